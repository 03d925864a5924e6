"""The convolution's backward on the CPU path (conv/backward.py, issue 49's first slice): the data,
weight and bias gradients of general layers (padding, stride, dilation, groups, depthwise,
rectangular kernels, bias) against the definition in float64 and within the float32 summation
bound; only what is asked is computed; a wrong output gradient is one line; and `train --custom`
(through MXNet, in a child process) reaching the built-in's accuracy. Through MXNet's autograd in
this process: tests/mx/test_backward_mxnet.py."""
import numpy as np
import pytest

from test_numpy_layer import GENERAL, _random

from ece408_op.conv import ConvSpec, conv2d_forward_reference
from ece408_op.conv.backward import backward_reference_and_bound, conv2d_backward_cpu


def _layer(b, c, h, w, m, attrs, rng):
    spec = ConvSpec.from_attrs(num_filter=m, **attrs)
    x = _random((b, c, h, w), rng)
    k = _random(spec.weight_shape(c), rng)
    dy = _random(spec.output_shape(x.shape), rng)
    return spec, x, k, dy


def _by_definition(dy, x, k, spec):
    """The gradients from the forward's own definition: d(sum(y * dy))/d(input), one input at a time,
    by linearity (the forward of a one-hot weight or input, float64): slow, for tiny layers only."""
    x64, k64, dy64 = (np.asarray(a, np.float64) for a in (x, k, dy))
    dk = np.zeros_like(k64)
    for idx in np.ndindex(*k.shape):
        e = np.zeros_like(k64)
        e[idx] = 1.0
        dk[idx] = (conv2d_forward_reference(x64, e, None, spec.with_(no_bias=True)) * dy64).sum()
    dx = np.zeros_like(x64)
    for idx in np.ndindex(*x.shape):
        e = np.zeros_like(x64)
        e[idx] = 1.0
        dx[idx] = (conv2d_forward_reference(e, k64, None, spec.with_(no_bias=True)) * dy64).sum()
    return dx, dk, dy64.sum(axis=(0, 2, 3))


@pytest.mark.parametrize("b,c,h,w,m,attrs", GENERAL[:4], ids=[str(g[5]) for g in GENERAL[:4]])
def test_the_gradients_are_the_forwards_derivatives(b, c, h, w, m, attrs, rng):
    spec, x, k, dy = _layer(min(b, 1), c, min(h, 7), min(w, 7), m, attrs, rng)
    (dx, dk, db), _ = backward_reference_and_bound(dy, x, k, spec)
    want_x, want_k, want_b = _by_definition(dy, x, k, spec)
    np.testing.assert_allclose(dx, want_x, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(dk, want_k, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(db, want_b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("b,c,h,w,m,attrs", GENERAL, ids=[str(g[5]) for g in GENERAL])
def test_float32_gradients_are_within_the_bound(b, c, h, w, m, attrs, rng):
    spec, x, k, dy = _layer(b, c, h, w, m, attrs, rng)
    refs, bounds = backward_reference_and_bound(dy, x, k, spec)
    got = conv2d_backward_cpu(dy, x, k, spec)
    for name, value, ref, bound in zip(("dx", "dw", "dbias"), got, refs, bounds):
        if value is None:
            assert spec.no_bias and name == "dbias"
            continue
        assert value.dtype == np.float32 and value.shape == ref.shape, name
        assert (np.abs(value - ref) <= bound).all(), f"{name}: {np.abs(value - ref).max()} past the bound"
    dx, dw, db = conv2d_backward_cpu(dy, x, k, spec, need=(False, True, False))
    assert dx is None and db is None and dw is not None


def test_a_wrong_output_gradient_is_one_clear_error(rng):
    from ece408_op.errors import ShapeError
    spec, x, k, dy = _layer(*GENERAL[0], rng)
    # bad input: the output's gradient of another shape
    with pytest.raises(ShapeError, match=r"the output's gradient is \(1, 4, 7, 9\), the layer's output \(2, 4, 7, 9\)"):
        conv2d_backward_cpu(dy[:1], x, k, spec)


@pytest.mark.slow
def test_train_through_ece408_conv_reaches_the_builtins_accuracy(tmp_path):
    """`train ece408-low --custom`: the recipe (600 training images, one epoch, fixed seeds) through
    ece408_conv's forward and backward; the checkpoint's accuracy on the 10,000 test images (real
    inference) within half a point of the same recipe through MXNet's Convolution."""
    import json
    from suitekit import python_command
    import subprocess
    found = {}
    for flag in ([], ["--custom"]):
        out = subprocess.run([*python_command(), "-m", "ece408_op", "train", "ece408-low", "--out",
                              str(tmp_path / ("custom" if flag else "builtin")), *flag],
                             capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        result = json.loads(out.stdout[out.stdout.index("{"):])["ece408-low"]
        found[result["convolution"]] = result["test_accuracy"]
    assert set(found) == {"Convolution", "ece408_conv"}
    assert 0.5 < found["Convolution"] < 0.8                      # the weak recipe, really trained
    assert abs(found["ece408_conv"] - found["Convolution"]) <= 0.005, found
