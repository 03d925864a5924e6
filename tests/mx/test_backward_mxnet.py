"""ece408_conv's backward through MXNet (conv/backward.py inside the CustomOp): MXNet's own
Convolution's gradients equal ours through ``mx.autograd``; ``req`` honoured (write, add, null:
autograd's grad_req); a Gluon training step through ece408_op's Conv2D equals nn.Conv2D's. (Apart
from tests/conv/test_backward.py: a process that has imported MXNet no longer limits NumPy's BLAS
threads inside the pool, which tests/conv/test_numpy_layer.py checks.)"""
import numpy as np
import pytest

from suitekit import require_mxnet
from test_backward import _layer
from test_numpy_layer import GENERAL, _random


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
