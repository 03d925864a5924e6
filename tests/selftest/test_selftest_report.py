"""``python -m ece408_op selftest``: the reliability table of docs/reliability.md, run for real, and
every claim it makes checked again from its JSON report (so the table cannot drift from
what the code does); and the claims check itself shown to fail on a bad report."""
import json
import re
import subprocess

import pytest

from suitekit import ROOT, python_command, require_mxnet
from ece408_op.selftest import DEVICE_GROWTH_LIMIT_MIB, HOST_GROWTH_LIMIT_MIB, check_claims
from ece408_op.selftest import cases as case_table
from ece408_op.selftest.verdict import judge
from ece408_op.selftest import faults

# The first test pays for the module's selftest run (240-288 s on the shared 2-core CI machine,
# 2026-11-23; its own subprocess limit is 1200 s).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

require_mxnet("ece408_op.mx.inference")

# The failure classes (docs/reliability.md), each with words that a row of the table must contain.
ISSUE_CLASSES = {
    "images and labels of different fetches": "two different fetches",
    "images and labels of different sources/orders": "two different sources",
    "--force fetch interrupted at the wrong moment": "fetch killed between its renames",
    "raw file wins over its .gz": "raw file beside its .gz",
    "labels outside 0-9": "labels outside 0-9",
    "fewer images than asked": "fewer images in the file than asked",
    "'already present' without checking": "already present",
    "--force --source url over npm files": "fetch --source url over a folder of npm files",
    "unreadable data folder": "unreadable data folder",
    "read-only cache": "read-only cache",
    "full cache": "full cache",
    "destination that is a file": "--dest naming a file",
    ".gz with corrupt content": ".gz file with corrupt content",
    "IDX with 0 images": "0 images",
    "images not 28x28": "not 28x28",
    "checkpoint missing the conv weight": "without the convolution's weight",
    "NumPy 2 (m1/m2)": "NumPy 2 in the environment",
    "closed stdout": "stdout closed",
    "broken pipe": "broken pipe",
    "checkpoint that fails to load": "params file is truncated",
    "unknown model name": "unknown model name",
    "missing params file": "without its params file",
    "one byte every few seconds": "one byte every",
    "endless response body": "endless response body",
    "killed fetches leave .part files and /tmp folders": "SIGKILL during a fetch, then the next fetch",
}


@pytest.fixture(scope="module")
def selftest(tmp_path_factory):
    """The default selftest run (as docs/reliability.md shows it), with its JSON report."""
    out = tmp_path_factory.mktemp("selftest") / "report.json"
    result = subprocess.run([*python_command(), "-m", "ece408_op", "selftest", "--json", str(out)],
                            capture_output=True, text=True, cwd=ROOT, timeout=1200)
    assert out.exists(), result.stderr[-3000:]
    return result, json.loads(out.read_text())


def test_selftest_passes_and_prints_the_table(selftest):
    result, report = selftest
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert result.stdout.startswith("| # | failure class | bad input or fault | what the user gets now |")
    for row in report["rows"]:
        assert row["case"].replace("|", "\\|") in result.stdout
    assert report["problems"] == []


def test_every_failure_class_of_the_issue_has_a_row(selftest):
    _, report = selftest
    titles = [row["case"] for row in report["rows"]]
    missing = [cls for cls, words in ISSUE_CLASSES.items() if not any(words in title for title in titles)]
    assert not missing, missing


def test_every_row_is_what_the_table_claims(selftest):
    # Re-check each recorded row against its case's specification, from the recorded output alone.
    _, report = selftest
    specs = {case.title: case.expect for case in case_table.cases()}
    for row in report["rows"]:
        if "skipped" in row:
            assert row["skipped"], row                       # a skip always says why
            continue
        expect = specs[row["case"]]
        assert row["ok"] and not row["problems"], row
        assert "Traceback" not in row["got"] and row["status"] != -1, row
        if expect.status == "error":
            assert row["status"] not in (0, None), row
        elif isinstance(expect.status, int):
            assert row["status"] == expect.status, row
        if row["status"] and not expect.quiet and not expect.free_stderr and "got" in row and expect.message:
            assert re.search(expect.message, row["got"]), row
            assert row["got"].startswith("error: ") and "\n" not in row["got"], row


def test_load_figures_hold(selftest):
    _, report = selftest
    (cpu,) = [figures for figures in report["load"] if figures["device"] == "cpu"]
    repeated, threads = cpu["repeated"], cpu["threads"]
    assert repeated["inferences"] == 1000 and repeated["identical"] == 1000
    assert repeated["host_rss_growth_mib"] <= HOST_GROWTH_LIMIT_MIB
    assert threads["threads"] == 8 and threads["errors"] == []
    assert threads["identical"] == threads["expected"] == 8 * threads["runs_per_thread"]


def test_the_claims_check_can_fail(selftest):
    # A report with each kind of broken claim must be refused by check_claims ...
    _, good = selftest
    assert check_claims(good) == []
    bad_row = json.loads(json.dumps(good))
    bad_row["rows"][0].update(ok=False, problems=["exit status 0"])
    bad_growth = json.loads(json.dumps(good))
    bad_growth["load"][0]["repeated"]["host_rss_growth_mib"] = HOST_GROWTH_LIMIT_MIB + 1
    bad_threads = json.loads(json.dumps(good))
    bad_threads["load"][0]["threads"]["identical"] -= 1
    bad_device = json.loads(json.dumps(good))
    bad_device["load"][0]["repeated"]["device_growth_mib"] = DEVICE_GROWTH_LIMIT_MIB + 1
    for report in (bad_row, bad_growth, bad_threads, bad_device):
        assert check_claims(report), report
    # ... and judge() must refuse what a user must never get
    case = case_table.Case("x", "x", None, case_table.Expect(message="boom"))
    ctx = type("Ctx", (), {})()
    for status, stderr in ((0, "error: boom\n"), (1, "Traceback (most recent call last):\nerror: boom\n"),
                           (1, "error: boom\nerror: boom\n"), (1, "error: other\n"), (-1, "")):
        assert judge(case, faults.Result(status, "", stderr, 0.1), ctx), (status, stderr)
    assert judge(case, faults.Result(1, "", "error: boom\n", 0.1), ctx) == []


def test_gpu_load_figures_skip_cleanly_without_a_gpu(tmp_path):
    # --device gpu on this machine: the GPU figures are a one-line skip (or, on a GPU machine, figures)
    out = tmp_path / "report.json"
    result = subprocess.run([*python_command(), "-m", "ece408_op", "selftest", "--only", "no case matches this",
                             "--device", "gpu", "--inferences", "3", "--threads", "2", "--runs", "1",
                             "--json", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr
    gpu = [figures for figures in json.loads(out.read_text())["load"] if figures["device"] == "gpu"]
    assert len(gpu) == 1
    if "skipped" in gpu[0]:
        line = [text for text in result.stdout.splitlines() if text.startswith("Load figures, GPU path: skipped")]
        assert len(line) == 1 and "\n" not in gpu[0]["skipped"], result.stdout
    else:
        assert gpu[0]["repeated"]["identical"] == 3 and "device_growth_mib" in gpu[0]["repeated"]
        assert gpu[0]["threads"]["identical"] == 2 and gpu[0]["threads"]["errors"] == []
