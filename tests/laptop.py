"""A laptop as the tests meet it: a wheel of this checkout, installed with the client's extra into a
fresh virtual environment (from the package index) where NumPy, MXNet and Numba cannot be
imported; the client's commands run there as a student runs them."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from suitekit import ROOT


def source_copy(tmp_path):
    """This checkout's package files (so that the build writes nothing into the work tree)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "ece408_op", src / "ece408_op", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "setup.py", src)
    shutil.copy(ROOT / "README.md", src)
    return src



def build_wheel(out):
    """A wheel of this checkout in the folder ``out``, built offline (no dependencies, no build isolation)."""
    src = source_copy(Path(out) / "build")
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                             "-w", str(out), str(src)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = Path(out).glob("ece408_op-*.whl")
    return wheel


def client_venv(folder, wheel):
    """A fresh virtual environment in ``folder`` with ``wheel`` and its client extra, from the package index;
    its python. Skips where the index cannot be reached, or this interpreter runs without site."""
    if sys.flags.no_site:
        pytest.skip("this interpreter runs without site (-S): a virtual environment's packages are not seen")
    venv = Path(folder) / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    result = subprocess.run([str(python), "-m", "pip", "install", "-q", f"{wheel}[client]"],
                            capture_output=True, text=True, timeout=600)
    skip_without_the_index(result)
    assert result.returncode == 0, result.stdout + result.stderr
    return python


def skip_without_the_index(result):
    """Skip where pip found no httpx at all (no package index here): the client's own requirement."""
    if result.returncode != 0 and "No matching distribution found for httpx" in result.stderr:
        pytest.skip(f"the package index cannot be reached here: {result.stderr.strip().splitlines()[-1]}")


def student_env(home):
    """A student's environment: this machine's, less every ECE408_ and XDG_ variable and PYTHONPATH, with
    ``home`` (empty) as HOME: where the client keeps its login is its own business."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ECE408_", "XDG_")) and k not in ("PYTHONPATH", "HOME")}
    env["HOME"] = str(home)
    return env
