"""A development run's build folder (its ``/build``) as the service keeps it: packed by the worker
once the run's commands have ended (``pack``), checked by the server before it is stored and again
by ``jobs download`` before anything is written (``check``), unpacked on the team's machine into a
folder of its own (``unpack_into``). The format is the upload's (a gzip-compressed tar that
``archive.read`` takes), with the build folder's own bounds:

* at most MAX_BYTES (256 MiB) of file data and MAX_ENTRIES (10,000) entries looked at (files,
  folders, and what is left out); past a bound the rest is left out, and a line says so;
* files and folders only: a symbolic link (never followed), a FIFO, a socket or a device is left
  out with a line, and so is a name the archive check refuses (not UTF-8, a character Windows or
  macOS cannot store, too long or too deep, the same name as another once case is ignored), a file
  that cannot be read, and a file past the bytes' bound (its size as the folder lists it: a sparse
  file counts whole, and is never read);
* modes as the upload keeps them: 755 for a file any execute bit was set on, 644 otherwise.

At most MAX_NOTES lines name what was left out; the rest are counted in one more line. Reading is
bounded too: a file is opened once without following a link and without blocking, and read only
where it is a regular file.
"""
import gzip
import os
import secrets
import shutil
import stat
import tarfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..base.files import Refused, file_kind, read_regular
from ..base.archive import Entry, UploadError, raw_cap, read, unpack
from ..base.names import printable
from ..base.terms import walk_folder
from .upload import add_entry, inflate, name_left_out

MAX_BYTES = 256 << 20                 # bytes of file data kept of one build folder
MAX_ENTRIES = 10000                   # entries looked at (files, folders, what is left out)
MAX_NOTES = 20                        # lines naming what was left out; the rest counted in one line
COMPRESSION = 1                       # gzip level: fast (a build folder is often binary already)


def sent_cap(max_bytes=MAX_BYTES, max_entries=MAX_ENTRIES):
    """The largest archive as sent: the tar at its largest, plus gzip's framing of data it cannot
    compress (a few bytes each 64 KiB)."""
    raw = raw_cap(max_bytes, max_entries)
    return raw + raw // 1000 + 4096


def mib(n):
    return f"{n / 2**20:.1f} MiB"


@dataclass
class Packed:
    """What ``pack`` put in the archive, and how much it left out."""
    files: int = 0
    folders: int = 0
    bytes: int = 0                    # file data
    left_out: int = 0
    archive_bytes: int = 0
    notes: list = field(default_factory=list)

    def summary(self):
        out = asdict(self)
        del out["notes"]
        return out


class _Notes:
    """The lines naming what was left out: MAX_NOTES of them, then a count."""

    def __init__(self, packed):
        self.packed = packed

    def add(self, text):
        self.packed.left_out += 1
        if len(self.packed.notes) < MAX_NOTES:
            self.packed.notes.append(text)

    def lines(self):
        more = self.packed.left_out - len(self.packed.notes)
        return self.packed.notes + ([f"* ... and {more} more entries of the build folder left out"] if more else [])


def pack(folder, out, max_bytes=MAX_BYTES, max_entries=MAX_ENTRIES):
    """Pack the build folder ``folder`` into a new archive file ``out``; the Packed (its ``notes``:
    the lines to show, one per entry left out, bounded). OSError where ``out`` cannot be written."""
    packed = Packed()
    notes = _Notes(packed)
    taken, seen, cut = {}, 0, []
    with open(out, "xb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=COMPRESSION, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
        walk = walk_folder(str(folder))
        while True:
            try:
                found = next(walk)
            except StopIteration:
                break
            except OSError as exc:
                where = printable(os.path.relpath(exc.filename, folder)) if exc.filename else "a folder"
                notes.add(f"* Left out {where} and what is under it: it cannot be read ({exc.strerror or exc})")
                break
            seen += 1
            name, mode = "/".join(found.parts), found.info.st_mode
            if seen > max_entries:
                packed.left_out += 1
                cut = [f"* The build folder holds more than {max_entries} entries: {printable(name)} and every "
                       "entry after it are left out"]
                break
            why = name_left_out(found.parts, taken)
            if why is None and not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                why = f"{file_kind(mode)} (files and folders only; a link is never followed)"
            if why is None and stat.S_ISREG(mode) and packed.bytes + found.info.st_size > max_bytes:
                why = (f"{mib(found.info.st_size)}, past the {max_bytes >> 20} MiB the service keeps of a build "
                       "folder")
            if why is None:
                why = _add(tar, found, name, mode, packed, max_bytes)
            if why is not None:
                notes.add(f"* Left out of the build folder: {printable(name)}: {why}")
                found.descend = False
        packed.notes = notes.lines() + cut
    packed.archive_bytes = os.path.getsize(out)
    return packed


def _add(tar, found, name, mode, packed, max_bytes):
    """Add one folder or file to ``tar``; None, or why it was left out."""
    if stat.S_ISDIR(mode):
        add_entry(tar, Entry(name))
        packed.folders += 1
        return None
    try:
        data = read_regular(found.path, max_bytes - packed.bytes)
    except Refused as exc:
        return str(exc)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    add_entry(tar, Entry(name, data, bool(mode & 0o111)))
    packed.files += 1
    packed.bytes += len(data)
    return None


def check(data, max_bytes=MAX_BYTES, max_entries=MAX_ENTRIES):
    """The entries of the archive ``data`` (``archive.read``'s Checked) within the build folder's
    bounds; UploadError (one line) otherwise."""
    cap = sent_cap(max_bytes, max_entries)
    if len(data) > cap:
        raise UploadError(f"the build folder's archive is {mib(len(data))}; at most {mib(cap)}")
    try:
        return read(inflate(data, raw_cap(max_bytes, max_entries)), max_bytes, max_entries)
    except UploadError as exc:
        raise UploadError(f"the build folder's archive is refused: {exc}") from None


def unpack_into(checked, dest):
    """Write ``checked``'s entries into the folder ``dest``, which must not exist or be empty: into
    a new folder beside it first, then renamed, so that ``dest`` holds all of it or nothing.
    FileExistsError where ``dest`` exists and is not an empty folder."""
    dest = Path(dest)
    if dest.exists() or dest.is_symlink():
        if dest.is_symlink() or not dest.is_dir() or any(dest.iterdir()):
            raise FileExistsError(str(dest))
    parent = dest.parent
    parent.mkdir(parents=True, exist_ok=True)
    fresh = parent / f".{dest.name}.partial-{secrets.token_hex(4)}"
    fresh.mkdir(mode=0o755)
    try:
        unpack(checked, fresh)
        if dest.is_dir() and not dest.is_symlink():
            dest.rmdir()                                # empty, as checked above
        os.rename(fresh, dest)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
