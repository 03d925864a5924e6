"""The upload's tar archive: read by this module's own parser (tarfile never reads an upload),
checked entry by entry, and written back out entry by entry by ``unpack``.

``read`` takes exactly this, and refuses anything else in one line saying what and where:

* 512-byte headers with a right checksum and the ustar magic (POSIX ``ustar\\0`` ``00``, with
  its name prefix; or GNU's ``ustar  \\0``, whose extra fields, which tar readers read differently,
  must be empty); sizes and modes in octal digits (a base-256 number is refused, so no
  size is negative or larger than the field says); each entry's data whole, then the end: two
  zero blocks and nothing but zero bytes after them, at most MAX_TRAILER bytes in all.
* Entries: a regular file (type ``0`` or NUL) or a folder (``5``, no data, no link target).
  Before one of them, at most one GNU long-name entry (``L``: the name, one NUL at its end and
  none inside, at most MAX_NAME bytes) and at most one PAX extended header (``x``: well-formed
  records whose keys are among PAX_KEYS, which change neither the entry's name nor its size;
  at most MAX_PAX bytes). Everything else is refused: links (symbolic ``2``, hard ``1``),
  devices, FIFOs, contiguous (``7``) and sparse (``S``) files, GNU long link names (``K``),
  PAX global headers (``g``), PAX keys ``path``, ``linkpath``, ``size``, ``GNU.sparse.*`` and
  any other not listed, a long-name or PAX header that is not directly followed by its entry.
* Names: UTF-8, relative, parts neither empty nor ``.`` nor ``..``, a file's not ending in
  ``/``; at most MAX_NAME bytes in all, MAX_PART a part, MAX_DEPTH parts; no part a name Windows
  or macOS cannot store (``name_problem``: control characters, ``\\ : * ? " < > |``, a trailing
  space or dot, a device name such as ``CON`` or ``com1.txt``).
* One tree: no name twice (exactly, or after case folding and Unicode normalisation, NFC, NFD,
  NFKC: the same name on macOS and Windows), no file where another entry needs a folder (a
  file ``x`` beside ``x/y``, in either order); folders an entry implies count as entries.
* Within the caller's caps: entries (files and folders), bytes of file data, and header bytes
  (headers, long names, PAX records: META_PER_ENTRY a cap's entry on average).

``unpack`` writes exactly the entries ``read`` returned into an empty folder, each folder and
file made by this code (``O_EXCL``, ``O_NOFOLLOW``, relative to its parent folder's
descriptor; by path inside that new folder where the system has no such calls: Windows), so that
nothing outside the folder is touched; on an archive ``read`` took, only the system (a full disk)
can make it fail.
"""
import hashlib
import os
import unicodedata
from dataclasses import dataclass, field

from ..errors import Ece408Error
from .names import printable

BLOCK = 512
MAX_DEPTH = 32                         # parts of a name: a/b/c is 3
MAX_NAME = 1024                        # bytes of a whole name (UTF-8)
MAX_PART = 255                         # bytes of one part: what Linux, macOS and Windows all store
MAX_PAX = 1024                         # bytes of one PAX extended header's records
META_PER_ENTRY = 2048                  # header bytes an entry may take, on average over the cap's entries
MAX_TRAILER = 20480                    # the end marker and the zero padding after it
PAX_KEYS = frozenset({"mtime", "atime", "ctime", "uid", "gid", "uname", "gname", "comment"})
WINDOWS_CHARACTERS = '\\:*?"<>|'       # ':' is macOS's separator too
DEVICE_NAMES = frozenset({"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
                         | {f"{d}{i}" for d in ("COM", "LPT") for i in (*"0123456789", "\u00b9", "\u00b2", "\u00b3")})
POSIX_MAGIC, GNU_MAGIC = b"ustar\x0000", b"ustar  \x00"
ZERO = bytes(BLOCK)
DIR_FD = os.open in os.supports_dir_fd and os.mkdir in os.supports_dir_fd    # False on Windows
KINDS = {b"1": "a hard link", b"2": "a symbolic link", b"3": "a character device", b"4": "a block device",
         b"6": "a FIFO", b"7": "a contiguous file", b"S": "a sparse file", b"K": "a GNU long link name",
         b"g": "a PAX global header", b"V": "a volume label", b"M": "a multi-volume continuation",
         b"N": "an old GNU long name", b"D": "a GNU dump folder"}


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


def metadata_cap(max_entries):
    """Header bytes an archive of at most ``max_entries`` entries may hold."""
    return max_entries * META_PER_ENTRY


def raw_cap(max_bytes, max_entries):
    """The largest tar archive ``read`` can take under these caps: file data, its padding to
    whole blocks, headers, the end (what the gzip stream may inflate to)."""
    return max_bytes + max_entries * BLOCK + metadata_cap(max_entries) + MAX_TRAILER


# ---------------------------------------------------------------------------- names

def fold(part):
    """``part`` as a file system that ignores case and Unicode normalisation compares it
    (compatibility caseless matching: NFD, case fold, NFKC, case fold, NFKC)."""
    text = unicodedata.normalize("NFKC", unicodedata.normalize("NFD", part).casefold()).casefold()
    return unicodedata.normalize("NFKC", text)


def name_problem(part):
    """Why one part of a name (no ``/`` in it) is refused, in a few words; None where it is taken."""
    if part in ("", ".", ".."):
        return "an empty, . or .. part"
    size = len(part.encode("utf-8", "surrogatepass"))
    if size > MAX_PART:
        return f"a part of {size} bytes; at most {MAX_PART}"
    if any(0xD800 <= ord(c) <= 0xDFFF for c in part):
        return "not UTF-8 text"
    bad = next((c for c in part if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        return f"the control character {printable(bad)}, which Windows cannot store"
    bad = next((c for c in part if c in WINDOWS_CHARACTERS), None)
    if bad is not None:
        return f"the character {bad}, which Windows{' and macOS' if bad == ':' else ''} cannot store"
    if part[-1] in " .":
        return "a part that ends in a space or a dot, which Windows drops"
    if part.split(".")[0].rstrip(" ").upper() in DEVICE_NAMES:
        return f"{printable(part, 40)}, a device name on Windows"
    return None


def name_of(raw, is_dir):
    """The checked name of an entry whose name field reads ``raw`` (bytes); UploadError otherwise."""
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UploadError(f"the upload holds the name {printable(raw.decode('utf-8', 'surrogateescape'), 80)}, "
                          "which is not UTF-8 text") from None
    shown = printable(name, 80)
    if is_dir and name.endswith("/"):
        name = name[:-1]
    elif name.endswith("/"):
        raise UploadError(f"the upload holds the file {shown}, whose name ends in /")
    if not name:
        raise UploadError("the upload holds an entry with an empty name")
    size = len(name.encode("utf-8"))
    if size > MAX_NAME:
        raise UploadError(f"the upload holds a name of {size} bytes ({shown}); at most {MAX_NAME}")
    if name.startswith("/"):
        raise UploadError(f"the upload holds the absolute path {shown}; only paths inside the folder are taken")
    parts = name.split("/")
    if ".." in parts:
        raise UploadError(f"the upload holds the path {shown}, which climbs out of the folder (..)")
    if "" in parts or "." in parts:
        raise UploadError(f"the upload holds the path {shown}, which is not a plain relative path")
    if len(parts) > MAX_DEPTH:
        raise UploadError(f"the upload holds {shown}, {len(parts)} folders deep; at most {MAX_DEPTH}")
    for part in parts:
        problem = name_problem(part)
        if problem:
            raise UploadError(f"the upload holds the name {shown}: {problem}")
    return name


class Tree:
    """The names taken so far, by their folded form: which is a file, which a folder (named, or
    implied by an entry under it), so that every conflict is refused as it comes."""

    def __init__(self, max_entries):
        self.max_entries = max_entries
        self.paths = {}               # folded path -> [name, is folder, named itself, the entry that implied it]

    def add(self, name, is_dir):
        parts = name.split("/")
        folded = [fold(p) for p in parts]
        for depth in range(1, len(parts) + 1):
            key, exact = "/".join(folded[:depth]), "/".join(parts[:depth])
            last = depth == len(parts)
            seen = self.paths.get(key)
            if seen is None:
                self.paths[key] = [exact, is_dir or not last, last, name]
                if len(self.paths) > self.max_entries:
                    raise UploadError(f"the upload holds more than {self.max_entries} files and folders "
                                      f"(at {printable(name, 80)})")
                continue
            known, known_dir, named, implied_by = seen
            if known != exact:
                first, second = _apart(known, exact)
                raise UploadError(f"the upload names {first} and {second}, one name where case or Unicode "
                                  "normalisation is ignored (macOS, Windows)")
            if not known_dir:
                if last:
                    raise UploadError(f"the upload names {printable(name, 80)} twice")
                raise UploadError(f"the upload puts {printable(name, 80)} under a file ({printable(known, 80)})")
            if last and not is_dir:
                if named:
                    raise UploadError(f"the upload names {printable(name, 80)} twice (a folder, then a file)")
                raise UploadError(f"the upload puts {printable(implied_by, 80)} under a file ({printable(name, 80)})")
            if last:
                if named:
                    raise UploadError(f"the upload names {printable(name, 80)} twice")
                seen[2] = True


def _apart(first, second):
    """Two names as shown, told apart where they look alike (NFC and NFD spellings: escaped)."""
    if unicodedata.normalize("NFC", first) == unicodedata.normalize("NFC", second):
        return ascii(first)[1:-1], ascii(second)[1:-1]
    return printable(first, 80), printable(second, 80)


# ---------------------------------------------------------------------------- headers

def _octal(field_bytes, what, offset):
    if field_bytes[:1] and field_bytes[0] & 0x80:
        raise UploadError(f"the upload's tar header at byte {offset} gives its {what} as a base-256 number; "
                          "only octal digits are taken")
    text = field_bytes.split(b"\0", 1)[0].strip(b" ")
    if not text:
        return 0
    if not all(0x30 <= c <= 0x37 for c in text):
        raise UploadError(f"the upload's tar header at byte {offset} is damaged (its {what} is not octal digits)")
    return int(text, 8)


def _field(block, start, end):
    return block[start:end].split(b"\0", 1)[0]


@dataclass
class Header:
    offset: int
    type: bytes
    name: bytes
    mode: int
    size: int
    linkname: bytes


def _header(block, offset):
    magic = block[257:265]
    if magic not in (POSIX_MAGIC, GNU_MAGIC):
        raise UploadError(f"the upload's tar archive has a block at byte {offset} that is not a ustar header "
                          "(python -m ece408_op submit --server packs one)")
    expected = _octal(block[148:156], "checksum", offset)
    unsigned = sum(block[:148]) + 8 * 0x20 + sum(block[156:])
    signed = unsigned - 256 * sum(1 for b in block[:148] + block[156:] if b >= 0x80)
    if expected not in (unsigned, signed):
        raise UploadError(f"the upload's tar header at byte {offset} is damaged (its checksum is wrong)")
    name = _field(block, 0, 100)
    if magic == POSIX_MAGIC and block[345]:
        name = _field(block, 345, 500) + b"/" + name
    elif magic == GNU_MAGIC and any(block[345:500]):
        raise UploadError(f"the upload's GNU tar header at byte {offset} uses its extra fields (times, sparse map, "
                          "multi-volume offset), which tar readers take in different ways")
    return Header(offset, block[156:157], name, _octal(block[100:108], "mode", offset),
                  _octal(block[124:136], "size", offset), _field(block, 157, 257))


def _pax(data, offset):
    """Check a PAX extended header's records (``LEN key=value\\n``): only PAX_KEYS."""
    at = 0
    while at < len(data):
        space = data.find(b" ", at, at + 12)
        digits = data[at:space] if space > at else b""
        if not digits.isdigit():
            raise UploadError(f"the upload's PAX header at byte {offset} is damaged (a record without its length)")
        length = int(digits)
        record = data[at:at + length]
        if length <= space - at + 1 or len(record) != length or not record.endswith(b"\n") or b"=" not in record:
            raise UploadError(f"the upload's PAX header at byte {offset} is damaged (a record of the wrong length)")
        key = record[space - at + 1:].split(b"=", 1)[0].decode("utf-8", "replace")
        if key not in PAX_KEYS:
            raise UploadError(f"the upload's PAX header at byte {offset} sets {printable(key, 40)}, which the service "
                              f"does not take (only {', '.join(sorted(PAX_KEYS))}: nothing that renames or resizes "
                              "an entry)")
        at += length


# ---------------------------------------------------------------------------- reading

def read(raw, max_bytes, max_entries):
    """The entries of the tar archive ``raw`` (see the module docstring): a Checked, or
    UploadError with the first problem."""
    if len(raw) % BLOCK:
        raise UploadError("the upload's tar archive is not whole 512-byte blocks (cut short?)")
    checked, tree = Checked(), Tree(max_entries)
    offset, meta, long_name, pax_at = 0, 0, None, None
    while True:
        if offset + BLOCK > len(raw):
            raise UploadError("the upload's tar archive ends without its end marker (cut short?)")
        block = raw[offset:offset + BLOCK]
        if block == ZERO:
            if long_name is not None or pax_at is not None:
                raise UploadError(f"the upload's tar archive ends after a {'long-name' if long_name else 'PAX'} "
                                  f"header at byte {offset - BLOCK}, before the entry it belongs to")
            _end(raw, offset)
            return checked
        header = _header(block, offset)
        if header.type not in (b"0", b"\0", b"5", b"L", b"x"):
            kind = KINDS.get(header.type, f"an entry of type {printable(header.type.decode('latin-1'))}")
            shown = printable((long_name or header.name).decode("utf-8", "replace"), 80)
            raise UploadError(f"the upload holds {shown}, {kind}; only files and folders are taken")
        start = offset + BLOCK
        end = start + -(-header.size // BLOCK) * BLOCK
        if header.type in (b"0", b"\0"):
            if header.size > max_bytes - checked.total:
                raise UploadError(f"the upload's files hold more than {size_text(max_bytes)} "
                                  f"(at {printable(header.name.decode('utf-8', 'replace'), 80)})")
        elif header.size > MAX_NAME + MAX_PAX:
            raise UploadError(f"the upload's tar header at byte {offset} gives {header.size} bytes of data to an "
                              "entry that has none or little")
        if end > len(raw):
            raise UploadError(f"the upload's tar archive is cut short (the entry at byte {offset} needs "
                              f"{header.size} bytes of data)")
        meta += BLOCK
        data = raw[start:start + header.size]
        if header.type == b"L":
            if long_name is not None:
                raise UploadError(f"the upload has two GNU long-name headers in a row (byte {offset})")
            if header.size > MAX_NAME + 1:
                raise UploadError(f"the upload's GNU long-name header at byte {offset} holds a name of "
                                  f"{header.size - 1} bytes; at most {MAX_NAME}")
            if header.size < 2 or data[-1] != 0 or 0 in data[:-1]:
                raise UploadError(f"the upload's GNU long-name header at byte {offset} is not a name ended by one NUL")
            long_name, meta = data[:-1], meta + end - start
        elif header.type == b"x":
            if pax_at is not None:
                raise UploadError(f"the upload has two PAX headers in a row (byte {offset})")
            if header.size > MAX_PAX:
                raise UploadError(f"the upload's PAX header at byte {offset} holds {header.size} bytes; at most "
                                  f"{MAX_PAX}")
            _pax(data, offset)
            pax_at, meta = offset, meta + end - start
        else:
            _entry(checked, tree, header, long_name if long_name is not None else header.name, data)
            long_name = pax_at = None
        if meta > metadata_cap(max_entries):
            raise UploadError(f"the upload's tar headers hold more than {metadata_cap(max_entries)} bytes "
                              f"(at byte {offset})")
        offset = end


def _entry(checked, tree, header, raw_name, data):
    is_dir = header.type == b"5"
    name = name_of(raw_name, is_dir)
    if header.linkname:
        raise UploadError(f"the upload's {printable(name, 80)} names a link target; only files and folders are taken")
    if is_dir and header.size:
        raise UploadError(f"the upload's folder {printable(name, 80)} carries {header.size} bytes of data")
    tree.add(name, is_dir)
    if is_dir:
        checked.entries.append(Entry(name))
    else:
        checked.total += len(data)
        checked.entries.append(Entry(name, bytes(data), bool(header.mode & 0o111)))


def _end(raw, offset):
    rest = raw[offset:]
    if len(rest) < 2 * BLOCK:
        raise UploadError("the upload's tar archive ends without its end marker (two zero blocks; cut short?)")
    if rest.count(0) != len(rest):
        at = offset + next(i for i, b in enumerate(rest) if b)
        raise UploadError(f"the upload has data after its tar archive's end (byte {at})")
    if len(rest) > MAX_TRAILER:
        raise UploadError(f"the upload has {len(rest)} bytes of zeros after its tar archive's last entry; at most "
                          f"{MAX_TRAILER}")


def size_text(n):
    """``51 KiB``, ``16.0 MiB``."""
    return f"{n / 1024:.0f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


# ---------------------------------------------------------------------------- unpacking

def unpack(checked, dest):
    """Write the checked entries into the empty folder ``dest`` (see the module docstring)."""
    dest = os.fspath(dest)
    if os.listdir(dest):
        raise UploadError(f"{dest} is not empty")
    tree = {}                                       # folder parts -> {name: Entry or None (a folder)}
    for entry in checked.entries:
        parts = tuple(entry.name.split("/"))
        for depth in range(len(parts)):
            tree.setdefault(parts[:depth], {}).setdefault(parts[depth], None)
        if entry.data is not None:
            tree[parts[:-1]][parts[-1]] = entry
        else:
            tree.setdefault(parts, {})
    if not DIR_FD:
        _write_by_path(tree, (), dest)
        return
    root = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _write_folder(tree, (), root)
    finally:
        os.close(root)


def _write_by_path(tree, parts, folder):
    """``_write_folder`` where the system opens nothing relative to a folder's descriptor (Windows:
    ``jobs download`` on a laptop): each folder and file made by its path, ``O_EXCL``, inside the
    empty folder ``unpack`` was given, where nothing but what this code makes can be in the way."""
    for name, entry in tree.get(parts, {}).items():
        path = os.path.join(folder, name)
        if entry is None:
            os.mkdir(path, 0o755)
            _write_by_path(tree, parts + (name,), path)
            continue
        mode = 0o755 if entry.executable else 0o644
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode)
        with os.fdopen(out, "wb") as f:
            f.write(entry.data)
        os.chmod(path, mode)


def _write_folder(tree, parts, fd):
    for name, entry in tree.get(parts, {}).items():
        if entry is None:
            os.mkdir(name, 0o755, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            try:
                os.fchmod(child, 0o755)
                _write_folder(tree, parts + (name,), child)
            finally:
                os.close(child)
            continue
        mode = 0o755 if entry.executable else 0o644
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
        with os.fdopen(out, "wb") as f:
            f.write(entry.data)
            os.fchmod(f.fileno(), mode)

