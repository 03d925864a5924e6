"""ece408_op.gluon.Conv2D as a drop-in for gluon.nn.Conv2D, and swap_convolutions on Gluon blocks
and checkpoints (what it swaps, what it keeps and why, parameter names unchanged)."""
import json
import subprocess
import warnings

import numpy as np
import pytest

from suitekit import ROOT, needs_startup_hook, python_command, require_mxnet

require_mxnet()
import mxnet as mx  # noqa: E402
from mxnet.gluon import nn  # noqa: E402

import ece408_op  # noqa: E402
from ece408_op.mx import gluon as ece_gluon  # noqa: E402

CONFIGS = [
    dict(channels=8, kernel_size=3, padding=1, strides=2),
    dict(channels=6, kernel_size=(3, 5), groups=3, use_bias=False, activation="relu", dilation=2),
    dict(channels=8, kernel_size=1),
    dict(channels=6, kernel_size=3, groups=6, padding=(1, 2), activation="tanh"),       # depthwise
    dict(channels=4, kernel_size=5, in_channels=6, weight_initializer=mx.init.Normal(0.5)),
]


@pytest.fixture(scope="module")
def x():
    return mx.nd.array(np.random.default_rng(5).standard_normal((2, 6, 17, 15)).astype(np.float32))


def _max_rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


@pytest.mark.parametrize("config", CONFIGS, ids=[str(sorted(c)) for c in CONFIGS])
def test_conv2d_is_a_drop_in_for_nn_conv2d(config, x, tmp_path):
    builtin = nn.Conv2D(**config)
    builtin.initialize(mx.init.Xavier())
    want = builtin(x).asnumpy()
    builtin.save_parameters(str(tmp_path / "builtin.params"))

    ours = ece408_op.gluon.Conv2D(**config)
    assert [p.split("_", 1)[1] for p in ours.collect_params()] == \
        [p.split("_", 1)[1] for p in builtin.collect_params()]            # weight (and bias), same names
    ours.load_parameters(str(tmp_path / "builtin.params"))            # an nn.Conv2D checkpoint loads
    assert _max_rel(ours(x).asnumpy(), want) < 1e-5                   # imperative
    ours.hybridize()
    assert _max_rel(ours(x).asnumpy(), want) < 1e-5
    ours.hybridize(static_alloc=True, static_shape=True)
    assert _max_rel(ours(x).asnumpy(), want) < 1e-5

    ours.export(str(tmp_path / "ours"))
    nodes = open(tmp_path / "ours-symbol.json").read()
    assert '"op_type": "ece408_conv"' in nodes and '"Convolution"' not in nodes
    imported = mx.gluon.SymbolBlock.imports(str(tmp_path / "ours-symbol.json"), ["data"],
                                            str(tmp_path / "ours-0000.params"))
    assert _max_rel(imported(x).asnumpy(), want) < 1e-5


def test_deferred_initialisation_infers_in_channels(x):
    ours = ece408_op.gluon.Conv2D(5, kernel_size=3)                   # in_channels=0
    ours.initialize()
    ours.hybridize()
    assert ours(x).shape == (2, 5, 15, 13)
    assert ours.weight.shape == (5, 6, 3, 3) and ours.bias.shape == (5,)


def test_extra_keywords_are_the_operator_attributes(x):
    ours = ece408_op.gluon.Conv2D(4, 3, device="cpu", gpu_kernel="v6", precision="fp32")
    ours.initialize()
    assert ours(x).shape == (2, 4, 15, 13)
    assert ours._ece408_attrs["precision"] == "fp32"
    with pytest.raises(ece408_op.errors.ShapeError, match="precision='fp16'"):
        # bad input: an unknown precision, refused at construction
        ece408_op.gluon.Conv2D(4, 3, precision="fp16")
    with pytest.raises(ece408_op.errors.ShapeError, match="device='tpu' is not one of"):
        # bad input: an unknown device, refused at construction
        ece408_op.gluon.Conv2D(4, 3, device="tpu")


def test_unsupported_configuration_falls_back_with_one_warning(x):
    # float64 parameters: ece408_conv computes float32 only, so the built-in runs (warned once)
    ece_gluon._warned.clear()
    ours = ece408_op.gluon.Conv2D(4, 3, in_channels=6)
    builtin = nn.Conv2D(4, 3, in_channels=6)
    for block in (ours, builtin):
        block.initialize(mx.init.One())
        block.cast("float64")
    x64 = x.astype("float64")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = ours(x64).asnumpy()
        ours(x64).asnumpy()
    messages = [str(w.message) for w in caught if "ece408_op.gluon.Conv2D" in str(w.message)]
    assert messages == ["ece408_op.gluon.Conv2D: parameters of type float64 are not supported (float32 only); "
                        "using MXNet's built-in Convolution"]
    assert np.array_equal(first, builtin(x64).asnumpy())


def test_swap_of_a_block_shares_its_parameters(x):
    net = nn.HybridSequential(prefix="net_")
    with net.name_scope():
        net.add(nn.Conv2D(8, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"), nn.Conv2D(4, 1))
    net.initialize(mx.init.Xavier())
    want = net(x).asnumpy()
    report = ece408_op.swap_convolutions(net)
    assert report.swapped == ["net_conv0_fwd", "net_conv1_fwd"] and report.kept == []
    block = report.result
    assert sorted(block.collect_params()) == sorted(net.collect_params())
    assert _max_rel(block(x).asnumpy(), want) < 1e-5
    net.collect_params()["net_conv1_weight"].set_data(mx.nd.zeros((4, 8, 1, 1)))   # shared: seen by both
    assert np.abs(block(x).asnumpy()).max() == np.abs(net[3].bias.data().asnumpy()).max()


@pytest.mark.slow                                   # measured 2.4 s (loaded machine)
@needs_startup_hook
def test_swap_of_a_checkpoint_prefix_and_its_report(tmp_path, x):
    net = nn.HybridSequential(prefix="ck_")
    with net.name_scope():
        net.add(nn.Conv2D(8, 3, strides=2), nn.Activation("relu"), nn.Conv2D(4, (1, 3), padding=(0, 1)))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    want = net(x).asnumpy()
    net.export(str(tmp_path / "ck"), epoch=3)
    report = ece408_op.swap_convolutions(str(tmp_path / "ck"))
    assert report.swapped == ["ck_conv0_fwd", "ck_conv1_fwd"]
    assert set(report.arg_params) == {"ck_conv0_weight", "ck_conv0_bias", "ck_conv1_weight", "ck_conv1_bias"}
    assert str(report).splitlines()[0] == "swapped 2 of 2 convolutions"
    report.save(str(tmp_path / "swapped"), epoch=3)
    # the swapped checkpoint loads and runs in a fresh interpreter that imports mxnet first
    code = (f"import mxnet as mx, numpy as np\n"
            f"b = mx.gluon.SymbolBlock.imports('{tmp_path}/swapped-symbol.json', ['data'], "
            f"'{tmp_path}/swapped-0003.params')\n"
            f"x = mx.nd.array(np.load('{tmp_path}/x.npy'))\n"
            f"np.save('{tmp_path}/y.npy', b(x).asnumpy())\n")
    np.save(tmp_path / "x.npy", x.asnumpy())
    result = subprocess.run([*python_command(), "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert _max_rel(np.load(tmp_path / "y.npy"), want) < 1e-5


def test_swap_rejects_what_it_cannot_take():
    # bad input: not a model; an unknown option; a bad device
    with pytest.raises(ece408_op.errors.Ece408Error, match="takes a Symbol, a checkpoint prefix or a Gluon"):
        ece408_op.swap_convolutions(42)
    with pytest.raises(ece408_op.errors.Ece408Error, match="unknown option colour="):
        ece408_op.swap_convolutions(mx.sym.var("x"), colour="red")
    with pytest.raises(ece408_op.errors.Ece408Error, match="device='tpu'"):
        ece408_op.swap_convolutions(mx.sym.var("x"), device="tpu")
    with pytest.raises(ece408_op.errors.ModelError, match="not found"):
        ece408_op.swap_convolutions(str(ROOT / "no" / "such-model"))


def test_gluon_is_importable_both_ways():
    from ece408_op.gluon import Conv2D, swap_blocks
    assert Conv2D is ece408_op.gluon.Conv2D is ece_gluon.Conv2D and swap_blocks is ece_gluon.swap_blocks


def _op_calls():
    return len(ece408_op.mx.op.op_times.records)


@pytest.mark.parametrize("initialised", [True, False], ids=["initialised", "deferred"])
def test_swap_blocks_keeps_each_convolutions_initializers(x, initialised):
    # GluonCV's centernet and simple_pose give Conv2D an Initializer object as bias_initializer
    net = nn.HybridSequential(prefix="init_")
    with net.name_scope():
        net.add(nn.Conv2D(8, 3, in_channels=6, weight_initializer=mx.init.Normal(0.3),
                          bias_initializer=mx.init.Constant(0.25)),
                nn.Conv2D(4, 1, bias_initializer="ones", activation="relu"))
    if initialised:
        net.initialize()
        want = net(x).asnumpy()
    report = ece_gluon.swap_blocks(net)
    assert report.swapped == ["init_conv0", "init_conv1"] and report.kept == []
    assert [type(block) for block in net] == [ece_gluon.Conv2D] * 2
    calls = _op_calls()
    got = net(x).asnumpy() if initialised else None
    if not initialised:
        net.initialize()                                # the initializers given to nn.Conv2D still apply
        got = net(x).asnumpy()
        assert np.all(net[0].bias.data().asnumpy() == 0.25) and np.all(net[1].bias.data().asnumpy() == 1)
        h = mx.nd.Convolution(x, net[0].weight.data(), net[0].bias.data(), kernel=(3, 3), num_filter=8)
        want = mx.nd.relu(mx.nd.Convolution(h, net[1].weight.data(), net[1].bias.data(), kernel=(1, 1),
                                            num_filter=4)).asnumpy()
    assert _max_rel(got, want) < 1e-5 and _op_calls() == calls + 2


def test_swap_blocks_swaps_a_bare_conv2d(x):
    conv = nn.Conv2D(5, 3, strides=2, in_channels=6)
    conv.initialize(mx.init.Xavier())
    want = conv(x).asnumpy()
    report = ece_gluon.swap_blocks(conv, device="cpu", precision="fp32")
    assert report.swapped == [conv.name] and type(conv) is ece_gluon.Conv2D
    assert conv._ece408_attrs["precision"] == "fp32"
    for hybridize in (False, True):
        if hybridize:
            conv.hybridize()
        calls = _op_calls()
        assert _max_rel(conv(x).asnumpy(), want) < 1e-5 and _op_calls() == calls + 1


@pytest.mark.filterwarnings("ignore:Cannot decide type:UserWarning")       # SymbolBlock's note on its input
def test_swap_blocks_swaps_the_convolutions_inside_a_symbol_block(x):
    # GluonCV's SSD holds most of its convolutions in a SymbolBlock (its feature extractor)
    features = nn.HybridSequential(prefix="feat_")
    with features.name_scope():
        features.add(nn.Conv2D(8, 3, padding=1), nn.Activation("relu"), nn.Conv2D(8, 3, padding=2, dilation=2))
    features.initialize(mx.init.Xavier())
    data = mx.sym.var("data")
    head = nn.HybridSequential(prefix="head_")
    with head.name_scope():
        head.add(nn.Conv2D(4, 1, in_channels=8), nn.Conv1D(2, 3, in_channels=1, layout="NCW"))
    head.initialize(mx.init.Xavier())
    net = nn.HybridSequential(prefix="top_")
    net.add(mx.gluon.SymbolBlock(features(data), data, params=features.collect_params()), head[0])
    want = net(x).asnumpy()
    report = ece_gluon.swap_blocks(net)
    assert sorted(report.swapped) == ["feat_conv0_fwd", "feat_conv1_fwd", "head_conv0"] and report.kept == []
    assert "Convolution" not in net[0]._cached_graph[1].tojson()
    for hybridize in (False, True):
        if hybridize:
            net.hybridize()
        calls = _op_calls()
        assert _max_rel(net(x).asnumpy(), want) < 1e-5 and _op_calls() == calls + 3
    # what it cannot swap, it reports: a 1-D convolution block, an NHWC node in a SymbolBlock
    nhwc = mx.sym.Convolution(data, num_filter=2, kernel=(3, 3), layout="NHWC", name="nhwc")
    kept = ece_gluon.swap_blocks(head)
    assert kept.swapped == ["head_conv0"] and kept.kept[0][0] == "head_conv1" and "Conv1D" in kept.kept[0][1]
    kept = ece_gluon.swap_blocks(mx.gluon.SymbolBlock(nhwc, data))
    assert kept.swapped == [] and kept.kept == [("nhwc", "layout=NHWC: ece408_conv computes NCHW only")]


@pytest.mark.parametrize("op_name", ["Convolution", "Convolution_v1"])
def test_swap_convolutions_swaps_dilated_and_legacy_convolutions(op_name, x):
    # every 2-D convolution node is swapped: dilated ones, and the legacy Convolution_v1 op
    data = mx.sym.var("data")
    conv = getattr(mx.sym, op_name)
    y = conv(data, num_filter=4, kernel=(3, 3), dilate=(2, 3), pad=(2, 1), name="dilated")
    y = conv(mx.sym.relu(y), num_filter=3, kernel=(3, 3), stride=(2, 2), no_bias=True, name="plain")
    report = ece408_op.swap_convolutions(y)
    assert report.swapped == ["dilated", "plain"] and report.kept == []
    assert op_name not in {node["op"] for node in json.loads(report.result.tojson())["nodes"]}
    rng = np.random.default_rng(11)
    shapes = dict(zip(y.list_arguments(), y.infer_shape(data=x.shape)[0]))
    args = {name: x if name == "data" else mx.nd.array(rng.standard_normal(shape).astype(np.float32))
            for name, shape in shapes.items()}
    want = y.bind(mx.cpu(), args).forward()[0].asnumpy()
    calls = _op_calls()
    got = report.result.bind(mx.cpu(), args).forward()[0].asnumpy()
    assert _max_rel(got, want) < 1e-5 and _op_calls() == calls + 2


def test_save_keeps_the_epoch_it_loaded(tmp_path, x):
    net = nn.HybridSequential(prefix="ep_")
    with net.name_scope():
        net.add(nn.Conv2D(4, 3))
    net.initialize()
    net.hybridize()
    net(x)
    net.export(str(tmp_path / "ep"), epoch=7)
    report = ece408_op.swap_convolutions(str(tmp_path / "ep"))
    report.save(str(tmp_path / "swapped"))
    assert sorted(p.name for p in tmp_path.glob("swapped-*")) == ["swapped-0007.params", "swapped-symbol.json"]
    report.save(str(tmp_path / "other"), epoch=2)
    assert (tmp_path / "other-0002.params").is_file()
