#!/usr/bin/env python3
"""Train models/ece408-high and models/ece408-low (fixed seeds)."""
import os, sys; sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))  # noqa: E401,E702
from ece408_op.cli import main  # noqa: E402
sys.exit(main(['train', *sys.argv[1:]]))
