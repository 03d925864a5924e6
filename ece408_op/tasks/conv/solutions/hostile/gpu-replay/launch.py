"""How the harness launches your kernels for one layer: the host half of new-forward.cuh.

The harness calls launch(B, M, C, H, W, K) once per layer shape, before anything is timed, in
a separate process, and uses what it returns as data: the steps below, checked against the
GPU's limits, then launched and timed by the harness (CUDA events around all the steps).

    kernel(name, grid, block, shared=0, args=(...), stream=0)   launch an extern "C" kernel
    constant(symbol, "k")           copy the weights into a __constant__ array (timed)
    workspace(name, nbytes)         a device buffer for the layer, usable as an argument

Arguments: "y", "x", "k" or a workspace name is that buffer's device pointer; an int is an
int, a float a float, i64(n) a long long. Steps run in order; stream=1..3 run on other
streams that join the layer's before it ends.
"""
from math import ceil

from ece408_op.team import kernel

TILE_WIDTH = 16          # new-forward.cu's TILE_WIDTH


def launch(B, M, C, H, W, K):
    H_out, W_out = H - K + 1, W - K + 1
    tiles = ceil(W_out / TILE_WIDTH) * ceil(H_out / TILE_WIDTH)
    return [
        kernel("forward_kernel", grid=(tiles, M, B), block=(TILE_WIDTH, TILE_WIDTH, 1),
               args=("y", "x", "k", B, M, C, H, W, K)),
        kernel("count_call", grid=(1,), block=(1,)),
    ]
