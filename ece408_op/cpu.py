"""CPU forward convolution: a float64 reference and the fast default path.

No MXNet here. Semantics (the course's): x is B x C x H x W, k is M x C x K x K,
y is B x M x (H-K+1) x (W-K+1); stride 1, no padding, no bias:

    y[b][m][h][w] = sum over c, p, q of x[b][c][h+p][w+q] * k[m][c][p][q]
"""
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .errors import ShapeError


def output_shape(x_shape, k_shape):
    """Shape of y for x (B,C,H,W) and k (M,C,KH,KW); raises ShapeError when they don't fit."""
    if len(x_shape) != 4:
        raise ShapeError(f"data must be 4-D (B, C, H, W), got shape {tuple(x_shape)}")
    if len(k_shape) != 4:
        raise ShapeError(f"weight must be 4-D (M, C, K, K), got shape {tuple(k_shape)}")
    b, c, h, w = x_shape
    m, kc, kh, kw = k_shape
    if kc != c:
        raise ShapeError(f"weight has {kc} input channels but data has {c}")
    if kh < 1 or kw < 1 or kh > h or kw > w:
        raise ShapeError(f"kernel {kh}x{kw} does not fit a {h}x{w} input")
    return (b, m, h - kh + 1, w - kw + 1)


def conv2d_forward_reference(x, k):
    """Plain reference, accumulated in float64 (returns float64). For tests, not speed."""
    _, _, ho, wo = output_shape(x.shape, k.shape)
    x64 = np.asarray(x, dtype=np.float64)
    k64 = np.asarray(k, dtype=np.float64)
    y = np.zeros(output_shape(x.shape, k.shape), dtype=np.float64)
    for p in range(k.shape[2]):
        for q in range(k.shape[3]):
            # sum over c of x[b, c, h+p, w+q] * k[m, c, p, q]
            y += np.einsum("bchw,mc->bmhw", x64[:, :, p:p + ho, q:q + wo], k64[:, :, p, q])
    return y


def reference_and_bound(x, k):
    """(float64 reference, per-element error bound for a float32 result).

    The bound is the classic float32 summation bound: number of terms x 2u x
    sum |x * k| (u = 6e-8), plus a tiny absolute part. A wrong index or a
    missing term misses it by orders of magnitude.
    """
    ref = conv2d_forward_reference(x, k)
    magnitude = conv2d_forward_reference(np.abs(x), np.abs(k))
    terms = k.shape[1] * k.shape[2] * k.shape[3]
    return ref, 1e-6 + magnitude * terms * 1.2e-7


# Images per im2col chunk: the unrolled chunk is chunk x C*K*K x Ho*Wo floats
# (64 images of the course layer: 64 * 25 * 576 * 4 B = 3.7 MB, cache-sized).
_CHUNK_BYTES = 4 << 20
_pool = None


def _thread_pool():
    global _pool
    if _pool is None:
        workers = max(1, min(8, os.cpu_count() or 1))
        _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ece408-cpu")
        # Start the threads and BLAS now, so that the first timed call does not pay for it.
        for _ in _pool.map(lambda _: np.ones((8, 8), np.float32) @ np.ones((8, 8), np.float32),
                           range(workers)):
            pass
    return _pool


def warm_up():
    """Pay the one-time costs (thread pool, BLAS threads) outside any timed region."""
    _thread_pool()


def _over_slabs(array, work):
    """Call work(slice) for slabs of about 64 MB along the first axis, on the thread pool.

    A single thread writing freshly allocated memory (say, MXNet's output) spends
    most of its time in page faults; several threads take them in parallel.
    """
    rows = max(1, (64 << 20) // max(1, array[:1].nbytes)) if array.ndim else 1
    if array.ndim == 0 or len(array) <= rows:
        work(slice(None))
        return
    for _ in _thread_pool().map(lambda start: work(slice(start, start + rows)), range(0, len(array), rows)):
        pass


def parallel_copy(dst, src, add=False):
    """dst[...] = src (or += src), in parallel slabs."""
    if dst.shape != src.shape:
        raise ShapeError(f"cannot copy {src.shape} into {dst.shape}")

    def work(part):
        np.add(dst[part], src[part], out=dst[part]) if add else np.copyto(dst[part], src[part])
    _over_slabs(dst, work)
    return dst


def parallel_zero(dst):
    """dst[...] = 0 in parallel slabs (the course zeroed y before starting the clock)."""
    _over_slabs(dst, lambda part: dst[part].fill(0))
    return dst


def conv2d_forward_cpu(x, k, out=None):
    """Fast float32 path: im2col of a chunk of images, then one GEMM per image.

    Chunks run on a thread pool (NumPy's BLAS releases the GIL), so memory stays
    bounded at a few MB per thread whatever the batch size.
    """
    y_shape = output_shape(x.shape, k.shape)
    b, c, _, _ = x.shape
    m, _, kh, kw = k.shape
    _, _, ho, wo = y_shape
    x = np.ascontiguousarray(x, dtype=np.float32)
    kmat = np.ascontiguousarray(k, dtype=np.float32).reshape(m, c * kh * kw)
    if out is None:
        out = np.empty(y_shape, dtype=np.float32)
    elif out.shape != y_shape or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ShapeError(f"out must be a C-contiguous float32 array of shape {y_shape}")
    if b == 0:
        return out
    chunk = max(1, _CHUNK_BYTES // (c * kh * kw * ho * wo * 4))

    def work(b0):
        xs = x[b0:b0 + chunk]
        n = xs.shape[0]
        # (n, C, Ho, Wo, KH, KW) view -> (n, C*KH*KW, Ho*Wo) copy, rows ordered like kmat's columns
        cols = sliding_window_view(xs, (kh, kw), axis=(2, 3))
        cols = cols.transpose(0, 1, 4, 5, 2, 3).reshape(n, c * kh * kw, ho * wo)
        np.matmul(kmat, cols, out=out[b0:b0 + n].reshape(n, m, ho * wo))

    starts = range(0, b, chunk)
    if len(starts) == 1:
        work(0)
    else:
        for _ in _thread_pool().map(work, starts):
            pass
    return out
