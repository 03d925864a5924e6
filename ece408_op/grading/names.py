"""Team-chosen strings (team names, file and folder names of any bytes) as shown to people and
stored: control characters and bytes that are not UTF-8 are escaped, never interpreted, so that
no name can print a fake row, move the cursor or break an encoding."""
import unicodedata

MAX_NAME = 200


def printable(text, limit=MAX_NAME):
    """``text`` with every control or unprintable character (ANSI escapes, newlines, bidi marks)
    and every undecodable byte (``\\udcXX`` surrogates from os.fsdecode) written as an escape."""
    out = []
    for ch in str(text):
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:                  # a byte that was not UTF-8
            out.append(f"\\x{code - 0xDC00:02x}")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    text = "".join(out)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def team_name(raw):
    """A team's name as stored: from a folder name (bytes or str, any bytes) or --team; escaped."""
    import os
    if isinstance(raw, bytes):
        raw = os.fsdecode(raw)
    return printable(raw)
