"""Every CUDA source compiles for sm_90 (no GPU needed: CI has nvcc), alone and without register spills;
each file's standalone defaults are the (tuned) course layer; a plan builds its version's file alone."""
import re
import shutil
import subprocess

import pytest

from ece408_op import kernels
from ece408_op.kernels.build import source_files
from ece408_op.kernels.versions import version as version_module
from suitekit import ROOT as ROOT_DIR

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")

SHAPE_CLASSES = [
    kernels.ConvShape(1, 28, 28, 50, 5),      # ece408-high / -low
    kernels.ConvShape(1, 64, 64, 6, 5),       # 2018 conv1
    kernels.ConvShape(6, 30, 30, 16, 5),      # 2018 conv2
    kernels.ConvShape(12, 33, 33, 24, 5),     # 2019 conv2
    kernels.ConvShape(3, 9, 11, 7, 1),        # K = 1, odd sizes
    kernels.ConvShape(2, 7, 7, 3, 7),         # K = H
    kernels.ConvShape(64, 56, 56, 64, 3, 3, 1, 1, 1, 1, BIAS=1),           # ResNet 3x3, padding, bias
    kernels.ConvShape(64, 56, 56, 128, 3, 3, 2, 2, 1, 1),                    # stride 2
    kernels.ConvShape(32, 28, 28, 32, 3, 3, PH=1, PW=1, G=32),               # depthwise
    kernels.ConvShape(16, 20, 20, 32, 3, 5, DH=2, DW=2, G=4),                # dilation, rectangular
    kernels.ConvShape(3, 226, 226, 64, 3),    # VGG's first layer as v7 sees it (x padded): v7 spilled here
    kernels.ConvShape(512, 7, 7, 512, 3, PH=1, PW=1),                        # ResNet's last 3x3 (v9 at 256 threads)
]
FOLDER = kernels.VERSIONS[1].source_path.parent
SOURCES = sorted(FOLDER.glob("*.cu"))
OWNERS = [*kernels.VERSIONS.values(), kernels.FUSED]


def _owner_key(owner):
    return kernels.FUSED if owner is kernels.FUSED else owner.number


def test_every_version_has_its_file_and_every_file_a_version():
    assert {owner.source_path for owner in OWNERS} == set(SOURCES)
    assert all(path.exists() for path in SOURCES)


@pytest.mark.slow
@needs_nvcc
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_source_compiles_alone(source, tmp_path):
    arches = ["sm_90", "sm_90a"] if any(v.arch_features for v in kernels.VERSIONS.values()
                                        if v.source_path == source) else ["sm_90"]
    for arch in arches:
        result = subprocess.run([NVCC, f"-arch={arch}", "-cubin", "-o", str(tmp_path / "out.cubin"), str(source)],
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr


def _ladder_defines(shape):
    """Every owner's #defines for ``shape`` at once (each version's constants computed on the same layer)."""
    defines = {**shape.defines(), "CONST_WEIGHTS": version_module.CONST_WEIGHTS}
    for owner in OWNERS:
        defines.update(owner.defines(shape))
    return defines


@pytest.mark.slow
@needs_nvcc
@pytest.mark.parametrize("shape", SHAPE_CLASSES, ids=str)
def test_shape_class_compiles_without_spills(shape, tmp_path):
    # every file at once, in one translation unit (its headers guarded): one nvcc run per shape class
    ladder = tmp_path / "ladder.cu"
    ladder.write_text("".join(f'#include "{source}"\n' for source in SOURCES))
    defines = [f"-D{k}={v}" for k, v in sorted(_ladder_defines(shape).items())]
    result = subprocess.run([NVCC, "-arch=sm_90", "-cubin", "-Xptxas", "-v", *defines,
                             "-o", str(tmp_path / "out.cubin"), str(ladder)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    entries = re.findall(r"Compiling entry function '(\w+)'", result.stderr)
    assert {f"conv_forward_v{n}" for n in (1, 2, 3, 4, 6, 7, 8, 9)} | {"im2col_v5", "gemm_v5", "fused_forward",
                                                                       "tanh_pool"} <= set(entries)
    spills = re.findall(r"(\d+) bytes spill stores", result.stderr)
    assert spills and all(int(n) == 0 for n in spills), result.stderr


def test_each_file_says_how_its_versions_differ_and_holds_their_kernels():
    for owner in OWNERS:
        text = owner.source_path.read_text()
        header = re.split(r"^#", text, maxsplit=1, flags=re.M)[0]     # the opening comment, before the first directive
        if owner is not kernels.FUSED:
            assert re.search(rf"//\s+v{owner.number} {owner.name}\b", header), f"{owner.label} missing"
        code = "".join(path.read_text() for path in source_files(owner.source_path))
        for entry in (owner.kernel,) if owner is kernels.FUSED else owner.kernels:
            assert re.search(rf'extern "C" __global__ void (__launch_bounds__\([^)]*\)\s+)?{entry}\(', code), entry


def test_the_cubin_cache_is_keyed_on_exactly_the_sources_a_module_includes(tmp_path, monkeypatch):
    from ece408_op.kernels import build
    monkeypatch.setattr(build, "_texts", {})
    (tmp_path / "used.cuh").write_text("#pragma once\n#define A 1\n")
    (tmp_path / "unused.cuh").write_text("#define B 1\n")
    (tmp_path / "m.cu").write_text('#include "used.cuh"\n')
    spec = build.ModuleSpec(tmp_path / "m.cu", (("CONV_M", 50),))
    assert source_files(spec.source) == [tmp_path / "m.cu", tmp_path / "used.cuh"]
    before = build.cubin_path(spec, "sm_90")
    (tmp_path / "unused.cuh").write_text("#define B 2\n")
    build._texts.clear()
    assert build.cubin_path(spec, "sm_90") == before
    (tmp_path / "used.cuh").write_text("#pragma once\n#define A 2\n")
    build._texts.clear()
    assert build.cubin_path(spec, "sm_90") != before
    assert build.cubin_path(build.ModuleSpec(spec.source, (("CONV_M", 49),)), "sm_90") != build.cubin_path(spec, "sm_90")


def _source_defaults(source):
    """NAME -> value of every ``#ifndef NAME / #define NAME value`` default in ``source`` and its headers, the
    first of each name (the one the preprocessor keeps). A file built with the layer's sizes at run time
    (CONV_DYNAMIC 1) leaves out common.cuh's defaults of the sizes (its other branch), keeping its own."""
    pattern = r"#ifndef (\w+)\n#define \1 (\w+)"
    values = {}
    for name, value in re.findall(pattern, "".join(p.read_text() for p in source_files(source))):
        values.setdefault(name, value)
    out = {name: int(values.get(value, value)) for name, value in values.items()}
    if out.get("CONV_DYNAMIC") == 1:
        own = dict(re.findall(pattern, source.read_text()))
        out = {name: value for name, value in out.items() if not name.startswith("CONV_") or name in own}
    elif out.get("CONV_DYNAMIC") == 0:
        del out["CONV_DYNAMIC"]               # (common.cuh's: the sizes are #defines; the launcher passes them)
    return out


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_source_defaults_are_the_tuned_course_layer(source):
    # what a plan of each version built from the file passes for the course layer (v4 and v14 share a
    # file: together), so that a standalone nvcc build is the course's module
    course = kernels.ConvShape(1, 28, 28, 50, 5)
    passed = {}
    for owner in OWNERS:
        if owner.source_path == source:
            passed.update(kernels.module_defines(_owner_key(owner), course))
    passed.pop("ARCH_FEATURES", None)                    # (how v20 is built: for sm_90a)
    assert _source_defaults(source) == passed
    if source == kernels.VERSIONS[7].source_path:
        from ece408_op.kernels import tuning
        stored, defaults = tuning.v7_values(), _source_defaults(source)
        assert defaults["V7_THREADS"] == stored["THREADS"] and defaults["VEC"] == stored["VEC"]
        unroll = course.M if stored["UNROLL_M"] == "full" else min(int(stored["UNROLL_M"]), course.M)
        assert defaults["V7_UNROLL_M"] == unroll and defaults["V7_STREAM"] == stored["STREAM"]


def test_tuning_overrides_change_the_module_defines():
    course = kernels.ConvShape(1, 28, 28, 50, 5)
    base = kernels.module_defines(7, course)
    other = kernels.module_defines(7, course, {"THREADS": 128, "UNROLL_M": 5, "VEC": 8})
    assert (other["V7_THREADS"], other["V7_UNROLL_M"], other["VEC"]) == (128, 5, 8) != \
        (base["V7_THREADS"], base["V7_UNROLL_M"], base["VEC"])
    from ece408_op.bench.sweep import sweep_configs
    configs = sweep_configs()
    keys = {kernels.module_spec(7, course, c) for c in configs}
    assert len(configs) == 48 and len(keys) == 48       # every config is its own module
    with pytest.raises(ValueError, match="unknown tuning keys"):
        # bad input: a tuning key that does not exist
        kernels.module_defines(7, course, {"WARP": 2})
    with pytest.raises(ValueError, match="does not divide"):
        # bad input: a v9 tile whose x tile cannot be shared out among its threads
        kernels.module_defines(9, course, {"V9_ACOLS": 3})
    with pytest.raises(ValueError, match=r"v8: tile .*V8_TP=2.* does not divide"):
        # bad input: a v8 micro-tile the kernel's static_assert refuses, caught before nvcc
        kernels.module_defines(8, course, {"V8_TP": 2, "V8_BP": 64, "V8_BF": 64, "V8_TF": 4})


def test_sweep_winner_keeps_the_stored_tuning_within_noise():
    from ece408_op.bench.sweep import pick_winner
    stored = {"VEC": 4, "UNROLL_M": "full", "STREAM": 1, "THREADS": 256}
    row = lambda ms, valid=True, **kw: {**stored, **kw, "median_s": ms / 1e3, "valid": valid}  # noqa: E731
    rows = [row(0.425, UNROLL_M=5), row(0.427), row(0.300, valid=False, VEC=8)]
    assert pick_winner(rows, stored) is rows[1]                    # a 0.5% tie: keep what is stored
    rows[1]["median_s"] = 0.500e-3
    assert pick_winner(rows, stored) is rows[0]                    # clearly slower: the fastest valid wins
    assert pick_winner([row(1.0, valid=False)], stored) is None
    # The committed sweep table supports the committed tuning.
    import json
    sweep = json.loads((ROOT_DIR / "docs" / "bench" / "v7_sweep.json").read_text())
    from ece408_op.kernels import tuning
    best = pick_winner(sweep["rows"], tuning.v7_values())
    assert {key: best[key] for key in tuning.V7_KEYS} == tuning.v7_values()


def test_kernel_notes_quote_the_committed_sweep_table():
    notes = (ROOT_DIR / "docs" / "kernel-notes.md").read_text()
    quoted = notes.split("<!-- sweep:begin -->\n", 1)[1].split("<!-- sweep:end -->", 1)[0]
    assert quoted == (ROOT_DIR / "docs" / "bench" / "v7_sweep.md").read_text()


@pytest.mark.slow                                   # measured 1.7 s (loaded machine)
@needs_nvcc
def test_a_plan_builds_only_its_own_kernels(tmp_path):
    shape = kernels.ConvShape(6, 30, 30, 16, 5)
    module = kernels.module_spec(9, shape)
    result = subprocess.run([NVCC, "-arch=sm_90", "-cubin", "-Xptxas", "-v", *[f"-D{k}={v}" for k, v in module.defines],
                             "-o", str(tmp_path / "out.cubin"), str(module.source)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    entries = set(re.findall(r"Compiling entry function '(\w+)'", result.stderr))
    assert entries == {"conv_forward_v9", "pad_input", "add_bias", "add_into", "tanh_pool"}


CUOBJDUMP = shutil.which("cuobjdump")


@needs_nvcc
@pytest.mark.skipif(CUOBJDUMP is None, reason="cuobjdump not on PATH")
@pytest.mark.parametrize("shape, wide", [
    (kernels.ConvShape(3, 224, 224, 64, 3, PH=1, PW=1), True),    # VGG's first: x padded to 226 wide, y 224
    (kernels.ConvShape(1, 28, 28, 50, 5), True),                   # the course layer
    (kernels.ConvShape(1, 70, 70, 12, 5), False),                  # 66 outputs a row: strips of 4 do not fit
], ids=str)
def test_v7_writes_y_in_16_byte_stores_where_its_rows_allow(shape, wide, tmp_path):
    """v7's stores are 16 bytes wide wherever y's rows are (WO a multiple of 4), whatever x's width:
    VGG's first layer used to store one float at a time because its padded x rows are 226 wide."""
    module = kernels.module_spec(7, kernels.VERSIONS[7].inner(shape))
    cubin = tmp_path / "v7.cubin"
    subprocess.run([NVCC, "-arch=sm_90", "-cubin", *[f"-D{k}={v}" for k, v in module.defines],
                    "-o", str(cubin), str(module.source)], check=True, capture_output=True)
    sass = subprocess.run([CUOBJDUMP, "-sass", "-fun", "conv_forward_v7", str(cubin)],
                          check=True, capture_output=True, text=True).stdout
    stores = re.findall(r"\bSTG\.E[\w.]*", sass)
    assert stores, sass[:2000]
    if wide:
        assert all(s.endswith(".128") for s in stores), sorted(set(stores))
    else:                          # one float at a time, streamed whatever the tuning (Strip.stream)
        assert not any(s.endswith(".128") for s in stores) and all(".EF" in s for s in stores), sorted(set(stores))


V20_LAYERS = [
    kernels.ConvShape(128, 28, 28, 128, 3, PH=1, PW=1),     # ResNet-18's 28x28 stride-1 layer
    kernels.ConvShape(64, 56, 56, 64, 3, PH=1, PW=1, BIAS=1),  # 64 filters: V20_BN 64, a bias
    kernels.ConvShape(12, 36, 36, 24, 7),                   # 2019 conv2 (padded by the course harness)
    kernels.ConvShape(256, 14, 14, 512, 1, SH=2, SW=2),     # 1x1 stride 2
]


def _ptxas(defines, arch, tmp_path):
    source = kernels.VERSIONS[20].source_path
    result = subprocess.run([NVCC, f"-arch={arch}", "-cubin", "-Xptxas", "-v", *[f"-D{k}={v}" for k, v in sorted(defines.items())],
                             "-o", str(tmp_path / "v20.cubin"), str(source)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    block = result.stderr.split("Compiling entry function 'conv_forward_v20'")[1].split("Compiling entry function")[0]
    registers = int(re.search(r"Used (\d+) registers", block).group(1))
    return result.stderr, block, registers


@pytest.mark.slow
@needs_nvcc
@pytest.mark.parametrize("case", [(0, {})] + [(0, o) for o in kernels.VERSIONS[20].tune_tiles[1:]] +
                         [(i, {}) for i in range(1, len(V20_LAYERS))], ids=str)
def test_v20_builds_its_wgmma_kernel_for_sm_90a_without_spills_or_serialisation(case, tmp_path):
    from ece408_op.kernels.build import feature_arch
    layer, overrides = V20_LAYERS[case[0]], case[1]
    defines = kernels.module_defines(20, layer, overrides)
    assert feature_arch(tuple(defines.items()), "sm_90") == "sm_90a"          # wgmma exists only there
    assert feature_arch(tuple(defines.items()), "sm_100") == "sm_100"         # (and v20 refuses 10.0 itself)
    assert feature_arch(kernels.module_spec(9, layer).defines, "sm_90") == "sm_90"
    log, block, registers = _ptxas(defines, "sm_90a", tmp_path)
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", block), block
    assert registers >= defines["V20_BN"] // 2, f"{registers} registers: the accumulators are not in registers"
    # ptxas serialises wgmma (waits after each one) when it cannot prove the operands stay put: a 2-4x loss
    assert "serialized" not in log, [line for line in log.splitlines() if "serialized" in line]
    _, _, plain = _ptxas(defines, "sm_90", tmp_path)                         # without the feature set: the trap
    assert plain < 24, f"the sm_90 (no wgmma) build of v20 has a body of {plain} registers"
