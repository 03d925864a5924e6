"""Your CPU forward convolution (milestone 2): the course's new-forward.h, in Python.

The harness calls forward(y, x, k) with NumPy float32 arrays in C order:

    x  B x C x H x W             input feature maps (read-only)
    k  M x C x K x K             weights (read-only)
    y  B x M x H_out x W_out     the output: write it here (H_out = H - K + 1, W_out = W - K + 1)

    y[b, m, h, w] = sum over c, p, q of x[b, c, h + p, w + q] * k[m, c, p, q]

Op Time is the harness's clock around this call. Write plain loops, as in C++: Numba compiles
forward's loops to machine code (@njit) the first time it is called, in an untimed warm-up;
prange spreads the images over the cores. Run it with `python -m ece408_op m2 1000` here.
"""
from numba import njit, prange


@njit(parallel=True, fastmath=True, cache=True)
def forward(y, x, k):
    B, M, H_out, W_out = y.shape
    C, K = x.shape[1], k.shape[2]
    for b in prange(B):                      # each image on its own core
        for m in range(M):
            y[b, m] = 0.0
            for c in range(C):
                for p in range(K):
                    for q in range(K):
                        weight = k[m, c, p, q]
                        # the innermost loop walks along a row of y and of x: contiguous
                        # memory, which the compiler turns into vector instructions
                        for h in range(H_out):
                            for w in range(W_out):
                                y[b, m, h, w] += x[b, c, h + p, w + q] * weight
