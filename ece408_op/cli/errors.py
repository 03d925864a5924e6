"""One mapping from exceptions to what the user sees, for every command.

* ``UsageError``: its text (the usage) on stderr, exit 2.
* any other ``Ece408Error``: ``error: <one line>`` on stderr, its exit code (1 unless set).
* an ``MXNetError`` raised through our operator: the operator's own exception, in one line.
* Ctrl-C: exit 130; SIGTERM/SIGHUP during a fetch: 128 + the signal; no traceback.
* standard output gone: a reader that went away (``| head``): exit 141 (128 + SIGPIPE, what
  a shell reports for a command killed by a broken pipe), nothing more printed; stdout
  closed, or a write that fails (``> /dev/full``): a one-line error, exit 1. Never 0 when
  output was lost.
``--debug`` anywhere on the command line, or ``ECE408_DEBUG=1``, prints the traceback too.
"""
import argparse
import errno
import os
import sys
import traceback

from ..console import Console, OutputError, output_error  # noqa: F401  (cli's one writer)
from ..errors import Ece408Error, Terminated, UsageError

DEBUG_ENV = "ECE408_DEBUG"
BROKEN_PIPE_STATUS = 128 + 13          # 128 + SIGPIPE


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad command line as a UsageError (usage + reason), like the milestones,
    and takes options only as written: no abbreviation (``--token`` is not ``--token-file``)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise UsageError(f"{self.format_usage().rstrip()}\n{self.prog}: error: {message}")


def debug_requested(argv):
    return "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def _mxnet_cause(exc):
    """``mx.failures.mxnet_cause`` where MXNet is loaded (only then can ``exc`` be an MXNetError);
    None without importing anything otherwise."""
    if "mxnet" not in sys.modules:
        return None
    from ..mx.failures import mxnet_cause
    return mxnet_cause(exc)


def report(exc, console=None, debug=False):
    """Print ``exc`` as the user should see it; returns the exit status."""
    if debug:
        traceback.print_exc()
    if isinstance(exc, UsageError):
        print(exc, file=sys.stderr)
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return 130
    if isinstance(exc, Terminated):
        return exc.exit_code
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


class _GuardedStdout:
    """sys.stdout while a command runs: a failed write or flush raises BrokenPipeError (the
    reader went away) or OutputError, not an OSError that could come from anywhere."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise output_error(exc) from exc

    def flush(self):
        try:
            return self._stream.flush()
        except OSError as exc:
            raise output_error(exc) from exc

    def __getattr__(self, name):
        return getattr(self._stream, name)


def run(command, argv, console=None):
    """Run ``command(argv)``; map what it raises through ``report``. Returns the exit status."""
    debug = debug_requested(argv)
    if sys.stdout is None:                              # started with stdout closed (>&-)
        return report(OutputError("standard output is closed, so the output would be lost; run the command "
                                  "with its output going to a terminal, a file or a pipe"), console)
    saved, sys.stdout = sys.stdout, _GuardedStdout(sys.stdout)
    try:
        try:
            status = command(argv) or 0
        except SystemExit as exc:                       # argparse's --help
            status = exc.code if isinstance(exc.code, int) else 0
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        return _broken_pipe()
    except (Exception, KeyboardInterrupt, Terminated) as exc:   # noqa: BLE001  report() re-raises the unknown
        if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
            return _broken_pipe()
        if isinstance(exc, OutputError):
            _discard_stdout()                           # or the interpreter's last flush fails again
        try:
            return report(exc, console, debug)
        except BrokenPipeError:
            return _broken_pipe()
    finally:
        sys.stdout = saved


def _discard_stdout():
    """Point stdout at /dev/null, so that the interpreter's last flush of what could not be
    written is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _broken_pipe():
    """The reader went away: exit like a command killed by SIGPIPE, printing nothing more."""
    _discard_stdout()
    return BROKEN_PIPE_STATUS
