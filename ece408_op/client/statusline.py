"""What ``jobs show --follow`` (and ``submit --server``) shows of a running job's progress, on
stderr: on a terminal one status line (``* elapsed 12 s: build command 2 of 3: make``) kept
below the transcript and rewritten in place (``\\r``) every second; elsewhere (a pipe, a file) a
plain line each time the step changes (``* step: build command 2 of 3: make (elapsed 12 s)``).
The transcript on stdout stays exactly the transcript: the status line is cleared before each
piece of it and drawn again after it where its last line is complete. The client's own: httpx's
peers only, nothing of the server."""
import shutil
import threading
import time

from ..base.names import shown


def elapsed_text(seconds):
    """``12 s``, ``3 min 5 s``, ``1 h 2 min``."""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def is_terminal(stream):
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class StatusLine:
    """A followed job's progress on ``err`` beside its transcript on ``out``."""

    def __init__(self, out, err, terminal=None, every=1.0):
        self.out, self.err = out, err
        self.terminal = is_terminal(err) if terminal is None else terminal
        self.shared = self.terminal and (terminal is not None or is_terminal(out))   # both on one screen
        self.every = every
        self.step = self.started = None
        self.skew = 0.0                           # the server's clock less ours
        self.drawn = 0                            # characters of the status line on the screen
        self.partial = False                      # the transcript's last piece ended inside a line
        self.lock = threading.RLock()
        self.stopped = threading.Event()
        self.ticker = None

    # ------------------------------------------------------------ what comes in
    def progress(self, data):
        """A ``progress`` event: the step, the start and the server's time."""
        with self.lock:
            if data.get("now") is not None:
                self.skew = float(data["now"]) - time.time()
            if data.get("started_at") is not None:
                self.started = float(data["started_at"])
            step = shown(data["step"], 200) if data.get("step") else None
            changed, self.step = step != self.step, step
            if self.terminal:
                self._draw()
                self._tick()
            elif changed and step:
                self._say(f"* step: {step} (elapsed {elapsed_text(self.elapsed())})")

    def transcript(self, text):
        """A piece of the transcript, on ``out`` exactly as it came."""
        with self.lock:
            self._clear()
            self.out.write(text)
            self.out.flush()
            if text and self.shared:
                self.partial = not text.endswith("\n")
            self._draw()

    def note(self, line):
        """One of the client's own lines, on ``err``."""
        with self.lock:
            self._clear()
            self._say(line)
            self._draw()

    def close(self):
        """The job ended (or the follow stops): the status line goes."""
        self.stopped.set()
        with self.lock:
            self._clear()
            self.started = None

    def elapsed(self):
        return 0.0 if self.started is None else time.time() + self.skew - self.started

    # ------------------------------------------------------------ the screen
    def _say(self, line):
        self.err.write(line + "\n")
        self.err.flush()

    def _line(self):
        text = f"* elapsed {elapsed_text(self.elapsed())}" + (f": {self.step}" if self.step else "")
        width = shutil.get_terminal_size((80, 24)).columns - 1       # never wraps: \r rewrites one row
        return text if len(text) <= width else text[:max(1, width - 1)] + "…"

    def _draw(self):
        if not self.terminal or self.started is None or self.partial or self.stopped.is_set():
            return
        text = self._line()
        self.err.write("\r" + text + " " * max(0, self.drawn - len(text)))
        self.err.flush()
        self.drawn = len(text)

    def _clear(self):
        if self.drawn:
            self.err.write("\r" + " " * self.drawn + "\r")
            self.err.flush()
            self.drawn = 0

    def _tick(self):
        if self.ticker is None:
            self.ticker = threading.Thread(target=self._ticking, name="status-line", daemon=True)
            self.ticker.start()

    def _ticking(self):
        while not self.stopped.wait(self.every):
            with self.lock:
                self._draw()
