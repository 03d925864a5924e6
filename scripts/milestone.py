#!/usr/bin/env python3
"""The milestone scripts. Each name is a link to this file and picks its milestone:

    m1_cpu.py, m1.1.py   built-in Convolution on the CPU (EvalMetric)
    m2_cpu.py, m2.1.py   ece408_conv, CPU path
    m3_gpu.py, m3.1.py   ece408_conv, GPU path (PyCUDA kernels)
    final.py             same as m3: the run the course ranked by Op Time

    python scripts/m3_gpu.py [model] [dataset_size] [--kernel N] [--profile]
"""
import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))  # run from a checkout
from ece408_op.harness import main  # noqa: E402

if __name__ == "__main__":
    name = os.path.basename(sys.argv[0])
    milestone = "final" if name.startswith("final") else name[:2]
    sys.exit(main(milestone))
