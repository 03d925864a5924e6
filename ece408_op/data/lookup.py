"""Where the Fashion-MNIST files are, and loading a split, checked.

Looked for, in order: an explicit folder (``--data-dir``; then no other), ``$ECE408_DATA_DIR``,
``/fashion-mnist`` (the course container's folder), the user cache
``$XDG_CACHE_HOME/ece408_op/fashion-mnist`` (default ``~/.cache/ece408_op/fashion-mnist``).
Files are the standard IDX ones, raw or .gz:

    train-images-idx3-ubyte  train-labels-idx1-ubyte   (60,000)
    t10k-images-idx3-ubyte   t10k-labels-idx1-ubyte    (10,000)

A split's images and labels always come from ONE folder, the first that holds any of
them; a folder that holds them but cannot be used (unreadable, half a set, corrupt) is an
error, never skipped for the next one, and so is a ``--data-dir`` or ``$ECE408_DATA_DIR``
that does not exist. What is checked:

* a folder with a manifest (what ``fetch`` writes): exactly the files it names, whose
  SHA-256 must match (so a file changed since, or left by another fetch, is refused); an
  unfinished fetch's manifest is refused;
* a folder without one (a folder of your own, /fashion-mnist, a cache written by an
  earlier version): images 28x28, labels 0-9, as many labels as images; where a file is
  there both raw and .gz, both must hold the same data; images and labels must not come
  from two different known sources (``checks.identify``).

Every refusal says how to get a good set (``python -m ece408_op fetch --force ...``).
"""
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..base.files import user_cache_dir as base_cache_dir
from ..errors import DataError
from .checks import check_images, check_labels, check_pair, check_same_origin, identify
from .files import list_folder, read_regular_file
from .idx import IMAGE_MAGIC, LABEL_MAGIC, idx_content, parse_idx
from .manifest import MANIFEST_NAME, FileRecord, read_manifest, refetch_hint

SPLITS = {"train": "train", "test": "t10k"}

# roles of the folders searched (messages name them this way)
EXPLICIT, ENV, CONTAINER, CACHE = "--data-dir", "$ECE408_DATA_DIR", "the course container's folder", "the cache"
CONTAINER_DIR = Path("/fashion-mnist")


def file_names(split):
    prefix = SPLITS[split]
    return f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"


def user_cache_dir():
    return base_cache_dir("fashion-mnist")


def search_order(data_dir=None):
    """[(folder, role)] in the order lookups try them."""
    if data_dir:
        return [(Path(data_dir), EXPLICIT)]
    order = []
    if os.environ.get("ECE408_DATA_DIR"):
        order.append((Path(os.environ["ECE408_DATA_DIR"]), ENV))
    return order + [(CONTAINER_DIR, CONTAINER), (user_cache_dir(), CACHE)]


def candidate_dirs(data_dir=None):
    return [folder for folder, _ in search_order(data_dir)]


def hint(folder):
    return refetch_hint(folder, user_cache_dir())


@dataclass
class SplitFiles:
    """The two files of one split in one folder, and how to check them."""
    folder: Path
    split: str
    images: Path
    labels: Path
    manifest: object = None          # the folder's Manifest, or None
    twins: tuple = ()                # (path used, other variant) where both raw and .gz are there


def inspect_folder(folder, split, role=EXPLICIT):
    """The split's files in ``folder``; None where the folder is absent or holds none of them
    (an explicit folder must hold them); DataError where it holds them but is unusable."""
    folder = Path(folder)
    try:
        folder.stat()
    except FileNotFoundError:
        if role == EXPLICIT:
            raise DataError(f"data folder {folder} does not exist; give an existing folder, or fetch into it: "
                            f"python -m ece408_op fetch --dest {folder}") from None
        if role == ENV:
            raise DataError(f"ECE408_DATA_DIR={folder} does not exist; fix it, or unset it to use "
                            f"{user_cache_dir()}") from None
        return None
    except OSError as exc:
        raise DataError(f"cannot reach data folder {folder} ({role}): {exc.strerror}; fix the permissions "
                        "of the folders above it, or use another data folder") from exc
    names = list_folder(folder, f"data folder ({role})")
    images_stem, labels_stem = file_names(split)
    if MANIFEST_NAME in names:
        return _manifest_files(folder, split, names)
    present = {stem: [name for name in (stem, stem + ".gz") if name in names] for stem in (images_stem, labels_stem)}
    if not any(present.values()):
        if role == EXPLICIT:
            raise DataError(f"Fashion-MNIST {split} files ({images_stem}, {labels_stem}, raw or .gz) not found "
                            f"in {folder}; run: python -m ece408_op fetch --dest {folder}")
        return None
    for stem, found in present.items():
        if not found:
            other = labels_stem if stem == images_stem else images_stem
            raise DataError(f"{folder} holds {other} but not {stem} (raw or .gz): half a set; {hint(folder)}")
    twins = tuple((folder / found[0], folder / found[1]) for found in present.values() if len(found) == 2)
    return SplitFiles(folder, split, folder / present[images_stem][0], folder / present[labels_stem][0],
                      None, twins)


def _manifest_files(folder, split, names):
    try:
        manifest = read_manifest(folder)
    except DataError as exc:
        raise DataError(f"{exc}; {hint(folder)}") from exc
    if not manifest.complete:
        raise DataError(f"{folder} holds an unfinished fetch (it was interrupted before it completed): "
                        f"its files may be a mix of two fetches; {hint(folder)}")
    try:
        image_name, label_name = manifest.names(split)
    except DataError as exc:
        raise DataError(f"{folder}: {exc}; {hint(folder)}") from exc
    missing = sorted(name for name in manifest.files if name not in names)
    if missing:
        raise DataError(f"{folder} lacks {missing[0]}, which its manifest lists: an incomplete set; {hint(folder)}")
    return SplitFiles(folder, split, folder / image_name, folder / label_name, manifest)


def locate(split="test", data_dir=None):
    """The split's files in the first folder of the search order that holds them."""
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}; use 'train' or 'test'")
    order = search_order(data_dir)
    for folder, role in order:
        found = inspect_folder(folder, split, role)
        if found is not None:
            return found
    raise DataError(f"Fashion-MNIST {split} files not found in {', '.join(str(f) for f, _ in order)}; "
                    "run: python -m ece408_op fetch (or set ECE408_DATA_DIR)")


def find_split_files(split="test", data_dir=None):
    """(images path, labels path) of the split, located as ``load_fashion_mnist`` does."""
    found = locate(split, data_dir)
    return found.images, found.labels


@dataclass
class LoadedSplit:
    images: object                   # uint8 N x 28 x 28
    labels: object                   # uint8 N
    records: dict                    # file name -> FileRecord (what a manifest would say)
    origin: str = None               # npm / official / None: the known source of the set


def _read_checked(files, path, kind, magic):
    """(array, FileRecord, known origin) of one file, checked against the folder's manifest."""
    raw = read_regular_file(path)
    digest = hashlib.sha256(raw).hexdigest()
    if files.manifest is not None:
        record = files.manifest.files[path.name]
        if record.bytes != len(raw) or record.sha256 != digest:
            raise DataError(f"{path} is not the file its folder's manifest names (changed or corrupt since it "
                            f"was fetched, or left by another fetch); {hint(files.folder)}")
    content = idx_content(raw, str(path))
    array = parse_idx(content, str(path), magic)
    stem = path.name[:-3] if path.name.endswith(".gz") else path.name
    content_digest = digest if content is raw else hashlib.sha256(content).hexdigest()
    origin = identify(stem, content_digest, hashlib.md5(raw).hexdigest() if content is not raw else None)
    return array, FileRecord(files.split, kind, len(array), len(raw), digest), origin, content


def load_split(files):
    """Read and check both files of a split (see the module's docstring)."""
    images, image_record, image_origin, image_content = _read_checked(files, files.images, "images", IMAGE_MAGIC)
    labels, label_record, label_origin, label_content = _read_checked(files, files.labels, "labels", LABEL_MAGIC)
    check_images(images, str(files.images))
    check_labels(labels, str(files.labels))
    check_pair(images, labels, str(files.images), str(files.labels))
    origin = files.manifest.order if files.manifest is not None else image_origin
    if files.manifest is None:
        for used, other in files.twins:
            content = image_content if used == files.images else label_content
            if idx_content(read_regular_file(other), str(other)) != content:
                raise DataError(f"{files.folder} holds both {used.name} and {other.name} and they differ: "
                                f"which one is meant is unclear; delete the wrong one, or {hint(files.folder)}")
        check_same_origin(str(files.images), image_origin, str(files.labels), label_origin)
        origin = image_origin if image_origin == label_origin else None
    return LoadedSplit(images, labels, {files.images.name: image_record, files.labels.name: label_record}, origin)


MEMORY_SPLITS = {}     # split -> (images, labels): a ranked run's images, sent by the runner, never a file


def register_memory_split(split, images, labels):
    """Make ``split`` load from memory: the measuring process of a ranked run gets its images over
    its channel, so that no data file is in reach of a team's process."""
    images, labels = np.asarray(images, np.uint8), np.asarray(labels, np.uint8)
    check_images(images, f"the {split} images sent by the runner")
    check_labels(labels, f"the {split} labels sent by the runner")
    if len(images) != len(labels):
        raise DataError(f"the runner sent {len(images)} {split} images and {len(labels)} labels")
    MEMORY_SPLITS[split] = (images, labels)


def is_memory_split(split, data_dir=None):
    return data_dir is None and split in MEMORY_SPLITS


def load_fashion_mnist(split="test", count=None, data_dir=None):
    """(images uint8 N x 28 x 28, labels uint8 N): the first ``count`` images of a split, checked.
    Asking for more images than the split holds is an error that says how many it holds."""
    if is_memory_split(split, data_dir):
        images, labels = MEMORY_SPLITS[split]
        where = "the images the runner sent"
    else:
        files = locate(split, data_dir)
        loaded = load_split(files)
        images, labels = loaded.images, loaded.labels
        where = files.images
    if count is not None:
        if count > len(images):
            raise DataError(f"asked for {count} images but {where} holds {len(images)}; "
                            f"give a dataset size of at most {len(images)}")
        images, labels = images[:max(count, 0)], labels[:max(count, 0)]
    return images, labels


def has_data(data_dir=None):
    """True where both splits are found and pass the checks."""
    try:
        for split in SPLITS:
            load_split(locate(split, data_dir))
    except DataError:
        return False
    return True
