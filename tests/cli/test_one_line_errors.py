"""Clean imports and one-line errors for the GPU path's failure modes (runs with or without a GPU)."""
import os
import shutil
import subprocess

import numpy as np
import pytest

from suitekit import ROOT, python_command, require_mxnet, run_script
from ece408_op import kernels
from ece408_op.errors import GpuError


@pytest.mark.slow                                   # measured 1.6 s (loaded machine)
def test_import_is_clean_with_warnings_as_errors():
    import ece408_op
    # Where MXNet is unusable the package still imports (kernel layer only).
    modules = "ece408_op" if ece408_op.mxnet_unavailable() else "ece408_op, ece408_op.mx.inference, mxnet"
    result = subprocess.run([*python_command(), "-W", "error", "-c", f"import {modules}"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_compat_restores_expired_numpy_aliases():
    require_mxnet()                                # needs the MXNet environment (NumPy < 2)
    assert np.bool is bool and np.int is int and np.object is object


@pytest.mark.slow                                   # measured 1.7 s (loaded machine)
def test_m3_without_a_usable_gpu_is_one_line_error():
    # bad input: no visible CUDA device (and, on CI, no PyCUDA at all)
    require_mxnet("ece408_op.mx.inference")
    result = run_script("m3_gpu.py", 10, env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "PyCUDA is not installed" in lines[0] or "CUDA" in lines[0]
    assert result.stdout == ""                      # fails before printing any transcript


def test_missing_nvcc_is_reported(monkeypatch, tmp_path):
    # bad input: a PATH without nvcc
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GpuError, match="nvcc not found on PATH"):
        kernels.require_nvcc()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_compile_error_becomes_one_line(tmp_path):
    # bad input: a kernel source with a syntax error, through the real nvcc
    source = kernels.VERSIONS[1].source_path
    broken = tmp_path / "broken.cu"
    broken.write_text(source.read_text().replace("float acc = 0.f;", "float acc = 0.f", 1))
    result = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-I", str(source.parent), "-o", os.devnull, str(broken)],
                            capture_output=True, text=True)
    assert result.returncode != 0
    line = kernels.compile_error_line(result.stdout + result.stderr)
    assert "error" in line and "\n" not in line
