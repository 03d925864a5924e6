"""The course models' block convolution (+ bias) -> tanh -> 2x2/2 max-pool, in NumPy: the
reference the fused GPU kernel (``kernels.fused_forward_gpu``) is checked against, and its
float32 error bound.

Pooling is MXNet's ``Pooling(kernel=(2, 2), stride=(2, 2), pool_type='max')`` with the default
'valid' convention: an odd last row or column of the convolution's output is dropped.
"""
import numpy as np

from .reference import reference_and_bound

TANH_ULPS = 2.4e-7     # float32 tanh's own rounding: 2 ulps of the result, relative


def max_pool_2x2(y, reduce=np.max):
    """The 2x2, stride-2 windows of y (B x M x HO x WO) reduced by ``reduce`` -> B x M x HO//2 x WO//2."""
    b, m, ho, wo = y.shape
    windows = y[:, :, :ho // 2 * 2, :wo // 2 * 2].reshape(b, m, ho // 2, 2, wo // 2, 2)
    return reduce(windows, axis=(3, 5))


def tanh_maxpool(y):
    """tanh of the 2x2/2 max-pool of y (tanh is increasing: equal to the max-pool of tanh(y))."""
    return np.tanh(max_pool_2x2(y))


def fused_reference_and_bound(x, k, bias=None, spec=None):
    """(float64 reference of tanh(max_pool(conv(x, k) + bias)), per-element float32 error bound).

    max and tanh move an error by at most its size (both are 1-Lipschitz), so the bound is the
    largest convolution bound (``reference_and_bound``) of each window, plus tanh's rounding.
    """
    ref, bound = reference_and_bound(x, k, bias, spec)
    pooled = tanh_maxpool(ref)
    return pooled, max_pool_2x2(bound) + TANH_ULPS * np.abs(pooled)
