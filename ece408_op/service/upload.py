"""The upload: what the client sends and the worker unpacks, a gzip-compressed tar.

Packed by the client (``pack_ranked``, ``pack_development``), it holds exactly what the run uses:
for a ranked run the milestone's team files, read as the local ranked run reads them
(``project.read_team_files``: one descriptor each, regular files only, at most 1 MiB); for a
development run the folder as a local development run copies it (version control and caches
left out, at most 64 MiB and 10,000 entries), files and folders only: a symbolic link, FIFO,
device or socket is left out with a line saying so.

Checked (``check``) by the server before it is queued and again by the worker before anything
is written, without trusting a byte of it: at most ``max_upload`` bytes as sent; decompressed
into memory with a cap (a compression bomb stops at the cap, not at the end of the disk);
gzip, one member, nothing after it; then every tar entry: a regular file or a folder (no
link, hard link, device, FIFO, sparse or continuation entry), a relative UTF-8 name with no
``..``, ``.`` or empty part, no NUL, not absolute, not named twice, no file under a file;
sizes and the entry count within the caps. A ranked upload must hold exactly the milestone's
files; a development upload its rai_build.yml. Unpacked (``unpack``) into a new empty folder,
each file created (O_EXCL, O_NOFOLLOW) by this code, never by tarfile's extract.
"""
import gzip
import hashlib
import io
import os
import stat
import tarfile
import zlib
from dataclasses import dataclass, field

from ..errors import Ece408Error
from .runs import (CONFIG_NAME, IGNORED, MAX_FILE_BYTES, MAX_SUBMISSION_BYTES, MAX_SUBMISSION_FILES, MILESTONE_FILES,
                   printable, read_file_once, read_team_files)

MAX_UPLOAD = 16 << 20                 # bytes as sent (compressed): serve --max-upload
MAX_NAME = 1024
MAX_PART = 255
TAR_OVERHEAD = 3 * 512                # a member's header and its pax header, at most, besides its data
FILE_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE)


class UploadError(Ece408Error):
    """An upload that is refused before anything unpacks it (one line)."""


@dataclass
class Entry:
    name: str
    data: bytes = None                # None: a folder
    executable: bool = False


@dataclass
class Checked:
    entries: list = field(default_factory=list)
    total: int = 0                    # bytes of file data

    def files(self):
        """[{name, size, sha256}] of the regular files, in order (what the job shows)."""
        return [{"name": e.name, "size": len(e.data), "sha256": hashlib.sha256(e.data).hexdigest()}
                for e in self.entries if e.data is not None]


def caps(kind):
    """(bytes of file data, entries) an upload of ``kind`` may hold."""
    if kind == "ranked":
        return 2 * MAX_FILE_BYTES, 2
    return MAX_SUBMISSION_BYTES, MAX_SUBMISSION_FILES


# ---------------------------------------------------------------------------- packing (client)

def _tar(entries):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry.name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if entry.data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(entry.data), 0o755 if entry.executable else 0o644
                tar.addfile(info, io.BytesIO(entry.data))
    return gzip.compress(raw.getvalue(), compresslevel=6, mtime=0)


def pack_ranked(folder, milestone):
    """(upload bytes, [TeamFile]) of the milestone's team files in ``folder``; TeamError (one
    line) where one is missing, a link, not a regular file or too large."""
    files = read_team_files(folder, MILESTONE_FILES[milestone])
    return _tar([Entry(name, data) for name, data in files.files]), list(files.taken)


def pack_development(folder, max_bytes=MAX_SUBMISSION_BYTES, max_entries=MAX_SUBMISSION_FILES):
    """(upload bytes, entries, notes) of the development run's folder: files and folders, as a
    local development run copies them; one note per entry left out. UploadError where the
    folder holds more than the caps or no rai_build.yml."""
    root = os.fsencode(os.fspath(folder))
    entries, notes, total = [], [], 0
    stack = [b""]
    while stack:
        rel = stack.pop()
        try:
            found = sorted(os.scandir(os.path.join(root, rel) if rel else root), key=lambda e: e.name)
        except OSError as exc:
            raise UploadError(f"cannot read the folder {printable(os.fsdecode(os.path.join(root, rel)))}: "
                              f"{exc.strerror or exc}") from None
        for item in found:
            if item.name in IGNORED or item.name.endswith(b".pyc"):
                continue
            path = os.path.join(rel, item.name) if rel else item.name
            try:
                name = path.decode("utf-8")
            except UnicodeDecodeError:
                notes.append(f"* Left out {printable(os.fsdecode(path))}: its name is not UTF-8")
                continue
            info = item.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                entries.append(Entry(name))
                stack.append(path)
            elif stat.S_ISREG(info.st_mode):
                total += info.st_size
                if total > max_bytes:
                    raise UploadError(f"the folder holds more than {max_bytes >> 20} MiB (at {printable(name)}); "
                                      "leave out data and builds")
                data = read_file_once(root, path, max_bytes)
                entries.append(Entry(name, data, bool(info.st_mode & 0o111)))
            else:
                kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a file or a folder"
                notes.append(f"* Left out {printable(name)}: {kind} (the service takes files and folders only)")
                continue
            if len(entries) > max_entries:
                raise UploadError(f"the folder holds more than {max_entries} files and folders; leave out what "
                                  "the build does not need")
    if not any(e.name == CONFIG_NAME and e.data is not None for e in entries):
        raise UploadError(f"{CONFIG_NAME}: not found in {printable(os.fsdecode(root))}; every submission needs one "
                          "at its top level")
    entries.sort(key=lambda e: e.name)
    return _tar(entries), entries, notes


# ---------------------------------------------------------------------------- checking (server, worker)

def _inflate(data, cap):
    """The gzip stream ``data`` decompressed, at most ``cap`` bytes; UploadError otherwise."""
    if data[:2] != b"\x1f\x8b":
        raise UploadError("the upload is not a gzip-compressed tar (python -m ece408_op submit --server packs one)")
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out, size, piece = [], 0, data
    try:
        while not inflater.eof:
            chunk = inflater.decompress(piece, 1 << 20)          # at most 1 MiB a call: memory stays bounded
            piece = inflater.unconsumed_tail
            size += len(chunk)
            if size > cap:
                raise UploadError(f"the upload unpacks to more than {size_text(cap)}: a compression bomb, or a "
                                  "folder larger than the service takes")
            out.append(chunk)
            if not chunk and not piece:
                break
    except zlib.error as exc:
        raise UploadError(f"the upload is not valid gzip ({exc})") from None
    if not inflater.eof:
        raise UploadError("the upload ends before its gzip stream does (cut short?)")
    if inflater.unused_data:
        raise UploadError("the upload has data after its gzip stream")
    return b"".join(out)


def size_text(n):
    """``51 KiB``, ``16.0 MiB``."""
    return f"{n / 1024:.0f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


def _check_name(raw, is_dir):
    name = raw[:-1] if is_dir and raw.endswith("/") else raw
    shown = printable(name, 80)
    if not name or len(name) > MAX_NAME:
        raise UploadError(f"the upload holds an entry with an empty or too long name ({shown})")
    if "\0" in name or any(0xDC80 <= ord(c) <= 0xDCFF for c in name):
        raise UploadError(f"the upload holds the name {shown}, which is not UTF-8 text")
    if name.startswith("/"):
        raise UploadError(f"the upload holds the absolute path {shown}; only paths inside the folder are taken")
    parts = name.split("/")
    if ".." in parts:
        raise UploadError(f"the upload holds the path {shown}, which climbs out of the folder (..)")
    if any(p in ("", ".") for p in parts) or any(len(p.encode()) > MAX_PART for p in parts):
        raise UploadError(f"the upload holds the path {shown}, which is not a plain relative path")
    return name


def _kind(info):
    return {tarfile.SYMTYPE: "a symbolic link", tarfile.LNKTYPE: "a hard link", tarfile.CHRTYPE: "a character device",
            tarfile.BLKTYPE: "a block device", tarfile.FIFOTYPE: "a FIFO", tarfile.CONTTYPE: "a contiguous file",
            tarfile.GNUTYPE_SPARSE: "a sparse file"}.get(info.type, f"an entry of type {info.type!r}")


def check(data, kind, milestone=None, max_upload=MAX_UPLOAD):
    """The entries of the upload ``data`` of a ``kind`` run (see the module docstring): a
    Checked, or UploadError (one line) before anything is written anywhere."""
    if len(data) > max_upload:
        raise UploadError(f"the upload is {size_text(len(data))}; this service takes at most {size_text(max_upload)}")
    max_bytes, max_entries = caps(kind)
    raw = _inflate(data, max_bytes + TAR_OVERHEAD * (max_entries + 2) + 1024)
    checked = Checked()
    names, files = set(), set()
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
            while True:
                info = tar.next()
                if info is None:
                    break
                is_dir = info.type == tarfile.DIRTYPE
                if info.type not in FILE_TYPES and not is_dir or info.sparse is not None:
                    raise UploadError(f"the upload holds {printable(info.name, 80)}, {_kind(info)}; only files and "
                                      "folders are taken")
                name = _check_name(info.name, is_dir)
                if name in names:
                    raise UploadError(f"the upload names {printable(name, 80)} twice")
                parents = name.split("/")[:-1]
                if any("/".join(parents[:i + 1]) in files for i in range(len(parents))):
                    raise UploadError(f"the upload puts {printable(name, 80)} under a file")
                names.add(name)
                if len(names) > max_entries:
                    raise UploadError(f"the upload holds more than {max_entries} files and folders")
                if is_dir:
                    checked.entries.append(Entry(name))
                    continue
                files.add(name)
                checked.total += info.size
                if info.size > max_bytes or checked.total > max_bytes:
                    raise UploadError(f"the upload's files hold more than {size_text(max_bytes)}")
                content = tar.extractfile(info).read()
                if len(content) != info.size:
                    raise UploadError(f"the upload's {printable(name, 80)} is cut short")
                checked.entries.append(Entry(name, content, bool(info.mode & 0o111)))
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise UploadError(f"the upload is not a valid tar archive ({exc})") from None
    _check_contents(checked, kind, milestone)
    return checked


def _check_contents(checked, kind, milestone):
    names = [e.name for e in checked.entries]
    if kind == "ranked":
        wanted = MILESTONE_FILES[milestone]
        if sorted(names) != sorted(wanted) or any(e.data is None for e in checked.entries):
            raise UploadError(f"a ranked {milestone} upload holds exactly {', '.join(wanted)} (files), not "
                              f"{', '.join(printable(n, 60) for n in names) or 'nothing'}")
        for entry in checked.entries:
            if len(entry.data) > MAX_FILE_BYTES:
                raise UploadError(f"{entry.name} has {len(entry.data)} bytes; at most {MAX_FILE_BYTES}")
    elif not any(e.name == CONFIG_NAME and e.data is not None for e in checked.entries):
        raise UploadError(f"{CONFIG_NAME}: not found at the top of the upload; every submission needs one")


def config_text(checked):
    """The bytes of the development upload's rai_build.yml."""
    return next(e.data for e in checked.entries if e.name == CONFIG_NAME and e.data is not None)


# ---------------------------------------------------------------------------- unpacking (worker)

def unpack(checked, dest):
    """Write the checked entries into the empty folder ``dest``; every file and folder is made
    here (O_EXCL, O_NOFOLLOW), so nothing outside ``dest`` is ever touched."""
    dest = os.fspath(dest)
    if os.listdir(dest):
        raise UploadError(f"{dest} is not empty")
    for entry in checked.entries:
        path = os.path.join(dest, *entry.name.split("/"))
        if entry.data is None:
            os.makedirs(path, mode=0o755, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if entry.executable else 0o644)
        with os.fdopen(fd, "wb") as out:
            out.write(entry.data)
