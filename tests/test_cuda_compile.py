"""Every CUDA source compiles for sm_90 (no GPU needed: CI has nvcc), without register spills."""
import re
import shutil
import subprocess

import pytest

from ece408_op import kernels

NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")

SHAPE_CLASSES = [
    kernels.ConvShape(1, 28, 28, 50, 5),      # ece408-high / -low
    kernels.ConvShape(1, 64, 64, 6, 5),       # 2018 conv1
    kernels.ConvShape(6, 30, 30, 16, 5),      # 2018 conv2
    kernels.ConvShape(12, 33, 33, 24, 5),     # 2019 conv2
    kernels.ConvShape(3, 9, 11, 7, 1),        # K = 1, odd sizes
    kernels.ConvShape(2, 7, 7, 3, 7),         # K = H
]
SOURCES = sorted(kernels.SOURCE.parent.glob("*.cu"))


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_source_compiles_alone(source, tmp_path):
    result = subprocess.run([NVCC, "-arch=sm_90", "-cubin", "-o", str(tmp_path / "out.cubin"), str(source)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("shape", SHAPE_CLASSES, ids=str)
def test_shape_class_compiles_without_spills(shape, tmp_path):
    defines = [f"-D{k}={v}" for k, v in sorted(shape.defines().items())]
    result = subprocess.run([NVCC, "-arch=sm_90", "-cubin", "-Xptxas", "-v", *defines,
                             "-o", str(tmp_path / "out.cubin"), str(kernels.SOURCE)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    entries = re.findall(r"Compiling entry function '(\w+)'", result.stderr)
    assert {f"conv_forward_v{n}" for n in (1, 2, 3, 4, 6, 7)} | {"im2col_v5", "gemm_v5"} <= set(entries)
    spills = re.findall(r"(\d+) bytes spill stores", result.stderr)
    assert spills and all(int(n) == 0 for n in spills), result.stderr


def test_header_lists_every_version():
    header = kernels.SOURCE.read_text().split("#ifndef")[0]
    for version in kernels.VERSIONS.values():
        assert re.search(rf"//\s+v{version.number} {version.name}\b", header), f"v{version.number} missing"
        assert f"conv_forward_v{version.number}" in kernels.SOURCE.read_text() or version.number == 5
