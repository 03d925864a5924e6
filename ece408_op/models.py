"""Model checkpoints and graph rewriting.

* ``course_symbol``: the 2017 course layout with MXNet's built-in Convolution.
* ``load_model``: an MXNet checkpoint by name (``ece408-high``...) or path prefix.
* ``swap_convolutions``: rewrite every Convolution node that ``ece408_conv`` can
  compute (2-D, square kernel, stride 1, no padding, no dilation, one group,
  no bias) into the custom operator, keeping the weight's name; any network's
  symbol works, not only the course's.
"""
import ast
import json
import os
import sys
from pathlib import Path

from . import OP_TYPE, require_op
from .errors import ModelError

mx = require_op().mx

MODEL_ENV = "ECE408_MODEL_DIR"
IMAGE_SHAPE = (1, 28, 28)


def course_symbol(num_filter=50, kernel=5, hidden=500, classes=10, data=None):
    """conv (no bias) -> tanh -> maxpool 2x2/2 -> flatten -> FC hidden -> tanh -> FC classes -> softmax."""
    data = mx.sym.Variable("data") if data is None else data
    x = mx.sym.Convolution(data, name="conv1", num_filter=num_filter, kernel=(kernel, kernel), no_bias=True)
    x = mx.sym.Activation(x, act_type="tanh", name="tanh1")
    x = mx.sym.Pooling(x, pool_type="max", kernel=(2, 2), stride=(2, 2), name="pool1")
    x = mx.sym.Flatten(x, name="flatten")
    x = mx.sym.FullyConnected(x, num_hidden=hidden, name="fc1")
    x = mx.sym.Activation(x, act_type="tanh", name="tanh2")
    x = mx.sym.FullyConnected(x, num_hidden=classes, name="fc2")
    return mx.sym.SoftmaxOutput(x, name="softmax")


# ---------------------------------------------------------------- where models live

def model_dirs():
    dirs = []
    if os.environ.get(MODEL_ENV):
        dirs.append(Path(os.environ[MODEL_ENV]))
    dirs.append(Path(__file__).resolve().parent.parent / "models")        # source checkout
    dirs.append(Path(sys.prefix) / "share" / "ece408_op" / "models")      # pip install
    return dirs


def available_models():
    names = set()
    for folder in model_dirs():
        names.update(p.name[:-len("-symbol.json")] for p in folder.glob("*-symbol.json"))
    return sorted(names)


def _latest_epoch(prefix):
    prefix = Path(prefix)
    epochs = []
    for path in prefix.parent.glob(prefix.name + "-*.params"):
        tail = path.name[len(prefix.name) + 1:-len(".params")]
        if tail.isdigit():
            epochs.append(int(tail))
    return max(epochs) if epochs else None


def resolve_model(name):
    """Name or checkpoint prefix -> (display name, prefix, epoch)."""
    candidates = [Path(name)] if ("/" in name or os.sep in name) else [d / name for d in model_dirs()]
    for prefix in candidates:
        symbol_file = Path(str(prefix) + "-symbol.json")
        if symbol_file.is_file():
            epoch = _latest_epoch(prefix)
            if epoch is None:
                raise ModelError(f"{symbol_file} has no {prefix.name}-NNNN.params beside it")
            return Path(name).name, prefix, epoch
    known = ", ".join(available_models()) or "none found"
    raise ModelError(f"model {name!r} not found (known: {known}); give a name or a checkpoint prefix")


def load_model(name):
    """(display name, symbol, arg_params, aux_params) of a checkpoint; params as MXNet loads them."""
    display, prefix, epoch = resolve_model(name)
    try:
        symbol, arg_params, aux_params = mx.model.load_checkpoint(str(prefix), epoch)
    except Exception as exc:  # noqa: BLE001  MXNetError, OSError, JSON errors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"cannot load checkpoint {prefix}-{epoch:04d}: {first}") from exc
    return display, symbol, arg_params, aux_params


# ---------------------------------------------------------------- graph rewriting

def _tuple_attr(attrs, key, default):
    text = attrs.get(key)
    if text in (None, "", "()", "[]"):
        return default
    value = ast.literal_eval(text)
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _swappable(attrs):
    kernel = _tuple_attr(attrs, "kernel", ())
    if len(kernel) != 2 or kernel[0] != kernel[1]:
        return False
    checks = (
        all(s == 1 for s in _tuple_attr(attrs, "stride", (1, 1))),
        all(p == 0 for p in _tuple_attr(attrs, "pad", (0, 0))),
        all(d == 1 for d in _tuple_attr(attrs, "dilate", (1, 1))),
        int(attrs.get("num_group", "1")) == 1,
        attrs.get("no_bias", "False").lower() in ("true", "1"),
        attrs.get("layout", "None") in ("None", "NCHW"),
    )
    return all(checks)


def swap_convolutions(symbol, **op_attrs):
    """Return (new symbol, names of swapped layers): eligible Convolutions -> ``ece408_conv``.

    ``op_attrs`` (e.g. ``device="gpu"``) are added to every swapped node.
    """
    graph = json.loads(symbol.tojson())
    swapped = []
    for node in graph["nodes"]:
        attrs = node.get("attrs", {})
        if node["op"] != "Convolution" or not _swappable(attrs):
            continue
        kernel = _tuple_attr(attrs, "kernel", ())
        node["op"] = "Custom"
        node["attrs"] = {"op_type": OP_TYPE, "num_filter": attrs["num_filter"],
                         "kernel": str(kernel[0]), **{k: str(v) for k, v in op_attrs.items()}}
        node["inputs"] = node["inputs"][:2]
        swapped.append(node["name"])
    return mx.sym.load_json(json.dumps(graph)), swapped
