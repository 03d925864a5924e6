#!/usr/bin/env python3
"""Every GPU kernel version against cuDNN and the memory floor (PyTorch + PyCUDA, no MXNet)."""
import os, sys; sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))  # noqa: E401,E702
from ece408_op.cli import main  # noqa: E402
sys.exit(main(['bench', 'gpu', *sys.argv[1:]]))
