"""Where the Fashion-MNIST files are, and loading a split.

Looked for, in order: an explicit folder, ``$ECE408_DATA_DIR``, ``/fashion-mnist``
(the course container's folder), the user cache ``$XDG_CACHE_HOME/ece408_op/fashion-mnist``
(default ``~/.cache/ece408_op/fashion-mnist``). Files are the standard IDX ones, raw or .gz:

    train-images-idx3-ubyte  train-labels-idx1-ubyte   (60,000)
    t10k-images-idx3-ubyte   t10k-labels-idx1-ubyte    (10,000)
"""
import os
from pathlib import Path

from ..errors import DataError
from .idx import IMAGE_MAGIC, LABEL_MAGIC, read_idx

SPLITS = {"train": "train", "test": "t10k"}


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
