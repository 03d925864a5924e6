"""`import mxnet` before `import ece408_op` works in any environment the package is installed in,
editable (`pip install -e`, what the Makefile does) or not: the package installs
`ece408_op-hook.pth` beside itself, which installs the import hook at interpreter start-up.

Each case builds a fresh virtual environment, installs this checkout into it (no network: no
dependencies, no build isolation) and runs a user's script that imports MXNet first."""
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT, require_mxnet

require_mxnet()
import mxnet  # noqa: E402
import numpy  # noqa: E402

# Top-level distributions the fresh environment borrows from this one (by symlink) instead of
# installing them: MXNet, NumPy and what MXNet imports.
BORROWED = ("mxnet", "numpy", "numpy.libs", "requests", "urllib3", "idna", "certifi", "charset_normalizer",
            "graphviz", "threadpoolctl.py", "setuptools", "pkg_resources", "_distutils_hack", "wheel",
            "packaging")
BUILD_TOOLS = ("setuptools", "wheel")      # their dist-info too: setuptools finds its commands through it

USER_SCRIPT = """
import sys
import mxnet as mx                                   # before ece408_op, as in the README
assert "numpy" in sys.modules
x, w = mx.nd.ones((1, 2, 5, 5)), mx.nd.ones((3, 2, 3, 3))
y = mx.nd.Custom(x, w, op_type="ece408_conv", num_filter=3, kernel=(3, 3), pad=(1, 1))
print(float(y.asnumpy()[0, 0, 2, 2]), float(y.asnumpy()[0, 0, 0, 0]))
"""
STARTUP_SCRIPT = "import sys; print('ece408_op' in sys.modules, 'numpy' in sys.modules, 'mxnet' in sys.modules)"


def _fresh_venv(tmp_path):
    if sys.flags.no_site:
        pytest.skip("this interpreter runs without site (-S): .pth files are not processed")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    ours = Path(sysconfig.get_path("purelib"))
    for name in BORROWED:
        if (ours / name).exists():
            (purelib / name).symlink_to(ours / name)
    for tool in BUILD_TOOLS:
        for info in ours.glob(f"{tool}-*.dist-info"):
            (purelib / info.name).symlink_to(info)
    return python, purelib


def _pip(python, *args):
    # pip runs from this environment against the fresh one's interpreter (--python, pip >= 22.3)
    result = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                             "--no-build-isolation", "--no-index", *args], capture_output=True, text=True,
                            env={**os.environ, "PIP_FIND_LINKS": ""})
    assert result.returncode == 0, result.stdout + result.stderr


def _source_copy(tmp_path):
    """This checkout's package files (so that the build writes nothing into the work tree)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "ece408_op", src / "ece408_op", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "setup.py", src)
    shutil.copy(ROOT / "README.md", src)
    return src


INSTALLS = {
    "editable-pep660": ["--use-pep517", "-e"],     # what `make` does (pip builds an editable wheel)
    "editable-develop": ["-e"],                    # pip's legacy path without build isolation: setup.py develop
    "normal": [],                                  # a wheel
}


@pytest.mark.slow
@pytest.mark.parametrize("how", sorted(INSTALLS))
def test_import_mxnet_first_works_after_install(tmp_path, how):
    python, purelib = _fresh_venv(tmp_path)
    src = _source_copy(tmp_path)
    _pip(python, *INSTALLS[how], str(src))
    assert (purelib / "ece408_op-hook.pth").is_file()
    run = dict(capture_output=True, text=True, cwd=tmp_path)         # not the checkout: the install
    startup = subprocess.run([str(python), "-c", STARTUP_SCRIPT], **run)
    assert startup.stdout.split() == ["True", "False", "False"], startup.stderr   # cheap: no NumPy, no MXNet
    result = subprocess.run([str(python), "-c", USER_SCRIPT], **run)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["18.0", "8.0"]


def test_without_the_hook_mxnet_first_fails_here(tmp_path):
    # Control: the same fresh environment without our package cannot import MXNet at all on this
    # NumPy (np.bool), which is what the hook repairs.
    if int(numpy.__version__.split(".")[0]) != 1 or int(numpy.__version__.split(".")[1]) < 24:
        pytest.skip(f"NumPy {numpy.__version__} still has np.bool")
    python, _ = _fresh_venv(tmp_path)
    result = subprocess.run([str(python), "-c", "import mxnet"], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode != 0 and "bool" in result.stderr
