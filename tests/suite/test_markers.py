"""The ``gpu`` marker (tests/conftest.py): a test needing a GPU is marked so wherever its file is, by the
file's name (``test_gpu_*.py``) or by the ``gpu`` fixture it uses (``cuda`` too), and no other test is,
so that ``-m gpu`` picks a GPU machine's tests from any folder. Collected for real, in a child pytest."""
import os
import subprocess
import sys

import pytest

from suitekit import ROOT

FILES = ["tests/kernels/test_gpu_fused_kernel.py",
         "tests/conv/test_numpy_layer.py",
         "tests/data/test_reader_properties.py"]


def collected(*args):
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          *args, *FILES], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return {line.split("::")[0].rsplit("/", 1)[-1] for line in out.stdout.splitlines() if "::" in line}, out.stdout


@pytest.mark.slow                                   # two child collections: 23 s on the loaded machine
def test_gpu_picks_the_gpu_files_tests_and_only_them():
    files, out = collected("-m", "gpu")
    assert files == {"test_gpu_fused_kernel.py"}, out
    files, out = collected("-m", "not gpu")
    assert files == {"test_numpy_layer.py", "test_reader_properties.py"}, out      # tests/data/test_reader_properties.py's gpu: hypothesis's


@pytest.mark.slow                                   # a child pytest: 10 s on the loaded machine
def test_the_gpu_fixture_marks_a_test_outside_a_gpu_file(tmp_path):
    """A test of a file not named for the GPU that asks for the device is marked; its neighbour is not
    (a synthetic file, tests/conftest.py loaded as a plugin as tests/suite/test_tiers.py loads tiers.py)."""
    (tmp_path / "test_probe.py").write_text("def test_on_the_device(cuda):\n    pass\n\n\n"
                                            "def test_on_the_host():\n    pass\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "-p", "conftest", "-m", "gpu", "test_probe.py"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert [line for line in out.stdout.splitlines() if "::" in line] == ["test_probe.py::test_on_the_device"], \
        out.stdout + out.stderr
