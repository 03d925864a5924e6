"""A build folder as the service keeps it (service/buildfolder.py), without a server: the bytes'
bound (files past it left out, each with its line; a sparse file never read), the lines naming
what is left out (at most twenty, the rest counted), a folder that cannot be read, the archive
check on the way back, and ``unpack_into`` (all or nothing, never into a non-empty folder, by
path where the system has no descriptor-relative calls, as on Windows)."""
import os
import stat

import pytest

from ece408_op.base import archive
from ece408_op.service import buildfolder
from ece408_op.base.archive import UploadError


def write(folder, files):
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder


def packed_tree(tmp_path, folder, **caps):
    packed = buildfolder.pack(folder, tmp_path / "out.tar.gz", **caps)
    checked = buildfolder.check((tmp_path / "out.tar.gz").read_bytes())
    return packed, {e.name: e.data for e in checked.entries}


def test_files_past_the_bytes_bound_are_left_out_each_with_its_line(tmp_path):
    folder = write(tmp_path / "build", {"a.bin": b"a" * 600, "b.bin": b"b" * 600, "c.bin": b"c" * 300,
                                        "d.txt": b"d" * 50})
    with open(folder / "sparse.bin", "wb") as f:
        f.truncate(1 << 40)                         # a terabyte of holes: over the bound by its size, never read
    packed, entries = packed_tree(tmp_path, folder, max_bytes=1000)
    assert entries == {"a.bin": b"a" * 600, "c.bin": b"c" * 300, "d.txt": b"d" * 50}
    assert (packed.files, packed.bytes, packed.left_out) == (3, 950, 2)
    assert packed.notes == ["* Left out of the build folder: b.bin: 0.0 MiB, past the 0 MiB the service keeps of a "
                            "build folder",
                            "* Left out of the build folder: sparse.bin: 1048576.0 MiB, past the 0 MiB the service "
                            "keeps of a build folder"]


def test_at_most_twenty_lines_name_what_is_left_out(tmp_path):
    folder = tmp_path / "build"
    folder.mkdir()
    for i in range(30):
        os.symlink("/etc/passwd", folder / f"link{i:02d}")
    (folder / "kept.txt").write_bytes(b"kept")
    packed, entries = packed_tree(tmp_path, folder)
    assert entries == {"kept.txt": b"kept"} and packed.left_out == 30
    assert len(packed.notes) == 21 and packed.notes[0].startswith("* Left out of the build folder: link00: a symbolic")
    assert packed.notes[-1] == "* ... and 10 more entries of the build folder left out"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a folder whatever its mode")
def test_a_folder_that_cannot_be_read_ends_the_walk_with_a_line(tmp_path):
    folder = write(tmp_path / "build", {"a.txt": b"a", "locked/secret": b"s"})
    (folder / "locked").chmod(0)
    try:
        packed, entries = packed_tree(tmp_path, folder)
    finally:
        (folder / "locked").chmod(0o755)
    assert entries["a.txt"] == b"a" and "locked/secret" not in entries
    assert any("locked" in note and "cannot be read" in note for note in packed.notes)


def test_the_archive_check_on_the_way_back_has_the_build_folders_bounds(tmp_path):
    folder = write(tmp_path / "build", {f"f{i}": b"x" for i in range(5)})
    buildfolder.pack(folder, tmp_path / "out.tar.gz")
    data = (tmp_path / "out.tar.gz").read_bytes()
    assert len(buildfolder.check(data).entries) == 5
    with pytest.raises(UploadError, match=r"^the build folder's archive is refused: the upload holds more than 4 "):
        buildfolder.check(data, max_entries=4)
    with pytest.raises(UploadError, match=r"^the build folder's archive is refused: the upload ends before"):
        buildfolder.check(data[:-8])


def test_unpack_into_writes_all_or_nothing_and_never_into_a_non_empty_folder(tmp_path):
    folder = write(tmp_path / "build", {"x/y.txt": b"y", "run": b"#!/bin/sh\n"})
    (folder / "run").chmod(0o700)
    buildfolder.pack(folder, tmp_path / "out.tar.gz")
    checked = buildfolder.check((tmp_path / "out.tar.gz").read_bytes())
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_bytes(b"mine")
    with pytest.raises(FileExistsError):
        buildfolder.unpack_into(checked, busy)
    assert os.listdir(busy) == ["mine.txt"]
    (tmp_path / "a-file").write_bytes(b"")
    with pytest.raises(FileExistsError):
        buildfolder.unpack_into(checked, tmp_path / "a-file")
    empty = tmp_path / "empty"
    empty.mkdir()
    buildfolder.unpack_into(checked, empty)                 # an empty folder is used
    assert (empty / "x" / "y.txt").read_bytes() == b"y" and stat.S_IMODE((empty / "run").stat().st_mode) == 0o755
    assert not [p for p in os.listdir(tmp_path) if ".partial-" in p]


def test_unpack_by_path_where_the_system_has_no_descriptor_calls(tmp_path, monkeypatch):
    # Windows (a laptop's jobs download) opens nothing relative to a folder's descriptor
    folder = write(tmp_path / "build", {"x/y/z.txt": b"z", "top.txt": b"t"})
    buildfolder.pack(folder, tmp_path / "out.tar.gz")
    checked = buildfolder.check((tmp_path / "out.tar.gz").read_bytes())
    monkeypatch.setattr(archive, "DIR_FD", False)
    monkeypatch.setattr(archive, "_write_folder", None)     # the descriptor path is not taken
    buildfolder.unpack_into(checked, tmp_path / "got")
    assert (tmp_path / "got" / "x" / "y" / "z.txt").read_bytes() == b"z"
    assert (tmp_path / "got" / "top.txt").read_bytes() == b"t"
    assert stat.S_IMODE((tmp_path / "got" / "top.txt").stat().st_mode) == 0o644
