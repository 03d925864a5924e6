"""A team's kernels through MXNet on the GPU machine (mxpy), skipped without a GPU: the milestones
(m3, final, --profile) of a team made by init print the course's lines with the right Correctness;
the worked examples are correct on both models; through the ranked runner (--submit m3 and final,
engine bubblewrap where it runs there, else host) device printf stays in the transcript, final times
five fresh runs per layer, and a kernel that replays a kept result, computes only some images or
wipes its buffers is refused. MXNet is imported
before any CUDA context (libmxnet loaded after one crashes)."""
import re

import pytest

from suitekit import ranked_engine as engine, require_mxnet

require_mxnet()

from gpu_sources import ONE_IMAGE_CU, PRINTF_CU, REPLAY_CU, REPLAY_LAUNCH, TAMPER_CU, TAMPER_LAUNCH  # noqa: E402
from teams import cli, reference_accuracies, team_project  # noqa: E402

from ece408_op.grading.machine import gpu_name  # noqa: E402
from ece408_op.tasks.conv import SOLUTIONS  # noqa: E402

pytestmark = pytest.mark.skipif(gpu_name() is None, reason="no GPU (nvidia-smi lists none)")
EXAMPLES = {p.name: p for p in sorted(SOLUTIONS.glob("correct/gpu-*"))}   # the task's correct GPU teams
COURSE = re.compile(r"Loading fashion-mnist data\.\.\. done\nLoading model\.\.\. done\nNew Inference\n"
                    r"Op Time: \d+\.\d{6}\nCorrectness: (\S+) Model: (\S+)\n\Z")


@pytest.fixture(scope="module")
def expected():
    require_mxnet()
    return reference_accuracies(1000)


def test_template_m3_final_and_profile(expected, tmp_path):
    team = team_project(tmp_path / "team")
    for milestone in ("m3", "final"):
        out = cli(milestone, 1000, cwd=team)
        assert out.returncode == 0, out.stderr
        match = COURSE.match(out.stdout)
        assert match and float(match[1]) == expected["ece408-high"], out.stdout
    profile = cli("m3", 1000, "--profile", cwd=team)
    assert profile.returncode == 0 and re.search(r"\sforward_kernel$", profile.stdout, re.M), profile.stdout


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_worked_examples_are_correct_on_both_models(expected, example):
    for model in ("ece408-high", "ece408-low"):
        out = cli("m3", model, 1000, "--team", EXAMPLES[example])          # the solution folder, as it is
        assert out.returncode == 0, out.stderr
        match = COURSE.match(out.stdout)
        assert match and float(match[1]) == expected[model], out.stdout


def test_device_printf_stays_printed_text(expected, tmp_path):
    team = team_project(tmp_path / "team", gpu=PRINTF_CU)
    db = tmp_path / "r.db"
    out = cli("submit", team, "--submit", "m3", "--size", 1000, "--engine", engine(), "--db", db)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    from ece408_op.grading.store import open_store
    with open_store(str(db)) as store:
        (record,) = store.records()
    assert record.status == "ok" and record.correct and "Op Time: 0.000001" in record.transcript
    assert all(t > 1e-6 for m in record.models for t in m["op_times"])


def test_ranked_m3_and_final_of_a_team_made_by_init(expected, tmp_path):
    team = team_project(tmp_path / "team")
    db = tmp_path / "r.db"
    for milestone in ("m3", "final"):
        out = cli("submit", team, "--submit", milestone, "--size", 1000, "--engine", engine(), "--db", db,
                  "--name", "gpu-team")
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    from ece408_op.grading.store import open_store
    with open_store(str(db)) as store:
        m3, final = store.records()
    for record in (m3, final):
        assert record.status == "ok" and record.correct and ("H100" in record.device or "H200" in record.device)
        assert [f["name"] for f in record.team_files] == ["new-forward.cu", "launch.py"]
    assert all(len(m["layers"][0]["fresh"]) == 5 for m in final.models)          # final: five fresh runs
    assert all(len(m["layers"][0]["fresh"]) == 1 for m in m3.models)               # a ranked m3: one
    assert all(m["layers"][0]["checked"] == "all" for r in (m3, final) for m in r.models)
    replay = team_project(tmp_path / "replay", gpu=REPLAY_CU, launch=REPLAY_LAUNCH)
    out = cli("submit", replay, "--submit", "final", "--size", 1000, "--engine", engine(), "--db", tmp_path / "x.db")
    assert out.returncode == 1 and "fresh run 1: the output differs from the reference" in out.stdout


@pytest.mark.parametrize("source, launch", [(ONE_IMAGE_CU, None), (TAMPER_CU, TAMPER_LAUNCH)])
def test_ranked_kernels_that_skip_or_tamper_fail(tmp_path, source, launch):
    """A kernel that computes only the images it hopes are checked, or wipes x, k and y so
    that its zeros match what it left there, fails the ranked run (every value is checked against
    the grader's own copies)."""
    team = team_project(tmp_path / "team", gpu=source, launch=launch)
    out = cli("submit", team, "--submit", "final", "--size", 1000, "--engine", engine(), "--db", tmp_path / "x.db")
    assert out.returncode == 1 and "fresh run 1: the output differs from the reference at (b, m, h, w)" in out.stdout, \
        out.stdout[-3000:]
