"""The suite's per-test time limit (pytest-timeout, configured in pytest.ini): a test that hangs
fails at the limit instead of stalling the run (a hang used to be stopped, if at all, by the
per-command timeout of one subprocess, which hid it)."""
import subprocess
import sys
import time

import pytest

from suitekit import ROOT


def test_every_test_runs_under_a_time_limit(pytestconfig):
    assert pytestconfig.pluginmanager.hasplugin("timeout"), "pytest-timeout is missing: pip install -e '.[test]'"
    assert 0 < float(pytestconfig.getini("timeout")) <= 600, pytestconfig.getini("timeout")


@pytest.mark.slow
def test_a_hanging_test_fails_at_the_limit(tmp_path):
    (tmp_path / "test_hang.py").write_text("import subprocess\n\n\ndef test_hang():\n"
                                            "    subprocess.run(['sleep', '600'])\n")
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c",
                             str(ROOT / "pytest.ini"), "-o", "timeout=2", str(tmp_path)],
                            capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 1 and "Timeout" in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]
    assert time.monotonic() - start < 60
