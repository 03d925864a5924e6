#!/bin/bash
# The GPU machine's run of tests/service/test_gpu_build_profile.py: serve with one local worker (host engine
# there: no bubblewrap), a development run that profiles a small CUDA program with ncu into /build,
# jobs download, ncu --import of the downloaded report. What it writes comes back under $OUT (at most
# 8 files): machine.txt, pytest.txt, and the test's transcript.txt, download.txt, listing.txt,
# report.ncu-rep, ncu-import.txt, serve.log.
#
#   From the checkout's root on that machine, with the environment kit in .devkit and Fashion-MNIST's
#   test split in .gpudata/fashion-mnist (docs/tests.md; the worker checks for its data):
#       bash tests/gpu_build_profile.sh          (DEVKIT=DIR: the kit elsewhere; OUT=DIR: where files go)
cd "$(dirname "$0")/.." || exit 1
source "${DEVKIT:-.devkit}/env.sh" || exit 1
[ -d .gpudata/fashion-mnist ] && export ECE408_DATA_DIR="$PWD/.gpudata/fashion-mnist"
export GPU_OUT="${OUT:-/tmp/gpu-build-profile}"
mkdir -p "$GPU_OUT"
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    echo "nvcc: $(command -v nvcc)  ncu: $(command -v ncu)  nsys: $(command -v nsys || echo none on the PATH)"
    ncu --version | tail -1
    grep -h RmProfilingAdminOnly /proc/driver/nvidia/params
} > "$GPU_OUT/machine.txt" 2>&1
cat "$GPU_OUT/machine.txt"
PYTHONUNBUFFERED=1 cudapy -m pytest tests/service/test_gpu_build_profile.py -q -s -rs -p no:cacheprovider 2>&1 \
    | tee "$GPU_OUT/pytest.txt"
exit "${PIPESTATUS[0]}"
