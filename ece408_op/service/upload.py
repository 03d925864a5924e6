"""The upload: what the client sends and the worker unpacks, a gzip-compressed tar.

Packed by the client (``pack_ranked``, ``pack_development``), it holds exactly what the run uses:
for a ranked run the milestone's team files, read as the local ranked run reads them
(``terms.read_team_files``: one descriptor each, regular files only, at most 1 MiB); for a
development run the folder (``walk_folder``), at most 64 MiB and 10,000 entries, files and
folders only, less what ``base/ignore.py``'s rules leave out (tokens and any file holding one,
databases, version control, caches, virtual environments, other teams' folders, the folder's
.ece408ignore), counted for the upload's one line (``LeftOut``; ``preview``: submit --dry-run's
list). Left out, one line each: a symbolic link, FIFO, device or socket; a name the service would refuse
(``archive.name_problem``: not UTF-8, a character Windows or macOS cannot store, too long, too
deep) and a name equal to one already taken where case or Unicode normalisation is ignored. On
every platform the names are ``/``-separated parts of the system's own listing.

Checked (``check``) by the server before it is queued and again by the worker before anything
is written, without trusting a byte of it: at most ``max_upload`` bytes as sent; decompressed
into memory with a cap (a compression bomb stops at the cap, not at the end of the disk);
gzip, one member, nothing after it; then the tar archive by ``archive.read`` (its docstring
lists what is taken); a ranked upload must hold exactly the milestone's files, a development
upload its rai_build.yml. Unpacked (``unpack``: ``archive.unpack``) into a new empty folder,
each file created by this code, never by tarfile's extract.
"""
import gzip
import io
import os
import stat
import tarfile
import zlib
from dataclasses import dataclass

from ..base.files import Refused, read_regular
from ..base.ignore import IgnoreError, LeftOut, Rules, holds_token
from ..base.archive import (MAX_DEPTH, MAX_NAME, Checked, Entry, UploadError, fold, name_problem, raw_cap, read,
                            size_text, unpack)
from ..base.names import printable
from ..base.terms import (CONFIG_NAME, JOB_KINDS, MAX_FILE_BYTES, MAX_SUBMISSION_BYTES, MAX_SUBMISSION_FILES,
                          MAX_UPLOAD, MILESTONE_FILES, read_team_files, walk_folder)

__all__ = ["Checked", "Entry", "IgnoreError", "MAX_UPLOAD", "Packed", "UploadError", "add_entry", "caps", "check",
           "check_file", "config_text", "inflate", "name_left_out", "pack_development", "pack_folder", "pack_ranked", "preview",
           "size_text", "unpack"]


def caps(kind):
    """(bytes of file data, entries) an upload of ``kind`` may hold."""
    if kind == "ranked":
        return 2 * MAX_FILE_BYTES, 2
    return MAX_SUBMISSION_BYTES, MAX_SUBMISSION_FILES


# ---------------------------------------------------------------------------- packing (client)

def add_entry(tar, entry):
    """Add ``entry`` (an Entry) to the tarfile ``tar`` as ``archive.read`` takes it: a folder or a
    regular file of mode 755 or 644, no owner, no time."""
    info = tarfile.TarInfo(entry.name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    if entry.data is None:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    else:
        info.size, info.mode = len(entry.data), 0o755 if entry.executable else 0o644
        tar.addfile(info, io.BytesIO(entry.data))


def _tar(entries):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for entry in entries:
            add_entry(tar, entry)
    return gzip.compress(raw.getvalue(), compresslevel=6, mtime=0)


def pack_ranked(folder, milestone):
    """(upload bytes, [TeamFile]) of the milestone's team files in ``folder``; TeamError (one
    line) where one is missing, a link, not a regular file or too large; IgnoreError where the
    folder's .ece408ignore cannot be read or leaves one out, or one holds a token."""
    names = MILESTONE_FILES[milestone]
    Rules(folder).needed(names)                 # a milestone's file left out by .ece408ignore: said, not dropped
    files = read_team_files(folder, names)
    for name, data in files.files:
        if holds_token(data):
            raise IgnoreError(f"{name} holds a token of the service, and a token is never sent; take it out of the "
                              "file")
    return _tar([Entry(name, data) for name, data in files.files]), list(files.taken)


def name_left_out(parts, taken):
    """Why the entry at ``parts`` is not packed (the service would refuse its name), or None."""
    name = "/".join(parts)
    problem = name_problem(parts[-1])
    if problem:
        return problem if problem != "not UTF-8 text" else "its name is not UTF-8"
    if len(parts) > MAX_DEPTH:
        return f"{len(parts)} folders deep; the service takes at most {MAX_DEPTH}"
    size = len(name.encode("utf-8"))
    if size > MAX_NAME:
        return f"a name of {size} bytes; the service takes at most {MAX_NAME}"
    key = "/".join(fold(p) for p in parts)
    if key in taken:
        return (f"the same name as {printable(taken[key])} where case or Unicode normalisation is ignored "
                "(macOS, Windows)")
    taken[key] = name
    return None


@dataclass
class Packed:
    """A development upload: its bytes, its entries (in name order), one note per entry the service
    would refuse, and everything left out (``LeftOut``: the rules' and the refused ones)."""
    data: bytes
    entries: list
    notes: list
    left_out: LeftOut

    @property
    def files(self):
        return [e for e in self.entries if e.data is not None]


def pack_development(folder, max_bytes=MAX_SUBMISSION_BYTES, max_entries=MAX_SUBMISSION_FILES):
    """(upload bytes, entries, notes) of ``pack_folder``."""
    packed = pack_folder(folder, max_bytes, max_entries)
    return packed.data, packed.entries, packed.notes


def pack_folder(folder, max_bytes=MAX_SUBMISSION_BYTES, max_entries=MAX_SUBMISSION_FILES):
    """The Packed development upload of ``folder``: files and folders, less what the rules leave
    out (``base/ignore.py``). UploadError where the folder holds more than the caps or no
    rai_build.yml; IgnoreError where its .ece408ignore cannot be read or leaves rai_build.yml out."""
    root = str(folder)
    rules = Rules(root)
    rules.needed([CONFIG_NAME])
    entries, notes, taken, total, left = [], [], {}, 0, LeftOut()
    try:
        for found in walk_folder(root):
            name, mode = "/".join(found.parts), found.info.st_mode
            ignored = rules.left_out(found.parts, stat.S_ISDIR(mode), found.path)
            if ignored is not None:
                left.add(name, stat.S_ISDIR(mode), *ignored, path=found.path)
                found.descend = False
                continue
            why = name_left_out(found.parts, taken)
            if why is None and not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                why = (f"{'a symbolic link' if stat.S_ISLNK(mode) else 'not a file or a folder'} (the service "
                       "takes files and folders only)")
            if why is not None:
                notes.append(f"* Left out {printable(name)}: {why}")
                left.add(name, stat.S_ISDIR(mode), "refused", why, path=found.path)
                found.descend = False
                continue
            if stat.S_ISDIR(mode):
                entries.append(Entry(name))
            else:
                if total + found.info.st_size > max_bytes:
                    raise UploadError(f"the folder holds more than {max_bytes >> 20} MiB (at {printable(name)}); "
                                      "leave out data and builds")
                data = _read(found.path, name, max_bytes - total)
                if holds_token(data):
                    if name == CONFIG_NAME:
                        raise IgnoreError(f"{CONFIG_NAME} holds a token of the service, and a token is never sent; take "
                                          "it out of the file")
                    left.add(name, False, "token", "it holds a token of the service: never sent")
                    continue
                total += len(data)
                entries.append(Entry(name, data, bool(mode & 0o111)))
            if len(entries) > max_entries:
                raise UploadError(f"the folder holds more than {max_entries} files and folders; leave out what "
                                  "the build does not need (.ece408ignore)")
    except OSError as exc:
        raise UploadError(f"cannot read the folder {printable(str(exc.filename or root))}: "
                          f"{exc.strerror or exc}") from None
    if not any(e.name == CONFIG_NAME and e.data is not None for e in entries):
        raise UploadError(f"{CONFIG_NAME}: not found in {printable(root)}; every submission needs one "
                          "at its top level")
    entries.sort(key=lambda e: e.name)
    return Packed(_tar(entries), entries, notes, left)


def preview(folder, milestone=None):
    """``submit --dry-run``: the lines listing what an upload of ``folder`` would send (each file,
    its size), what it leaves out and why, and the counts; nothing is sent. Raises as packing does."""
    if milestone is not None:
        _, taken = pack_ranked(folder, milestone)
        lines = [f"{f.size:>10}  {f.name}" for f in taken]
        size = sum(f.size for f in taken)
        return lines + [f"* Dry run: a ranked {milestone} would send {len(taken)} file(s) ({size_text(size)}): "
                        f"{', '.join(f.name for f in taken)}, nothing else of the folder; nothing was sent"]
    packed = pack_folder(folder)
    lines = [f"{len(e.data):>10}  {printable(e.name)}" for e in packed.files]
    for name, is_dir, files, _, words in packed.left_out.items:
        inside = f" ({files} file{'' if files == 1 else 's'})" if is_dir else ""
        lines.append(f"{'left out':>10}  {printable(name)}{'/' if is_dir else ''}{inside}: {words}")
    size = sum(len(e.data) for e in packed.files)
    return lines + [f"* Dry run: a development run would send {len(packed.files)} file(s) ({size_text(size)}); "
                    f"{packed.left_out.line()}; nothing was sent"]


def _read(path, name, limit):
    """The bytes of the file at ``path`` (read once, no link followed); UploadError otherwise."""
    try:
        return read_regular(path, limit)
    except Refused as exc:
        raise UploadError(f"the folder's {printable(name)} cannot be taken: {exc}") from None
    except OSError as exc:
        raise UploadError(f"the folder's {printable(name)} cannot be read: {exc.strerror or exc}") from None


# ---------------------------------------------------------------------------- checking (server, worker)

def inflate(data, cap):
    """The gzip stream ``data`` (bytes, or a binary file read 1 MiB at a time: an upload kept on
    disk is never whole in memory as sent) decompressed, at most ``cap`` bytes; UploadError otherwise."""
    source = io.BytesIO(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
    piece = source.read(1 << 20)
    if piece[:2] != b"\x1f\x8b":
        raise UploadError("the upload is not a gzip-compressed tar (python -m ece408_op submit --server packs one)")
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out, size = [], 0
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
                piece = source.read(1 << 20)
                if not piece:
                    break
    except zlib.error as exc:
        raise UploadError(f"the upload is not valid gzip ({exc})") from None
    if not inflater.eof:
        raise UploadError("the upload ends before its gzip stream does (cut short?)")
    if inflater.unused_data or piece or source.read(1):
        raise UploadError("the upload has data after its gzip stream")
    return b"".join(out)


def check(data, kind, milestone=None, max_upload=MAX_UPLOAD):
    """The entries of the upload ``data`` of a ``kind`` run (see the module docstring): a
    Checked, or UploadError (one line) before anything is written anywhere."""
    return _check(io.BytesIO(data), len(data), kind, milestone, max_upload)


def check_file(path, kind, milestone=None, max_upload=MAX_UPLOAD):
    """``check`` of the upload kept in the file at ``path`` (the server's: received to disk), read
    as it is inflated."""
    with open(path, "rb") as f:
        return _check(f, os.fstat(f.fileno()).st_size, kind, milestone, max_upload)


def _check(source, size, kind, milestone, max_upload):
    if size > max_upload:
        raise UploadError(f"the upload is {size_text(size)}; this service takes at most {size_text(max_upload)}")
    if kind not in JOB_KINDS:
        raise UploadError(f"the job's kind is {printable(str(kind), 20)}, not ranked or development")
    if kind == "ranked" and milestone not in MILESTONE_FILES:
        raise UploadError(f"a ranked job names a milestone ({', '.join(MILESTONE_FILES)}), not "
                          f"{printable(str(milestone), 20)}")
    max_bytes, max_entries = caps(kind)
    checked = read(inflate(source, raw_cap(max_bytes, max_entries)), max_bytes, max_entries)
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
