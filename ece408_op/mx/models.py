"""Model checkpoints: the course network, and checkpoints by name or path prefix.

* ``course_symbol``: the 2017 course layout with MXNet's built-in Convolution.
* ``load_model``: an MXNet checkpoint by name (``ece408-high``...) or path prefix.
  Names are looked up in ``$ECE408_MODEL_DIR``, then the source checkout's ``models/``,
  then ``<prefix>/share/ece408_op/models`` of a pip install.
"""
import ast
import glob
import os
import sys
from pathlib import Path

from ..base.names import printable
from ..errors import ModelError
from .compat import import_mxnet
from .messages import mxnet_error_line

mx = import_mxnet()

MODEL_ENV = "ECE408_MODEL_DIR"


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


# The later course layouts (two custom layers; ../shared/HARNESS.md): input side, conv1 and
# conv2 filters, hidden units. Their inputs are Fashion-MNIST resized up (data/resize.py).
LATER_LAYOUTS = {
    "2018": {"size": 64, "filters": (6, 16), "hidden": 140},     # 2018 spring
    "2019": {"size": 70, "filters": (12, 24), "hidden": 160},    # 2019 fall
}


def later_course_symbol(size, filters, hidden, kernel=5, classes=10, data=None):
    """conv1 (no bias) -> tanh -> maxpool 2x2/2 -> conv2 (no bias) -> flatten -> FC hidden -> tanh
    -> FC classes -> softmax. The data variable carries the input shape (0, 1, size, size) as
    its ``__shape__`` hint, saved in the symbol file: ``input_shape`` reads it back."""
    data = mx.sym.Variable("data", shape=(0, 1, size, size)) if data is None else data
    x = mx.sym.Convolution(data, name="conv1", num_filter=filters[0], kernel=(kernel, kernel), no_bias=True)
    x = mx.sym.Activation(x, act_type="tanh", name="tanh1")
    x = mx.sym.Pooling(x, pool_type="max", kernel=(2, 2), stride=(2, 2), name="pool1")
    x = mx.sym.Convolution(x, name="conv2", num_filter=filters[1], kernel=(kernel, kernel), no_bias=True)
    x = mx.sym.Flatten(x, name="flatten")
    x = mx.sym.FullyConnected(x, num_hidden=hidden, name="fc1")
    x = mx.sym.Activation(x, act_type="tanh", name="tanh2")
    x = mx.sym.FullyConnected(x, num_hidden=classes, name="fc2")
    return mx.sym.SoftmaxOutput(x, name="softmax")


DEFAULT_INPUT_SHAPE = (1, 28, 28)     # the 2017 models, saved without a hint


def input_shape(symbol):
    """(C, H, W) of one input image: the data variable's ``__shape__`` hint, else 1 x 28 x 28."""
    hint = symbol.attr_dict().get("data", {}).get("__shape__")
    if not hint:
        return DEFAULT_INPUT_SHAPE
    try:
        shape = tuple(int(d) for d in ast.literal_eval(hint))
    except (ValueError, SyntaxError, TypeError) as exc:
        raise ModelError(f"the model's data variable has an unreadable __shape__ {hint!r}") from exc
    if len(shape) != 4 or min(shape[1:]) < 1:
        raise ModelError(f"the model's data variable has __shape__ {hint}; want (0, C, H, W)")
    return shape[1:]


MEMORY_MODELS = {}      # name -> (symbol JSON text, params bytes): a grader's hidden model, never on disk


def register_memory_model(name, symbol_json, params):
    """Make ``name`` load from memory (a checkpoint's symbol JSON and .params bytes): the hidden
    model of a ranked run reaches the measuring process over its channel and is never written
    where a team's process could read it."""
    MEMORY_MODELS[name] = (symbol_json, bytes(params))


def _load_memory_model(name):
    symbol_json, params = MEMORY_MODELS[name]
    try:
        symbol = mx.sym.load_json(symbol_json)
        loaded = mx.nd.load_frombuffer(params)
    except Exception as exc:  # noqa: BLE001  MXNetError, JSON errors
        raise ModelError(f"the model {name} could not be loaded: {mxnet_error_line(exc)}") from exc
    if not isinstance(loaded, dict):
        raise ModelError(f"the model {name}'s parameters are not a named checkpoint")
    arg_params = {k[4:]: v for k, v in loaded.items() if k.startswith("arg:")}
    aux_params = {k[4:]: v for k, v in loaded.items() if k.startswith("aux:")}
    check_params(symbol, arg_params, aux_params, f"{name}'s parameters")
    return name, symbol, arg_params, aux_params


def model_input_shape(name):
    """``input_shape`` of a checkpoint by name or prefix, reading only its symbol file."""
    if name in MEMORY_MODELS:
        return input_shape(mx.sym.load_json(MEMORY_MODELS[name][0]))
    _, prefix, _ = resolve_model(name)
    return input_shape(load_symbol(f"{prefix}-symbol.json"))


def load_symbol(symbol_file):
    """A checkpoint's symbol, or a one-line ModelError saying why the file cannot be loaded."""
    try:
        return mx.sym.load(symbol_file)
    except Exception as exc:  # noqa: BLE001  MXNetError, OSError, JSON errors
        raise ModelError(f"cannot load {symbol_file}: {mxnet_error_line(exc)}; it is not an MXNet symbol "
                         "file (re-save the checkpoint)") from exc


# ---------------------------------------------------------------- where models live

def model_dirs():
    dirs = []
    if os.environ.get(MODEL_ENV):
        dirs.append(Path(os.environ[MODEL_ENV]))
    dirs.append(Path(__file__).resolve().parents[2] / "models")          # source checkout
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
    for path in prefix.parent.glob(glob.escape(prefix.name) + "-*.params"):
        tail = path.name[len(prefix.name) + 1:-len(".params")]
        if tail.isdigit():
            epochs.append(int(tail))
    return max(epochs) if epochs else None


class ModelNotFound(ModelError):
    """No checkpoint of that name or prefix (the message says where it was looked for)."""


def resolve_model(name):
    """Name or checkpoint prefix -> (display name, prefix, epoch)."""
    if not name or "\0" in name:
        raise ModelNotFound(f"model {name!r} is not a name or a checkpoint prefix")
    candidates = [Path(name)] if ("/" in name or os.sep in name) else [d / name for d in model_dirs()]
    for prefix in candidates:
        symbol_file = Path(str(prefix) + "-symbol.json")
        try:
            found = symbol_file.is_file()
        except (OSError, ValueError):
            found = False
        if found:
            epoch = _latest_epoch(prefix)
            if epoch is None:
                raise ModelError(f"{symbol_file} has no {prefix.name}-NNNN.params beside it (looked for "
                                 f"{prefix.name}-*.params in {symbol_file.parent}); copy the parameters "
                                 "file there, or re-save the checkpoint")
            return Path(name).name, prefix, epoch
    known = ", ".join(available_models()) or "none found"
    where = printable(", ".join(str(p.parent) for p in candidates), None)      # one line whatever the name holds
    raise ModelNotFound(f"model {name!r} not found: looked for {printable(Path(name).name, 80)}-symbol.json in {where} "
                        f"(known models: {known}); give a known name or a checkpoint prefix path/to/name")


def _owners(symbol):
    """variable name -> 'node (op)' of the first layer that takes it as an input."""
    import json
    nodes = json.loads(symbol.tojson())["nodes"]
    owners = {}
    for node in nodes:
        if node["op"] == "null":
            continue
        for entry in node["inputs"]:
            source = nodes[entry[0]]
            if source["op"] == "null":
                owners.setdefault(source["name"], f"{node['name']} ({node['op']})")
    return owners


def check_params(symbol, arg_params, aux_params, params_file):
    """ModelError naming the first parameter the symbol needs that the checkpoint lacks."""
    inputs = {name for name in symbol.list_arguments() if name == "data" or name.endswith("label")}
    missing = [name for name in symbol.list_arguments() if name not in inputs and name not in arg_params]
    missing += [name for name in symbol.list_auxiliary_states() if name not in aux_params]
    if missing:
        owner = _owners(symbol).get(missing[0], "the network")
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise ModelError(f"{params_file} has no {missing[0]!r}{more}, which {owner} needs: an incomplete "
                         "checkpoint; re-save it with all its parameters (mx.model.save_checkpoint)")


def load_model(name):
    """(display name, symbol, arg_params, aux_params) of a checkpoint; params as MXNet loads them.
    A file that cannot be loaded, or a parameter the network needs but the file lacks, is a
    one-line ModelError saying which file and why."""
    if name in MEMORY_MODELS:
        return _load_memory_model(name)
    display, prefix, epoch = resolve_model(name)
    symbol_file, params_file = f"{prefix}-symbol.json", f"{prefix}-{epoch:04d}.params"
    symbol = load_symbol(symbol_file)
    if not Path(params_file).is_file():
        raise ModelError(f"{params_file} is not a regular file; replace it with the checkpoint's parameters")
    try:
        arg_params, aux_params = mx.model.load_params(str(prefix), epoch)
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"cannot load {params_file}: {mxnet_error_line(exc)}; it is truncated or not an "
                         "MXNet parameters file (re-save or copy the checkpoint again)") from exc
    check_params(symbol, arg_params, aux_params, params_file)
    return display, symbol, arg_params, aux_params
