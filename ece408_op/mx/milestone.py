"""A milestone's run, as the course's harness ran it: load the first N test images and a model,
swap ``ece408_conv`` in (m2, m3, final), run inference once over the whole batch and print the
course's lines through one Console:

    Loading fashion-mnist data... done
    Loading model... done
    New Inference
    Op Time: 0.076815                      (one line per custom layer, as each finishes)
    Correctness: 0.8562 Model: ece408-high

m1 prints ``EvalMetric: {'accuracy': ...}`` instead. Used by the command line (``cli/milestone.py``:
arguments, usage, --ncu) and by a ranked run's measuring process (``grading/measure.py``).
Importing it imports no MXNet (the run does): the command line parses its arguments first.
"""
import contextlib
import sys
from dataclasses import dataclass

from ..console import Console
from ..errors import UsageError

DEFAULT_MODEL = "ece408-high"
MAX_SIZE = 10000
NO_TEAM = ("* No team project here: the course's reference forward ran (your own: python -m ece408_op init "
           "DIR, then run this in DIR or give --team DIR)")


class _NoClock:
    """Where no one asked for --profile's breakdown: marks go nowhere."""

    def mark(self, name):
        pass


@dataclass
class Args:
    model: str = DEFAULT_MODEL
    size: int = MAX_SIZE
    data_dir: str = None
    profile: bool = False
    fuse: bool = False     # conv -> tanh -> 2x2 max-pool chains as one ece408_conv_tanh_pool layer
    kernel: str = None     # --kernel: the GPU kernel version, as given
    team: str = None       # --team DIR: the team project to run (a path string)
    help: bool = False     # -h/--help: print the usage, run nothing
    ncu: bool = False      # --ncu: re-run under Nsight Compute, then the kernels' metrics (bench/ncu.py)
    use_team: bool = False  # a team's forward runs the custom layers (set by run_milestone)
    time_limit: str = None  # --time-limit: seconds one forward of a team's may take

    @property
    def extra(self):
        """Attributes for the swapped-in operators."""
        extra = {} if self.kernel is None else {"gpu_kernel": self.kernel}
        return {**extra, "team": "1"} if self.use_team else extra


def looks_for_a_team(milestone, args):
    """Whether ``milestone`` runs a team's forward where it finds one: not m1, ``--kernel N`` or
    ``--fuse``, which ask for the staff's."""
    return milestone.custom and args.kernel is None and not args.fuse


def team_runtime(milestone, args, device=None):
    """The TeamRuntime of the team project to run (``--team DIR``, else this folder where it is
    one), its kernels compiled for ``device``; None where the milestone runs our own forward
    (m1, ``--kernel N``: the staff's reference versions, or no team project here)."""
    from ..team.project import find_team, require_files
    if not looks_for_a_team(milestone, args):
        return None
    team_dir = find_team(args.team)
    if team_dir is None:
        return None
    require_files(team_dir, milestone.files)            # one line before any output where one is missing
    from ..team.harness import numba_cache_dir, time_limit_from_env
    from ..team.runtime import TeamRuntime
    image = None
    if milestone.device == "gpu":
        from ..team.build import compile_kernels
        image = compile_kernels(team_dir, device.arch)
    time_limit = float(args.time_limit) if args.time_limit is not None else time_limit_from_env()
    return TeamRuntime(team_dir, image, repeats=milestone.repeats, numba_cache=numba_cache_dir(),
                       time_limit=time_limit)


def run_milestone(milestone, args, console=None, clock=None, runtime=None):
    """Print the course harness's transcript for one milestone; returns the accuracy.
    ``console`` writes every line, the Op Time lines too; ``clock`` (cli.breakdown.Breakdown) is
    marked at each step for ``--profile``; ``runtime`` (a team.runtime.TeamRuntime) runs a team's
    forward (default: ``team_runtime``)."""
    console = console or Console()
    clock = clock or _NoClock()
    if args.size == 0:
        raise UsageError(f"dataset size 0: nothing to run; give a size from 1 to {MAX_SIZE}")
    device = _gpu_preflight(args) if milestone.device == "gpu" else None
    runtime = runtime or team_runtime(milestone, args, device)
    with runtime or contextlib.nullcontext():
        args.use_team = runtime is not None
        accuracy = _run(milestone, args, console, clock, device)
    if runtime is None and looks_for_a_team(milestone, args):
        # said, as the transcript looks the same either way: on stderr (stdout stays the course's
        # transcript), after the run (an error stays one line)
        print(NO_TEAM, file=sys.stderr, flush=True)
    return accuracy


def _run(milestone, args, console, clock, device):
    from ..kernels.hostcopy.records import record_count, records_since
    from .inference import bind_model, load_test_batch, prepare, score
    from .models import load_model, model_input_shape
    from .op import op_times
    say = console.say
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
    first_record = record_count()
    with profiling as profile, op_times.capture(console if milestone.custom else None):
        metric = score(module, images, labels)
    clock.mark("inference: MXNet's forward over the whole network, of which")
    if milestone.custom:
        say(f"Correctness: {metric.get()[1]} Model: {name}")
    else:
        say(f"EvalMetric: {dict(metric.get_name_value())}")
    if profile is not None:
        say(f"\nProfile of the custom layers (CUDA events; Op Time covers the conv_forward rows only):\n"
            f"{profile.table()}")
        say("\n" + clock.report(records_since(first_record), device))
    return metric.get()[1]


def _gpu_preflight(args):
    """Fail early, in one line, where the GPU path cannot run. Returns the device."""
    from ..kernels import GpuDevice, require_nvcc
    device = GpuDevice.get()
    require_nvcc()
    return device
