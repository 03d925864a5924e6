"""The IDX file format (the MNIST family's): big-endian header, then uint8 data.

``parse_idx`` accepts raw or gzip bytes and raises only DataError: a bad magic number, a
header that does not match the data's length, corrupt or truncated gzip data, or more data
than the header declares (decompression stops there: a small .gz cannot fill memory).
"""
import gzip
import math
import struct
import zlib
from pathlib import Path

import numpy as np

from ..errors import DataError
from .files import MAX_READ_BYTES, atomic_write_bytes, read_regular_file

IMAGE_MAGIC = 2051
LABEL_MAGIC = 2049
_UBYTE = 0x08
_GZIP_MAGIC = b"\x1f\x8b"
_REFETCH = "delete it and fetch again"
_CHUNK = 1 << 23                  # decompress 8 MB at a time


def _header(raw, name, expected_magic):
    """(header length, dims) of IDX bytes; DataError where they are not a uint8 IDX header."""
    if len(raw) < 4:
        raise DataError(f"{name}: too short to be an IDX file; {_REFETCH}")
    magic = struct.unpack(">I", raw[:4])[0]
    dtype_code, ndim = (magic >> 8) & 0xFF, magic & 0xFF
    if magic >> 16 != 0 or dtype_code != _UBYTE or ndim not in (1, 3):
        raise DataError(f"{name}: bad magic number {magic} (want {IMAGE_MAGIC} or {LABEL_MAGIC}); "
                        "not an IDX images or labels file")
    if expected_magic is not None and magic != expected_magic:
        kind = "labels" if magic == LABEL_MAGIC else "images"
        raise DataError(f"{name}: magic number {magic} ({kind} file), expected {expected_magic}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{name}: truncated header; {_REFETCH}")
    dims = struct.unpack(">" + "I" * ndim, raw[4:header])
    if header + math.prod(dims) > MAX_READ_BYTES:
        raise DataError(f"{name}: header declares shape {dims}, more than any Fashion-MNIST file; {_REFETCH}")
    return header, dims


def _gunzip(raw, name, expected_magic):
    """Decompress gzip data, never past the size its IDX header declares."""
    out = bytearray()
    limit = None                      # header + data bytes, once the header is known
    pending = bytes(raw)
    try:
        while pending:
            stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
            tail = pending
            while not stream.eof:
                budget = _CHUNK if limit is None else max(1, min(_CHUNK, limit + 1 - len(out)))
                piece = stream.decompress(tail, budget)
                out += piece
                if limit is None and len(out) >= 4 and len(out) >= 4 + 4 * (out[3] if out[3] in (1, 3) else 0):
                    header, dims = _header(bytes(out[:16]), name, expected_magic)
                    limit = header + math.prod(dims)
                if limit is not None and len(out) > limit:
                    raise DataError(f"{name}: the gzip data holds more than its IDX header declares; {_REFETCH}")
                if not piece and stream.unconsumed_tail == tail:
                    break                 # input used up before the end of the stream
                tail = stream.unconsumed_tail
            if not stream.eof:
                raise DataError(f"{name}: gzip data ends early (truncated file); {_REFETCH}")
            pending = stream.unused_data
            if not pending.strip(b"\0"):
                break                     # trailing zero padding, as gzip(1) accepts
            if pending[:2] != _GZIP_MAGIC:
                raise DataError(f"{name}: data after the end of the gzip stream; {_REFETCH}")
    except zlib.error as exc:
        raise DataError(f"{name}: corrupt gzip data ({exc}); {_REFETCH}") from exc
    return bytes(out)


def parse_idx(raw, name="IDX data", expected_magic=None):
    """Decode IDX bytes (raw or gzip) into a uint8 array, checking header and length."""
    raw = bytes(raw)
    if raw[:2] == _GZIP_MAGIC:
        raw = _gunzip(raw, name, expected_magic)
    header, dims = _header(raw, name, expected_magic)
    count = math.prod(dims)
    if len(raw) - header != count:
        raise DataError(f"{name}: header promises {count} bytes of data for shape {dims} "
                        f"but the file holds {len(raw) - header}; {_REFETCH}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def idx_content(raw, name="IDX data"):
    """The uncompressed IDX bytes of raw or gzip data (for fingerprints)."""
    raw = bytes(raw)
    return _gunzip(raw, name, None) if raw[:2] == _GZIP_MAGIC else raw


def read_idx(path, expected_magic=None):
    path = Path(path)
    return parse_idx(read_regular_file(path), name=str(path), expected_magic=expected_magic)


def encode_idx(array, compress=False):
    array = np.ascontiguousarray(array, dtype=np.uint8)
    if array.ndim not in (1, 3):
        raise ValueError("IDX arrays here are 1-D (labels) or 3-D (images)")
    raw = struct.pack(">I", (_UBYTE << 8) | array.ndim) + struct.pack(">" + "I" * array.ndim, *array.shape)
    raw += array.tobytes()
    return gzip.compress(raw, compresslevel=6, mtime=0) if compress else raw


def write_idx(path, array):
    """Write an IDX file atomically; gzip-compressed when the name ends in .gz."""
    atomic_write_bytes(path, encode_idx(array, compress=str(path).endswith(".gz")))
