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
from dataclasses import dataclass, field

from ..errors import UsageError
from .breakdown import Breakdown
from .errors import Console, run

DEFAULT_MODEL = "ece408-high"
MAX_SIZE = 10000


@dataclass(frozen=True)
class Milestone:
    script: str            # the classic name, used in the usage text
    summary: str           # one line for ``python -m ece408_op --help``
    custom: bool           # swap in ece408_conv
    device: str = "cpu"    # path the custom operator takes
    repeats: int = 0       # a team's forward: timed runs on fresh inputs per layer (final)


MILESTONES = {
    "m1": Milestone("m1.1.py", "whole network with MXNet's built-in Convolution, CPU (EvalMetric)", custom=False),
    "m2": Milestone("m2.1.py", "network with ece408_conv, CPU path (Op Time, Correctness)", custom=True),
    "m3": Milestone("m3.1.py", "network with ece408_conv, GPU path (Op Time, Correctness)", custom=True,
                    device="gpu"),
    "final": Milestone("final.py", "same as m3: the run the course ranked by Op Time", custom=True, device="gpu",
                       repeats=5),
}


@dataclass
class Args:
    model: str = DEFAULT_MODEL
    size: int = MAX_SIZE
    data_dir: str = None
    profile: bool = False
    fuse: bool = False     # conv -> tanh -> 2x2 max-pool chains as one ece408_conv_tanh_pool layer
    team: str = None       # --team DIR: a team project to run (default: this folder if it is one)
    extra: dict = field(default_factory=dict)     # attributes for the swapped-in operators


def _mx():
    """The MXNet layer (registers the operator), or a one-line Ece408Error saying why it is unusable."""
    from .. import require_mxnet
    return require_mxnet()


def usage(script, gpu=False):
    from ..mx.models import available_models
    models = ", ".join(available_models()) or DEFAULT_MODEL
    text = (f"Usage: {script} <model_name> <dataset size>\n"
            f"    <model_name>: one of {models}, or a checkpoint prefix path (default {DEFAULT_MODEL})\n"
            f"    <dataset size>: an integer, clamped to [0, {MAX_SIZE}] (default {MAX_SIZE})\n"
            "    --fuse: run each conv -> tanh -> max-pool chain as one fused layer (ece408_conv_tanh_pool)")
    if gpu:
        text += ("\n    --kernel N: GPU kernel version 1-10 or its name (default auto: $ECE408_KERNEL, "
                 "else the fastest for the layer)\n    --profile: print a table of the kernels and copies")
    return text


def _check_model(text, usage_text):
    """A model argument must name a checkpoint: UsageError (the usage, then where it was looked
    for) where none is found; ModelError where one is found but incomplete (no params file)."""
    from ..mx.models import ModelNotFound, resolve_model
    try:
        resolve_model(text)
    except ModelNotFound as exc:
        raise UsageError(f"{usage_text}\nerror: {exc}") from exc


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
            pass                                   # handled by cli.errors.run
        elif name == "--data-dir":
            args.data_dir = _option_value(item, items, text)
        elif name == "--team":
            args.team = _option_value(item, items, text)
        elif gpu and name == "--kernel":
            args.extra["gpu_kernel"] = _option_value(item, items, text)
        elif gpu and item == "--profile":
            args.profile = True
        elif item == "--fuse":
            args.fuse = True
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
        elif size is None and not seen_model:
            _check_model(item, text)
            args.model, seen_model = item, True
        else:
            raise UsageError(text)
    return args


def team_runtime(milestone, args, device=None):
    """The TeamRuntime of the team project to run (``--team DIR``, else this folder where it is
    one), its kernels compiled for ``device``; None where the milestone runs our own forward
    (m1, ``--kernel N``: the staff's reference versions, or no team project here)."""
    from ..team.project import find_team
    if not milestone.custom or "gpu_kernel" in args.extra or args.fuse:
        return None
    team_dir = find_team(args.team)
    if team_dir is None:
        return None
    from ..team.client import numba_cache_dir
    from ..team.runtime import TeamRuntime
    image = None
    if milestone.device == "gpu":
        from ..team.build import compile_kernels
        image = compile_kernels(team_dir, device.arch)
    return TeamRuntime(team_dir, image, repeats=milestone.repeats, numba_cache=numba_cache_dir())


def run_milestone(milestone, args, console=None, clock=None, runtime=None):
    """Print the course harness's transcript for one milestone; returns the accuracy.
    ``clock`` (a cli.breakdown.Breakdown) is marked at each step for ``--profile``; ``runtime``
    (a team.runtime.TeamRuntime) runs a team's forward (default: ``team_runtime``)."""
    say = (console or Console()).say
    clock = clock or Breakdown()
    if args.size == 0:
        raise UsageError(f"dataset size 0: nothing to run; give a size from 1 to {MAX_SIZE}")
    device = _gpu_preflight(args) if milestone.device == "gpu" else None
    runtime = runtime or team_runtime(milestone, args, device)
    with runtime or contextlib.nullcontext():
        if runtime is not None:
            args.extra["team"] = "1"
        return _run(milestone, args, say, clock, device)


def _run(milestone, args, say, clock, device):
    from ..kernels import hostcopy
    from ..mx.inference import bind_model, load_test_batch, prepare, score
    from ..mx.models import load_model, model_input_shape
    from ..mx.op import op_times
    profiling = device.profiling() if device is not None and args.profile else contextlib.nullcontext()
    clock.mark("GPU set-up: CUDA init, device context, nvcc check" if device else "set-up")
    say("Loading fashion-mnist data...", end="")
    shape = model_input_shape(args.model)
    images, labels = load_test_batch(args.size, args.data_dir, shape)
    say(" done")
    clock.mark(f"data: {len(images)} test images of {shape[1]}x{shape[2]}")
    say("Loading model...", end="")
    name, symbol, arg_params, aux_params = load_model(args.model)
    module = bind_model(prepare(symbol, milestone.custom, milestone.device, args.extra, fuse=args.fuse),
                        arg_params, aux_params, len(images))
    say(" done")
    clock.mark("model: load, swap" + (", fuse" if args.fuse else "") + ", bind")
    say("New Inference")
    first_record = hostcopy.record_count()
    with profiling as profile, op_times.capture(echo=milestone.custom):
        metric = score(module, images, labels)
    clock.mark("inference: MXNet's forward over the whole network, of which")
    if milestone.custom:
        say(f"Correctness: {metric.get()[1]} Model: {name}")
    else:
        say(f"EvalMetric: {dict(metric.get_name_value())}")
    if profile is not None:
        say(f"\nProfile of the custom layers (CUDA events; Op Time covers the conv_forward rows only):\n"
            f"{profile.table()}")
        layers = hostcopy.records_since(first_record)
        say("\n" + clock.table(layers, hostcopy.measure_link(device.index) if layers else None,
                                hostcopy.measure_fresh_memory() if layers else None))
    return metric.get()[1]


def _gpu_preflight(args):
    """Fail early, in one line, where the GPU path cannot run. Returns the device."""
    from .. import kernels
    kernels.parse_version(args.extra.get("gpu_kernel"))
    device = kernels.GpuDevice.get()
    kernels.require_nvcc()
    return device


def main(milestone_name, argv, prog=None):
    """A milestone's command line: exit status 0, or a one-line error and a non-zero status."""
    milestone = MILESTONES[milestone_name]
    script = prog or milestone.script
    console = Console()

    def command(argv):
        clock = Breakdown()
        _mx()                                           # one line where MXNet is unusable
        clock.mark("MXNet import, operators registered")
        args = parse_args(argv, script, milestone.device == "gpu")
        if args.fuse and not milestone.custom:
            raise UsageError(usage(script) + f"\n{script} runs MXNet's own layers: --fuse is for m2, m3, final")
        from ..mx.op import quiet_callback_tracebacks
        with quiet_callback_tracebacks():
            run_milestone(milestone, args, console, clock)
    return run(command, argv, console)
