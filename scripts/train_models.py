#!/usr/bin/env python3
"""Train models/ece408-high and models/ece408-low (deterministic seed)."""
import ece408_op.train

if __name__ == "__main__":
    ece408_op.train.main()
