"""The milestones' command line: the course harness's arguments, usage and exact output (the run
itself: ``mx/milestone.py``).

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
from dataclasses import dataclass

from ..course import MILESTONES
from ..errors import Ece408Error, UsageError
from ..mx.milestone import DEFAULT_MODEL, MAX_SIZE, Args, run_milestone
from .breakdown import Breakdown
from .errors import Console, run


def _mx():
    """The MXNet layer (registers the operator), or a one-line Ece408Error saying why it is unusable."""
    from .. import require_mxnet
    return require_mxnet()


# ---------------------------------------------------------------- the one description of the options

CUSTOM = ("m2", "m3", "final")
GPU = ("m3", "final")


def _kernel_help():
    from ..kernels import VERSIONS
    names = ", ".join(v.name for v in VERSIONS.values())
    return (f"GPU kernel version {min(VERSIONS)}-{max(VERSIONS)} (or v3, or its name: {names}), or fast "
            "(v12 where it runs the layer, else auto); default auto: $ECE408_KERNEL, else the fastest for the layer")


def _check_time_limit(value):
    import math
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not (math.isfinite(seconds) and seconds > 0):
        raise Ece408Error("give the seconds a team's forward may take, a number above 0")


def _check_kernel(value):
    from ..kernels import parse_version        # no PyCUDA needed to parse
    parse_version(value)


@dataclass(frozen=True)
class Option:
    """One option of the milestones: usage, help, parsing and errors all read this table."""
    flags: tuple                # ("--kernel",) or ("-h", "--help")
    help: object                # one line, or a function returning it (read when the usage is shown)
    field: str = None           # the Args field it sets (None: handled elsewhere, e.g. --debug)
    metavar: str = None         # None: a switch
    milestones: tuple = ("m1",) + CUSTOM
    check: object = None        # value -> raises Ece408Error where it is bad

    @property
    def label(self):
        return ", ".join(self.flags) + (f" {self.metavar}" if self.metavar else "")


OPTIONS = (
    Option(("--data-dir",), "read Fashion-MNIST from DIR only (default: $ECE408_DATA_DIR, /fashion-mnist, "
           "then the cache)", "data_dir", "DIR"),
    Option(("--fuse",), "run each conv -> tanh -> max-pool chain as one fused layer (ece408_conv_tanh_pool)",
           "fuse", milestones=CUSTOM),
    Option(("--kernel",), _kernel_help, "kernel", "N", milestones=GPU, check=_check_kernel),
    Option(("--profile",), "print a table of the kernels and copies, then where the run's wall time went",
           "profile", milestones=GPU),
    Option(("--ncu",), "re-run under Nsight Compute (ncu --clock-control none), then each kernel's time, DRAM "
           "bandwidth, FP32 FLOP rate and occupancy", "ncu", milestones=GPU),
    Option(("--team",), "run the team project in DIR (default: this folder when it holds a team project)",
           "team", "DIR", milestones=CUSTOM),
    Option(("--time-limit",), "seconds one forward of the team's may take before its process is killed (default "
           "600, or $ECE408_TIME_LIMIT); Ctrl-C stops it at once", "time_limit", "SECONDS", milestones=CUSTOM,
           check=_check_time_limit),
    Option(("--debug",), "tracebacks instead of one-line errors (also ECE408_DEBUG=1)"),
    Option(("-h", "--help"), "print this text and exit", "help"),
)
WHY_NOT = {"m1": "m1 runs MXNet's built-in Convolution", "m2": "m2 runs the CPU path"}


def _names(milestones):
    return ", ".join(milestones[:-1]) + f" and {milestones[-1]}" if len(milestones) > 1 else milestones[0]


def usage(script, milestone="m2"):
    """The usage text of ``milestone`` run as ``script``: the course's lines, then one per option."""
    from ..mx.models import available_models
    models = ", ".join(available_models()) or DEFAULT_MODEL
    lines = [f"Usage: {script} <model_name> <dataset size>",
             f"    <model_name>: one of {models}, or a checkpoint prefix path (default {DEFAULT_MODEL})",
             f"    <dataset size>: an integer, clamped to [0, {MAX_SIZE}] (default {MAX_SIZE})"]
    for option in OPTIONS:
        if milestone in option.milestones:
            text = option.help() if callable(option.help) else option.help
            lines.append(f"    {option.label}: {text}")
    return "\n".join(lines)


def _usage_error(script, milestone, reason):
    return UsageError(f"{usage(script, milestone)}\nerror: {reason}")


def _check_model(text):
    """A model argument must name a checkpoint: a UsageError of one line (where it was looked for,
    the known names) where none is found; ModelError where one is found but incomplete (no params
    file)."""
    from ..mx.models import ModelNotFound, resolve_model
    try:
        resolve_model(text)
    except ModelNotFound as exc:
        raise UsageError(f"error: {exc}") from exc


def _integer(text):
    try:
        return int(text)
    except ValueError:
        return None


def _option(item):
    flag = item.split("=", 1)[0]
    return next((o for o in OPTIONS if flag in o.flags), None)


def parse_args(argv, script, milestone="m2"):
    """``[model] [dataset_size]`` in either order, and the options of ``OPTIONS`` that
    ``milestone`` takes (``--name VALUE`` or ``--name=VALUE``). A bad command line is a
    UsageError: the usage, then one line saying what was wrong. ``-h``/``--help`` anywhere:
    ``Args(help=True)``, nothing else read."""
    if any(item in ("-h", "--help") for item in argv):
        return Args(help=True)

    def fail(reason):
        return _usage_error(script, milestone, reason)

    args = Args()
    positional = []
    items = list(argv)
    while items:
        item = items.pop(0)
        option = _option(item) if item.startswith("-") else None
        if option is None and item.startswith("--"):
            raise fail(f"unknown option {item.split('=', 1)[0]}")
        if option is None:
            positional.append(item)
            continue
        if milestone not in option.milestones:
            why = WHY_NOT.get(milestone, f"{milestone} does not take it")
            raise fail(f"{option.flags[-1]} is for {_names(option.milestones)}: {why}")
        if option.metavar is None:
            if "=" in item:
                raise fail(f"{option.flags[-1]} takes no value")
            value = True
        else:
            value = item.split("=", 1)[1] if "=" in item else (items.pop(0) if items else "")
            if not value:
                raise fail(f"{option.flags[-1]} needs a value: {option.label}")
            if option.check is not None:
                try:
                    option.check(value)
                except Ece408Error as exc:
                    raise fail(f"{option.flags[-1]} {value}: {exc}") from exc
        if option.field is not None:
            setattr(args, option.field, value)
    if len(positional) > 2:
        raise fail(f"unexpected argument {positional[2]!r}: give at most a model and a dataset size")
    sizes = [(item, _integer(item)) for item in positional if _integer(item) is not None]
    models = [item for item in positional if _integer(item) is None]
    if len(sizes) == 2:
        raise fail(f"two dataset sizes, {sizes[0][0]} and {sizes[1][0]}: give at most one")
    if len(models) == 2:
        raise fail(f"two models, {models[0]!r} and {models[1]!r}: give at most one")
    if models:
        _check_model(models[0])
        args.model = models[0]
    if sizes:
        text, size = sizes[0]
        args.size = min(max(size, 0), MAX_SIZE)
        if args.size == 0:
            raise fail(f"dataset size {text} is clamped to 0: nothing to run; give a size from 1 to {MAX_SIZE}")
    return args


def ncu_argv(milestone_name, argv):
    """The command --ncu profiles: this milestone in a fresh interpreter (the same flags), without --ncu."""
    import sys
    return [sys.executable, *(["-S"] if sys.flags.no_site else []), "-m", "ece408_op", milestone_name,
            *(item for item in argv if item != "--ncu")]


def _under_ncu(milestone_name, argv, console):
    """The milestone again under ncu, with MXNet's synchronous engine: under ncu's injection MXNet's
    threaded engine aborts ('Resource deadlock avoided', H100, 2026-11-24) before any kernel runs;
    the naive engine runs each operator on the calling thread (Op Time and Correctness alike)."""
    import os
    from ..bench import ncu
    return ncu.profile(ncu_argv(milestone_name, argv), say=console.say,
                       env={**os.environ, "MXNET_ENGINE_TYPE": "NaiveEngine"})


def main(milestone_name, argv, prog=None):
    """A milestone's command line: exit status 0, or a one-line error and a non-zero status."""
    milestone = MILESTONES[milestone_name]
    script = prog or f"python -m ece408_op {milestone_name}"
    console = Console()

    def one_run(argv):
        clock = Breakdown()
        _mx()                                           # one line where MXNet is unusable
        clock.mark("MXNet import, operators registered")
        args = parse_args(argv, script, milestone_name)
        if args.help:
            console.say(usage(script, milestone_name))
            return 0
        if args.ncu:
            return _under_ncu(milestone_name, argv, console)
        from ..team.harness import watch_interrupts
        with watch_interrupts():
            run_milestone(milestone, args, console, clock)
    return run(one_run, argv, console)
