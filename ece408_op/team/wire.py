"""Messages between the harness's processes: a 4-byte big-endian length, then that many bytes of
JSON. The team process's pipes (``process.py``, ``harness.py``) and the measuring process's channel
(``grading/channel.py``) use it; the reader bounds every message before reading it."""
import json
import struct


def encode(message):
    data = json.dumps(message, allow_nan=False).encode()
    return struct.pack(">I", len(data)) + data


def read_exact(read, n):
    """``n`` bytes from ``read(k)`` (which returns at most k bytes, none at the end); EOFError where
    the other side closes first."""
    parts, got = [], 0
    while got < n:
        chunk = read(n - got)
        if not chunk:
            raise EOFError("the other side closed its end")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def decode(read, limit):
    """The next message, read with ``read(k)`` (at most k bytes; none at the end: EOFError); ValueError
    where it is longer than ``limit`` bytes or not JSON."""
    (n,) = struct.unpack(">I", read_exact(read, 4))
    if n > limit:
        raise ValueError(f"a message of {n} bytes (at most {limit})")
    try:
        return json.loads(read_exact(read, n))
    except UnicodeDecodeError as exc:
        raise ValueError(f"a message that is not UTF-8 ({exc})") from exc
