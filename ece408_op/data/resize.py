"""Fashion-MNIST resized up for the later course models (64x64 for 2018, 70x70 for 2019).

The course generated these inputs once by a bilinear resize of the 28x28 images; this
module does the same and caches the result as an IDX file, like the 28x28 data.

The resize, exactly (``resize_bilinear``):

* half-pixel centres (what OpenCV's ``INTER_LINEAR``, PIL, TensorFlow 2 and MXNet's
  ``BilinearResize2D(align_corners=False)`` do): output pixel ``o`` of ``n_out`` samples the
  input at ``s = (o + 0.5) * n_in / n_out - 0.5``, clamped to ``[0, n_in - 1]``, and takes
  ``(1 - f) * in[floor(s)] + f * in[floor(s) + 1]`` with ``f = s - floor(s)`` (the edge pixel
  repeats past the border);
* separable: rows, then columns, in float64 (``A @ image @ A.T`` with ``A`` the
  ``n_out x n_in`` interpolation matrix);
* rounded to the nearest integer (ties to even) and stored as uint8 0-255: raw pixels, as
  the course models take them. Every output is a convex combination of input pixels, so
  no value leaves 0-255.

Cache: ``$XDG_CACHE_HOME/ece408_op/fashion-mnist-resized/`` (default ``~/.cache/...``), one
file per split and size, e.g. ``t10k-images-64x64-<key>-idx3-ubyte``, where ``<key>`` is
the first 16 hex digits of the SHA-256 of the 28x28 source images and of ``METHOD``: a
cache made from other source data (the npm order, the official order) or by another
resize is never used. Files are written atomically (temporary name, then rename), so an
interrupted run leaves no partial file; stale keys of the same split and size are removed
after a new file is written. Where the cache folder cannot be written the resized images
are used without being cached.
"""
import hashlib
from pathlib import Path

import numpy as np

from ..errors import DataError
from .idx import IMAGE_MAGIC, read_idx, write_idx
from .lookup import SPLITS, load_fashion_mnist, user_cache_dir

METHOD = "bilinear-half-pixel-float64-rint-v1"   # part of the cache key: change it with the method
SOURCE_SIZE = 28
CHUNK = 2048                                   # images resized per float64 block (bounded memory)


def interpolation_matrix(n_in, n_out):
    """The ``n_out x n_in`` float64 matrix of the 1-D bilinear resize (half-pixel centres)."""
    if n_in < 1 or n_out < 1:
        raise ValueError(f"sizes must be positive, got {n_in} -> {n_out}")
    s = (np.arange(n_out, dtype=np.float64) + 0.5) * (n_in / n_out) - 0.5
    s = np.clip(s, 0.0, n_in - 1)
    lo = np.floor(s).astype(np.int64)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = s - lo
    matrix = np.zeros((n_out, n_in), dtype=np.float64)
    rows = np.arange(n_out)
    np.add.at(matrix, (rows, lo), 1.0 - frac)
    np.add.at(matrix, (rows, hi), frac)
    return matrix


def resize_bilinear_float(images, size):
    """N x H x W (any real dtype) -> N x size x size float64, unrounded (see the module doc)."""
    images = np.asarray(images)
    if images.ndim != 3:
        raise ValueError(f"images must be N x H x W, got shape {images.shape}")
    rows = interpolation_matrix(images.shape[1], size)
    cols = interpolation_matrix(images.shape[2], size)
    return rows @ images.astype(np.float64) @ cols.T


def resize_bilinear(images, size):
    """N x H x W uint8 -> N x size x size uint8: the bilinear resize, rounded (module doc)."""
    images = np.asarray(images)
    out = np.empty((images.shape[0], size, size), dtype=np.uint8)
    for start in range(0, images.shape[0], CHUNK):
        block = resize_bilinear_float(images[start:start + CHUNK], size)
        np.clip(np.rint(block), 0, 255, out=block)
        out[start:start + CHUNK] = block
    return out


def resized_cache_dir():
    return user_cache_dir().parent / "fashion-mnist-resized"


def cache_key(source_images):
    digest = hashlib.sha256(METHOD.encode())
    digest.update(np.ascontiguousarray(source_images).tobytes())
    return digest.hexdigest()[:16]


def cache_path(split, size, key, folder=None):
    return Path(folder or resized_cache_dir()) / f"{SPLITS[split]}-images-{size}x{size}-{key}-idx3-ubyte"


def _read_cached(path, count, size):
    """The cached images, or None where the file is missing or not what its name says."""
    if not path.is_file():
        return None
    try:
        images = read_idx(path, IMAGE_MAGIC)
    except DataError:
        return None                       # damaged: rewrite it
    return images if images.shape == (count, size, size) else None


def _write_cache(path, images):
    """Write ``images`` atomically and drop older keys of the same split and size; False where
    the folder cannot be written (the caller goes on uncached)."""
    try:
        write_idx(path, images)
    except (OSError, DataError):          # files.py turns storage errors into DataError
        return False
    stem = path.name.rsplit("-", 3)[0]            # "<split>-images-<size>x<size>"
    for other in path.parent.glob(stem + "-*-idx3-ubyte"):
        if other != path:
            try:
                other.unlink()
            except OSError:
                pass
    return True


def load_resized(split="test", size=64, count=None, data_dir=None, cache=True, cache_dir=None):
    """(images uint8 N x size x size, labels uint8 N): the first ``count`` images of a split,
    resized as the module doc says; the whole split is resized once and cached."""
    if not isinstance(size, (int, np.integer)) or size < 1:
        raise DataError(f"resize size must be a positive integer, got {size!r}")
    from .lookup import is_memory_split
    source, labels = load_fashion_mnist(split, None, data_dir)
    cache = cache and not is_memory_split(split, data_dir)        # a ranked run's images: never on disk
    if size == source.shape[1] == source.shape[2]:
        images = source
    else:
        path = cache_path(split, int(size), cache_key(source), cache_dir)
        images = _read_cached(path, source.shape[0], size) if cache else None
        if images is None:
            images = resize_bilinear(source, int(size))
            if cache:
                _write_cache(path, images)
    if count is not None:
        images, labels = images[:count], labels[:count]
    return images, labels

