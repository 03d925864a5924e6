"""``python -m ece408_op selftest``: the reliability table and the load figures.

Every bad input and fault of the table is tried in a temporary folder and a fresh process
(the user's cache is never touched); the table goes to stdout as Markdown, progress to
stderr. Exit 0 when every claim holds (cases that cannot run here are listed as skipped),
else a one-line error naming the first failing claim.
"""
import json
import re
import sys

from ..errors import Ece408Error
from .errors import ArgumentParser, run


class SelftestFailed(Ece408Error):
    """A case did not behave as the table says."""


def parse_args(argv):
    parser = ArgumentParser(prog="ece408_op selftest",
                            description="Try every bad input and fault; print the reliability table and load figures.")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                        help="gpu: the load figures on the GPU path too (device memory before/after)")
    parser.add_argument("--inferences", type=int, default=1000, help="repeated inferences (default %(default)s)")
    parser.add_argument("--threads", type=int, default=8, help="threads with their own executor (default %(default)s)")
    parser.add_argument("--runs", type=int, default=20, help="inferences per thread (default %(default)s)")
    parser.add_argument("--only", metavar="REGEX", help="only the cases whose title matches")
    parser.add_argument("--no-load", action="store_true", help="the table only, no load figures")
    parser.add_argument("--json", metavar="FILE", help="also write the report here as JSON")
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    args = parser.parse_args(argv)
    for name in ("inferences", "threads", "runs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    try:
        re.compile(args.only or "")
    except re.error as exc:
        parser.error(f"--only: not a regular expression ({exc})")
    return args


def command(argv):
    args = parse_args(argv)
    from ..selftest import format_report, run_selftest

    def progress(text):
        print(text, file=sys.stderr, flush=True)
    report = run_selftest(args.device, args.inferences, args.threads, args.runs, args.only,
                          load=not args.no_load, progress=progress)
    print(format_report(report))
    if args.json:
        try:
            with open(args.json, "w") as handle:
                json.dump(report, handle, indent=1)
        except OSError as exc:
            raise Ece408Error(f"cannot write {args.json}: {exc.strerror}; give --json a writable path") from exc
    if report["problems"]:
        raise SelftestFailed(f"{len(report['problems'])} claims failed; first: {report['problems'][0]}")
    return 0


def main(argv):
    return run(command, argv)
