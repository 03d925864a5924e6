"""The fused layer: conv (+ bias) -> tanh -> 2x2 max-pool. Its CPU path against the float64
reference, the MXNet operator and the graph pass against the unfused graph (MXNet's own
Convolution, Activation and Pooling), and their errors."""
import json

import numpy as np
import pytest

from suitekit import require_mxnet
from ece408_op.conv.fused import conv_tanh_pool_cpu, fused_reference_and_bound, pooled_shape

fused_op = require_mxnet("ece408_op.mx.fused_op")
mx = fused_op.mx
from ece408_op.mx.fuse_pass import fuse_conv_tanh_pool  # noqa: E402
from ece408_op.mx.models import LATER_LAYOUTS, course_symbol, later_course_symbol  # noqa: E402
from ece408_op.mx.op import take_last_error  # noqa: E402
from ece408_op.mx.swap import swap_convolutions  # noqa: E402

FUSED = fused_op.FUSED_OP_TYPE
# (B, C, H, W, M, K): the course layers, C > 1, odd conv outputs (the pool drops a row/column), B=1
SHAPES = [(3, 1, 28, 28, 50, 5), (2, 6, 30, 30, 16, 5), (2, 12, 33, 33, 24, 5), (1, 3, 12, 9, 5, 3),
          (4, 2, 8, 8, 3, 1), (2, 1, 70, 70, 12, 5)]


def _data(rng, shape, bias):
    b, c, h, w, m, k = shape
    x = (rng.random((b, c, h, w)) * 255).astype(np.float32)
    weight = (rng.standard_normal((m, c, k, k)) / (255 * k * np.sqrt(c))).astype(np.float32)
    return x, weight, (rng.standard_normal(m).astype(np.float32) if bias else None)


def _within(got, ref, bound, what):
    bad = ~(np.abs(np.asarray(got, np.float64) - ref) <= bound)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    assert not bad.any(), f"{what}: {int(bad.sum())} of {bad.size} off, first at {np.argwhere(bad)[0]}"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("bias", [False, True])
def test_cpu_path_matches_the_float64_reference(rng, shape, bias):
    x, k, b = _data(rng, shape, bias)
    ref, bound = fused_reference_and_bound(x, k, b)
    got = conv_tanh_pool_cpu(x, k, b)
    assert got.shape == pooled_shape(x.shape, k.shape)
    _within(got, ref, bound, f"fused cpu {shape}")


def test_cpu_path_in_several_chunks_and_into_out(rng, monkeypatch):
    from ece408_op.conv import fused
    monkeypatch.setattr(fused, "CHUNK_BYTES", 3 * 50 * 24 * 24 * 4)       # 3 images a chunk: 4 chunks
    x, k, _ = _data(rng, (11, 1, 28, 28, 50, 5), False)
    out = np.full((11, 50, 12, 12), np.nan, np.float32)
    assert fused.conv_tanh_pool_cpu(x, k, out=out) is out
    ref, bound = fused_reference_and_bound(x, k)
    _within(out, ref, bound, "chunked")


def _unfused(data, weight, bias, m, k):
    conv = mx.sym.Convolution(data, weight=weight, bias=bias, num_filter=m, kernel=(k, k), no_bias=bias is None)
    return mx.sym.Pooling(mx.sym.Activation(conv, act_type="tanh"), pool_type="max", kernel=(2, 2), stride=(2, 2))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("bias", [False, True])
def test_operator_equals_the_unfused_graph(rng, shape, bias):
    x, k, b = _data(rng, shape, bias)
    m, ksize = shape[4], shape[5]
    args = [mx.nd.array(x), mx.nd.array(k)] + ([mx.nd.array(b)] if bias else [])
    got = mx.nd.Custom(*args, op_type=FUSED, num_filter=m, kernel=ksize, no_bias=not bias, device="cpu").asnumpy()
    data, weight = mx.sym.Variable("data"), mx.sym.Variable("weight")
    bias_var = mx.sym.Variable("bias") if bias else None
    feed = {"data": args[0], "weight": args[1], **({"bias": args[2]} if bias else {})}
    want = _unfused(data, weight, bias_var, m, ksize).bind(mx.cpu(), feed).forward()[0].asnumpy()
    ref, bound = fused_reference_and_bound(x, k, b)
    _within(got, ref, bound, "operator vs float64")
    _within(got, want, 2 * bound, "operator vs MXNet's unfused layers")


def _bind_error(symbol, **shapes):
    with pytest.raises(mx.base.MXNetError):
        symbol.infer_shape(**shapes)
    return str(take_last_error())


def test_bad_attributes_are_clear_errors_not_crashes():
    # bad input: missing num_filter, a rectangular kernel, a conv output too small to pool,
    # a weight of the wrong shape, float64 data
    data = mx.sym.Variable("data")
    assert "needs num_filter and kernel" in _bind_error(mx.sym.Custom(data, op_type=FUSED, kernel=5),
                                                        data=(1, 1, 28, 28))
    assert "square" in _bind_error(mx.sym.Custom(data, op_type=FUSED, num_filter=2, kernel="(3, 5)"),
                                   data=(1, 1, 28, 28))
    assert "too small" in _bind_error(mx.sym.Custom(data, op_type=FUSED, num_filter=2, kernel=5),
                                      data=(1, 1, 5, 5))
    weight = mx.sym.Variable("weight")
    assert "does not match" in _bind_error(mx.sym.Custom(data, weight, op_type=FUSED, num_filter=2, kernel=5),
                                           data=(1, 1, 28, 28), weight=(3, 1, 5, 5))
    sym = mx.sym.Custom(data, op_type=FUSED, num_filter=2, kernel=5)
    with pytest.raises(mx.base.MXNetError):
        sym.infer_type(data=np.float64)
    assert "float32 only" in str(take_last_error())


def test_backward_is_refused():
    x = mx.nd.ones((1, 1, 8, 8))
    k = mx.nd.ones((2, 1, 3, 3))
    x.attach_grad()
    with mx.autograd.record():
        y = mx.nd.Custom(x, k, op_type=FUSED, num_filter=2, kernel=3, device="cpu")
    with pytest.raises(mx.base.MXNetError):
        y.backward()
        mx.nd.waitall()
    assert "inference-only" in str(take_last_error())


def _random_args(rng, symbol, data_shape):
    shapes, _, _ = symbol.infer_shape(data=data_shape)
    return {name: mx.nd.array((rng.standard_normal(shape) * (0.004 if name != "data" else 60)).astype(np.float32))
            for name, shape in zip(symbol.list_arguments(), shapes)}


@pytest.mark.parametrize("layout", ["2017", "2018", "2019"])
def test_pass_fuses_the_course_models_and_keeps_their_output(rng, layout):
    symbol = course_symbol() if layout == "2017" else later_course_symbol(**LATER_LAYOUTS[layout])
    fused, names = fuse_conv_tanh_pool(symbol, device="cpu")
    assert names == ["conv1"]
    assert fused.list_arguments() == symbol.list_arguments()          # same parameters load
    assert fused.attr_dict().get("data") == symbol.attr_dict().get("data")   # input shape hint kept
    final, swapped = swap_convolutions(fused, device="cpu")
    assert swapped == ([] if layout == "2017" else ["conv2"])
    size = {"2017": 28, "2018": 64, "2019": 70}[layout]
    args = _random_args(rng, symbol, (4, 1, size, size))
    internals = ["fc1_output"]           # compare before the softmax, where differences show
    want = symbol.get_internals()[internals[0]].bind(mx.cpu(), args).forward()[0].asnumpy()
    got = final.get_internals()[internals[0]].bind(mx.cpu(), args).forward()[0].asnumpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_pass_fuses_only_what_it_can():
    data = mx.sym.Variable("data")

    def conv(x, name, **kw):
        return mx.sym.Convolution(x, name=name, num_filter=4, kernel=(3, 3), **{"no_bias": True, **kw})

    def pool(x, **kw):
        return mx.sym.Pooling(x, **{"pool_type": "max", "kernel": (2, 2), "stride": (2, 2), **kw})
    a = pool(mx.sym.tanh(conv(data, "a", no_bias=False)))                        # fused (with bias)
    b = pool(mx.sym.Activation(conv(a, "b"), act_type="relu"))                  # relu: no
    c = pool(mx.sym.Activation(conv(b, "c"), act_type="tanh"), pool_type="avg")  # average pool: no
    d = pool(mx.sym.Activation(conv(c, "d", stride=(2, 2)), act_type="tanh"))    # strided conv: no
    e_conv = conv(d, "e")
    e = pool(mx.sym.Activation(e_conv, act_type="tanh")) + mx.sym.sum(e_conv)    # conv output used twice: no
    f = pool(mx.sym.Activation(conv(e, "f"), act_type="tanh"), kernel=(3, 3))     # 3x3 pool: no
    fused, names = fuse_conv_tanh_pool(f)
    assert names == ["a"]
    ops = [(n["op"], n["name"]) for n in json.loads(fused.tojson())["nodes"] if n["op"] != "null"]
    assert ops.count(("Custom", "a")) == 1 and sum(op == "Convolution" for op, _ in ops) == 5
    no_pool = mx.sym.Activation(conv(data, "g"), act_type="tanh")                # no pool at all
    unchanged, none = fuse_conv_tanh_pool(no_pool)
    assert none == [] and unchanged is no_pool


def test_pass_keeps_a_chain_whose_inner_output_is_a_graph_output():
    data = mx.sym.Variable("data")
    conv = mx.sym.Convolution(data, num_filter=2, kernel=(3, 3), no_bias=True, name="c")
    act = mx.sym.Activation(conv, act_type="tanh", name="t")
    both = mx.sym.Group([mx.sym.Pooling(act, pool_type="max", kernel=(2, 2), stride=(2, 2)), act])
    assert fuse_conv_tanh_pool(both)[1] == []


def test_pass_absorbs_an_already_swapped_conv_and_keeps_its_attributes():
    swapped, _ = swap_convolutions(course_symbol(), device="cpu", gpu_kernel="7")
    fused, names = fuse_conv_tanh_pool(swapped)
    node = next(n for n in json.loads(fused.tojson())["nodes"] if n["op"] == "Custom")
    assert names == ["conv1"] and node["attrs"]["op_type"] == FUSED
    assert node["attrs"]["gpu_kernel"] == "7" and node["attrs"]["device"] == "cpu"


@pytest.mark.parametrize("layout", ["2017", "2019"])
def test_swap_with_fuse_fuses_then_swaps_the_rest(rng, layout):
    symbol = course_symbol() if layout == "2017" else later_course_symbol(**LATER_LAYOUTS[layout])
    report = swap_convolutions(symbol, fuse=True, device="cpu")
    assert report.fused == ["conv1"] and report.swapped == ([] if layout == "2017" else ["conv2"])
    assert "fused    conv1" in str(report) and report.kept == []
    nodes = json.loads(report.symbol.tojson())["nodes"]
    custom = {n["name"]: n["attrs"]["op_type"] for n in nodes if n["op"] == "Custom"}
    assert custom["conv1"] == FUSED and all(n["op"] != "Convolution" for n in nodes)
    assert "conv1_guard_data" in {n["name"] for n in nodes}           # guarded like the swapped nodes
    size = 28 if layout == "2017" else 70
    args = _random_args(rng, symbol, (3, 1, size, size))
    want = symbol.get_internals()["fc1_output"].bind(mx.cpu(), args).forward()[0].asnumpy()
    got = report.symbol.get_internals()["fc1_output"].bind(mx.cpu(), args).forward()[0].asnumpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    unselected = swap_convolutions(symbol, fuse=True, select=["conv2"], device="cpu")
    assert unselected.fused == [] and ("conv1", "not selected") in unselected.kept


def test_swap_with_fuse_in_a_gluon_block(rng):
    net = mx.gluon.nn.HybridSequential()
    with net.name_scope():
        net.add(mx.gluon.nn.Conv2D(6, 5, in_channels=1), mx.gluon.nn.Activation("tanh"),
                mx.gluon.nn.MaxPool2D(2, 2), mx.gluon.nn.Conv2D(16, 5, in_channels=6), mx.gluon.nn.Flatten(),
                mx.gluon.nn.Dense(10, in_units=16 * 8 * 8))
    net.initialize(mx.init.Xavier())
    x = mx.nd.array(rng.random((4, 1, 28, 28)).astype(np.float32) * 255)
    want = net(x).asnumpy()
    report = swap_convolutions(net, fuse=True, device="cpu")
    assert len(report.fused) == 1 and len(report.swapped) == 1
    np.testing.assert_allclose(report.result(x).asnumpy(), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
