"""The MXNet layer, the only part of the package that imports MXNet.

    compat.py     shims that let MXNet 1.9.1 import on current Python/NumPy (no MXNet import)
    hook.py       runs those shims before MXNet loads and registers the operator after (stdlib only)
    failures.py   the reason of a failed callback, carried into the MXNetError users see
    op.py         the ece408_conv CustomOp and CustomOpProp, Op Time records, the layout guard
    gluon.py      ece408_op.gluon.Conv2D, a drop-in for gluon.nn.Conv2D
    fused_op.py   the ece408_conv_tanh_pool operator: conv (+ bias) -> tanh -> 2x2 max-pool in one
    fuse_pass.py  the graph pass putting it in place of conv -> tanh -> max-pool chains
    models.py     the course network, checkpoints by name or prefix
    swap.py       swap_convolutions: built-in Convolution nodes -> ece408_conv (Symbol, checkpoint,
                  HybridBlock), with a report of what was swapped and kept
    inference.py  bind a checkpoint, score a batch (what the milestones run)
    train.py      training recipes of the shipped models
    zoo.py        model-zoo networks, every convolution swapped, through every path (the benchmarks:
                  ece408_op/bench/, cpu.py and zoo.py)

Importing this package itself imports nothing of MXNet; its modules do.
"""
