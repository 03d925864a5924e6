"""Shared-memory tiles: a block of (TILE_WIDTH + K - 1)^2 threads per output tile, and the patch
it loads in dynamic shared memory (4 bytes a float)."""
from math import ceil

from ece408_op.team import kernel

TILE_WIDTH = 16          # new-forward.cu's TILE_WIDTH


def launch(B, M, C, H, W, K):
    H_out, W_out = H - K + 1, W - K + 1
    side = TILE_WIDTH + K - 1
    tiles = ceil(W_out / TILE_WIDTH) * ceil(H_out / TILE_WIDTH)
    return [
        kernel("forward_kernel", grid=(tiles, M, B), block=(side, side, 1), shared=side * side * 4,
               args=("y", "x", "k", B, M, C, H, W, K)),
    ]
