"""Nsight Compute through the service on the GPU machine, in one command: a real ``serve`` with its
local worker on GPU 0 (bubblewrap where it runs there, else host), a team's development run whose
rai_build.yml builds a small CUDA program with nvcc, profiles it with ``ncu -o /build/report``, asks
for an Nsight Systems timeline too, and prints the report's SHA-256; then ``jobs download`` and
``ncu --import`` of the downloaded report, as a student opens it on a laptop. Skipped without a GPU,
nvcc or ncu (or the data the worker needs).

    source .devkit/env.sh && ECE408_DATA_DIR=DIR GPU_OUT=DIR cudapy -m pytest tests/service/test_gpu_build_profile.py -q -s

``GPU_OUT``: a folder that gets the transcript, the download's output, ncu's summary of the
downloaded report, the report itself and the server's log (tests/gpu_build_profile.sh runs it so).
"""
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from suitekit import ranked_engine
from servicekit import job_id_of
from teams import rai_yaml

from ece408_op.base import nsight
from ece408_op.grading.inputs import data_dir
from ece408_op.grading.machine import gpu_name
from ece408_op.grading.request import SubmitError

pytestmark = [pytest.mark.service,
              pytest.mark.skipif(gpu_name() is None, reason="no GPU (nvidia-smi lists none)"),
              pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc"),
              pytest.mark.skipif(nsight.find("ncu") is None, reason="no ncu (Nsight Compute)")]

VADD = r"""#include <cstdio>
__global__ void vadd(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
int main() {
    const int n = 1 << 20;
    float *a, *b, *c;
    cudaMallocManaged(&a, n * sizeof(float));
    cudaMallocManaged(&b, n * sizeof(float));
    cudaMallocManaged(&c, n * sizeof(float));
    for (int i = 0; i < n; i++) { a[i] = 1.0f; b[i] = 2.0f * i; }
    for (int r = 0; r < 3; r++) vadd<<<(n + 255) / 256, 256>>>(a, b, c, n);
    cudaError_t err = cudaDeviceSynchronize();
    printf("vadd %s: c[n-1] = %.1f\n", cudaGetErrorString(err), c[n - 1]);
    return err == cudaSuccess && c[n - 1] == 1.0f + 2.0f * (n - 1) ? 0 : 1;
}
"""
COMMANDS = ["nvcc -O2 -arch=sm_90 -o /build/vadd /src/vadd.cu",
            "ncu -o /build/report --clock-control none /build/vadd",
            "nsys profile -o /build/timeline /build/vadd",
            "sha256sum /build/report.ncu-rep"]
COUNTERS = "* ncu could not read the GPU's counters here ("


def keep(name, text):
    """Write ``text`` to $GPU_OUT/name where GPU_OUT is set (what the GPU machine's run brings back)."""
    out = os.environ.get("GPU_OUT")
    if out:
        Path(out, name).write_text(text)


@pytest.mark.timeout(900)
def test_ncu_report_made_on_the_worker_opens_after_jobs_download(running_service, tmp_path):
    try:
        data_dir()
    except SubmitError as exc:
        pytest.skip(str(exc))
    svc = running_service(tmp_path / "svc", workers=1, args=["--engine", ranked_engine()])
    try:
        token = svc.add_teams("profilers")["profilers"]
        team = tmp_path / "team"
        team.mkdir()
        (team / "vadd.cu").write_text(VADD)
        (team / "rai_build.yml").write_text(rai_yaml(COMMANDS, gpu_count=1))
        out = svc.cli("submit", team, token=token, timeout=600)
        keep("transcript.txt", out.stdout + "\n--- stderr ---\n" + out.stderr)
        job_id = job_id_of(out.stderr)
        text = out.stdout
        assert "==ERROR==" not in text, text[-3000:]          # a tool's error is one line of the runner's
        if COUNTERS in text:                                # ncu ran, and this machine keeps its counters
            assert text.count(COUNTERS) == 1
            pytest.skip(next(line for line in text.splitlines() if line.startswith(COUNTERS)))
        assert out.returncode == 0, text[-3000:] + out.stderr
        assert re.search(r"^vadd no error: c\[n-1\] = 2097151\.0$", text, re.M), text[-3000:]
        if nsight.find("nsys") is None:
            assert "\n* nsys is not installed on this worker; the command was not run\n" in text
        assert re.search(r"^==PROF== Profiling \"vadd\"", text, re.M), text[-3000:]
        digest = re.search(r"^([0-9a-f]{64})  \S*report\.ncu-rep$", text, re.M).group(1)
        kept = re.search(rf"^\* The build folder \((\d+) files, [\d.]+ MiB\) is kept until .* UTC: python -m "
                         rf"ece408_op jobs download {job_id}$", text, re.M)
        assert kept, text[-2000:]
        down = svc.cli("jobs", "download", job_id, token=token, cwd=tmp_path)
        keep("download.txt", down.stdout + down.stderr)
        assert down.returncode == 0, down.stderr
        folder = tmp_path / f"build-{job_id}"
        report = folder / "report.ncu-rep"
        assert hashlib.sha256(report.read_bytes()).hexdigest() == digest        # the bytes the worker had
        assert os.access(folder / "vadd", os.X_OK)
        listing = "".join(f"{p.relative_to(folder)} {p.stat().st_size} {oct(p.stat().st_mode & 0o777)}\n"
                          for p in sorted(folder.rglob("*")))
        keep("listing.txt", listing)
        shutil.copy(report, os.environ.get("GPU_OUT") or tmp_path)
        summary = subprocess.run([nsight.find("ncu"), "--import", str(report), "--print-summary", "per-kernel"],
                                 capture_output=True, text=True, timeout=300)
        keep("ncu-import.txt", summary.stdout + summary.stderr)
        assert summary.returncode == 0 and "vadd" in summary.stdout, summary.stdout + summary.stderr
    finally:
        svc.close()
        keep("serve.log", svc.log())
