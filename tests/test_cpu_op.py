"""The ece408_conv operator (CPU path) against MXNet's built-in Convolution and the NumPy reference."""
import numpy as np
import pytest

from ece408_op.cpu import conv2d_forward_cpu, conv2d_forward_reference, output_shape
from ece408_op.errors import ShapeError
from conftest import assert_close, require_mxnet

mx = require_mxnet().mx
from ece408_op.op import Conv2dForward, op_times, parse_kernel, take_last_error  # noqa: E402

# (B, C, H, W, M, K): B=1, C>1, K=1, K=H, odd and non-square sizes, M not a multiple of anything.
SHAPES = [
    (1, 1, 28, 28, 50, 5), (3, 1, 28, 28, 50, 5), (2, 3, 9, 11, 7, 3), (1, 1, 5, 5, 1, 5),
    (4, 2, 6, 6, 3, 6), (5, 1, 7, 13, 4, 1), (1, 4, 8, 8, 9, 1), (2, 6, 30, 30, 16, 5),
    (1, 12, 33, 33, 24, 5), (3, 1, 64, 64, 6, 5), (2, 2, 15, 17, 5, 7), (1, 3, 7, 7, 2, 7),
    (6, 1, 10, 3, 5, 3), (2, 5, 12, 12, 13, 4), (1, 1, 1, 1, 3, 1), (7, 2, 11, 9, 1, 2),
    (2, 1, 70, 70, 12, 5), (1, 8, 16, 16, 33, 3), (3, 3, 4, 4, 2, 4), (129, 1, 28, 28, 50, 5),
    (2, 16, 9, 9, 8, 3), (1, 2, 31, 29, 11, 6),
]


def _random(shape, rng, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


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


@pytest.mark.parametrize("shape", SHAPES[:12], ids=lambda s: "B%dC%dH%dW%dM%dK%d" % s)
def test_fast_cpu_path_matches_float64_reference(shape, rng):
    b, c, h, w, m, ksize = shape
    x = _random((b, c, h, w), rng, 255.0)
    k = _random((m, c, ksize, ksize), rng, 0.01)
    ref = conv2d_forward_reference(x, k)
    assert_close(conv2d_forward_cpu(x, k), ref, atol=1e-5 * np.abs(ref).max(), rtol=1e-5)


def test_reference_matches_definition_elementwise(rng):
    x = _random((2, 3, 6, 7), rng)
    k = _random((4, 3, 3, 3), rng)
    y = conv2d_forward_reference(x, k)
    for b, m, i, j in [(0, 0, 0, 0), (1, 3, 3, 4), (1, 2, 2, 1)]:
        want = sum(float(x[b, c, i + p, j + q]) * float(k[m, c, p, q])
                   for c in range(3) for p in range(3) for q in range(3))
        assert y[b, m, i, j] == pytest.approx(want, rel=1e-12)


def test_large_batch_is_chunked_and_exact(rng):
    # 3000 images: many chunks on the thread pool; compare with the reference on a sample.
    x = _random((3000, 1, 28, 28), rng, 255.0)
    k = _random((50, 1, 5, 5), rng, 0.01)
    y = conv2d_forward_cpu(x, k)
    pick = [0, 1, 63, 64, 65, 1500, 2999]
    assert_close(y[pick], conv2d_forward_reference(x[pick], k), atol=1e-3, rtol=1e-5)


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


@pytest.mark.parametrize("text,want", [("5", 5), ("(5, 5)", 5), ("[3,3]", 3), ("(7,)", 7)])
def test_parse_kernel(text, want):
    assert parse_kernel(text) == want


@pytest.mark.parametrize("text", ["(3, 5)", "0", "abc", "(1, 2, 3)", "-2"])
def test_parse_kernel_rejects(text):
    # bad input: non-square, zero, non-numeric, 3-D, negative kernels
    with pytest.raises(ShapeError):
        parse_kernel(text)


def test_bad_shapes_are_rejected_with_clear_errors():
    # bad input: kernel larger than the image, channel mismatch, 3-D data
    with pytest.raises(ShapeError, match="does not fit"):
        output_shape((1, 1, 4, 4), (2, 1, 5, 5))
    with pytest.raises(ShapeError, match="channels"):
        output_shape((1, 2, 8, 8), (2, 1, 3, 3))
    with pytest.raises(ShapeError, match="4-D"):
        output_shape((1, 8, 8), (2, 1, 3, 3))
    data = mx.sym.Variable("data")
    y = mx.sym.Custom(data, mx.sym.Variable("w"), op_type="ece408_conv", num_filter=2, kernel=9)
    take_last_error()
    with pytest.raises(mx.base.MXNetError):
        y.infer_shape(data=(1, 1, 4, 4))
    cause = take_last_error()
    assert isinstance(cause, ShapeError) and "does not fit" in str(cause)


def test_parallel_copy_add_and_zero_cover_every_slab(rng):
    from ece408_op.cpu import parallel_copy, parallel_zero
    src = _random((300, 50, 24, 24), rng)          # 3 x 64 MB slabs and a remainder
    dst = np.full_like(src, np.nan)
    assert parallel_copy(dst, src) is dst and np.array_equal(dst, src)
    parallel_copy(dst, src, add=True)
    assert np.array_equal(dst, 2 * src)
    parallel_zero(dst)
    assert not dst.any()
    with pytest.raises(ShapeError):
        # bad input: shapes that differ
        parallel_copy(dst[:2], src[:3])
