"""Team-chosen strings (team names, file and folder names of any bytes) as shown to people and
stored: control characters and bytes that are not UTF-8 are escaped, never interpreted, so that
no name can print a fake row, move the cursor or break an encoding.

The escaping is injective: two different strings never print or store alike, so that two teams
never share a name (a skip, a ranking row). Escapes:

    \\\\              a backslash
    \\xNN            NN < 80: a control character (C0, DEL); NN >= 80: a byte that was not UTF-8
    \\uNNNN, \\UNNNNNNNN  any other control or unprintable character (C1 controls, bidi marks, ...)

A team name is never shortened (``team_name``): two names sharing their first 199 characters
stay two teams. Other one-line texts (reasons, paths in messages) may be, with a final "…".
"""
import os
import unicodedata

MAX_NAME = 200
UNPRINTABLE = ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")


def _escape(ch, backslash):
    code = ord(ch)
    if ch == "\\":
        return "\\\\" if backslash else ch
    if 0xDC80 <= code <= 0xDCFF:                      # a byte that was not UTF-8 (os.fsdecode)
        return f"\\x{code - 0xDC00:02x}"
    if unicodedata.category(ch) in UNPRINTABLE:
        if code < 0x80:
            return f"\\x{code:02x}"
        return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    return ch


def printable(text, limit=MAX_NAME):
    """``text`` with every backslash, every control or unprintable character (ANSI escapes, newlines,
    bidi marks) and every undecodable byte (``\\udcXX`` surrogates from os.fsdecode) written as an
    escape (see the module docstring); cut to ``limit`` characters with a final "…" (None: never)."""
    text = "".join(_escape(ch, True) for ch in str(text))
    return text if limit is None or len(text) <= limit else text[:limit - 1] + "…"


def shown(stored, limit=None):
    """A stored name (already escaped by ``printable``) as shown: unchanged where it is what
    ``printable`` writes; a control character that got into the database another way is still
    escaped (backslashes are left alone: they are the stored escapes)."""
    text = "".join(_escape(ch, False) for ch in str(stored))
    return text if limit is None or len(text) <= limit else text[:limit - 1] + "…"


def team_name(raw):
    """A team's name as stored: from a folder name (bytes or str, any bytes) or --team; escaped,
    in full (never cut: a cut could make two teams one)."""
    if isinstance(raw, bytes):
        raw = os.fsdecode(raw)
    return printable(raw, limit=None)
