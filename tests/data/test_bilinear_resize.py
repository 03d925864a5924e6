"""The bilinear resize of the later course models' inputs: definition, range, independent
implementations (MXNet's BilinearResize2D and OpenCV inside MXNet), and its cache."""
import os

import numpy as np
import pytest

from ece408_op import data
from ece408_op.data import resize
from ece408_op.errors import DataError


def _write_split(folder, split, images, labels):
    prefix = data.SPLITS[split]
    data.write_idx(folder / f"{prefix}-images-idx3-ubyte", images)
    data.write_idx(folder / f"{prefix}-labels-idx1-ubyte", labels)


def _scalar_resize(image, size):
    """The module doc's formula, pixel by pixel, written independently of the matrix form."""
    n = image.shape[0]
    out = np.empty((size, size))

    def sample(o):
        s = min(max((o + 0.5) * n / size - 0.5, 0.0), n - 1)
        lo = int(np.floor(s))
        return lo, min(lo + 1, n - 1), s - lo
    for i in range(size):
        r0, r1, fr = sample(i)
        for j in range(size):
            c0, c1, fc = sample(j)
            top = (1 - fc) * image[r0, c0] + fc * image[r0, c1]
            bottom = (1 - fc) * image[r1, c0] + fc * image[r1, c1]
            out[i, j] = (1 - fr) * top + fr * bottom
    return out


@pytest.fixture(scope="module")
def fashion():
    if not data.has_data():
        pytest.skip("Fashion-MNIST is not fetched (python -m ece408_op fetch)")
    return data.load_fashion_mnist("test", 300)[0]


@pytest.mark.parametrize("n_in,n_out", [(28, 64), (28, 70), (5, 3), (1, 4), (7, 7)])
def test_interpolation_matrix_rows_are_convex_weights(n_in, n_out):
    matrix = resize.interpolation_matrix(n_in, n_out)
    assert matrix.shape == (n_out, n_in)
    assert np.all(matrix >= 0) and np.allclose(matrix.sum(axis=1), 1.0)
    assert np.all((matrix > 0).sum(axis=1) <= 2)              # at most two neighbours per sample
    if n_in == n_out:
        assert np.array_equal(matrix, np.eye(n_in))            # same size: the identity


@pytest.mark.parametrize("size", [64, 70])
def test_resize_matches_the_scalar_definition(fashion, size):
    got = resize.resize_bilinear_float(fashion[:3], size)
    for image, resized in zip(fashion[:3].astype(np.float64), got):
        np.testing.assert_allclose(resized, _scalar_resize(image, size), rtol=0, atol=1e-9)


@pytest.mark.parametrize("size", [64, 70])
def test_resize_shape_type_and_range(fashion, size):
    out = resize.resize_bilinear(fashion, size)
    assert out.shape == (len(fashion), size, size) and out.dtype == np.uint8
    # a convex combination of each image's pixels: inside that image's own range
    assert np.all(out.min(axis=(1, 2)) >= fashion.min(axis=(1, 2)))
    assert np.all(out.max(axis=(1, 2)) <= fashion.max(axis=(1, 2)))
    flat = np.full((2, 28, 28), 173, np.uint8)
    assert np.all(resize.resize_bilinear(flat, size) == 173)
    # the rounded values are the float ones, rounded
    floats = resize.resize_bilinear_float(fashion[:20], size)
    assert np.abs(out[:20] - floats).max() <= 0.5 + 1e-9


def _mxnet():
    import ece408_op
    reason = ece408_op.mxnet_unavailable()
    if reason:
        pytest.skip(f"MXNet unusable here: {reason}")
    return ece408_op.require_mxnet()


@pytest.mark.parametrize("size", [64, 70])
def test_resize_agrees_with_mxnet_bilinear_resize(fashion, size):
    # MXNet's own operator (align_corners=False: half-pixel centres), float32
    mx = _mxnet()
    x = mx.nd.array(fashion[:100, None].astype(np.float32))
    theirs = mx.nd.contrib.BilinearResize2D(x, height=size, width=size, align_corners=False).asnumpy()[:, 0]
    ours = resize.resize_bilinear_float(fashion[:100], size)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-3)   # float32 sample positions
    rounded = resize.resize_bilinear(fashion[:100], size).astype(np.int64)
    differ = rounded != np.rint(theirs)
    assert np.all(np.abs(np.abs(theirs - np.floor(theirs)) - 0.5)[differ] < 2e-3)   # only at exact ties


@pytest.mark.parametrize("size", [64, 70])
def test_resize_agrees_with_opencv_inside_mxnet(fashion, size):
    # mx.image.imresize is OpenCV's INTER_LINEAR (fixed-point weights on uint8): within one level
    mx = _mxnet()
    ours = resize.resize_bilinear(fashion[:50], size).astype(np.int64)
    for image, mine in zip(fashion[:50], ours):
        theirs = mx.image.imresize(mx.nd.array(image[:, :, None], dtype=np.uint8), size, size, interp=1)
        assert np.abs(theirs.asnumpy()[:, :, 0].astype(np.int64) - mine).max() <= 1


def test_load_resized_caches_once_and_checks_its_key(tmp_path):
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (40, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, 40, dtype=np.uint8)
    source, cache = tmp_path / "source", tmp_path / "cache"
    _write_split(source, "test", images, labels)
    first, first_labels = resize.load_resized("test", 64, 25, data_dir=source, cache_dir=cache)
    files = sorted(p.name for p in cache.iterdir())
    assert len(files) == 1 and files[0].startswith("t10k-images-64x64-") and files[0].endswith("-idx3-ubyte")
    assert first.shape == (25, 64, 64) and np.array_equal(first_labels, labels[:25])
    assert np.array_equal(first, resize.resize_bilinear(images[:25], 64))
    cached = cache / files[0]
    assert data.read_idx(cached).shape == (40, 64, 64)           # the whole split, once
    stamp = cached.stat().st_mtime_ns
    again, _ = resize.load_resized("test", 64, data_dir=source, cache_dir=cache)
    assert cached.stat().st_mtime_ns == stamp and np.array_equal(again[:25], first)   # read back
    # other source data: a new key, the stale file replaced
    images[0, 0, 0] ^= 0xFF
    _write_split(source, "test", images, labels)
    changed, _ = resize.load_resized("test", 64, 1, data_dir=source, cache_dir=cache)
    names = [p.name for p in cache.iterdir()]
    assert len(names) == 1 and names[0] != files[0]
    assert np.array_equal(changed, resize.resize_bilinear(images[:1], 64))
    # a damaged cache file is not trusted: rewritten
    (cache / names[0]).write_bytes(b"\x00\x00\x08\x03broken")
    repaired, _ = resize.load_resized("test", 64, 1, data_dir=source, cache_dir=cache)
    assert np.array_equal(repaired, changed) and data.read_idx(cache / names[0]).shape == (40, 64, 64)
    assert not [p for p in cache.iterdir() if p.name.endswith(".part")]


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_cache_still_gives_the_images(tmp_path):
    rng = np.random.default_rng(4)
    _write_split(tmp_path / "src", "test", rng.integers(0, 256, (3, 28, 28), dtype=np.uint8), np.zeros(3, np.uint8))
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    images, _ = resize.load_resized("test", 70, data_dir=tmp_path / "src", cache_dir=locked / "cache")
    assert images.shape == (3, 70, 70) and not any(locked.iterdir())


def test_cache_folder_that_is_a_file_still_gives_the_images(tmp_path):
    # (root can write anywhere, but not below a regular file)
    rng = np.random.default_rng(5)
    _write_split(tmp_path / "src", "test", rng.integers(0, 256, (3, 28, 28), dtype=np.uint8), np.zeros(3, np.uint8))
    (tmp_path / "file").write_text("not a folder")
    images, _ = resize.load_resized("test", 70, data_dir=tmp_path / "src", cache_dir=tmp_path / "file" / "cache")
    assert images.shape == (3, 70, 70)


def test_bad_size_is_a_clear_error(tmp_path):
    # bad input: size 0 and a non-integer size
    for size in (0, 2.5):
        with pytest.raises(DataError, match="positive integer"):
            resize.load_resized("test", size, data_dir=tmp_path)


def test_default_cache_is_beside_the_data_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert resize.resized_cache_dir() == tmp_path / "ece408_op" / "fashion-mnist-resized"
