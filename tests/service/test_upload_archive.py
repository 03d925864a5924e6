"""The upload's archive (base/archive.py, service/upload.py), without a server: every hostile
archive refused in one line saying what and where, what honest writers produce taken, the
unpack writing exactly what the check took (a property test over random and damaged archives,
tarfile as an independent reader), and the client's packing leaving out what the service would
refuse, on Linux and with Windows' path module in place of Linux's."""
import gzip
import io
import json
import os
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from suitekit import ROOT, python_command
from ece408_op.base import archive
from ece408_op.service import upload as uploads

CONFIG = b"rai:\n  version: 0.2\n  image: x\ncommands:\n  build:\n    - echo hi\n"
POSIX, GNU = b"ustar\x0000", b"ustar  \x00"


# ---------------------------------------------------------------------------- a tar writer of our own

def header(name, kind=b"0", size=0, mode=0o644, magic=POSIX, linkname=b"", prefix=b"", size_field=None,
           checksum=None, extra=b"", mode_field=None):
    """One 512-byte header, any field as given (tarfile cannot write most hostile ones)."""
    block = bytearray(512)
    block[0:100] = name[:100].ljust(100, b"\0")
    block[100:108] = mode_field if mode_field is not None else b"%07o\0" % mode
    block[108:124] = b"0000000\x000000000\x00"
    block[124:136] = size_field if size_field is not None else b"%011o\0" % size
    block[136:148] = b"00000000000\0"
    block[156:157] = kind
    block[157:257] = linkname.ljust(100, b"\0")
    block[257:265] = magic
    block[345:500] = (prefix or extra).ljust(155, b"\0")
    block[148:156] = b" " * 8
    block[148:156] = checksum if checksum is not None else b"%06o\0 " % sum(block)
    return bytes(block)


def entry(name, data=b"x", kind=b"0", **fields):
    """One member; a name longer than the header's 100 bytes goes in a GNU long-name entry before it."""
    name = name.encode() if isinstance(name, str) else name
    size = fields.pop("size", len(data))
    before = long_name(name + b"\0") if len(name) > 100 else b""
    return before + header(name, kind, size, **fields) + data + bytes(-len(data) % 512)


def pax_record(key, value):
    text = f"{key}={value}".encode()
    n = len(text) + 2
    while len(str(n)) + 1 + len(text) + 1 != n:
        n = len(str(n)) + 1 + len(text) + 1
    return b"%d %s\n" % (n, text)


def pax_header(*records, kind=b"x"):
    return entry("././@PaxHeader", b"".join(pax_record(k, v) for k, v in records), kind)


def long_name(raw):
    return entry("././@LongLink", raw, b"L", magic=GNU)


def tar(*members, end=bytes(1024)):
    return b"".join(members) + end


def gz(raw):
    return gzip.compress(raw, mtime=0)


def config():
    return entry("rai_build.yml", CONFIG)


def refused(raw, message, kind="development", milestone=None):
    with pytest.raises(uploads.UploadError) as info:
        uploads.check(gz(raw), kind, milestone)
    text = str(info.value)
    assert message in text and "\n" not in text, text
    return text


# ---------------------------------------------------------------------------- what is refused

HOSTILE = {
    # path conflicts
    "a file after a folder it needs": (tar(config(), entry("x/y"), entry("x")), "puts x/y under a file (x)"),
    "a file under a file": (tar(config(), entry("x"), entry("x/y")), "puts x/y under a file (x)"),
    "a folder named twice": (tar(config(), entry("d/", b"", b"5"), entry("d/", b"", b"5")), "names d twice"),
    "a file named twice": (tar(config(), entry("a"), entry("a")), "names a twice"),
    "a folder, then a file": (tar(config(), entry("d/", b"", b"5"), entry("d")), "names d twice (a folder, then a file)"),
    "a file, then a folder": (tar(config(), entry("d"), entry("d/", b"", b"5")), "names d twice"),
    "case": (tar(config(), entry("Makefile"), entry("makefile")), "names Makefile and makefile, one name where case"),
    "case of a folder": (tar(config(), entry("Src/a"), entry("src/b")), "names Src and src, one name"),
    "NFC and NFD": (tar(config(), entry("\u00e9"), entry("e\u0301")), "names \\xe9 and e\\u0301, one name"),
    "NFKC": (tar(config(), entry("\ufb01le"), entry("file")), "one name where case or Unicode normalisation"),
    "German sharp s": (tar(config(), entry("stra\u00dfe"), entry("STRASSE")), "one name where case"),
    # what is not a file or a folder
    "symbolic link": (tar(config(), entry("l", b"", b"2", linkname=b"/etc/shadow")), "l, a symbolic link"),
    "hard link": (tar(config(), entry("h", b"", b"1", linkname=b"rai_build.yml")), "h, a hard link"),
    "character device": (tar(config(), entry("c", b"", b"3")), "c, a character device"),
    "block device": (tar(config(), entry("b", b"", b"4")), "b, a block device"),
    "FIFO": (tar(config(), entry("f", b"", b"6")), "f, a FIFO"),
    "contiguous file": (tar(config(), entry("c", b"x", b"7")), "c, a contiguous file"),
    "sparse file": (tar(config(), entry("s", b"", b"S", magic=GNU)), "s, a sparse file"),
    "GNU long link": (tar(config(), entry("././@LongLink", b"target\0", b"K", magic=GNU), entry("l", b"", b"2")),
                      "a GNU long link name"),
    "a regular file with a link target": (tar(config(), entry("r", b"x", linkname=b"/etc/passwd")),
                                          "names a link target"),
    "a folder with data": (tar(config(), entry("d/", b"data", b"5")), "folder d carries 4 bytes"),
    "unknown type": (tar(config(), entry("q", b"", b"Z")), "an entry of type Z"),
    # PAX
    "PAX global header": (tar(config(), pax_header(("comment", "x"), kind=b"g"), entry("a")), "a PAX global header"),
    "PAX path": (tar(config(), pax_header(("path", "../../evil")), entry("a")), "sets path, which the service"),
    "PAX linkpath": (tar(config(), pax_header(("linkpath", "/etc")), entry("a")), "sets linkpath"),
    "PAX size": (tar(config(), pax_header(("size", "999999")), entry("a")), "sets size"),
    "PAX GNU.sparse.map": (tar(config(), pax_header(("GNU.sparse.map", "0,1")), entry("a")), "sets GNU.sparse.map"),
    "PAX GNU.sparse.size": (tar(config(), pax_header(("GNU.sparse.size", "9")), entry("a")), "sets GNU.sparse.size"),
    "PAX hdrcharset": (tar(config(), pax_header(("hdrcharset", "BINARY")), entry("a")), "sets hdrcharset"),
    "PAX record of the wrong length": (tar(config(), entry("././@PaxHeader", b"99 mtime=1\n", b"x"), entry("a")),
                                       "a record of the wrong length"),
    "PAX record without a length": (tar(config(), entry("././@PaxHeader", b"mtime=1\n", b"x"), entry("a")),
                                    "a record without its length"),
    "two PAX headers": (tar(config(), pax_header(("mtime", "1")), pax_header(("mtime", "2")), entry("a")),
                        "two PAX headers in a row"),
    "PAX header at the end": (tar(config(), pax_header(("mtime", "1"))), "ends after a PAX header"),
    "PAX header too large": (tar(config(), pax_header(("comment", "x" * 2000)), entry("a")),
                             f"holds 2014 bytes; at most {archive.MAX_PAX}"),
    # GNU long names used oddly
    "two long names": (tar(config(), long_name(b"a\0"), long_name(b"b\0"), entry("c")), "two GNU long-name headers"),
    "long name at the end": (tar(config(), long_name(b"abc\0")), "ends after a long-name header"),
    "long name without its NUL": (tar(config(), long_name(b"abc"), entry("x")), "ended by one NUL"),
    "long name with a NUL inside": (tar(config(), long_name(b"a\0b\0"), entry("x")), "ended by one NUL"),
    "long name too long": (tar(config(), long_name(b"a" * 2000 + b"\0"), entry("x")), "a name of 2000 bytes"),
    "long name before a link": (tar(config(), long_name(b"innocent\0"), entry("x", b"", b"2", linkname=b"/")),
                                "innocent, a symbolic link"),
    "GNU header with its extra fields": (tar(config(), entry("a", magic=GNU, extra=b"12345")), "extra fields"),
    # sizes and numbers
    "base-256 size": (tar(config(), entry("a", size_field=b"\x80" + bytes(10) + b"\x01")), "base-256 number"),
    "negative size": (tar(config(), entry("a", size_field=b"\xff" * 12)), "base-256 number"),
    "huge size": (tar(config(), entry("a", size=0o77777777777)), "files hold more than 64.0 MiB"),
    "size not octal": (tar(config(), entry("a", size_field=b"0000000009x\0")), "its size is not octal digits"),
    "mode not octal": (tar(config(), header(b"a", mode_field=b"0000z44\0")), "its mode is not octal digits"),
    "checksum wrong": (tar(config(), entry("a", checksum=b"000000\0 ")), "its checksum is wrong"),
    "not ustar": (tar(config(), entry("a", magic=b"\0" * 8)), "not a ustar header"),
    # truncation and what follows the end
    "cut in the data": (tar(config(), entry("a", b"y" * 1000))[:-600], "cut short"),
    "cut in a header": (tar(config())[:-1024] + header(b"a")[:300], "not whole 512-byte blocks"),
    "no end marker": (tar(config(), end=b""), "ends without its end marker"),
    "half an end marker": (tar(config(), end=bytes(512)), "ends without its end marker"),
    "an entry after the end": (tar(config(), end=bytes(1024) + entry("hidden")), "data after its tar archive's end"),
    "an entry after one zero block": (tar(config(), end=bytes(512) + entry("hidden") + bytes(1024)),
                                      "data after its tar archive's end"),
    "too much padding": (tar(config(), end=bytes(40960)), "bytes of zeros after its tar archive's last entry"),
    # names
    "absolute": (tar(config(), entry("/etc/cron.d/evil")), "the absolute path /etc/cron.d/evil"),
    "dot dot": (tar(config(), entry("a/../../evil")), "climbs out of the folder (..)"),
    "dot": (tar(config(), entry("./x")), "not a plain relative path"),
    "empty part": (tar(config(), entry("a//b")), "not a plain relative path"),
    "empty name": (tar(config(), entry("")), "an entry with an empty name"),
    "a file named like a folder": (tar(config(), entry("a/")), "the file a/, whose name ends in /"),
    "not UTF-8": (tar(config(), entry(b"bad\xff")), "the name bad\\xff, which is not UTF-8 text"),
    "control character": (tar(config(), entry("a\x1b[31m")), "the control character \\x1b"),
    "newline": (tar(config(), entry("a\nb")), "the control character \\x0a"),
    "backslash": (tar(config(), entry("a\\b")), "the character \\, which Windows cannot store"),
    "colon": (tar(config(), entry("a:b")), "the character :, which Windows and macOS cannot store"),
    "star": (tar(config(), entry("a*")), "the character *"),
    "trailing dot": (tar(config(), entry("src./a")), "ends in a space or a dot"),
    "trailing space": (tar(config(), entry("a ")), "ends in a space or a dot"),
    "device name": (tar(config(), entry("include/aux.h")), "aux.h, a device name on Windows"),
    "COM1": (tar(config(), entry("COM1")), "a device name on Windows"),
    "too deep": (tar(config(), entry("/".join(["d"] * 33))), "33 folders deep; at most 32"),
    "part too long": (tar(config(), long_name(("p" * 256).encode() + b"\0"), entry("x")), "a part of 256 bytes"),
    "name too long": (tar(config(), long_name(("p" * 200 + "/").encode() * 6 + b"q\0"), entry("x")),
                      f"at most {archive.MAX_NAME}"),
    # the development upload's contents
    "no rai_build.yml": (tar(entry("a")), "rai_build.yml: not found at the top of the upload"),
    "rai_build.yml a folder": (tar(entry("rai_build.yml/", b"", b"5")), "rai_build.yml: not found"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archive_refused_in_one_line(case):
    raw, message = HOSTILE[case]
    refused(raw, message)


def test_the_name_too_long_case_is_too_long():
    # 5 parts of 200 bytes, their slashes and one more: over MAX_NAME
    name = ("p" * 200 + "/") * 6 + "q"
    assert len(name.encode()) > archive.MAX_NAME
    refused(tar(config(), long_name(name.encode() + b"\0"), entry("x")), f"a name of {len(name)} bytes")


@pytest.mark.slow                                   # measured 2 s (loaded machine)
def test_counts_and_caps():
    refused(tar(config(), *[entry(f"f{i}") for i in range(10000)]), "more than 10000 files and folders")
    deep = [entry("/".join(f"d{i}" for i in range(j + 1)) + f"/f{j}") for j in range(0, 30)]
    assert uploads.check(gz(tar(config(), *deep)), "development")          # implied folders are entries too
    refused(tar(config(), *[entry("/".join(["d"] * 30) + f"/f{j}") for j in range(9971)]),
            "more than 10000 files and folders")
    refused(tar(entry("new-forward.py"), entry("evil.pth")), "holds exactly new-forward.py (files)", "ranked", "m2")
    refused(tar(entry("new-forward.py", b"x" * (2 << 20) + b"y")), "files hold more than 2.0 MiB", "ranked", "m2")
    refused(tar(config()), "the job's kind is weird", "weird")
    refused(tar(entry("new-forward.py")), "a ranked job names a milestone (m2, m3, final), not m9", "ranked", "m9")
    heavy = [long_name(b"n" * 250 + b"\0") + pax_header(("comment", "c" * 900)) + entry(f"f{i}") for i in range(2)]
    refused(tar(*heavy), "tar headers hold more than 4096 bytes (at byte 4608)", "ranked", "m2")


def test_what_honest_writers_produce_is_taken(tmp_path):
    long = "src/" + "/".join(["a" * 120] * 3) + "/kernel.cu"
    for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT):
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=fmt) as t:
            for name, data in (("rai_build.yml", CONFIG), ("src/", None), ("src/main.cu", b"int main(){}"),
                               ("run.sh", b"#!/bin/sh\n")):
                info = tarfile.TarInfo(name)
                if data is None:
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                else:
                    info.size, info.mode = len(data), 0o755 if name.endswith(".sh") else 0o644
                t.addfile(info, io.BytesIO(data) if data is not None else None)
            if fmt == tarfile.GNU_FORMAT:
                info = tarfile.TarInfo(long)
                info.size = 3
                t.addfile(info, io.BytesIO(b"abc"))
        checked = uploads.check(gz(raw.getvalue()), "development")
        names = {e.name: e for e in checked.entries}
        assert names["run.sh"].executable and not names["src/main.cu"].executable
        assert names["src"].data is None and (fmt != tarfile.GNU_FORMAT or names[long].data == b"abc")
    accepted = tar(pax_header(("mtime", "1.5"), ("uname", "me")), config(), entry("d/f", b"later"),
                   entry("d/", b"", b"5"), entry("\u00e9t\u00e9.txt", b"summer"), end=bytes(10240))
    checked = uploads.check(gz(accepted), "development")
    dest = tmp_path / "dest"
    dest.mkdir()
    uploads.unpack(checked, dest)
    assert (dest / "d" / "f").read_bytes() == b"later" and (dest / "\u00e9t\u00e9.txt").read_bytes() == b"summer"


def test_the_clients_own_archives_are_taken(tmp_path):
    team = tmp_path / "team"
    deep = team.joinpath(*["n" * 90] * 6)
    deep.mkdir(parents=True)
    (deep / "kernel.cu").write_text("// deep")
    (team / "rai_build.yml").write_bytes(CONFIG)
    (team / "caf\u00e9.txt").write_text("ok")
    data, entries, notes = uploads.pack_development(team)
    assert notes == []
    checked = uploads.check(data, "development")
    assert [e.name for e in checked.entries] == [e.name for e in entries]


# ---------------------------------------------------------------------------- the property: refused, or unpacked exactly

GOOD_PARTS = ["a", "b", "c", "src", "k.cu", "\u00e9t\u00e9", "p" * 120]
ODD_PARTS = ["A", "e\u0301t\u00e9", "\ufb01", "fi", "..", ".", "", "con", "a:b", "a\\b", "x ", "\x01", "q" * 256]
KIND_CODES = [tarfile.REGTYPE] * 6 + [tarfile.DIRTYPE] * 3 + [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE,
                                                             tarfile.CONTTYPE, tarfile.CHRTYPE]
PAX_HEADERS = [None] * 8 + [{"mtime": "1"}, {"comment": "\u00e9"}, {"path": "x"}, {"GNU.sparse.map": "0,1"},
                            {"size": "3"}]

parts = st.integers(0, 9).flatmap(lambda i: st.sampled_from(ODD_PARTS if i == 5 else GOOD_PARTS))
members = st.tuples(st.lists(parts, min_size=1, max_size=4).map("/".join), st.sampled_from(KIND_CODES),
                    st.binary(max_size=700), st.booleans(), st.sampled_from(PAX_HEADERS))
damage = st.integers(0, 3).flatmap(lambda i: st.none() if i != 2 else st.one_of(
    st.tuples(st.just("cut"), st.integers(0, 1 << 16)),
    st.tuples(st.just("byte"), st.integers(0, 1 << 16), st.integers(0, 255)),
    st.tuples(st.just("append"), st.binary(min_size=1, max_size=1024))))


def build(items, fmt, with_config):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=fmt) as t:
        if with_config:
            info = tarfile.TarInfo("rai_build.yml")
            info.size = len(CONFIG)
            t.addfile(info, io.BytesIO(CONFIG))
        for name, kind, data, executable, headers in items:
            info = tarfile.TarInfo(name)
            info.type, info.mode = kind, 0o755 if executable else 0o644
            if kind == tarfile.SYMTYPE or kind == tarfile.LNKTYPE:
                info.linkname = "rai_build.yml"
            if headers:
                info.pax_headers = dict(headers)
            regular = kind in (tarfile.REGTYPE, tarfile.CONTTYPE)
            info.size = len(data) if regular else 0
            t.addfile(info, io.BytesIO(data) if regular else None)
    return raw.getvalue()


def damaged(raw, how):
    if how is None:
        return raw
    if how[0] == "cut":
        return raw[:how[1] % (len(raw) + 1)]
    if how[0] == "byte":
        at = how[1] % len(raw)
        return raw[:at] + bytes([how[2]]) + raw[at + 1:]
    return raw + how[1]


def tree_of(folder):
    files, folders = {}, set()
    for path in sorted(Path(folder).rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink() or not (path.is_dir() or path.is_file()):
            files[rel] = "not a file or a folder"
        elif path.is_dir():
            folders.add(rel)
        else:
            files[rel] = (path.read_bytes(), bool(path.stat().st_mode & 0o111))
    return files, folders


def refused_or_unpacked_exactly(raw):
    """Check ``raw`` (a tar) as an upload: refused in one line (its reason returned), or unpacked
    into an empty folder exactly as checked, nothing beside the folder touched, and the files
    those tarfile reads (None returned)."""
    try:
        checked = uploads.check(gz(raw), "development")
    except uploads.UploadError as exc:
        assert "\n" not in str(exc) and str(exc)
        return str(exc)
    with tempfile.TemporaryDirectory() as parent:
        dest = Path(parent) / "dest"
        dest.mkdir()
        (Path(parent) / "beside").write_bytes(b"untouched")
        uploads.unpack(checked, dest)
        assert sorted(os.listdir(parent)) == ["beside", "dest"]
        assert (Path(parent) / "beside").read_bytes() == b"untouched"
        files, folders = tree_of(dest)
    wanted_files = {e.name: (e.data, e.executable) for e in checked.entries if e.data is not None}
    wanted_folders = {e.name for e in checked.entries if e.data is None}
    wanted_folders |= {"/".join(e.name.split("/")[:i]) for e in checked.entries for i in range(1, e.name.count("/") + 1)}
    assert files == wanted_files and folders == wanted_folders
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as t:          # an independent reader agrees
        seen = {m.name: (t.extractfile(m).read(), bool(m.mode & 0o111)) for m in t.getmembers() if m.isreg()}
    assert seen == wanted_files
    event(f"taken: {len(checked.entries)} entries")
    return None


@pytest.mark.slow                                   # measured 1,500 archives: 7 s (loaded machine)
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(members, max_size=6), st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT]),
       st.sampled_from([True, True, True, False]), damage)
def test_every_archive_is_refused_or_unpacked_exactly(items, fmt, with_config, how):
    try:
        raw = build(items, fmt, with_config)
    except (ValueError, UnicodeError):
        event("tarfile cannot write it")
        return                                      # a name tarfile cannot write in this format
    reason = refused_or_unpacked_exactly(damaged(raw, how))
    if reason:
        event("refused: " + re.sub(r"[0-9]+", "N", reason)[:60])


honest = st.tuples(st.lists(st.sampled_from(GOOD_PARTS), min_size=1, max_size=6).map("/".join),
                   st.sampled_from([tarfile.REGTYPE, tarfile.REGTYPE, tarfile.DIRTYPE]), st.binary(max_size=1500),
                   st.booleans(), st.none())


@pytest.mark.slow                                   # measured 500 archives: 3 s (loaded machine)
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(honest, max_size=12))
def test_files_and_folders_are_taken_unless_they_conflict(items):
    reason = refused_or_unpacked_exactly(build(items, tarfile.GNU_FORMAT, True))
    assert reason is None or any(why in reason for why in ("twice", "under a file")), reason


# ---------------------------------------------------------------------------- the client's packing

def test_the_client_leaves_out_names_the_service_refuses(tmp_path):
    team = tmp_path / "team"
    (team / "src").mkdir(parents=True)
    (team / "rai_build.yml").write_bytes(CONFIG)
    for name in ("a\\b.cu", "time:stamp.log", "bell\x07", "trailing.", "nul.txt", "Kernel.cu", "kernel.cu",
                 "caf\u00e9", "cafe\u0301"):
        (team / "src" / name).write_text(name[:8])
    os.mkdir(team / "Build")
    os.mkdir(team / "build")
    (team / "build" / "out.o").write_text("o")
    (team / "bad\udcff".encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape")).write_text("x")
    deep = team.joinpath(*["d"] * 33)
    deep.mkdir(parents=True)
    (deep / "f").write_text("deep")
    data, entries, notes = uploads.pack_development(team)
    names = {e.name for e in entries}
    assert {"src/Kernel.cu", "src/cafe\u0301", "Build"} <= names               # the first in name order is kept
    assert not names & {"src/kernel.cu", "src/caf\u00e9", "build", "build/out.o"}
    shown = "\n".join(notes)
    for expected in ("src/a\\\\b.cu: the character \\, which Windows cannot store",
                     "src/time:stamp.log: the character :, which Windows and macOS cannot store",
                     "src/bell\\x07: the control character \\x07", "src/trailing.: a part that ends in a space or a dot",
                     "src/nul.txt: nul.txt, a device name on Windows",
                     "src/kernel.cu: the same name as src/Kernel.cu where case or Unicode normalisation is ignored",
                     "src/caf\u00e9: the same name as src/cafe\u0301", "build: the same name as Build",
                     "bad\\xff: its name is not UTF-8"):
        assert expected in shown, (expected, shown)
    assert "33 folders deep; the service takes at most 32" in shown
    checked = uploads.check(data, "development")                   # what was packed is taken whole
    assert len(checked.entries) == len(entries)


WINDOWS = """
import json, ntpath, os, sys
for name in ("fcntl", "resource", "termios", "pwd", "grp"):       # POSIX-only modules: absent on Windows
    sys.modules[name] = None
for flag in ("O_NOFOLLOW", "O_NONBLOCK", "O_NOCTTY"):
    delattr(os, flag)
from ece408_op.service import upload
os.path, os.sep = ntpath, "\\\\"                                  # os.path is ntpath on Windows
data, entries, notes = upload.pack_development(sys.argv[1])
sys.stdout.buffer.write(data)
print(json.dumps([[e.name for e in entries], notes]), file=sys.stderr)
"""


def test_on_windows_the_client_packs_slash_separated_names(tmp_path):
    """What Windows lacks, taken away (fcntl and the other POSIX modules, O_NOFOLLOW, O_NONBLOCK):
    the client still imports; with Windows' path module in place, it packs and names with ``/``."""
    team = tmp_path / "team"
    (team / "src" / "sub").mkdir(parents=True)
    (team / "rai_build.yml").write_bytes(CONFIG)
    (team / "src" / "sub" / "kernel.cu").write_bytes(b"// k\r\n")
    out = subprocess.run([*python_command(), "-c", WINDOWS, str(team)], capture_output=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    names, notes = json.loads(out.stderr.decode().splitlines()[-1])
    assert names == ["rai_build.yml", "src", "src/sub", "src/sub/kernel.cu"] and notes == []
    assert uploads.check(out.stdout, "development").entries[-1].data == b"// k\r\n"


def test_the_folder_walk_is_shared_by_the_client_and_the_local_run(tmp_path):
    """One walker (base/terms.py's walk_folder) and one set of rules (base/ignore.py) for both:
    the same entries, version control and caches left out by both."""
    from ece408_op.grading.scratch import copy_submission
    team = tmp_path / "team"
    for rel in ("rai_build.yml", "src/a.cu", ".git/HEAD", "src/__pycache__/x.pyc", "src/m.pyc", "z/y/x"):
        (team / rel).parent.mkdir(parents=True, exist_ok=True)
        (team / rel).write_text(rel)
    walked = ["rai_build.yml", "src", "src/a.cu", "z", "z/y", "z/y/x"]
    _, entries, _ = uploads.pack_development(team)
    assert sorted(e.name for e in entries) == walked
    copy_submission(team, tmp_path / "copy")
    copied = sorted(p.relative_to(tmp_path / "copy").as_posix() for p in (tmp_path / "copy").rglob("*"))
    assert copied == sorted(walked)
