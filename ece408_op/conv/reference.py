"""The float64 reference every path is checked against, and the float32 error bound it allows."""
import numpy as np

from .spec import output_shape


def conv2d_forward_reference(x, k):
    """Plain reference, accumulated in float64 (returns float64). For tests, not speed."""
    y_shape = output_shape(x.shape, k.shape)
    _, _, ho, wo = y_shape
    x64 = np.asarray(x, dtype=np.float64)
    k64 = np.asarray(k, dtype=np.float64)
    y = np.zeros(y_shape, dtype=np.float64)
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
