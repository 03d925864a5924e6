#!/usr/bin/env python3
"""m2: the network with ece408_conv, CPU path: [model] [dataset_size]."""
import os, sys; sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))  # noqa: E401,E702
from ece408_op.cli import main  # noqa: E402
sys.exit(main(['m2', *sys.argv[1:]], prog=os.path.basename(__file__)))
