"""The convolution's backward on the CPU path (conv/backward.py) and through MXNet (ece408_conv's
CustomOp backward, issue 49's first slice): the data, weight and bias gradients of general layers
(padding, stride, dilation, groups, depthwise, rectangular kernels, bias) against the definition in
float64 and within the float32 summation bound; MXNet's own Convolution's gradients equal ours;
``req`` honoured (write, add, null: autograd's grad_req); a Gluon training step through ece408_op's
Conv2D equals nn.Conv2D's; a team's forward still says it has no backward."""
import numpy as np
import pytest

from conftest import require_mxnet
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


# ------------------------------------------------------------------ through MXNet

def _mx_gradients(mx, op_type, x, k, bias, spec, grad_req="write", start=None):
    """(dx, dk, dbias) of sum(y * dy) through ``op_type`` (ece408_conv or MXNet's Convolution), dy = 1..."""
    attrs = dict(num_filter=spec.num_filter, kernel=spec.kernel, stride=spec.stride, pad=spec.pad,
                 dilate=spec.dilate, num_group=spec.num_group, no_bias=bias is None)
    arrays = [mx.nd.array(x), mx.nd.array(k)] + ([mx.nd.array(bias)] if bias is not None else [])
    for i, a in enumerate(arrays):
        a.attach_grad(grad_req=grad_req[i] if isinstance(grad_req, list) else grad_req)
        if start is not None and a.grad is not None:
            a.grad[:] = start[i]
    with mx.autograd.record():
        if op_type == "ece408_conv":
            y = mx.nd.Custom(*arrays, op_type="ece408_conv", device="cpu", **{n: str(v) for n, v in attrs.items()})
        else:
            y = mx.nd.Convolution(*arrays, **attrs)
        dy = mx.nd.array(np.linspace(-1, 1, int(np.prod(y.shape)), dtype=np.float32).reshape(y.shape))
        loss = (y * dy).sum()
    loss.backward()
    return [None if a.grad is None else a.grad.asnumpy() for a in arrays]


@pytest.mark.parametrize("b,c,h,w,m,attrs", GENERAL, ids=[str(g[5]) for g in GENERAL])
def test_mxnet_autograd_gives_the_builtins_gradients(b, c, h, w, m, attrs, rng):
    op = require_mxnet()
    mx = op.mx
    spec, x, k, _ = _layer(b, c, h, w, m, attrs, rng)
    bias = None if spec.no_bias else _random((m,), rng)
    ours = _mx_gradients(mx, "ece408_conv", x, k, bias, spec)
    theirs = _mx_gradients(mx, "Convolution", x, k, bias, spec)
    for name, a, t in zip(("dx", "dw", "dbias"), ours, theirs):
        np.testing.assert_allclose(a, t, rtol=1e-4, atol=1e-4 * (np.abs(t).max() + 1), err_msg=name)


def test_mxnet_grad_req_add_and_null(rng):
    op = require_mxnet()
    mx = op.mx
    spec, x, k, _ = _layer(*GENERAL[3], rng)                 # depthwise, with bias
    bias = _random((spec.num_filter,), rng)
    written = _mx_gradients(mx, "ece408_conv", x, k, bias, spec)
    start = [np.full(g.shape, 0.5, np.float32) for g in written]
    added = _mx_gradients(mx, "ece408_conv", x, k, bias, spec, grad_req="add", start=start)
    for w_, a, s in zip(written, added, start):
        np.testing.assert_allclose(a, w_ + s, rtol=1e-5, atol=1e-5)
    # the weight's gradient not asked (null: MXNet keeps no gradient for it, our backward is told so);
    # the others written as before
    nulled = _mx_gradients(mx, "ece408_conv", x, k, bias, spec, grad_req=["write", "null", "write"], start=start)
    assert nulled[1] is None
    np.testing.assert_allclose(nulled[0], written[0], rtol=1e-6)
    np.testing.assert_allclose(nulled[2], written[2], rtol=1e-6)


def test_a_gluon_training_step_equals_nn_conv2ds(rng):
    """One SGD step of a small network through ece408_op.gluon.Conv2D (hybridized) and through
    nn.Conv2D from the same parameters: the same loss and the same updated weights."""
    op = require_mxnet()
    mx = op.mx
    from ece408_op.mx.gluon import Conv2D

    def net(conv):
        block = mx.gluon.nn.HybridSequential()
        block.add(conv(channels=4, kernel_size=3, padding=1, in_channels=2), mx.gluon.nn.Activation("relu"),
                  mx.gluon.nn.Dense(3, in_units=4 * 6 * 6))
        return block
    x = mx.nd.array(_random((5, 2, 6, 6), rng))
    label = mx.nd.array([0, 1, 2, 1, 0])
    results = []
    for conv in (mx.gluon.nn.Conv2D, Conv2D):
        mx.random.seed(3)
        block = net(conv)
        block.initialize(mx.init.Xavier())
        block.hybridize()
        trainer = mx.gluon.Trainer(block.collect_params(), "sgd", {"learning_rate": 0.5})
        with mx.autograd.record():
            loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()(block(x), label).mean()
        loss.backward()
        trainer.step(1)
        results.append((float(loss.asscalar()), [p.data().asnumpy() for p in block.collect_params().values()]))
    (loss_a, params_a), (loss_b, params_b) = results
    assert loss_a == pytest.approx(loss_b, rel=1e-5)
    for a, b in zip(params_a, params_b):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_train_through_ece408_conv_reaches_the_builtins_accuracy(tmp_path):
    """`train ece408-low --custom`: the recipe (600 training images, one epoch, fixed seeds) through
    ece408_conv's forward and backward; the checkpoint's accuracy on the 10,000 test images (real
    inference) within half a point of the same recipe through MXNet's Convolution."""
    import json
    from conftest import python_command
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
