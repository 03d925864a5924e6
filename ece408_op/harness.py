"""The milestone runner: the course harness's behaviour and exact output.

    Loading fashion-mnist data... done
    Loading model... done
    New Inference
    Op Time: 0.076815                      (one line per custom layer)
    Correctness: 0.8562 Model: ece408-high

m1 runs MXNet's built-in Convolution and prints ``EvalMetric: {'accuracy': ...}``
instead of the Op Time / Correctness lines. Arguments ``[model] [dataset_size]``
come in either order; the size is clamped to [0, 10000]; the images are the
first N of the test split, all in one batch.
"""
import contextlib
import os
import sys
import traceback
from dataclasses import dataclass, field

import numpy as np

from .data import load_fashion_mnist
from .errors import Ece408Error, ModelError, UsageError
from .models import IMAGE_SHAPE, available_models, load_model, mx, swap_convolutions, resolve_model
from .op import op_times, quiet_callback_tracebacks, take_last_error

DEFAULT_MODEL = "ece408-high"
MAX_SIZE = 10000


@dataclass(frozen=True)
class Milestone:
    name: str
    script: str            # the classic name, used in the usage text
    custom: bool           # swap in ece408_conv
    device: str = "cpu"    # path the custom operator takes


MILESTONES = {
    "m1": Milestone("m1", "m1.1.py", custom=False),
    "m2": Milestone("m2", "m2.1.py", custom=True, device="cpu"),
    "m3": Milestone("m3", "m3.1.py", custom=True, device="gpu"),
    "final": Milestone("final", "final.py", custom=True, device="gpu"),
}


@dataclass
class Args:
    model: str = DEFAULT_MODEL
    size: int = MAX_SIZE
    data_dir: str = None
    debug: bool = False
    profile: bool = False
    extra: dict = field(default_factory=dict)     # attributes for the swapped-in operators


def usage(script, gpu=False):
    models = ", ".join(available_models()) or DEFAULT_MODEL
    text = (f"Usage: {script} <model_name> <dataset size>\n"
            f"    <model_name>: one of {models}, or a checkpoint prefix path (default {DEFAULT_MODEL})\n"
            f"    <dataset size>: an integer, clamped to [0, {MAX_SIZE}] (default {MAX_SIZE})")
    if gpu:
        text += ("\n    --kernel N: GPU kernel version 1-7 or its name (default auto: $ECE408_KERNEL, "
                 "else the fastest for the layer)\n    --profile: print a table of the kernels and copies")
    return text


def _is_model(text):
    try:
        resolve_model(text)
    except ModelError:
        return False
    return True


def _option_value(item, items, text):
    value = item.split("=", 1)[1] if "=" in item else (items.pop(0) if items else None)
    if not value:
        raise UsageError(text)
    return value


def parse_args(argv, script, gpu=False):
    """``[model] [dataset_size]`` in either order, plus ``--data-dir DIR``, ``--debug``
    and, for GPU milestones, ``--kernel N`` and ``--profile``."""
    args = Args()
    text = usage(script, gpu)
    positional = []
    items = list(argv)
    while items:
        item = items.pop(0)
        name = item.split("=", 1)[0]
        if item in ("-h", "--help"):
            raise UsageError(text)
        if item == "--debug":
            args.debug = True
        elif name == "--data-dir":
            args.data_dir = _option_value(item, items, text)
        elif gpu and name == "--kernel":
            args.extra["gpu_kernel"] = _option_value(item, items, text)
        elif gpu and item == "--profile":
            args.profile = True
        elif item.startswith("--"):
            raise UsageError(text)
        else:
            positional.append(item)
    if len(positional) > 2:
        raise UsageError(text)
    seen_model = seen_size = False
    for item in positional:
        try:
            size = int(item)
        except ValueError:
            size = None
        if size is not None and not seen_size:
            args.size, seen_size = min(max(size, 0), MAX_SIZE), True
        elif size is None and not seen_model and _is_model(item):
            args.model, seen_model = item, True
        else:
            raise UsageError(text)
    return args


# ---------------------------------------------------------------- inference

def load_test_batch(count, data_dir=None):
    images, labels = load_fashion_mnist("test", count, data_dir)
    return images.astype(np.float32).reshape((-1,) + IMAGE_SHAPE), labels.astype(np.float32)


def label_names(symbol):
    return [name for name in symbol.list_arguments() if name.endswith("label")]


def bind_model(symbol, arg_params, aux_params, batch_size, context=None):
    """A Module bound for inference on one batch of ``batch_size`` images."""
    labels = label_names(symbol)
    module = mx.mod.Module(symbol, context=context or mx.cpu(), label_names=labels)
    module.bind(data_shapes=[("data", (batch_size,) + IMAGE_SHAPE)],
                label_shapes=[(name, (batch_size,)) for name in labels], for_training=False)
    module.set_params(arg_params, aux_params)
    return module


def score(module, images, labels):
    """Run the whole batch once and return an Accuracy metric."""
    batch = mx.io.NDArrayIter(images, labels, batch_size=len(images),
                              label_name=(label_names(module.symbol) or ["softmax_label"])[0])
    metric = mx.metric.Accuracy()
    module.score(batch, metric)
    return metric


def prepare(symbol, custom, device, op_attrs=None):
    if not custom:
        return symbol
    swapped_symbol, swapped = swap_convolutions(symbol, device=device, **(op_attrs or {}))
    if not swapped:
        raise ModelError("the model has no convolution that ece408_conv can replace")
    return swapped_symbol


def run_inference(model, count, use_custom=True, device="cpu", data_dir=None, op_attrs=None):
    """Quiet version of a milestone: {'name', 'accuracy', 'op_times'} for the first ``count`` images."""
    name, symbol, arg_params, aux_params = load_model(model)
    images, labels = load_test_batch(count, data_dir)
    module = bind_model(prepare(symbol, use_custom, device, op_attrs), arg_params, aux_params, len(images))
    with op_times.capture(echo=False) as start:
        metric = score(module, images, labels)
    return {"name": name, "accuracy": metric.get()[1],
            "op_times": [seconds for seconds, _ in op_times.since(start)]}


def run_milestone(milestone, args, out=None):
    """Print the course harness's transcript for one milestone."""
    out = out or sys.stdout

    def say(text, end="\n"):
        out.write(text + end)
        out.flush()
        _partial_line[0] = end == ""

    if args.size == 0:
        raise UsageError(f"dataset size 0: nothing to run; give a size from 1 to {MAX_SIZE}")
    kernels = _gpu_preflight(args) if milestone.device == "gpu" else None
    say("Loading fashion-mnist data...", end="")
    images, labels = load_test_batch(args.size, args.data_dir)
    say(" done")
    say("Loading model...", end="")
    name, symbol, arg_params, aux_params = load_model(args.model)
    module = bind_model(prepare(symbol, milestone.custom, milestone.device, args.extra),
                        arg_params, aux_params, len(images))
    say(" done")
    say("New Inference")
    with op_times.capture(echo=milestone.custom):
        metric = score(module, images, labels)
    if milestone.custom:
        say(f"Correctness: {metric.get()[1]} Model: {name}")
    else:
        say(f"EvalMetric: {dict(metric.get_name_value())}")
    if kernels is not None and kernels.profile is not None:
        say(f"\nProfile of the custom layers (CUDA events; Op Time covers the conv_forward rows only):\n"
            f"{kernels.profile.table()}")
    return metric.get()[1]


def _gpu_preflight(args):
    """Fail early, in one line, where the GPU path cannot run; set up profiling."""
    from . import kernels
    kernels.parse_version(args.extra.get("gpu_kernel"))
    kernels.GpuDevice.get()
    kernels.require_nvcc()
    kernels.profile = kernels.Profile() if args.profile else None
    return kernels


_partial_line = [False]      # stdout ends inside a line ("Loading model...") when an error comes


def _error(message):
    prefix = "\n" if _partial_line[0] else ""
    _partial_line[0] = False
    print(f"{prefix}error: {message}", file=sys.stderr)


def mxnet_error_line(exc):
    """The useful line of an MXNetError raised through a custom operator."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if "Error:" in line and "Traceback" not in line:
            return line.split("Error:", 1)[1].strip() or line
    return lines[0] if lines else type(exc).__name__


def main(milestone_name, argv=None):
    """Entry point of the scripts: exit status 0, or a one-line error and a non-zero status."""
    if milestone_name not in MILESTONES:
        print(f"error: unknown milestone {milestone_name!r}; use one of {', '.join(MILESTONES)}", file=sys.stderr)
        return 2
    milestone = MILESTONES[milestone_name]
    if argv is None:
        argv, script = sys.argv[1:], os.path.basename(sys.argv[0]) or milestone.script
    else:
        script = milestone.script
    debug = "--debug" in argv
    try:
        with contextlib.nullcontext() if debug else quiet_callback_tracebacks():
            run_milestone(milestone, parse_args(argv, script, milestone.device == "gpu"))
        return 0
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return exc.exit_code
    except Ece408Error as exc:
        if debug:
            traceback.print_exc()
        _error(exc)
        return exc.exit_code
    except mx.base.MXNetError as exc:
        if debug:
            traceback.print_exc()
        cause = take_last_error()
        _error(cause if cause is not None else mxnet_error_line(exc))
        return getattr(cause, "exit_code", 1)
