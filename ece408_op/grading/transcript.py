"""The build transcript, as the course server showed it: each command announced as
``* Running <command>``, its output (stdout and stderr, as they come) after it, and the runner's
own lines (``* The command exited with code 1; the build stopped.``). A ranked run's figures
never come from this text (``channel.py``); ``ModelResult`` holds them as the record keeps them.
"""
import re
import statistics
import sys
import threading
import unicodedata
from collections import deque
from dataclasses import asdict, dataclass, field

RUNNING = "* Running "
STORED_TRANSCRIPT = 1 << 20        # bytes of a transcript kept in a record: head and tail
EVAL_METRIC = re.compile(r"^EvalMetric: \{'accuracy': ([0-9.eE+-]+)\}\s*$", re.M)


class OutputEscaper:
    """A command's output as the transcript keeps and shows it: every control character (ANSI and
    OSC escape sequences, carriage returns that overwrite a line, bell, bidi marks...) written as
    an escape (``\\x1b``, ``\\r``, ``\\u202e``); newlines and tabs kept, ``\\r\\n`` read as a
    newline. Stateful across chunks (a ``\\r`` at a chunk's end waits for the next)."""

    def __init__(self):
        self.pending_cr = False

    def escape(self, text, final=False):
        if self.pending_cr:
            text = "\r" + text
            self.pending_cr = False
        if text.endswith("\r") and not final:
            text, self.pending_cr = text[:-1], True
        text = text.replace("\r\n", "\n")
        if text.replace("\n", "").replace("\t", "").isprintable():
            return text                                # the common case, at C speed
        return "".join(ch if ch in "\n\t" or not _control(ch) else _escape(ch) for ch in text)


def _control(ch):
    return unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Zl", "Zp")


def _escape(ch):
    code = ord(ch)
    return {"\r": "\\r", "\x1b": "\\x1b"}.get(ch) or (
        f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")


def running_line(command):
    return f"{RUNNING}{command}"


def failed_line(code):
    return f"* The command exited with code {code}; the build stopped."


def timeout_line(limit):
    return f"* The command ran past its time limit of {limit:g} s and was killed; the build stopped."


def killed_line(signal_name):
    return f"* The run was stopped from outside ({signal_name}); the build stopped."


@dataclass
class ModelResult:
    """One model's run: every Op Time (the course's printed lines), the Correctness, the value it
    must equal, and the repeats that time the model (``team/repeats.py``: each a total over the
    model's layers on fresh inputs; ``stopped``: why they stopped). Its ``op_time``, the figure
    that ranks, is the statistic of the repeats (``team/repeats.py``: their median); the sum of the
    Op Times where there are none."""
    model: str
    op_times: list = field(default_factory=list)
    correctness: float = None
    expected: float = None
    repeats: list = None
    stopped: str = None

    @property
    def op_time(self):
        return statistics.median(self.repeats) if self.repeats else sum(self.op_times)

    @property
    def correct(self):
        return self.correctness is not None and self.expected is not None and self.correctness == self.expected

    def to_dict(self):
        return {**asdict(self), "op_time": self.op_time, "correct": self.correct}


def parse_eval_metric(text):
    """The accuracy an m1 run printed (``EvalMetric: {'accuracy': 0.8673}``), or None: for tools
    and tests reading a transcript, never for a record."""
    found = EVAL_METRIC.findall(text)
    return float(found[-1]) if found else None


class Transcript:
    """The transcript: written through to ``stream`` as it comes, and kept, up to ``cap`` bytes:
    its head (three quarters) and its tail, with a line saying how much was left out between.

    Past the head, output is not shown as it comes (a run printing megabytes would flood the
    viewer): it is held, its last ``cap // 4`` bytes, and shown when the runner's next line comes
    (a command's end, the run's end), after a line saying how much was left out: the end of every
    command's output reaches the stream before the line that ends it."""

    def __init__(self, stream=None, cap=STORED_TRANSCRIPT):
        self.stream = stream if stream is not None else sys.stdout
        self.cap = cap
        self.head, self.head_bytes = [], 0
        self.tail, self.tail_bytes = deque(), 0
        self.dropped = 0
        self.held, self.held_bytes, self.held_dropped = deque(), 0, 0    # past the head, not shown yet
        self.shown_cut = False
        self.lock = threading.Lock()
        self.last = ""
        self.on_progress = None          # where the run's steps go (the service's worker), None: nowhere

    def progress(self, step):
        """Where the run is now (``build command 2 of 3: make``, ``model ece408-high (1 of 2): layer
        1 ..., fresh run 3 of 5``): one line for a live view, given to ``on_progress`` where one is
        set, never written into the transcript (its text stays the course's)."""
        hook = self.on_progress
        if hook is not None:
            try:
                hook(str(step))
            except (OSError, ValueError):
                pass                               # a live view gone: the run goes on

    @staticmethod
    def _trim(parts, size, cap):
        """Drop ``parts``' oldest pieces while they hold more than ``cap`` bytes (the newest stays);
        returns (bytes kept, bytes dropped)."""
        dropped = 0
        while size > cap and len(parts) > 1:
            gone = len(parts.popleft().encode("utf-8", "replace"))
            size -= gone
            dropped += gone
        return size, dropped

    def _keep(self, text):
        n = len(text.encode("utf-8", "replace"))
        if self.head_bytes + n <= self.cap * 3 // 4 and not self.tail:
            self.head.append(text)
            self.head_bytes += n
            return True
        self.tail.append(text)
        self.tail_bytes, dropped = self._trim(self.tail, self.tail_bytes + n, self.cap // 4)
        self.dropped += dropped
        self.held.append(text)
        self.held_bytes, dropped = self._trim(self.held, self.held_bytes + n, self.cap // 4)
        self.held_dropped += dropped
        return False

    def _show(self, text):
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def write(self, text):
        if not text:
            return
        with self.lock:
            in_head = self._keep(text)
            self.last = text
            if in_head:
                self._show(text)
            elif not self.shown_cut:
                self.shown_cut = True
                self._show(f"\n[... more than {self.cap * 3 // 4} bytes of output: the rest is not shown as it "
                           f"comes; the last {self.cap // 4} bytes of it are shown when the command ends ...]\n")

    def line(self, text):
        """One line of the runner's own (``* ...``): shown at once, after the output held back."""
        self.write(("" if not self.last or self.last.endswith("\n") else "\n") + text + "\n")
        self.output_ended()

    def output_ended(self):
        """A command's output has ended: show what was held back of it (its end), once."""
        with self.lock:
            if not self.held:
                return
            if self.held_dropped:
                self._show(f"[... {self.held_dropped} bytes of output not shown ...]\n")
            self._show("".join(self.held))
            self.held.clear()
            self.held_bytes = self.held_dropped = 0

    def text(self):
        with self.lock:
            cut = f"\n[... {self.dropped} bytes of output left out ...]\n" if self.dropped else ""
            return "".join(self.head) + cut + "".join(self.tail)
