"""The ece408_conv operator (CPU path) inside MXNet: against the built-in Convolution, req, shapes."""
import numpy as np
import pytest

from conftest import assert_close, require_mxnet
from ece408_op.conv import conv2d_forward_reference
from ece408_op.errors import ShapeError
from test_conv import SHAPES, _random

mx = require_mxnet().mx
from ece408_op.mx.op import Conv2dForward, op_times, take_last_error  # noqa: E402

def _custom(x, k, **attrs):
    m, _, ksize, _ = k.shape
    return mx.nd.Custom(mx.nd.array(x), mx.nd.array(k), op_type="ece408_conv", num_filter=m,
                        kernel=(ksize, ksize), **attrs).asnumpy()


def _builtin(x, k):
    m, _, ksize, _ = k.shape
    return mx.nd.Convolution(mx.nd.array(x), mx.nd.array(k), kernel=(ksize, ksize), num_filter=m,
                             no_bias=True).asnumpy()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B%dC%dH%dW%dM%dK%d" % s)
def test_operator_matches_builtin_convolution(shape, rng):
    b, c, h, w, m, ksize = shape
    x = _random((b, c, h, w), rng, 10.0)
    k = _random((m, c, ksize, ksize), rng)
    y = _custom(x, k, device="cpu")
    ref = _builtin(x, k)
    scale = np.abs(ref).max() + 1e-30
    assert_close(y, ref, atol=1e-5 * scale, rtol=1e-5, what=f"ece408_conv vs Convolution {shape}")


def _forward_directly(req, initial, x, k):
    """Call the CustomOp's forward with a chosen req, as MXNet would."""
    out = mx.nd.array(initial)
    Conv2dForward("cpu", "auto").forward(False, [req], [mx.nd.array(x), mx.nd.array(k)], [out], [])
    return out.asnumpy()


def test_forward_honours_req_add_and_null(rng):
    x = _random((2, 2, 8, 8), rng)
    k = _random((3, 2, 3, 3), rng)
    initial = _random((2, 3, 6, 6), rng)
    y = conv2d_forward_reference(x, k)
    assert_close(_forward_directly("write", initial, x, k), y, atol=1e-5)
    assert_close(_forward_directly("add", initial, x, k), initial + y, atol=1e-5)
    assert np.array_equal(_forward_directly("null", initial, x, k), initial)


def test_weight_shape_is_inferred_from_data():
    data = mx.sym.Variable("data")
    y = mx.sym.Custom(data, mx.sym.Variable("w"), op_type="ece408_conv", num_filter=50, kernel="(5, 5)")
    args, outs, _ = y.infer_shape(data=(10, 1, 28, 28))
    assert args == [(10, 1, 28, 28), (50, 1, 5, 5)]
    assert outs == [(10, 50, 24, 24)]


def test_backward_raises_inference_only(rng, capfd):
    x = mx.nd.array(_random((1, 1, 6, 6), rng))
    k = mx.nd.array(_random((2, 1, 3, 3), rng))
    x.attach_grad()
    with mx.autograd.record():
        y = mx.nd.Custom(x, k, op_type="ece408_conv", num_filter=2, kernel=3)
    with pytest.raises(mx.base.MXNetError):
        y.backward()
        x.grad.wait_to_read()
    # MXNet reports the operator's own exception on stdout and raises a generic MXNetError.
    assert "ece408_conv is inference-only" in capfd.readouterr().out


def test_op_time_is_recorded_per_forward(rng):
    x = _random((4, 1, 28, 28), rng)
    k = _random((50, 1, 5, 5), rng)
    start = len(op_times.records)
    _custom(x, k)
    _custom(x, k)
    got = op_times.since(start)
    assert len(got) == 2 and all(seconds > 0 and path == "cpu" for seconds, path in got)


def test_bad_shape_in_a_symbol_is_reported_with_its_cause():
    # bad input: a kernel larger than the image, found at shape inference
    data = mx.sym.Variable("data")
    y = mx.sym.Custom(data, mx.sym.Variable("w"), op_type="ece408_conv", num_filter=2, kernel=9)
    take_last_error()
    with pytest.raises(mx.base.MXNetError):
        y.infer_shape(data=(1, 1, 4, 4))
    cause = take_last_error()
    assert isinstance(cause, ShapeError) and "does not fit" in str(cause)


