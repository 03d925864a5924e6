"""v23 hgmma without a GPU: its SASS holds HGMMA (the warpgroup MMA, sm_90a) for every autotuner tile, both
element types and both output layouts, without spills or serialised wgmma; what it refuses (one line); where
the choice may pick it (the autotuner on compute capability 9.0 only, before v21; never a fallback). Skips
the builds without nvcc (the SASS check without cuobjdump)."""
import re
import shutil
import subprocess

import pytest

from ece408_op import kernels
from ece408_op.kernels.build import feature_arch
from ece408_op.kernels.versions.version import MAX_SHARED

NVCC, CUOBJDUMP = shutil.which("nvcc"), shutil.which("cuobjdump")
V23 = kernels.VERSIONS[23]
RESNET = kernels.ConvShape(64, 56, 56, 64, 3, PH=1, PW=1, DTYPE="float16", XL=1, WL=1)
RESNET_NCHW_BF16 = kernels.ConvShape(64, 56, 56, 64, 3, PH=1, PW=1, BIAS=1, DTYPE="bfloat16")
CASES = ([(shape, tile) for tile in V23.tune_tiles for shape in (RESNET, RESNET_NCHW_BF16)]
         + [(kernels.ConvShape(3, 224, 224, 64, 7, 7, 2, 2, 3, 3, DTYPE="bfloat16"), {}),       # the stem, NCHW
            (kernels.ConvShape(256, 14, 14, 1024, 1, BIAS=1, DTYPE="bfloat16", XL=1, WL=1), {"V23_BN": 256})])


def _build(shape, tile, tmp_path):
    defines = kernels.module_defines(23, V23.inner(shape), tile or None)
    assert feature_arch(tuple(defines.items()), "sm_90") == "sm_90a"          # wgmma exists only there
    cubin = tmp_path / "v23.cubin"
    result = subprocess.run([NVCC, "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-Xptxas", "-v",
                             *[f"-D{k}={v}" for k, v in sorted(defines.items())], "-o", str(cubin),
                             str(V23.source_path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return defines, cubin, result.stderr


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].DTYPE}-C{c[0].C}-K{c[0].KH}-{c[1]}")
def test_v23_builds_hgmma_for_sm_90a_without_spills_or_serialisation(case, tmp_path):
    shape, tile = case
    assert V23.unsupported(shape, tile) is None
    defines, cubin, log = _build(shape, tile, tmp_path)
    block = log.split("Compiling entry function 'conv_forward_v23'")[1].split("Compiling entry function")[0]
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", block), block
    registers = int(re.search(r"Used (\d+) registers", block).group(1))
    assert registers >= defines["V23_MI"] * defines["V23_BN"] // 2, f"{registers}: accumulators not in registers"
    # ptxas serialises wgmma (waits after each one) when it cannot prove the operands stay put: a 2-4x loss
    assert "serialized" not in log, [line for line in log.splitlines() if "serialized" in line]
    if CUOBJDUMP is None:
        pytest.skip("cuobjdump not on PATH: the SASS is not read")
    sass = subprocess.run([CUOBJDUMP, "-sass", "-fun", "conv_forward_v23", str(cubin)], check=True,
                          capture_output=True, text=True).stdout
    hgmma = re.findall(r"\bHGMMA\.64x(\d+)x16\.F32(\.BF16)?\b", sass)
    assert hgmma, sass[:2000]
    assert {int(n) for n, _ in hgmma} == {defines["V23_BN"]}
    assert all(bool(bf) == (shape.DTYPE == "bfloat16") for _, bf in hgmma)
    assert not re.findall(r"\bHMMA\b", sass)                                  # not mma.sync's path
    assert len(hgmma) >= defines["V23_MI"] * defines["V23_BK"] // 16          # one per 16 of depth and tile


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
def test_v23_built_for_plain_sm_90_is_only_the_trap(tmp_path):
    defines = kernels.module_defines(23, V23.inner(RESNET))
    result = subprocess.run([NVCC, "-arch=sm_90", "-cubin", "-Xptxas", "-v",
                             *[f"-D{k}={v}" for k, v in sorted(defines.items())], "-o", str(tmp_path / "plain.cubin"),
                             str(V23.source_path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    block = result.stderr.split("Compiling entry function 'conv_forward_v23'")[1].split("Compiling entry function")[0]
    assert int(re.search(r"Used (\d+) registers", block).group(1)) < 24


def test_v23_refuses_what_it_cannot_run_in_one_line():
    half = dict(DTYPE="float16", XL=1, WL=1)
    cases = [(kernels.ConvShape(64, 9, 9, 64, 3, PH=1, PW=1, G=4, **half), "one group"),
             (kernels.ConvShape(6, 15, 15, 18, 3, **half), "6 channels: a multiple of 4"),
             (kernels.ConvShape(8, 40, 40, 8, 17, **half), "wider than 16"),
             (kernels.ConvShape(64, 9, 9, 64, 3), "float16 or bfloat16")]
    for shape, why in cases:
        reason = V23.unsupported(shape)
        assert reason and why in reason and "\n" not in reason, reason
    assert "tile" in V23.unsupported(RESNET, {"V23_BN": 96})
    assert "tile" in V23.unsupported(RESNET, {"V23_STAGES": 2})
    assert "shared memory" in V23.unsupported(RESNET, {"V23_BN": 256, "V23_MI": 2, "V23_STAGES": 4})
    with pytest.raises(ValueError, match="v23: tile"):
        kernels.module_defines(23, RESNET, {"V23_WG": 3})
    # a stem's 3 channels are padded to 4 (half-precision data): it runs, 8-byte copies
    stem = kernels.ConvShape(3, 224, 224, 64, 7, 7, 2, 2, 3, 3, DTYPE="float16", XL=1, WL=1)
    assert V23.unsupported(stem) is None and V23.values(stem)["V23_VEC"] == 4
    assert V23.values(RESNET)["V23_VEC"] == 8


def test_every_tile_fits_shared_memory_on_networks_layers():
    for c, m, k in ((64, 64, 3), (3, 64, 7), (256, 64, 1), (512, 512, 3), (1024, 2048, 1)):
        shape = kernels.ConvShape(c, 14, 14, m, k, PH=k // 2, PW=k // 2, DTYPE="float16", XL=1, WL=1)
        for tile in V23.tune_tiles:
            values = V23.values(shape, tile)
            assert V23.unsupported(shape, tile) is None, (shape, tile)
            assert V23.shared_bytes(values) <= MAX_SHARED


def test_v23_is_an_autotuner_candidate_on_compute_capability_9_0_only_and_never_a_fallback():
    from ece408_op.kernels import autotune
    shape = kernels.ConvShape(128, 28, 28, 128, 3, PH=1, PW=1, DTYPE="bfloat16", XL=1, WL=1)
    on_hopper = [n for n, _ in autotune.candidates(shape, "sm_90")]
    assert 23 in on_hopper and 21 in on_hopper and on_hopper.index(23) < on_hopper.index(21)
    assert {n for n, _ in autotune.candidates(shape, "sm_90") if n == 23} and \
        len([1 for n, _ in autotune.candidates(shape, "sm_90") if n == 23]) == len(V23.tune_tiles)
    assert 23 not in {n for n, _ in autotune.candidates(shape, "sm_80")}
    assert 23 not in {n for n, _ in autotune.candidates(shape, "sm_100")}
    assert 23 not in kernels.fallback_order()
    assert kernels.default_version(shape) == 21                      # no table, no tuning: v21 as before
    assert "9.0" in V23.arch_reason("sm_80")
    grouped = kernels.ConvShape(64, 28, 28, 64, 3, PH=1, PW=1, G=64, DTYPE="float16", XL=1, WL=1)
    assert 23 not in {n for n, _ in autotune.candidates(grouped, "sm_90")}


def test_the_benchmark_table_in_the_docs_is_the_committed_runs():
    import json
    from types import SimpleNamespace

    from suitekit import ROOT
    from ece408_op.bench import hgmma
    result = json.loads((ROOT / "docs" / "bench" / "hgmma_h200.json").read_text())
    table = hgmma.markdown(result)
    assert (ROOT / "docs" / "bench" / "hgmma_h200.md").read_text() == table
    assert table.split("\n", 2)[2].strip() in (ROOT / "docs" / "gpu-dropin.md").read_text()
    assert hgmma.peak_tflops("NVIDIA H200") == hgmma.peak_tflops("NVIDIA H100 80GB HBM3") == 989.4
    assert hgmma.peak_tflops("NVIDIA A100") is None
    conv = SimpleNamespace(kernel_size=(3, 3), padding=(1, 1), dilation=(1, 1), stride=(2, 2), out_channels=128,
                           groups=1)
    assert hgmma.layer_flops(conv, (64, 64, 56, 56)) == 2.0 * 64 * 128 * 28 * 28 * 64 * 9
    rows = result["rows"]
    assert len(rows) == 32 and all(r["valid"] for r in rows)
    assert sum(r["auto_version"] == "v23 hgmma" for r in rows) == 30      # (the docs' count)
