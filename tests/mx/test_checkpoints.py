"""Checkpoints: load with both convolutions, accuracy targets, swapping convolutions in any network."""
import numpy as np
import pytest

from suitekit import assert_close, require_mxnet

models = require_mxnet("ece408_op.mx.models")
mx = models.mx
from ece408_op.errors import ModelError  # noqa: E402
from ece408_op.mx.inference import run_inference  # noqa: E402
from ece408_op.mx.swap import swap_convolutions  # noqa: E402


def test_course_models_are_present_and_float16_on_disk():
    assert {"ece408-high", "ece408-low"} <= set(models.available_models())
    for name in ("ece408-high", "ece408-low"):
        _, prefix, epoch = models.resolve_model(name)
        saved = mx.nd.load(f"{prefix}-{epoch:04d}.params")
        assert {v.dtype for v in saved.values()} == {np.float16}
        assert saved["arg:conv1_weight"].shape == (50, 1, 5, 5)
        assert saved["arg:fc1_weight"].shape == (500, 7200)


@pytest.mark.slow
def test_accuracy_targets_on_10000_test_images():
    # Real inference over the whole test split, with the custom operator.
    high = run_inference("ece408-high", 10000)["accuracy"]
    low = run_inference("ece408-low", 10000)["accuracy"]
    assert high >= 0.89, high
    assert 0.55 <= low <= 0.75, low


def test_unknown_model_is_a_clear_error():
    # bad input: a model name that does not exist
    with pytest.raises(ModelError, match="not found"):
        models.resolve_model("ece408-missing")


def test_checkpoint_prefix_path_is_accepted(tmp_path):
    name, symbol, arg_params, aux_params = models.load_model("ece408-low")
    mx.model.save_checkpoint(str(tmp_path / "mine"), 3, symbol, arg_params, aux_params)
    assert models.resolve_model(str(tmp_path / "mine"))[2] == 3
    assert run_inference(str(tmp_path / "mine"), 50)["name"] == "mine"


def _mixed_network():
    """A non-course network: a plain conv, a strided one, one with bias, a 1x1, a padded one."""
    data = mx.sym.Variable("data")
    x = mx.sym.Convolution(data, name="a", num_filter=4, kernel=(3, 3), no_bias=True)
    x = mx.sym.relu(x)
    x = mx.sym.Convolution(x, name="strided", num_filter=6, kernel=(3, 3), stride=(2, 2), no_bias=True)
    x = mx.sym.Convolution(x, name="biased", num_filter=5, kernel=(1, 1))
    x = mx.sym.Convolution(x, name="one", num_filter=3, kernel=(1, 1), no_bias=True)
    x = mx.sym.Convolution(x, name="padded", num_filter=2, kernel=(3, 3), pad=(1, 1), no_bias=True)
    return x


def test_swap_convolutions_in_any_network(rng):
    net = _mixed_network()
    report = swap_convolutions(net, device="cpu")
    swapped, names = report                                   # the earlier (symbol, names) form
    assert names == ["a", "strided", "biased", "one", "padded"] and report.kept == []
    assert swapped.list_arguments() == net.list_arguments()
    shapes, _, _ = net.infer_shape(data=(2, 3, 17, 17))
    args = {name: mx.nd.array(rng.standard_normal(shape).astype(np.float32))
            for name, shape in zip(net.list_arguments(), shapes)}
    want = net.bind(mx.cpu(), args).forward()[0].asnumpy()
    got = swapped.bind(mx.cpu(), args).forward()[0].asnumpy()
    assert_close(got, want, atol=1e-4, rtol=1e-4, what="swapped network")
    ops = [node["op"] for node in __import__("json").loads(swapped.tojson())["nodes"]]
    assert ops.count("Custom") == 5 and ops.count("Convolution") == 0


def test_swap_keeps_what_it_cannot_run_and_says_why():
    one_d = mx.sym.Convolution(mx.sym.Variable("seq"), name="conv1d", num_filter=4, kernel=(3,), no_bias=True)
    nhwc = mx.sym.Convolution(mx.sym.Variable("img"), name="nhwc", num_filter=4, kernel=(3, 3), layout="NHWC")
    report = swap_convolutions(mx.sym.Group([one_d, nhwc]))
    assert report.swapped == []
    assert dict(report.kept) == {"conv1d": "kernel=(3,) is 1-D: ece408_conv is 2-D only",
                                 "nhwc": "layout=NHWC: ece408_conv computes NCHW only"}
    assert "kept     nhwc: layout=NHWC" in str(report)
