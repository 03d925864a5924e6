"""The float64 reference every path is checked against, and the float32 error bound it allows."""
import numpy as np

from .spec import ConvSpec, output_shape


def conv2d_forward_reference(x, k, bias=None, spec=None):
    """Plain reference for any ConvSpec, accumulated in float64 (returns float64). For tests.
    Without ``spec``: the course's layer (stride 1, no padding, one group)."""
    spec = spec or ConvSpec.course(k.shape).with_(no_bias=bias is None)
    y_shape = output_shape(x.shape, k.shape, spec)
    _, c, _, _ = x.shape
    ho, wo = y_shape[2:]
    (sh, sw), (ph, pw), (dh, dw) = spec.stride, spec.pad, spec.dilate
    groups = spec.num_group
    cg, mg = c // groups, spec.num_filter // groups
    xp = np.pad(np.asarray(x, dtype=np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    k64 = np.asarray(k, dtype=np.float64)
    y = np.zeros(y_shape, dtype=np.float64)
    for g in range(groups):
        xg, kg = xp[:, g * cg:(g + 1) * cg], k64[g * mg:(g + 1) * mg]
        for p in range(k.shape[2]):
            for q in range(k.shape[3]):
                window = xg[:, :, p * dh:p * dh + sh * (ho - 1) + 1:sh, q * dw:q * dw + sw * (wo - 1) + 1:sw]
                # sum over c of x[b, c, i*sh + p*dh, j*sw + q*dw] * k[m, c, p, q]
                y[:, g * mg:(g + 1) * mg] += np.einsum("bchw,mc->bmhw", window, kg[:, :, p, q], optimize=True)
    if bias is not None:
        y += np.asarray(bias, dtype=np.float64).reshape(1, -1, 1, 1)
    return y


def reference_and_bound(x, k, bias=None, spec=None):
    """(float64 reference, per-element error bound for a float32 result).

    The bound is the classic float32 summation bound: number of terms x 2u x
    sum |x * k| (u = 6e-8), plus a tiny absolute part. A wrong index or a
    missing term misses it by orders of magnitude.
    """
    ref = conv2d_forward_reference(x, k, bias, spec)
    magnitude = conv2d_forward_reference(np.abs(x), np.abs(k), None if bias is None else np.abs(bias), spec)
    terms = k.shape[1] * k.shape[2] * k.shape[3] + (bias is not None)
    return ref, 1e-6 + magnitude * terms * 1.2e-7
