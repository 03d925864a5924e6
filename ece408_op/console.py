"""The one writer of the course transcript (``Loading fashion-mnist data... done``, ``Op Time:
...``, ``Correctness: ...``): every line a milestone prints goes through a ``Console``, the Op Time
lines too (the operator writes them through the console the milestone hands it). It remembers
whether it stopped inside a line ("Loading model..."), so that an error starts on a fresh one,
and turns a failed write into a BrokenPipeError (a reader that went away) or an OutputError."""
import errno
import sys

from .errors import Ece408Error


class OutputError(Ece408Error):
    """Standard output cannot be written (closed, full disk, I/O error)."""


def output_error(exc):
    """BrokenPipeError as is (a reader that went away), other OSErrors as an OutputError."""
    if isinstance(exc, BrokenPipeError) or getattr(exc, "errno", None) == errno.EPIPE:
        return BrokenPipeError(errno.EPIPE, "Broken pipe")
    return OutputError(f"cannot write to standard output: {exc.strerror or exc}; the output was lost "
                       "(check where it goes: a full disk, a closed file)")


class Console:
    """Writes the transcript to ``stream`` (default: stdout, as it is when a line is written)."""

    def __init__(self, stream=None):
        self._stream = stream
        self.partial = False

    @property
    def stream(self):
        return self._stream if self._stream is not None else sys.stdout

    def say(self, text, end="\n"):
        stream = self.stream
        if stream is None:
            raise OutputError("standard output is closed; the output would be lost")
        try:
            stream.write(text + end)
            stream.flush()
        except OSError as exc:
            raise output_error(exc) from exc
        self.partial = end == ""

    def op_time(self, seconds):
        """The course's line for one custom layer's Op Time (``%f``: six decimals)."""
        self.say("Op Time: %f" % seconds)
