"""Log lines on stderr: one event a line, ``<UTC time> <level> <event> key=value ...``.

Values that hold a space, a quote, ``=`` or a control character are written as JSON strings,
so that a line always splits back into its fields and a team's name can never start a fake
line. No token, password or Authorization header is ever given to ``log``: callers pass
names, ids and outcomes only.
"""
import json
import logging
import sys
import threading
import time

_lock = threading.Lock()
LEVELS = ("debug", "info", "warning", "error")
_threshold = {"value": 1}


def set_level(name):
    _threshold["value"] = LEVELS.index(name)


def _value(value):
    text = value if isinstance(value, str) else json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    if text == "" or any(c in text for c in ' "=\\') or not text.isprintable():
        return json.dumps(text, ensure_ascii=True)
    return text


def stamp(seconds=None):
    """ISO 8601 UTC with milliseconds: 2026-11-26T15:37:00.123Z."""
    seconds = time.time() if seconds is None else seconds
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds * 1000) % 1000:03d}Z"


def log(event, level="info", **fields):
    if LEVELS.index(level) < _threshold["value"]:
        return
    parts = [stamp(), level, event] + [f"{k}={_value(v)}" for k, v in fields.items() if v is not None]
    line = " ".join(parts) + "\n"
    with _lock:
        try:
            sys.stderr.write(line)
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


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
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stderr"}},
        "loggers": {"uvicorn": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
                    "uvicorn.error": {"level": level.upper()},
                    "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False}},
    }
