"""The later course models (2018 spring, 2019 fall): their checkpoints, the input shape saved in
the symbol, accuracy on the whole test split, m1 == m2 Correctness, two Op Time lines, the fused
graph's Correctness, and their training recipe."""
import json
from dataclasses import replace

import numpy as np
import pytest

from suitekit import require_mxnet, run_script
from test_milestones import CUSTOM_OUTPUT, M1_OUTPUT

models = require_mxnet("ece408_op.mx.models")
mx = models.mx
from ece408_op.errors import ModelError  # noqa: E402
from ece408_op.mx.inference import load_test_batch, run_inference  # noqa: E402

pytestmark = pytest.mark.slow          # every test here runs whole milestones

# name -> (input side, (conv1, conv2 filters), hidden units, flattened conv2 output)
LATER = {"ece408-2018": (64, (6, 16), 140, 16 * 26 * 26), "ece408-2019": (70, (12, 24), 160, 24 * 29 * 29)}


@pytest.mark.parametrize("name", LATER)
def test_checkpoint_layout_float16_and_input_shape(name):
    size, (m1, m2), hidden, flat = LATER[name]
    _, prefix, epoch = models.resolve_model(name)
    saved = mx.nd.load(f"{prefix}-{epoch:04d}.params")
    assert {v.dtype for v in saved.values()} == {np.float16}
    shapes = {key.split(":", 1)[1]: value.shape for key, value in saved.items()}
    assert shapes == {"conv1_weight": (m1, 1, 5, 5), "conv2_weight": (m2, m1, 5, 5), "fc1_weight": (hidden, flat),
                      "fc1_bias": (hidden,), "fc2_weight": (10, hidden), "fc2_bias": (10,)}
    assert models.model_input_shape(name) == (1, size, size)
    nodes = json.loads(open(f"{prefix}-symbol.json").read())["nodes"]
    assert [n["name"] for n in nodes if n["op"] == "Convolution"] == ["conv1", "conv2"]


def test_the_2017_models_keep_28x28():
    assert models.model_input_shape("ece408-high") == (1, 28, 28)
    assert models.model_input_shape("ece408-low") == (1, 28, 28)


@pytest.mark.timeout(900)          # 148 s for ece408-2019 on the shared 2-core CI machine (2026-11-23)
@pytest.mark.parametrize("name", LATER)
def test_accuracy_on_10000_images_and_m1_equals_m2_and_fused(name):
    # real inference over the whole test split: custom operator (CPU path), built-in, fused
    custom = run_inference(name, 10000)
    assert custom["accuracy"] >= 0.88, custom["accuracy"]
    assert len(custom["op_times"]) == 2
    assert run_inference(name, 10000, use_custom=False)["accuracy"] == custom["accuracy"]
    fused = run_inference(name, 10000, fuse=True)
    assert fused["accuracy"] == custom["accuracy"] and len(fused["op_times"]) == 2


def test_scripts_print_two_op_time_lines_and_m1_agrees():
    for name in LATER:
        m2 = run_script("m2_cpu.py", name, 500)
        match = CUSTOM_OUTPUT.match(m2.stdout)
        assert m2.returncode == 0 and match, m2.stdout + m2.stderr
        assert len(match["ops"].splitlines()) == 2 and match["model"] == name
        m1 = M1_OUTPUT.match(run_script("m1.1.py", name, 500).stdout)
        assert m1 and m1["acc"] == match["acc"]
        fused = CUSTOM_OUTPUT.match(run_script("m2.1.py", name, 500, "--fuse").stdout)
        assert fused and fused["acc"] == match["acc"] and len(fused["ops"].splitlines()) == 2


def test_fuse_is_refused_by_m1():
    # bad input: --fuse where MXNet's own layers run
    result = run_script("m1.1.py", "10", "--fuse")
    assert result.returncode == 2 and result.stderr.splitlines()[-1] == \
        "error: --fuse is for m2, m3 and final: m1 runs MXNet's built-in Convolution"


def _with_hint(tmp_path, hint):
    name, symbol, arg_params, aux_params = models.load_model("ece408-low")
    graph = json.loads(symbol.tojson())
    graph["nodes"][0].setdefault("attrs", {})["__shape__"] = hint
    prefix = tmp_path / "hinted"
    mx.model.save_checkpoint(str(prefix), 1, mx.sym.load_json(json.dumps(graph)), arg_params, aux_params)
    return str(prefix)


def test_input_shapes_fashion_mnist_cannot_give_are_clear_errors(tmp_path):
    # bad input: a model asking for 3 channels, and an unreadable hint
    with pytest.raises(ModelError, match="Fashion-MNIST gives 1 x S x S"):
        load_test_batch(5, shape=models.model_input_shape(_with_hint(tmp_path, "(0, 3, 28, 28)")))
    with pytest.raises(ModelError, match="unreadable __shape__"):
        models.model_input_shape(_with_hint(tmp_path, "(0, one)"))
    result = run_script("m2.1.py", _with_hint(tmp_path, "(0, 3, 28, 28)"), 5)
    assert result.returncode == 1 and result.stderr.strip().startswith("error: the model takes 3 x 28 x 28 inputs")


def test_training_recipe_saves_float16_and_the_input_shape(tmp_path):
    from ece408_op.mx import train
    recipe = replace(train.RECIPES["ece408-2019"], train_images=300, epochs=1)
    arg_params, aux_params = train.train(recipe, progress=False)
    train.save_float16(tmp_path / "tiny", arg_params, aux_params, recipe=recipe)
    assert models.model_input_shape(str(tmp_path / "tiny")) == (1, 70, 70)
    saved = mx.nd.load(str(tmp_path / "tiny-0001.params"))
    assert {v.dtype for v in saved.values()} == {np.float16}
    builtin = train.evaluate(str(tmp_path / "tiny"), count=200)            # MXNet's own layers
    assert builtin == run_inference(str(tmp_path / "tiny"), 200)["accuracy"]   # == the custom operator's
