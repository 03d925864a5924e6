"""The convolution's backward on the CPU: the data gradient, the weight gradient and the bias gradient
of y = conv(x, w) + bias for any ConvSpec (stride, padding, dilation, groups, rectangular kernels), in
the forward's float32, and their float64 references with the float32 error bound.

With y[b][m][i][j] = bias[m] + sum over c, p, q of xpad[b][g*C/G + c][i*SH + p*DH][j*SW + q*DW] *
w[m][c][p][q] (spec.py), and dy the gradient of the loss with respect to y:

    dw[m][c][p][q] = sum over b, i, j of dy[b][m][i][j] * xpad[b][g*C/G + c][i*SH + p*DH][j*SW + q*DW]
    dx[b][g*C/G + c][h][v] = sum over m of group g, p, q with h + PH = i*SH + p*DH, v + PW = j*SW + q*DW
                             of dy[b][m][i][j] * w[m][c][p][q]          (a transposed convolution)
    dbias[m] = sum over b, i, j of dy[b][m][i][j]

Each is computed a kernel tap (p, q) at a time: the tap's strided window of the padded input is a
view (no im2col copy), and the sums over channels are matrix products (NumPy's BLAS, float32 with
float32 sums, or float64 for the references). The data gradient scatters each tap's product back into
the padded gradient through the same strided window, then drops the padding.
"""
import numpy as np

from .spec import output_shape


def _window(xp, p, q, spec, ho, wo):
    """The view of padded ``xp`` that tap (p, q) reads: [..., i, j] = xp[..., i*SH + p*DH, j*SW + q*DW]."""
    (sh, sw), (dh, dw) = spec.stride, spec.dilate
    return xp[:, :, p * dh:p * dh + sh * (ho - 1) + 1:sh, q * dw:q * dw + sw * (wo - 1) + 1:sw]


def _groups(spec, c):
    groups = spec.num_group
    return groups, c // groups, spec.num_filter // groups


def backward_weight(dy, x, w_shape, spec, dtype=np.float32):
    """dw (of ``w_shape``): the correlation of the input with the output's gradient."""
    x, dy = np.asarray(x, dtype), np.asarray(dy, dtype)
    (ph, pw) = spec.pad
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else x
    ho, wo = dy.shape[2:]
    groups, cg, mg = _groups(spec, x.shape[1])
    dw = np.empty(w_shape, dtype)
    for g in range(groups):
        dyg = dy[:, g * mg:(g + 1) * mg]                            # b, m, i, j
        for p in range(w_shape[2]):
            for q in range(w_shape[3]):
                window = _window(xp[:, g * cg:(g + 1) * cg], p, q, spec, ho, wo)    # b, c, i, j
                dw[g * mg:(g + 1) * mg, :, p, q] = np.tensordot(dyg, window, axes=([0, 2, 3], [0, 2, 3]))
    return dw


def backward_data(dy, w, x_shape, spec, dtype=np.float32):
    """dx (of ``x_shape``): the output's gradient through the transposed convolution."""
    w, dy = np.asarray(w, dtype), np.asarray(dy, dtype)
    b, c, h, v = x_shape
    (ph, pw) = spec.pad
    ho, wo = dy.shape[2:]
    groups, cg, mg = _groups(spec, c)
    dxp = np.zeros((b, c, h + 2 * ph, v + 2 * pw), dtype)
    for g in range(groups):
        dyg = dy[:, g * mg:(g + 1) * mg]
        for p in range(w.shape[2]):
            for q in range(w.shape[3]):
                # [b, i, j, c] = sum over m of dy[b, m, i, j] * w[m, c, p, q]
                tap = np.tensordot(dyg, w[g * mg:(g + 1) * mg, :, p, q], axes=([1], [0]))
                _window(dxp[:, g * cg:(g + 1) * cg], p, q, spec, ho, wo)[...] += tap.transpose(0, 3, 1, 2)
    return dxp[:, :, ph:ph + h, pw:pw + v]


def backward_bias(dy, dtype=np.float32):
    return np.asarray(dy, dtype).sum(axis=(0, 2, 3), dtype=dtype)


def conv2d_backward_cpu(dy, x, w, spec, need=(True, True, True)):
    """(dx, dw, dbias) of the forward ``conv2d_forward_cpu(x, w, bias, spec)`` for the output's gradient
    ``dy``, float32; an entry is None where ``need`` (data, weight, bias) says it is not wanted or the
    layer has no bias."""
    want_x, want_w, want_b = need
    expected = output_shape(x.shape, w.shape, spec)
    if tuple(dy.shape) != tuple(expected):
        from ..errors import ShapeError
        raise ShapeError(f"the output's gradient is {tuple(dy.shape)}, the layer's output {tuple(expected)}")
    dx = backward_data(dy, w, x.shape, spec) if want_x else None
    dw = backward_weight(dy, x, w.shape, spec) if want_w else None
    db = backward_bias(dy) if want_b and not spec.no_bias else None
    return dx, dw, db


def backward_reference_and_bound(dy, x, w, spec):
    """((dx, dw, dbias) in float64, (their float32 error bounds)): each bound the float32 summation bound
    of its sum (terms x 1.2e-7 x the sum of the magnitudes, plus a tiny absolute part), as
    ``reference_and_bound`` gives the forward's."""
    f64 = np.float64
    dx = backward_data(dy, w, x.shape, spec, f64)
    dw = backward_weight(dy, x, w.shape, spec, f64)
    db = backward_bias(dy, f64)
    ady, ax, aw = np.abs(np.asarray(dy, f64)), np.abs(np.asarray(x, f64)), np.abs(np.asarray(w, f64))
    groups, _, mg = _groups(spec, x.shape[1])
    terms_x = mg * w.shape[2] * w.shape[3]
    terms_w = dy.shape[0] * dy.shape[2] * dy.shape[3]
    bound_x = 1e-6 + backward_data(ady, aw, x.shape, spec, f64) * terms_x * 1.2e-7
    bound_w = 1e-6 + backward_weight(ady, ax, w.shape, spec, f64) * terms_w * 1.2e-7
    bound_b = 1e-6 + backward_bias(ady, f64) * terms_w * 1.2e-7
    return (dx, dw, db), (bound_x, bound_w, bound_b)
