"""The backward kernels (kernels/backward/) on the CPU: every source compiles for sm_90 in every element type
without register spills (skips without nvcc), the packed sizes match backward.cuh's BwdDims, the version
rule and the split-K sizing keep their promises, and a layer they cannot take is a ShapeError."""
import math
import re
import shutil
import subprocess

import pytest

from ece408_op.errors import ShapeError
from ece408_op.kernels import backward

NVCC = shutil.which("nvcc")
SOURCES = sorted(backward.FOLDER.glob("*.cu"))
RESNET_3X3 = backward.layer_sizes((64, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1), 1)
DEPTHWISE = backward.layer_sizes((8, 32, 28, 28), (32, 1, 3, 3), (2, 2), (1, 1), (1, 1), 32)


def test_every_source_is_one_the_launcher_builds():
    assert set(backward.SOURCES.values()) == set(SOURCES) and len(SOURCES) == 2
    for (gradient, version), name in backward.KERNELS.items():
        assert version in backward.VERSIONS[gradient]
        source = backward.SOURCES["data" if gradient == "data" else "weight"].read_text()
        assert re.search(rf"void (__launch_bounds__\(\w+\) )?{name}\(", source)


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("elem", sorted(backward.ELEMS.values()))
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_source_compiles_for_sm90_without_spills(source, elem, tmp_path):
    result = subprocess.run([NVCC, "-arch=sm_90", "-cubin", f"-DELEM={elem}", "-Xptxas", "-v",
                             "-o", str(tmp_path / "out.cubin"), str(source)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", result.stderr)]
    assert spills and not any(spills), result.stderr


def test_packed_sizes_follow_the_structs_fields():
    text = (backward.FOLDER / "backward.cuh").read_text()
    struct = re.search(r"struct BwdDims \{(.*?)\};", text, re.S).group(1)
    ints = re.sub(r"\s", "", re.search(r"int (.*?);", struct, re.S).group(1)).split(",")
    divs = re.search(r"FastDiv (.*?);", struct).group(1).replace(" ", "").split(",")
    assert tuple(ints) == backward.DIMS_FIELDS
    assert tuple(d.removeprefix("div_") for d in divs) == backward.DIMS_DIVISORS
    args = backward.pack_dims(RESNET_3X3, 3, 64)
    assert len(args) == len(ints) + 2 * len(divs) and int(args[backward.DIMS_FIELDS.index("SPLIT")]) == 3


def test_the_rule_and_what_is_asked():
    assert backward.choose("data", RESNET_3X3) == "gemm" and backward.choose("data", DEPTHWISE) == "plain"
    assert backward.choose("weight", DEPTHWISE) == "splitk" and backward.choose("bias", RESNET_3X3) == "block"
    assert backward.choose("data", DEPTHWISE, "fast") == "gemm"
    assert backward.choose("weight", RESNET_3X3, "plain") == "plain"
    with pytest.raises(ShapeError, match="no data-gradient version 'splitk'"):
        backward.choose("data", RESNET_3X3, "splitk")


@pytest.mark.parametrize("sizes", [RESNET_3X3, DEPTHWISE,
                                   backward.layer_sizes((64, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3), (1, 1), 1)])
def test_split_k_covers_the_depth_once(sizes):
    split, chunk = backward.split_k(sizes, 132)
    depth = sizes["N"] * sizes["HO"] * sizes["WO"]
    assert chunk % backward.DEPTH == 0 and (split - 1) * chunk < depth <= split * chunk
    assert split * sizes["G"] <= 65535 and (split == 1 or chunk >= 256)
    tiles = math.ceil(sizes["MG"] / 64) * math.ceil(sizes["CG"] * sizes["KK"] / 64) * sizes["G"]
    assert tiles * split >= min(4 * 132, tiles * math.ceil(depth / 256)) * 0.5


def test_layers_the_kernels_cannot_take_are_shape_errors():
    with pytest.raises(ShapeError, match="2\\^31"):
        backward.layer_sizes((4096, 512, 32, 32), (8, 512, 1, 1), (1, 1), (0, 0), (1, 1), 1)
    with pytest.raises(ShapeError, match="not a convolution"):
        backward.layer_sizes((1, 6, 8, 8), (4, 4, 3, 3), (1, 1), (0, 0), (1, 1), 2)
    with pytest.raises(ShapeError, match="float64"):
        backward.backward_call((1, 3, 8, 8), (4, 3, 3, 3), (1, 1), (0, 0), (1, 1), 1, "float64")


def test_each_stride_phase_takes_exactly_the_taps_that_divide():
    # stride 2, pad 1, 3x3: even rows read the middle tap, odd rows the two outer ones
    assert backward.taps(0, 1, 1, 2, 3) == (1, 1, 1) and backward.taps(1, 1, 1, 2, 3) == (0, 2, 2)
    # stride 2, pad 3, dilation 2: every tap lands on odd rows; even rows' dx is 0 (no taps)
    assert backward.taps(0, 3, 2, 2, 5)[2] == 0 and backward.taps(1, 3, 2, 2, 5) == (0, 1, 5)
    assert backward.taps(0, 0, 1, 1, 7) == (0, 1, 7)                  # stride 1: one phase, every tap
    sizes = backward.layer_sizes((2, 6, 9, 10), (4, 6, 3, 4), (3, 2), (1, 2), (2, 1), 1)
    for phase in backward.phases(sizes):
        for axis, (a, first, step, count) in {"h": (phase["PA"], phase["P0"], phase["PSTEP"], phase["PCOUNT"]),
                                              "w": (phase["PB"], phase["Q0"], phase["QSTEP"], phase["QCOUNT"])}.items():
            s, p, d, k = (sizes["SH"], sizes["PH"], sizes["DH"], sizes["KH"]) if axis == "h" else \
                (sizes["SW"], sizes["PW"], sizes["DW"], sizes["KW"])
            assert [first + step * t for t in range(count)] == [q for q in range(k) if (a + p - q * d) % s == 0]
    assert len(backward.phases(sizes)) == 6


def test_the_tile_rule(monkeypatch):
    big = backward.layer_sizes((64, 256, 56, 56), (512, 256, 1, 1), (2, 2), (0, 0), (1, 1), 1)
    assert backward.tiles(big, 132) == (128, 128)
    assert backward.tiles(RESNET_3X3, 132) == (64, 64)               # 64 filters: a 128 tile half empty
    small = backward.layer_sizes((64, 512, 7, 7), (512, 512, 3, 3), (1, 1), (1, 1), (1, 1), 1)
    assert backward.tiles(small, 132) == (64, 128)                   # dx: 25 x 4 blocks of 128 < 2 a multiprocessor
    monkeypatch.setenv(backward.TILE_ENV, "128")
    assert backward.tiles(DEPTHWISE, 132) == (128, 128)
    monkeypatch.setenv(backward.TILE_ENV, "96")
    with pytest.raises(ShapeError, match="64 or 128"):
        backward.tiles(DEPTHWISE, 132)
