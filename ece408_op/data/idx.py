"""The IDX file format (the MNIST family's): big-endian header, then uint8 data."""
import gzip
import struct
from pathlib import Path

import numpy as np

from ..errors import DataError
from .files import atomic_write_bytes

IMAGE_MAGIC = 2051
LABEL_MAGIC = 2049
_UBYTE = 0x08


def parse_idx(raw, name="IDX data", expected_magic=None):
    """Decode IDX bytes (raw or gzip) into a uint8 array, checking header and length."""
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise DataError(f"{name}: corrupt gzip data ({exc}); delete it and fetch again") from exc
    if len(raw) < 4:
        raise DataError(f"{name}: too short to be an IDX file; delete it and fetch again")
    magic = struct.unpack(">I", raw[:4])[0]
    dtype_code, ndim = (magic >> 8) & 0xFF, magic & 0xFF
    if magic >> 16 != 0 or dtype_code != _UBYTE or ndim not in (1, 3):
        raise DataError(f"{name}: bad magic number {magic} (want {IMAGE_MAGIC} or {LABEL_MAGIC})")
    if expected_magic is not None and magic != expected_magic:
        raise DataError(f"{name}: magic number {magic}, expected {expected_magic}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{name}: truncated header; delete it and fetch again")
    dims = struct.unpack(">" + "I" * ndim, raw[4:header])
    count = int(np.prod(dims, dtype=np.int64))
    if len(raw) - header != count:
        raise DataError(f"{name}: header promises {count} bytes of data for shape {dims} "
                        f"but the file holds {len(raw) - header}; delete it and fetch again")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def read_idx(path, expected_magic=None):
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror}") from exc
    return parse_idx(raw, name=str(path), expected_magic=expected_magic)


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
