"""Input unrolling + tiled matrix multiply: two kernels per chunk of images and one workspace
(the unrolled chunk), so that the workspace stays below WORKSPACE_BYTES whatever the batch."""
from math import ceil

from ece408_op.team import kernel, workspace

TILE = 16                         # new-forward.cu's TILE
WORKSPACE_BYTES = 256 << 20       # the unrolled matrices of as many images as fit


def launch(B, M, C, H, W, K):
    H_out, W_out = H - K + 1, W - K + 1
    rows, cols = C * K * K, H_out * W_out
    per_image = rows * cols * 4
    chunk = max(1, min(B, WORKSPACE_BYTES // per_image))
    steps = [workspace("unrolled", chunk * per_image)]
    for b0 in range(0, B, chunk):
        n = min(chunk, B - b0)
        steps.append(kernel("unroll_kernel", grid=(min(ceil(n * rows * cols / 256), 65535),), block=(256,),
                            args=("unrolled", "x", b0, n, C, H, W, K)))
        steps.append(kernel("gemm_kernel", grid=(ceil(cols / TILE), ceil(M / TILE), n), block=(TILE, TILE),
                            args=("y", "unrolled", "k", b0, M, rows, cols)))
    return steps
