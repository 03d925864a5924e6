"""CPU fast path: im2col of a chunk of images, then one BLAS matrix product per image."""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..errors import ShapeError
from .parallel import thread_pool
from .spec import output_shape

# Images per im2col chunk: the unrolled chunk is chunk x C*K*K x Ho*Wo floats, about
# CHUNK_BYTES (72 images of the course layer: 72 * 25 * 576 * 4 B = 4.1 MB, cache-sized).
CHUNK_BYTES = 4 << 20


def chunk_images(c, kh, kw, ho, wo):
    """Images per im2col chunk for a layer."""
    return max(1, CHUNK_BYTES // (c * kh * kw * ho * wo * 4))


def conv2d_forward_cpu(x, k, out=None):
    """Fast float32 path. Chunks run on the shared thread pool (NumPy's BLAS releases the
    GIL), so memory stays bounded at a few MB per thread whatever the batch size."""
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
    chunk = chunk_images(c, kh, kw, ho, wo)

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
        for _ in thread_pool().map(work, starts):
            pass
    return out
