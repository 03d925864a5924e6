"""Messages between the harness's processes: a 4-byte big-endian length, then that many bytes of
JSON. The team process's pipes (``worker.py``, ``client.py``) and the measuring process's channel
(``grading/channel.py``) use it; the reader bounds every message before reading it."""
import json
import struct


def encode(message):
    data = json.dumps(message, allow_nan=False).encode()
    return struct.pack(">I", len(data)) + data


def decode(read_exact, limit):
    """The next message, read with ``read_exact(n)`` (n bytes, or EOFError); ValueError where it is
    longer than ``limit`` bytes or not JSON."""
    (n,) = struct.unpack(">I", read_exact(4))
    if n > limit:
        raise ValueError(f"a message of {n} bytes (at most {limit})")
    try:
        return json.loads(read_exact(n))
    except UnicodeDecodeError as exc:
        raise ValueError(f"a message that is not UTF-8 ({exc})") from exc
