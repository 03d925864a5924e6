"""One mapping from exceptions to what the user sees, for every command.

* ``UsageError``: its text (the usage) on stderr, exit 2.
* any other ``Ece408Error``: ``error: <one line>`` on stderr, its exit code (1 unless set).
* an ``MXNetError`` raised through our operator: the operator's own exception, in one line.
* Ctrl-C: exit 130, no traceback.
``--debug`` anywhere on the command line, or ``ECE408_DEBUG=1``, prints the traceback too.
"""
import argparse
import os
import sys
import traceback

from ..errors import Ece408Error, UsageError

DEBUG_ENV = "ECE408_DEBUG"


class Console:
    """Writes the transcript to stdout and remembers whether it stopped inside a line
    ("Loading model..."), so that an error starts on a fresh line."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.partial = False

    def say(self, text, end="\n"):
        self.stream.write(text + end)
        self.stream.flush()
        self.partial = end == ""


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad command line as a UsageError (usage + reason), like the milestones."""

    def error(self, message):
        raise UsageError(f"{self.format_usage().rstrip()}\n{self.prog}: error: {message}")


def debug_requested(argv):
    return "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def _mxnet_cause(exc):
    """(message, exit code) for an MXNetError, or None if ``exc`` is not one."""
    mxnet = sys.modules.get("mxnet")
    if mxnet is None or not isinstance(exc, mxnet.base.MXNetError):
        return None
    from ..mx.failures import mxnet_error_line, take
    cause = getattr(exc, "cause", None) or take()
    if cause is not None:
        return str(cause), getattr(cause, "exit_code", 1)
    return mxnet_error_line(exc), 1


def report(exc, console=None, debug=False):
    """Print ``exc`` as the user should see it; returns the exit status."""
    if debug:
        traceback.print_exc()
    if isinstance(exc, UsageError):
        print(exc, file=sys.stderr)
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return 130
    if isinstance(exc, Ece408Error):
        message, code = str(exc), exc.exit_code
    else:
        mapped = _mxnet_cause(exc)
        if mapped is None:
            raise exc
        message, code = mapped
    prefix = "\n" if console is not None and console.partial else ""
    if console is not None:
        console.partial = False
    print(f"{prefix}error: {message}", file=sys.stderr)
    return code


def run(command, argv, console=None):
    """Run ``command(argv)``; map what it raises through ``report``. Returns the exit status."""
    debug = debug_requested(argv)
    try:
        return command(argv) or 0
    except SystemExit as exc:                           # argparse's --help
        return exc.code if isinstance(exc.code, int) else 0
    except (Exception, KeyboardInterrupt) as exc:       # noqa: BLE001  report() re-raises the unknown
        return report(exc, console, debug)
