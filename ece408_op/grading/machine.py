"""The machine a run measures on, by name: the GPU (nvidia-smi) or the CPU (/proc/cpuinfo), and
the refusal of a GPU milestone where there is no GPU."""
import os
import shutil
import subprocess
from pathlib import Path

from .request import GPU_MILESTONES, SubmitError

def gpu_query(field_name):
    """A field of the first visible NVIDIA GPU (nvidia-smi --query-gpu), or None where there is none."""
    if shutil.which("nvidia-smi") is None:
        return None
    argv = ["nvidia-smi", f"--query-gpu={field_name}", "--format=csv,noheader"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible:
        argv.append(f"--id={visible}")
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    values = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return values[0] if out.returncode == 0 and values else None


def gpu_name():
    return gpu_query("name")


def gpu_arch():
    """``sm_90`` for the first visible GPU (its compute capability), or None."""
    cap = gpu_query("compute_cap")
    try:
        major, minor = cap.split(".")
        return f"sm_{int(major)}{int(minor)}"
    except (AttributeError, ValueError):
        return None


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def check_device(milestone):
    """The device name to record; SubmitError where a GPU milestone has no GPU here."""
    if milestone in GPU_MILESTONES:
        name = gpu_name()
        if name is None:
            raise SubmitError(f"--submit {milestone} runs the GPU path and this host has no CUDA GPU "
                              f"(nvidia-smi lists none); run it on a GPU machine, or use --submit m2")
        return name
    return cpu_name()
