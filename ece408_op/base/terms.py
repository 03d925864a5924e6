"""What the class's client and its service agree on, in one leaf both import (standard library
only: a laptop's client loads nothing of grading/, team/ or the server): the limits of a
submission, the names of the files a run takes, the walk of a team's folder and the reading of
its milestone files, the jobs' kinds and the shape of a token. A local run (grading/, team/) reads
a team's folder by the same rules, so that a folder is taken alike wherever it is sent."""
import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from ..course import MILESTONES
from ..errors import Ece408Error
from .files import NotRegular, Refused, TooLarge, read_regular

CONFIG_NAME = "rai_build.yml"                # a development run's build file, at the folder's top
DEFAULT_SIZE = 10000                         # images a ranked run measures unless told
JOB_KINDS = ("ranked", "development")
MILESTONE_FILES = {name: m.files for name, m in MILESTONES.items() if m.files}   # what a ranked run takes
MAX_FILE_BYTES = 1 << 20                     # each of a ranked run's files
MAX_SUBMISSION_BYTES = 64 << 20              # a development run's folder: file data
MAX_SUBMISSION_FILES = 10000                 # ... and entries
MAX_UPLOAD = 16 << 20                        # an upload's bytes as sent (compressed): serve --max-upload
TOKEN = re.compile(r"^ece408_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")   # ece408_<id: 64 bits hex>_<secret: 256 bits>


TOKEN_BYTES = re.compile(rb"(?<![A-Za-z0-9_-])ece408_[0-9a-f]{16}_[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])")   # in a file
# a token's secret anywhere in a text (a path, a name, a message), also cut short or run into other text
TOKEN_IN_TEXT = re.compile(r"(ece408_[0-9a-f]{16}_)[A-Za-z0-9_-]{8,}")


def redact_tokens(text):
    """``text`` with every token's secret replaced: what an error body or a log line may say of a
    token is its id (not secret), never the rest."""
    return TOKEN_IN_TEXT.sub(r"\1[secret removed]", text) if "ece408_" in text else text


def parse_token(token):
    """(id, secret) of a well-formed token, else None."""
    match = TOKEN.match(token or "")
    return (match.group(1), match.group(2)) if match else None


def looks_like_token(text):
    return parse_token(text.strip()) is not None


# ---------------------------------------------------------------------------- a development run's folder

class Found:
    """One entry ``walk_folder`` found: its ``parts`` (names from the root, of the root's type), the
    ``path`` to open it by, its ``info`` (lstat: a link is not followed); a folder is walked into
    after the consumer's turn unless it set ``descend`` to False."""

    __slots__ = ("parts", "path", "info", "descend")

    def __init__(self, parts, path, info):
        self.parts, self.path, self.info, self.descend = parts, path, info, True


def walk_folder(root):
    """Every entry under the folder ``root`` (str or bytes; names come back of the same type), each
    folder's entries in name order (what a submission leaves out is its consumer's to decide:
    ``base/ignore.py``'s rules; a build folder is taken whole).
    Paths come from the system's own listing (no path module joins them), so that names are
    ``parts`` on every platform. The OSError of a folder that cannot be listed propagates, its
    ``filename`` set."""
    stack = [((), root)]
    while stack:
        parts, folder = stack.pop()
        with os.scandir(folder) as listing:
            entries = sorted(listing, key=lambda e: e.name)
        for entry in entries:
            found = Found(parts + (entry.name,), entry.path, entry.stat(follow_symlinks=False))
            yield found
            if found.descend and stat.S_ISDIR(found.info.st_mode):
                stack.append((found.parts, entry.path))


# ---------------------------------------------------------------------------- a ranked run's files

class TeamError(Ece408Error):
    """A team folder that cannot be used (missing files, a link, a file too large)."""


@dataclass(frozen=True)
class TeamFile:
    name: str
    sha256: str
    size: int

    def to_dict(self):
        return {"name": self.name, "sha256": self.sha256, "size": self.size}


@dataclass(frozen=True)
class TeamFiles:
    """The team's files a run takes, read ONCE: their bytes, what the record lists, and the digest
    ``grade`` compares. What is written into the sandbox, hashed and recorded is the same read."""
    files: tuple                      # ((name, bytes), ...)
    taken: tuple                      # (TeamFile, ...)

    @property
    def digest(self):
        """SHA-256 over (name, size, bytes) of every file, in order."""
        digest = hashlib.sha256()
        for name, data in self.files:
            digest.update(f"{name}\0{len(data)}\0".encode())
            digest.update(data)
        return digest.hexdigest()

    def write(self, dest):
        """Write the files into the folder ``dest``; returns [TeamFile]."""
        for name, data in self.files:
            with open(Path(dest) / name, "wb") as out:
                out.write(data)
        return list(self.taken)


def read_file_once(folder, name, max_bytes=MAX_FILE_BYTES):
    """The bytes of ``folder/name``, read once (``base.files.read_regular``: no link followed, never
    blocking, a regular file of at most ``max_bytes`` on the descriptor it is read from); TeamError
    (one line) otherwise."""
    path = os.path.join(os.fsencode(folder), os.fsencode(name))
    try:
        return read_regular(path, max_bytes)
    except FileNotFoundError:
        raise TeamError(f"the submission has no {name}; a team project needs it "
                        "(python -m ece408_op init DIR makes one)") from None
    except NotRegular as exc:
        raise TeamError(f"the submission's {name} is not a regular file ({exc.kind})") from None
    except TooLarge as exc:
        raise TeamError(f"the submission's {name} has {exc.size} bytes; at most {max_bytes}" if not exc.growing else
                        f"the submission's {name} grew past {max_bytes} bytes while it was read") from None
    except Refused as exc:
        raise TeamError(f"the submission's {name} cannot be taken: {exc}") from None
    except OSError as exc:
        raise TeamError(f"the submission's {name} cannot be read: {exc.strerror or exc}") from None


def read_team_files(folder, names, max_bytes=MAX_FILE_BYTES):
    """TeamFiles of ``names`` in the team ``folder`` (each read once: ``read_file_once``)."""
    files, taken = [], []
    for name in names:
        data = read_file_once(folder, name, max_bytes)
        files.append((name, data))
        taken.append(TeamFile(name, hashlib.sha256(data).hexdigest(), len(data)))
    return TeamFiles(tuple(files), tuple(taken))
