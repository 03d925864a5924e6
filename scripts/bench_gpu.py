#!/usr/bin/env python3
"""Benchmark every GPU kernel version against cuDNN and the memory floor (needs PyTorch, PyCUDA; no MXNet)."""
import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))  # run from a checkout
from ece408_op.kernels.bench import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
