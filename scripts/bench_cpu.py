#!/usr/bin/env python3
"""Benchmark: ece408_conv's CPU Op Time vs MXNet's built-in CPU Convolution (same run, same tensors)."""
import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))  # run from a checkout
from ece408_op.bench import cpu_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(cpu_main())
