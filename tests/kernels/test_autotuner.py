"""The autotuner without a GPU: which candidates it times, how it picks, the per-device cache in the
user's cache folder (XDG, atomic writes, a corrupt file ignored with one warning line), the switch
that turns it off, and where it stands in the choice of a version (after an explicit request and
the measured table, before the fallback order). The timings are injected; tests/kernels/test_gpu_call_path.py
tunes on the device."""
import json

import pytest

from ece408_op import kernels
from ece408_op.errors import GpuError
from ece408_op.kernels import autotune, choice

S = kernels.ConvShape
POINTWISE = S(256, 56, 56, 64, 1)                               # ResNet-50's 1x1 (not in the table)
DEPTHWISE = S(32, 28, 28, 32, 3, PH=1, PW=1, G=32)


class FakeDevice:
    name = "Test GPU 80GB"
    arch = "sm_90"


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv(autotune.ENV, "1")
    autotune.forget_caches()
    yield tmp_path
    autotune.forget_caches()


def fake_measure(seconds_by_version, calls):
    """A measure() that returns the given time per version (tiles: +1% per overrides key) and counts calls."""
    def measure(dev, shape, batch, options, budget):
        calls.append((shape, batch, len(options)))
        return [(n, o, seconds_by_version.get(n, 9e-3) * (1 + 0.01 * len(o))) for n, o in options]
    return measure


def test_candidates_are_the_defaultable_versions_that_run_the_layer_with_their_tiles():
    options = autotune.candidates(POINTWISE)
    numbers = [n for n, _ in options]
    assert {8, 9} <= set(numbers)
    assert {n for n, _ in autotune.candidates(DEPTHWISE)} == {8, 9, 13}   # v7, v10, v11: one group only
    assert numbers.count(9) >= 3 and numbers.count(8) >= 2     # tile choices
    assert 12 not in numbers and all(kernels.VERSIONS[n].defaultable for n in numbers)
    course = [n for n, _ in autotune.candidates(S(1, 28, 28, 50, 5))]
    assert {7, 8, 9, 10, 11} <= set(course)
    # duplicates (a tile equal to the default tile) are dropped
    keys = [(n, kernels.module_spec(n, kernels.VERSIONS[n].inner(POINTWISE), o))
            for n, o in options]
    assert len(keys) == len(set(keys))


def test_bucket_and_key():
    assert [autotune.bucket(b) for b in (1, 2, 3, 64, 65, 100, 128)] == [1, 2, 4, 64, 128, 128, 128]
    assert autotune.cache_key(POINTWISE, 100) == kernels.shape_key(POINTWISE) + " B128"


def test_choose_times_once_picks_the_fastest_and_a_second_process_reads_the_cache(cache_home):
    calls = []
    measure = fake_measure({8: 2e-3, 9: 1e-3}, calls)
    assert autotune.choose(FakeDevice(), POINTWISE, 64, measure=measure) == (9, {})
    path = cache_home / "ece408_op" / "autotune" / "Test_GPU_80GB.json"
    entry = json.loads(path.read_text())["entries"][autotune.cache_key(POINTWISE, 64)]
    assert entry["version"] == 9 and entry["overrides"] == {} and len(entry["timings"]) == len(
        autotune.candidates(POINTWISE, FakeDevice.arch))
    assert autotune.choose(FakeDevice(), POINTWISE, 60, measure=measure) == (9, {})     # same batch class
    assert len(calls) == 1
    autotune.forget_caches()                                    # a new process: the file, no timing
    assert autotune.choose(FakeDevice(), POINTWISE, 64, measure=lambda *a: pytest.fail("timed again")) == (9, {})
    # another shape is added to the same file; the first stays
    assert autotune.choose(FakeDevice(), DEPTHWISE, 64, measure=fake_measure({8: 1e-3, 9: 2e-3}, calls))[0] == 8
    assert len(json.loads(path.read_text())["entries"]) == 2
    assert not list(path.parent.glob(".*"))                     # no temporary file left behind


def test_a_tile_can_win(cache_home):
    def measure(dev, shape, batch, options, budget):
        return [(n, o, 1e-3 if o == {"V9_WP": 2, "V9_WF": 2, "V9_MI": 4, "V9_NI": 4} else 2e-3) for n, o in options]
    assert autotune.choose(FakeDevice(), POINTWISE, 64, measure=measure) == (
        9, {"V9_WP": 2, "V9_WF": 2, "V9_MI": 4, "V9_NI": 4})


def test_host_bound_ties_go_to_the_fastest_kernel():
    """Figures within HOST_TIE of the fastest tie (a small layer: the host's floor sets them all); the least
    GPU time among them wins. Outside the tie the figure decides, however fast the kernel (two launches
    that cost more host time than their kernel saves lose)."""
    tie = 1 + autotune.HOST_TIE
    floor = 22e-6
    timings = [(9, {}, floor, 21e-6), (20, {"V20_INLINE": 1}, floor * (1 + 0.5 * autotune.HOST_TIE), 12e-6),
               (13, {}, floor * 1.01, 18e-6), (20, {}, floor * tie * 1.01, 8e-6)]
    assert autotune.pick(timings)[:2] == (20, {"V20_INLINE": 1})
    assert autotune.pick(timings[:1] + timings[3:])[:2] == (9, {})
    # no GPU figure (an injected measure): the figure alone
    assert autotune.pick([(8, {}, 2e-3), (9, {}, 1e-3)])[0] == 9
    assert autotune.pick([(8, {}, 1e-3, None), (9, {}, 1.02e-3, 0.5e-3)])[0] == 9


def test_untimed_candidates_are_never_picked(cache_home):
    def measure(dev, shape, batch, options, budget):
        return [(n, o, None if i else 5e-3) for i, (n, o) in enumerate(options)]
    first = autotune.candidates(POINTWISE, FakeDevice.arch)[0]      # (the device's: v20 first on sm_90)
    assert autotune.choose(FakeDevice(), POINTWISE, 64, measure=measure) == first
    assert autotune.pick([(8, {}, None)]) is None


def test_off_switch(cache_home, monkeypatch):
    monkeypatch.setenv(autotune.ENV, "0")
    assert autotune.choose(FakeDevice(), POINTWISE, 64, measure=lambda *a: pytest.fail("timed")) is None
    assert not (cache_home / "ece408_op").exists()


def test_corrupt_cache_is_ignored_with_one_line_and_rewritten(cache_home, capsys):
    path = cache_home / "ece408_op" / "autotune" / "Test_GPU_80GB.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    calls = []
    assert autotune.choose(FakeDevice(), POINTWISE, 64, measure=fake_measure({8: 1e-3, 9: 2e-3}, calls))[0] == 8
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "ignoring the autotune cache" in err and str(path) in err
    assert json.loads(path.read_text())["entries"]                 # replaced by a valid cache


def test_stale_or_invalid_entries_are_tuned_again(cache_home):
    calls = []
    measure = fake_measure({8: 2e-3, 9: 1e-3}, calls)
    autotune.choose(FakeDevice(), POINTWISE, 64, measure=measure)
    path = autotune.cache_for(FakeDevice.name).path
    data = json.loads(path.read_text())
    key = autotune.cache_key(POINTWISE, 64)
    for bad in ({"version": 11}, {"version": 12}, {"version": 9, "overrides": {"V9_ACOLS": 3}}, {"version": "x"},
                {"source": "another kernel source"}):
        data["entries"][key] = {**data["entries"][key], **bad}
        path.write_text(json.dumps(data))
        autotune.forget_caches()
        calls.clear()
        assert autotune.choose(FakeDevice(), POINTWISE, 64, measure=measure) == (9, {}), bad
        assert len(calls) == 1, bad
        data = json.loads(path.read_text())


def test_writes_are_kept_back_a_second_and_flushed(cache_home):
    measure = fake_measure({8: 2e-3, 9: 1e-3}, [])
    autotune.choose(FakeDevice(), POINTWISE, 64, measure=measure)
    autotune.choose(FakeDevice(), DEPTHWISE, 64, measure=measure)           # within WRITE_EVERY_S: kept back
    cache = autotune.cache_for(FakeDevice.name)
    assert len(json.loads(cache.path.read_text())["entries"]) == 1
    cache.flush()
    assert len(json.loads(cache.path.read_text())["entries"]) == 2


def test_a_long_tuning_prints_one_line(cache_home, monkeypatch):
    clock = iter([0.0, 2.5])
    monkeypatch.setattr(autotune.time, "perf_counter", lambda: next(clock))
    lines = []
    autotune.choose(FakeDevice(), POINTWISE, 64, measure=fake_measure({8: 2e-3, 9: 1e-3}, []), log=lines.append)
    assert len(lines) == 1 and "autotuned" in lines[0] and "2.5 s" in lines[0] and "v9" in lines[0]


def test_resolve_order_request_table_tuner_fallback(tmp_path, monkeypatch):
    monkeypatch.delenv(choice.KERNEL_ENV, raising=False)
    table_shape = S(64, 56, 56, 64, 3, PH=1, PW=1)
    path = tmp_path / "defaults.json"
    path.write_text(json.dumps({"GPU": {"shapes": {kernels.shape_key(table_shape): 8}}}))
    monkeypatch.setattr(choice, "DEFAULTS_FILE", path)
    choice.reload_defaults()
    tuner = lambda shape: (9, {"V9_WP": 2})                      # noqa: E731
    assert choice.resolve_version(None, table_shape, "GPU", tune=tuner) == (8, None)       # the table first
    assert choice.resolve_version(None, POINTWISE, "GPU", tune=tuner) == (9, {"V9_WP": 2})  # then the tuner
    assert choice.resolve_version(None, POINTWISE, "GPU", tune=lambda s: None) == (
        choice.fallback_version(POINTWISE), None)                                          # then the fallback
    assert choice.resolve_version("v6", POINTWISE, "GPU", tune=tuner) == (6, None)         # a request wins
    monkeypatch.setenv(choice.KERNEL_ENV, "8")
    assert choice.resolve_version(None, POINTWISE, "GPU", tune=tuner) == (8, None)         # so does the env
    choice.reload_defaults()


def test_the_table_is_read_once(tmp_path, monkeypatch):
    path = tmp_path / "defaults.json"
    path.write_text(json.dumps({"GPU": {"shapes": {kernels.shape_key(POINTWISE): 8}}}))
    monkeypatch.setattr(choice, "DEFAULTS_FILE", path)
    choice.reload_defaults()
    reads = []
    real = type(path).read_text
    monkeypatch.setattr(type(path), "read_text", lambda self, *a, **k: reads.append(self) or real(self, *a, **k))
    for _ in range(5):
        assert choice.default_version(POINTWISE, "GPU") == 8
    assert len(reads) == 1
    choice.reload_defaults()


def test_the_cost_model_times_per_shape_versions_only_on_few_input_values():
    """v7, v10, v11 build a module per layer shape (about a second of nvcc): candidates only where
    C*KH*KW <= PER_SHAPE_MAX_CKK (where they won: MobileNetV2's 1x1 16->96, VGG's first layer)."""
    limit = autotune.PER_SHAPE_MAX_CKK
    wide = {n for n, _ in autotune.candidates(S(limit + 1, 56, 56, 96, 1))}
    few = {n for n, _ in autotune.candidates(S(limit, 56, 56, 96, 1))}
    assert not wide & {7, 10, 11} and {8, 9} <= wide
    assert {7, 8, 9} <= few
    assert 7 in {n for n, _ in autotune.candidates(S(3, 224, 224, 64, 3, PH=1, PW=1))}
    assert all(kernels.VERSIONS[n].dynamic for n in wide)


def test_precision_fp32_tunes_plain_float32_versions_only_under_its_own_key(cache_home):
    assert {n for n, _ in autotune.candidates(POINTWISE, "sm_90", "fp32")} == {8}
    assert {n for n, _ in autotune.candidates(DEPTHWISE, "sm_90", "fp32")} == {8, 13}
    assert all(kernels.VERSIONS[n].exact for n, _ in autotune.candidates(S(1, 28, 28, 50, 5), "sm_90", "fp32"))
    assert autotune.cache_key(POINTWISE, 64, "fp32") == autotune.cache_key(POINTWISE, 64) + " fp32"
    calls = []
    measure = fake_measure({8: 2e-3, 9: 1e-3, 20: 0.5e-3}, calls)
    assert autotune.choose(FakeDevice(), POINTWISE, 64, measure=measure)[0] == 20
    assert autotune.choose(FakeDevice(), POINTWISE, 64, measure=measure, precision="fp32")[0] == 8
    assert autotune.choose(FakeDevice(), POINTWISE, 64, measure=measure, precision="float32")[0] == 8
    assert len(calls) == 2                                       # each precision tuned once, kept apart
    autotune.cache_for(FakeDevice.name).flush()                  # (the second write may be kept back a second)
    entries = json.loads(autotune.cache_for(FakeDevice.name).path.read_text())["entries"]
    assert set(entries) == {autotune.cache_key(POINTWISE, 64), autotune.cache_key(POINTWISE, 64, "fp32")}


def test_precision_in_the_choice_of_a_version(tmp_path, monkeypatch):
    monkeypatch.delenv(choice.KERNEL_ENV, raising=False)
    monkeypatch.delenv(choice.PRECISION_ENV, raising=False)
    table_shape = S(64, 56, 56, 64, 3, PH=1, PW=1)
    path = tmp_path / "defaults.json"
    path.write_text(json.dumps({"GPU": {"shapes": {kernels.shape_key(table_shape): 20}}}))
    monkeypatch.setattr(choice, "DEFAULTS_FILE", path)
    choice.reload_defaults()
    try:
        assert choice.resolve_version(None, table_shape, "GPU") == (20, None)
        number, _ = choice.resolve_version(None, table_shape, "GPU", precision="fp32")     # the table skipped
        assert kernels.VERSIONS[number].exact
        assert choice.resolve_version("fast", table_shape, "GPU", precision="fp32")[0] != 12
        with pytest.raises(GpuError, match="precision='fp32'"):
            # bad input: a TF32 tensor-core version asked for under precision fp32
            choice.resolve_version(9, table_shape, "GPU", precision="fp32")
        with pytest.raises(GpuError, match="unknown precision"):
            # bad input: a precision that does not exist
            choice.parse_precision("fp16")
        monkeypatch.setenv(choice.PRECISION_ENV, "fp32")
        assert choice.parse_precision(None) == choice.parse_precision("auto") == "fp32"
        assert choice.parse_precision("tf32x3") == "tf32x3"
    finally:
        choice.reload_defaults()


def test_one_cache_folder_holds_modules_and_tunings(tmp_path, monkeypatch):
    from ece408_op.kernels import build
    monkeypatch.setenv(build.GPU_CACHE_ENV, str(tmp_path / "gpu-cache"))
    monkeypatch.delenv(build.CACHE_ENV, raising=False)
    autotune.forget_caches()
    try:
        assert build.cubin_cache_dir() == tmp_path / "gpu-cache" / "cubin"
        assert autotune.cache_for("Test GPU").path == tmp_path / "gpu-cache" / "autotune" / "Test_GPU.json"
    finally:
        autotune.forget_caches()


def test_a_new_batch_class_times_the_candidates_that_were_close_at_another(cache_home):
    calls = []

    def measure(dev, shape, batch, options, budget):
        calls.append([describe for describe in map(lambda o: autotune.describe(*o), options)])
        return [(n, o, (1e-3 if n == 20 else 3e-3) * (1 + 0.01 * i)) for i, (n, o) in enumerate(options)]
    every = autotune.candidates(POINTWISE, FakeDevice.arch)
    autotune.choose(FakeDevice(), POINTWISE, 64, measure=measure)
    assert len(calls[0]) == len(every)
    autotune.choose(FakeDevice(), POINTWISE, 1, measure=measure)          # a new batch class: v20's tiles only,
    v20 = [(n, o) for n, o in every if n == 20]                          # the best, and the best of one launch
    want = [autotune.describe(*c) for c in v20[:autotune.PRIOR_MAX]]
    single = next(c for c in v20 if c[1].get("V20_INLINE"))
    assert calls[1] == want + ([autotune.describe(*single)] if autotune.describe(*single) not in want else [])
    assert autotune.choose(FakeDevice(), DEPTHWISE, 1, measure=measure) and len(calls[2]) == len(
        autotune.candidates(DEPTHWISE, FakeDevice.arch))                  # a shape not seen: every candidate
