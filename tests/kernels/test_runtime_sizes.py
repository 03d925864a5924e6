"""The layer's sizes as a kernel argument: v8, v9, v13 and v20 build one module per tile (v13: per
window) for every layer, the sizes packed as common.cuh's ConvDims in the order the struct declares them,
divisions by run-time sizes exact (FastDiv); $ECE408_STATIC_SIZES=1 and layers the run-time path cannot take
build a module per shape as before. No GPU needed (tests/kernels/test_gpu_runtime_sizes.py runs them)."""
import random
import re

import numpy as np
import pytest

from ece408_op import kernels
from ece408_op.kernels.versions import version as version_module

S = kernels.ConvShape
LAYERS = [S(64, 56, 56, 64, 3, PH=1, PW=1), S(256, 14, 14, 512, 3, SH=2, SW=2, PH=1, PW=1),
          S(1024, 14, 14, 256, 1), S(3, 224, 224, 64, 7, SH=2, SW=2, PH=3, PW=3, BIAS=1)]
COMMON = kernels.VERSIONS[1].source_path.with_name("common.cuh")


def test_conv_dims_packs_the_struct_in_its_declared_order():
    text = COMMON.read_text()
    body = re.search(r"struct ConvDims \{(.*?)\};", text, re.S).group(1)
    ints = [name.strip() for line in re.findall(r"^\s*int ([^;]+);", body, re.M) for name in line.split(",")]
    divs = [name.strip() for name in re.search(r"FastDiv ([^;]+);", body).group(1).split(",")]
    assert tuple(ints) == version_module.DIMS_FIELDS
    assert tuple(d.removeprefix("div_") for d in divs) == version_module.DIMS_DIVISORS
    assert re.search(r"struct FastDiv \{\s*unsigned m;\s*int s;\s*\};", text)
    shape = LAYERS[1]
    args = version_module.conv_dims(shape)
    assert len(args) == len(ints) + 2 * len(divs)
    assert all(type(a) is np.int32 for a in args[:len(ints)])
    assert [type(a) for a in args[len(ints):]] == [np.uint32, np.int32] * len(divs)
    values = dict(zip(ints, map(int, args)))
    assert (values["HO"], values["WO"], values["HOWO"], values["GKK"], values["KHKW"]) == (7, 7, 49, 2304, 9)


def test_fast_div_is_exact_below_2_to_the_31():
    rng = random.Random(35)
    divisors = list(range(1, 2100)) + [rng.randrange(1, 1 << 24) for _ in range(500)] + [(1 << 20) + 1, 3 << 20]
    for d in divisors:
        m, s = version_module.fast_div(d)
        assert 0 <= m < 1 << 32
        for n in [0, 1, d - 1, d, d + 1, 2 * d - 1, (1 << 31) - 1] + [rng.randrange(0, 1 << 31) for _ in range(20)]:
            if n < 0:
                continue
            got = ((n * m) >> 32) >> s if m else n >> s
            assert got == n // d, (n, d)
    with pytest.raises(ValueError):
        # bad input: no division by zero
        version_module.fast_div(0)


@pytest.mark.parametrize("number", [8, 9, 13, 20])
def test_one_module_per_tile_serves_every_layer(number, monkeypatch):
    monkeypatch.delenv(version_module.STATIC_SIZES_ENV, raising=False)
    version = kernels.VERSIONS[number]
    tile = {8: {"V8_BP": 128, "V8_BF": 64, "V8_TP": 8, "V8_TF": 4}, 9: {"V9_WP": 4, "V9_WF": 2, "V9_MI": 2, "V9_NI": 4},
            13: {"V13_VEC": 4}, 20: {"V20_BN": 128, "V20_WG": 1}}[number]
    layers = LAYERS if number != 13 else [S(32, 112, 112, 32, 3, PH=1, PW=1, G=32), S(960, 7, 7, 960, 3, PH=1, PW=1, G=960),
                                          S(144, 56, 56, 144, 3, PH=1, PW=1, G=144, BIAS=1)]
    specs = {kernels.module_spec(number, version.inner(s), tile) for s in layers if version.unsupported(s, tile) is None}
    assert len(specs) == 1
    defines = next(iter(specs)).define_dict()
    assert defines["CONV_DYNAMIC"] == 1
    sizes = {k for k in defines if k.startswith("CONV_") and k != "CONV_DYNAMIC"}
    assert sizes == ({"CONV_KH", "CONV_KW", "CONV_SW", "CONV_DW"} if number == 13 else set())
    # another window is another v13 module; the run-time sizes are off with the switch, and where the layer
    # cannot take them (v8/v9: more than 64 taps go through no mask)
    if number == 13:
        other = S(32, 56, 56, 32, 5, SH=2, SW=2, PH=2, PW=2, G=32)
        assert kernels.module_spec(13, other, tile) not in specs
    monkeypatch.setenv(version_module.STATIC_SIZES_ENV, "1")
    static = {kernels.module_spec(number, version.inner(s), tile) for s in layers if version.unsupported(s, tile) is None}
    assert len(static) == len([s for s in layers if version.unsupported(s, tile) is None]) > 1
    assert all(spec.define_dict()["CONV_DYNAMIC"] == 0 and "CONV_C" in spec.define_dict() for spec in static)


def test_layers_with_more_than_64_taps_build_per_shape():
    wide = S(3, 40, 40, 8, 9)                  # 81 taps, no padding: v8/v9 run it with the sizes as #defines
    for number in (8, 9):
        assert kernels.VERSIONS[number].unsupported(wide) is None
        defines = kernels.module_defines(number, wide)
        assert defines["CONV_DYNAMIC"] == 0 and defines["CONV_KH"] == 9


def test_a_plan_keeps_the_sizes_for_its_launch(monkeypatch):
    """plan.defines holds the layer's sizes whatever the module (the launch sizes its grid from them)."""
    monkeypatch.delenv(version_module.STATIC_SIZES_ENV, raising=False)
    from ece408_op.kernels.plans import module_defines
    shape = LAYERS[0]
    assert "CONV_C" not in module_defines(20, shape)
    assert kernels.VERSIONS[20].shared_bytes({**shape.defines(), **module_defines(20, shape)}) > 0


@pytest.mark.slow                                   # measured nvcc on the shared modules: 18 s (loaded machine)
def test_warmup_gpu_builds_the_shared_modules_without_a_gpu(tmp_path, monkeypatch, capsys):
    """``warmup --gpu`` builds the modules most layers share into the GPU cache folder (no GPU needed)."""
    import shutil
    from ece408_op.cli import main
    from ece408_op.kernels import autotune
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    monkeypatch.setenv("ECE408_GPU_CACHE", str(tmp_path))
    monkeypatch.delenv("ECE408_CUBIN_CACHE", raising=False)
    assert main(["warmup", "--gpu", "--arch", "sm_90", "--precision", "fp32"]) == 0
    count = len(autotune.shared_modules("sm_90", "fp32"))
    assert f"{count} GPU modules for sm_90 (fp32) ready" in capsys.readouterr().out
    assert len(list((tmp_path / "cubin").glob("*.cubin.gz"))) == count
    assert all(spec.source.name in ("v08_gemm.cu", "v13_depthwise.cu") for spec in autotune.shared_modules("sm_90", "fp32"))
