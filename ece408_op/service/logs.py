"""Log lines on stderr: one event a line, ``<UTC time> <level> <event> key=value ...``.

Values that hold a space, a quote, ``=`` or a control character are written as JSON strings,
so that a line always splits back into its fields and a team's name can never start a fake
line. No token, password or Authorization header is ever given to ``log``: callers pass
names, ids and outcomes only; and what a client sent that looks like a token (a path, a team's
name) has its secret removed from every value (``base.terms.redact_tokens``).

A warning or error that repeats is written at most ``Repeats.LINES`` times a window of
``Repeats.WINDOW`` seconds (per event, or per message of a library's logger); the rest are
counted and said in one line (``log.repeated event=... count=N``) when the window ends, so that
a fault hit by every request cannot flood the log.
"""
import json
import logging
import sys
import threading
import time

from ..base.terms import redact_tokens

_lock = threading.Lock()
LEVELS = ("debug", "info", "warning", "error")
_threshold = {"value": 1}


def set_level(name):
    _threshold["value"] = LEVELS.index(name)


def _value(value):
    text = value if isinstance(value, str) else json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    text = redact_tokens(text)                   # a secret a client sent as a path or a name: never written
    if text == "" or any(c in text for c in ' "=\\') or not text.isprintable():
        return json.dumps(text, ensure_ascii=True)
    return text


def stamp(seconds=None):
    """ISO 8601 UTC with milliseconds: 2026-11-26T15:37:00.123Z."""
    seconds = time.time() if seconds is None else seconds
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds * 1000) % 1000:03d}Z"


class Repeats:
    """How often each key was written in its current window; what is past the cap is counted."""

    LINES = 5
    WINDOW = 60.0

    TOP = 5                                  # addresses a repeat's line names, the most frequent first
    ADDRESSES = 10000                        # distinct addresses counted a window (past it: "others")

    def __init__(self):
        self.windows = {}       # key -> [window start, lines written, lines held back, {address: count}]
        self.lock = threading.Lock()

    def ended(self, now=None):
        """[(key, count, [(address, count)...])] of the windows that have ended with lines held back
        (forgotten here): the addresses of the held lines, the most frequent first."""
        now = time.monotonic() if now is None else now
        out = []
        with self.lock:
            for key, (start, _, held, addresses) in list(self.windows.items()):
                if now - start >= self.WINDOW:
                    del self.windows[key]
                    if held:
                        out.append((key, held, sorted(addresses.items(), key=lambda a: (-a[1], a[0]))))
        return out

    def allow(self, key, now=None, address=None):
        """(whether a line of ``key`` may be written now, what ``ended`` gives of the windows just
        ended). A line held back counts toward its ``address`` (a client's), where it names one."""
        now = time.monotonic() if now is None else now
        ended = self.ended(now)
        with self.lock:
            window = self.windows.setdefault(key, [now, 0, 0, {}])
            if window[1] < self.LINES:
                window[1] += 1
                return True, ended
            window[2] += 1
            if address is not None:
                counts = window[3]
                slot = str(address) if str(address) in counts or len(counts) < self.ADDRESSES else "others"
                counts[slot] = counts.get(slot, 0) + 1
            return False, ended


_repeats = Repeats()


def _write(line):
    with _lock:
        try:
            sys.stderr.write(line)
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def _say_repeats(ended):
    for key, count, addresses in ended:
        fields = [stamp(), "warning", "log.repeated", f"event={_value(key)}", f"count={count}",
                  f"seconds={Repeats.WINDOW:g}"]
        if addresses:                        # whom the held lines stand for: the top ones, and how many others
            top = ",".join(f"{a}:{n}" for a, n in addresses[:Repeats.TOP])
            fields += [f"addresses={_value(top)}", f"address_count={len(addresses)}"]
        _write(" ".join(fields) + "\n")


def log(event, level="info", **fields):
    if LEVELS.index(level) < _threshold["value"]:
        return
    if LEVELS.index(level) >= LEVELS.index("warning"):
        allowed, ended = _repeats.allow(event, address=fields.get("address"))
        _say_repeats(ended)
        if not allowed:
            return
    parts = [stamp(), level, event] + [f"{k}={_value(v)}" for k, v in fields.items() if v is not None]
    _write(" ".join(parts) + "\n")


def flush_repeats():
    """Say the counts of the windows that have ended (the server calls this every few seconds,
    so that a flood's count is said even when nothing else is logged after it)."""
    _say_repeats(_repeats.ended())


class RepeatFilter(logging.Filter):
    """The same cap for a library's own warnings and errors (uvicorn's, asyncio's), per message."""

    def filter(self, record):
        if record.levelno < logging.WARNING:
            return True
        allowed, ended = _repeats.allow(f"{record.name}: {str(record.msg)[:80]}")
        _say_repeats(ended)
        return allowed


class UtcFormatter(logging.Formatter):
    """uvicorn's records as ``<UTC time> <level> uvicorn message=...``."""

    converter = time.gmtime

    def format(self, record):
        line = (f"{self.formatTime(record, '%Y-%m-%dT%H:%M:%S')}.{int(record.msecs):03d}Z "
                f"{record.levelname.lower()} uvicorn message={_value(record.getMessage().strip())}")
        if record.exc_info:                      # an error of the application: where, on the same line
            import traceback
            kind, value, tb = record.exc_info
            frames = traceback.extract_tb(tb)
            where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
            line += f" error={_value(f'{kind.__name__}: {value}')} at={_value(where)}"
        return line


def uvicorn_log_config(level="info"):
    """uvicorn's own lines (start, stop, errors) in the same shape; its access log is off: the
    application logs each request itself (``http`` events), without headers or query strings."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"()": UtcFormatter}},
        "filters": {"repeats": {"()": RepeatFilter}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stderr",
                                "filters": ["repeats"]}},
        "loggers": {"uvicorn": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
                    "asyncio": {"handlers": ["stderr"], "level": "WARNING", "propagate": False},
                    "uvicorn.error": {"level": level.upper()},
                    "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False}},
    }
