"""How the pages write values: transcripts with their control characters as escapes, times in UTC
and as ages, seconds, a queued job's place (the templates' filters)."""
import math
import re
import time

from . import clock
from .jobs import duration
from ..base.names import printable, shown

# characters a transcript may carry that a page must show as escapes: C0 but tab and newline, DEL, C1,
# soft hyphen, zero-width and bidirectional marks, line/paragraph separators, BOM, surrogates
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
                     "\ufff9-\ufffb\ud800-\udfff]")


def as_text(text):
    """A transcript as a page shows it: every control character (ANSI escapes, carriage returns,
    bells, bidi marks) written as an escape, tabs and newlines kept."""
    return CONTROL.sub(lambda m: shown(m.group()), text)


def utc(value):
    """An epoch time or an ISO 8601 text as ``YYYY-MM-DD HH:MM:SS`` (UTC); ``-`` for None."""
    if value is None or value == "":
        return "-"
    if isinstance(value, (int, float)):
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(value))
    return printable(str(value)[:19].replace("T", " "), 40)


def secs(value):
    return f"{value:.6f}" if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def ago(value, now=None):
    """``12 s ago``, ``5 min 3 s ago`` of an epoch time."""
    if value is None:
        return "never"
    now = clock.now() if now is None else now
    return f"{duration(max(0.0, now - value))} ago" if now - value >= 1 else "just now"


def place_text(place):
    """A queued job's place, as the client prints it."""
    ahead = place.get("place")
    where = "next in line" if ahead == 0 else f"{ahead} job(s) ahead of yours" if ahead is not None else "queued"
    text = f"Waiting in the queue: {where} ({place.get('waiting')} waiting, {place.get('running')} running)"
    return text + (f"; {place['note']}" if place.get("note") else "")
