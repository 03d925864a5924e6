"""The kernel layer's tables without a GPU: v8/v9 tiles for every kind of layer, the fused kernel's
capability check, the measured defaults table (defaults.json) and how the suite fills it, and the
fused block's NumPy reference."""
import json

import numpy as np
import pytest

from ece408_op import kernels
from ece408_op.conv import fused_reference_and_bound, max_pool_2x2, reference_and_bound, tanh_maxpool
from ece408_op.errors import ShapeError
from ece408_op.bench import suite
from ece408_op.kernels import choice
from ece408_op.kernels.versions import v08_gemm, v11_resident, version

S = kernels.ConvShape
LAYERS = [layer.shape() for layer in suite.LAYERS] + [
    S(3, 9, 11, 7, 1), S(2, 7, 7, 3, 7), S(32, 28, 28, 32, 3, PH=1, PW=1, G=32), S(16, 20, 20, 32, 3, 5, DH=2, DW=2, G=4),
    S(1, 1, 1, 3, 1), S(4, 12, 11, 8, 3, PH=1, PW=1, G=8, BIAS=1), S(1024, 7, 7, 1000, 1)]


@pytest.mark.parametrize("shape", LAYERS, ids=str)
def test_gemm_tiles_divide_and_fit(shape):
    for number in (8, 9):
        defines = kernels.module_defines(number, shape)
        gemm = kernels.VERSIONS[number]
        threads, bp = gemm.threads_and_bp(defines)
        assert threads % 32 == 0 and threads <= 1024
        assert gemm.shared_bytes(defines) <= version.MAX_SHARED
        assert gemm.unsupported(shape) is None
        assert v08_gemm.gemm_stride(bp) % 16 == 8 and v08_gemm.gemm_stride(gemm.bf(defines)) % 16 == 8
    assert defines["V9_BK"] % 8 == 0
    assert defines["V9_WF"] * defines["V9_NI"] * 8 >= min(shape.M // shape.G, 64)   # no filter tile wasted on few filters


def test_fused_capability():
    assert kernels.FUSED.reason(S(1, 28, 28, 50, 5)) is None
    assert kernels.FUSED.reason(S(1, 28, 28, 50, 5, PH=2, PW=2, BIAS=1)) is None      # the launcher pads
    assert "stride" in kernels.FUSED.reason(S(3, 20, 20, 8, 3, SH=2, SW=2))
    assert "registers" in kernels.FUSED.reason(S(6, 30, 30, 16, 5))
    assert "2x2" in kernels.FUSED.reason(S(1, 5, 5, 2, 5))
    on = kernels.module_defines(kernels.FUSED, S(1, 28, 28, 50, 5))
    off = kernels.module_defines(kernels.FUSED, S(1, 28, 28, 50, 5, PH=1, PW=1))   # a layer with padding
    assert on["FUSE_ENABLED"] == 1 and off["FUSE_ENABLED"] == 0


def test_defaults_table_picks_the_measured_version(tmp_path, monkeypatch):
    shape = S(6, 30, 30, 16, 5)
    table = {"Some GPU": {"shapes": {kernels.shape_key(shape): 9, kernels.shape_key(S(1, 28, 28, 50, 5)): 4}}}
    path = tmp_path / "defaults.json"
    path.write_text(json.dumps(table))
    monkeypatch.setattr(choice, "DEFAULTS_FILE", path)
    assert kernels.default_version(shape, "Some GPU") == 9
    assert kernels.default_version(S(1, 28, 28, 50, 5), "Some GPU") == 4
    assert kernels.default_version(shape, "Another GPU") == 10             # not measured there: the fallback
    assert kernels.default_version(shape.__class__(6, 30, 30, 16, 5, BIAS=1), "Some GPU") == 9   # bias aside
    assert kernels.choose_version("v6", shape, "Some GPU") == 6            # an explicit request wins
    big = S(64, 32, 32, 128, 5)                                            # weights beyond constant memory
    table["Some GPU"]["shapes"][kernels.shape_key(big)] = 7                # a version that cannot run it
    path.write_text(json.dumps(table))
    choice.reload_defaults()
    assert kernels.VERSIONS[7].unsupported(big) and kernels.default_version(big, "Some GPU") == 8


def test_winograd_is_never_a_default(tmp_path, monkeypatch):
    resnet = S(128, 28, 28, 128, 3, PH=1, PW=1)
    assert kernels.VERSIONS[12].unsupported(resnet) is None and kernels.default_version(resnet) != 12
    path = tmp_path / "defaults.json"
    path.write_text(json.dumps({"Some GPU": {"shapes": {kernels.shape_key(resnet): 12}}}))
    monkeypatch.setattr(choice, "DEFAULTS_FILE", path)
    assert kernels.default_version(resnet, "Some GPU") == kernels.default_version(resnet)   # the table's 12 ignored
    assert kernels.choose_version("12", resnet, "Some GPU") == 12                          # asked for: runs
    result = {"layers": [{"name": "L"}], "rows": [_row("L", 64, "v12 winograd", 0.1), _row("L", 64, "v9 tensor", 0.3)]}
    assert suite.choose_defaults(result) == {"K": 9}
    with pytest.raises(ValueError, match="V12_GEMM"):
        # bad input: a GEMM version v12 cannot use
        kernels.module_defines(12, resnet, {"V12_GEMM": 7})


def test_fast_is_winograd_where_it_runs_else_the_default(monkeypatch):
    resnet, stride2, course = S(128, 28, 28, 128, 3, PH=1, PW=1), S(64, 56, 56, 128, 3, 3, 2, 2, 1, 1), S(1, 28, 28, 50, 5)
    assert kernels.parse_version(" Fast ") == choice.FAST
    assert kernels.choose_version("fast", resnet, "NVIDIA H100 80GB HBM3") == 12
    for shape in (stride2, course):
        assert kernels.choose_version("fast", shape, "NVIDIA H100 80GB HBM3") == kernels.default_version(
            shape, "NVIDIA H100 80GB HBM3") != 12
    monkeypatch.setenv(choice.KERNEL_ENV, "fast")
    assert kernels.choose_version(None, resnet) == 12 and kernels.choose_version("auto", course) == 7
    with pytest.raises(ShapeError, match="v12 winograd cannot run this layer"):
        # bad input: v12 asked for by number on a layer it cannot run (fast would fall back)
        kernels.choose_version("12", stride2)
    with pytest.raises(Exception, match="choose auto, fast"):
        # bad input: an unknown kernel name; the message lists fast
        kernels.parse_version("fastest")


def test_committed_defaults_name_real_versions_and_measured_shapes():
    known = {kernels.shape_key(layer.shape()) for layer in suite.LAYERS}
    for device, entry in choice.load_defaults().items():
        assert entry["shapes"], device
        for key, number in entry["shapes"].items():
            assert key in known and number in kernels.VERSIONS, (device, key, number)


def _row(layer, batch, entry, ms, valid=True, kind="conv"):
    return {"layer": layer, "shape": "K", "batch": batch, "entry": entry, "kind": kind, "median_s": ms / 1e3,
            "valid": valid}


def test_suite_chooses_the_fastest_version_valid_at_every_batch(tmp_path):
    result = {"device": "GPU X", "date": "2026-01-01", "layers": [{"name": "L"}], "rows": [
        _row("L", 100, "v9 tensor", 0.1, valid=False), _row("L", 1000, "v9 tensor", 1.0),
        _row("L", 100, "v8 gemm", 0.2), _row("L", 1000, "v8 gemm", 2.0),
        _row("L", 100, "v7 strip", 0.3), _row("L", 1000, "v7 strip", 2.5), _row("L", 1000, "cudnn", 0.5),
        _row("L", 1000, "fused kernel", 0.1, kind="fused")]}
    assert suite.choose_defaults(result) == {"K": 8}            # v9 faster, but invalid at B=100
    result["rows"][0]["valid"] = True
    assert suite.choose_defaults(result) == {"K": 9}
    path = tmp_path / "defaults.json"
    path.write_text(json.dumps({"Other GPU": {"shapes": {"K": 7}}}))
    suite.apply_defaults(result, path)
    data = json.loads(path.read_text())
    assert data["Other GPU"]["shapes"] == {"K": 7} and data["GPU X"]["shapes"] == {"K": 9}


def test_tanh_maxpool_is_mxnets_valid_pooling():
    y = np.random.default_rng(0).standard_normal((2, 3, 7, 6))
    got = tanh_maxpool(y)
    assert got.shape == (2, 3, 3, 3)
    for i in range(3):
        for j in range(3):
            assert np.allclose(got[:, :, i, j], np.tanh(y[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2].max(axis=(2, 3))))
    assert np.array_equal(max_pool_2x2(y, reduce=np.minimum), -max_pool_2x2(-y))


def test_fused_bound_holds_for_float32_and_catches_a_wrong_window():
    rng = np.random.default_rng(3)
    x = rng.random((2, 2, 13, 12)).astype(np.float32)
    k = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    ref, bound = fused_reference_and_bound(x, k, bias)
    conv32 = reference_and_bound(x, k, bias)[0].astype(np.float32)      # a float32 result within its bound
    fused32 = np.tanh(max_pool_2x2(conv32)).astype(np.float32)
    assert (np.abs(fused32 - ref) <= bound).all()
    shifted = np.tanh(max_pool_2x2(conv32[:, :, 1:, :]))[:, :, :ref.shape[2]]   # windows one row off
    assert not (np.abs(shifted - ref) <= bound).all()


def test_committed_defaults_are_the_committed_measurements():
    # defaults.json is what choose_defaults makes of the committed suite runs (docs/bench), device by device
    root = choice.DEFAULTS_FILE.parents[2] / "docs" / "bench"
    table = choice.load_defaults()
    for path in (root / "suite.json", root / "h200" / "suite.json"):
        result = json.loads(path.read_text())
        assert table[result["device"]]["shapes"] == suite.choose_defaults(result)
        assert all(row["valid"] for row in result["rows"])


@pytest.mark.parametrize("entry", ["conv2d_forward_device", "fused_forward_device"])
@pytest.mark.parametrize("bad", ["y", "x", "k"])
def test_device_entry_points_refuse_misaligned_pointers_before_any_launch(entry, bad):
    """A 16-byte load or store at a misaligned address is a CUDA error that poisons the context:
    the zero-copy entry points refuse such pointers first (no GPU needed: nothing is launched)."""
    pointers = {"y": 0x10000, "x": 0x20000, "k": 0x30000}
    pointers[bad] += 4                              # bad input: a view starting one float in
    with pytest.raises(ShapeError, match=rf"^{bad} at 0x[0-9a-f]+ is not 16-byte aligned"):
        getattr(kernels, entry)(pointers["y"], pointers["x"], pointers["k"], (2, 1, 28, 28), (50, 1, 5, 5))


def test_an_explicit_full_unroll_is_honoured_with_several_channels():
    vgg = S(3, 224, 224, 64, 3, PH=1, PW=1)
    inner = kernels.VERSIONS[7].inner(vgg)
    assert kernels.module_defines(7, inner, {"UNROLL_M": "full"})["V7_UNROLL_M"] == 64
    assert kernels.module_defines(7, inner)["V7_UNROLL_M"] == kernels.VERSIONS[7].SEVERAL_UNROLL


@pytest.mark.parametrize("layer", [(6, 30, 30, 5), (12, 33, 33, 5), (1, 28, 28, 5), (3, 9, 11, 3), (2, 6, 6, 6),
                                   (1, 1, 1, 1)])
def test_v11_tap_order_is_a_padded_permutation_no_worse_than_the_natural_one(layer):
    c, h, w, k = layer
    order = v11_resident.tap_order(c, h, w, k)
    taps = c * k * k
    assert len(order) % 8 == 0 and len(order) - taps < 8
    assert sorted(order[:taps]) == list(range(taps)) and set(order[taps:]) <= {-1}   # padding only at the end
    natural = list(range(taps))
    assert v11_resident.read_wavefronts(c, h, w, k, order) <= v11_resident.read_wavefronts(c, h, w, k, natural)


def test_v11_tap_order_removes_bank_conflicts_on_the_2018_layer():
    natural = v11_resident.read_wavefronts(6, 30, 30, 5, list(range(150)))
    ordered = v11_resident.read_wavefronts(6, 30, 30, 5, v11_resident.tap_order(6, 30, 30, 5))
    assert natural > 1.4 and ordered < 1.25, (natural, ordered)
    # consecutive taps of one row never conflict: 8 positions x 4 adjacent taps span 11 words
    assert v11_resident.read_wavefronts(1, 8, 40, 4, [0, 1, 2, 3]) == pytest.approx(1.0)


def test_v11_tiles_and_shared_memory():
    v11 = kernels.VERSIONS[11]
    course2 = kernels.ConvShape(6, 30, 30, 16, 5)
    d = kernels.module_defines(11, v11.inner(course2))
    assert (d["V11_WARPS"], d["V11_MT"], d["V11_BUFFERS"], d["V11_ENABLED"]) == (4, 2, 1, 1)
    # 19 k-steps x 2 filter fragments x 32 lanes x 16 bytes + the tap table + one 6x30x30 image
    assert v11.shared_bytes(d) == 19 * 2 * 32 * 16 + 19 * 32 + 6 * 900 * 4
    assert "filters" in v11.unsupported(kernels.ConvShape(6, 30, 30, 72, 5))
    assert "C*K*K" in v11.unsupported(kernels.ConvShape(64, 16, 16, 32, 3))
    assert "shared memory" in v11.unsupported(kernels.ConvShape(3, 226, 226, 64, 3))
