"""Compiling a team's new-forward.cu: device code only, into a cubin the harness loads as data.

One command line for every place it runs (a student's machine, the grader's build sandbox):
``nvcc -cubin -arch=sm_XX -O3 -lineinfo`` (line info for Nsight Compute's source view).
"""
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import Ece408Error

SOURCE = "new-forward.cu"
CUBIN = "new-forward.cubin"
MAX_CUBIN_BYTES = 64 << 20
COMPILE_TIMEOUT = 600


class BuildError(Ece408Error):
    """new-forward.cu did not compile (the first error line; nvcc's whole log went to the transcript)."""


def nvcc_argv(source, output, arch, nvcc="nvcc"):
    return [nvcc, "-cubin", f"-arch={arch}", "-O3", "-lineinfo", "-o", str(output), str(source)]


def first_error(log):
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["nvcc failed without a message"])[0][:300]


def compile_kernels(team_dir, arch, stdout=None):
    """The cubin (bytes) of ``team_dir``/new-forward.cu for ``arch`` (``sm_90``); nvcc's output is
    written to ``stdout`` (a file object; default: this process's stderr) where it says anything."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise BuildError("nvcc not found on PATH; install the CUDA toolkit or add its bin folder "
                         "(e.g. /usr/local/cuda/bin) to PATH")
    source = Path(team_dir) / SOURCE
    if not source.is_file():
        raise BuildError(f"the team folder {team_dir} has no {SOURCE}")
    with tempfile.TemporaryDirectory(prefix="ece408-nvcc-") as tmp:
        output = Path(tmp) / CUBIN
        try:
            out = subprocess.run(nvcc_argv(source, output, arch, nvcc), capture_output=True, text=True,
                                 timeout=COMPILE_TIMEOUT, cwd=tmp)
        except subprocess.TimeoutExpired as exc:
            raise BuildError(f"nvcc ran past {COMPILE_TIMEOUT} s on {SOURCE}") from exc
        log = (out.stdout or "") + (out.stderr or "")
        if log.strip():
            import sys
            (stdout or sys.stderr).write(log if log.endswith("\n") else log + "\n")
        if out.returncode != 0 or not output.is_file():
            raise BuildError(f"{SOURCE} did not compile: {first_error(log)}")
        if os.path.getsize(output) > MAX_CUBIN_BYTES:
            raise BuildError(f"the compiled {SOURCE} is larger than {MAX_CUBIN_BYTES >> 20} MiB")
        return output.read_bytes()


def grader_cubin(arch):
    """The grader's own fill and check kernels for ``arch`` (``kernels.team.GRADER_SOURCE``),
    built by the trusted side and sent to the measuring process with its job."""
    from ..kernels.team import grader_cubin as build
    return build(arch)
