"""The tiers' check itself (tests/tiers.py, run by make test-fast): it fails a run whose fast tier has
drifted, naming each test and its time, and passes one that has not; every run writes its durations.
Each case is a pytest of its own on a synthetic test file, with limits small enough to cross."""
import json
import os
import subprocess
import sys

import pytest

from suitekit import ROOT

TIERS_FOLDER = ROOT / "tests"           # where tiers.py is, whichever folder holds this file

CONFTEST = """
import tiers


def pytest_addoption(parser):
    tiers.add_options(parser)


def pytest_configure(config):
    tiers.register(config)
"""

TESTS = """
import time

import pytest


def test_quick():
    pass


def test_sleeps_past_the_fast_tier():
    time.sleep(0.6)


@pytest.mark.slow
def test_slow_and_marked_so():
    time.sleep(0.6)
"""


def run_pytest(folder, *args, ini="fast_tier_test_s = 0.1\nfast_tier_margin = 3\nfast_tier_total_s = 10\n"):
    (folder / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n    service: service\n" + ini)
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "test_synthetic.py").write_text(TESTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TIERS_FOLDER), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", *args], cwd=folder,
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.slow                                   # measured 2.8 s (loaded machine)
def test_a_fast_tier_test_past_its_limit_fails_the_run_naming_it(tmp_path):
    out = run_pytest(tmp_path, "--fast-tier-check")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "3 passed" in out.stdout
    assert "the fast tier has drifted" in out.stdout, out.stdout
    offenders = [line for line in out.stdout.splitlines() if line.endswith("(a fast-tier test's call may take 0.3 s)")]
    assert len(offenders) == 1 and "test_synthetic.py::test_sleeps_past_the_fast_tier" in offenders[0], out.stdout
    assert float(offenders[0].split()[0]) >= 0.6
    assert "test_slow_and_marked_so" not in out.stdout.split("fast tier check")[-1]     # the slow tier's own


@pytest.mark.slow                                   # measured 2.8 s (loaded machine)
def test_a_fast_tier_past_its_budget_fails_the_run(tmp_path):
    out = run_pytest(tmp_path, "--fast-tier-check", ini="fast_tier_test_s = 5\nfast_tier_total_s = 0.2\n"
                                                         "fast_tier_total_margin = 2\n")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "the fast tier's tests took" in out.stdout and "past its budget of 0.4 s" in out.stdout, out.stdout
    assert "test_synthetic.py::test_sleeps_past_the_fast_tier" in out.stdout.split("fast tier check")[-1]


@pytest.mark.slow                                   # measured 2.2 s (loaded machine)
def test_a_fast_tier_within_its_limits_passes_and_every_run_records_its_durations(tmp_path):
    out = run_pytest(tmp_path, "--fast-tier-check", "-m", "not slow and not service",
                     ini="fast_tier_test_s = 5\nfast_tier_total_s = 60\n")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "fast tier check" not in out.stdout
    record = json.loads((tmp_path / ".pytest_cache" / "d" / "ece408" / "durations-not-slow-and-not-service.json").read_text())
    assert record["markexpr"] == "not slow and not service" and record["limits_s"]["fast_tier_test"] == 15
    test = record["tests"]["test_synthetic.py::test_sleeps_past_the_fast_tier"]
    assert test["fast"] and test["call_s"] >= 0.6


@pytest.mark.slow                                   # measured 2.9 s (loaded machine)
def test_without_the_option_a_slow_fast_tier_test_fails_nothing(tmp_path):
    out = run_pytest(tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    record = json.loads((tmp_path / ".pytest_cache" / "d" / "ece408" / "durations-all.json").read_text())
    assert record["tests"]["test_synthetic.py::test_slow_and_marked_so"]["fast"] is False


@pytest.mark.slow                                   # measured 5.2 s (loaded machine)
@pytest.mark.parametrize("workers", ["2"])
def test_the_check_sees_every_worker_s_tests_under_xdist(tmp_path, workers):
    pytest.importorskip("xdist")
    out = run_pytest(tmp_path, "--fast-tier-check", "-n", workers)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "test_synthetic.py::test_sleeps_past_the_fast_tier" in out.stdout.split("fast tier check")[-1]
