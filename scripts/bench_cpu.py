#!/usr/bin/env python3
"""ece408_conv's CPU Op Time against MXNet's built-in Convolution."""
import os, sys; sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))  # noqa: E401,E702
from ece408_op.cli import main  # noqa: E402
sys.exit(main(['bench', 'cpu', *sys.argv[1:]]))
