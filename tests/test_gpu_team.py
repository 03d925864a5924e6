"""A team's kernels on the GPU (issue: team kernels), on the GPU machine; every test skips without
a GPU. Through the milestone (m3, final, --profile) and through the ranked runner (--submit m3 and
final, engine bubblewrap where it runs there, else host), the template's kernel prints the
course's lines with the right Correctness; device printf stays in the transcript; a plan past the
device's limits, or naming no kernel, is refused in one line; a kernel that replays a kept result
fails the fresh-input check of final. The worked examples run the course layers correctly."""
import re
import shutil

import numpy as np
import pytest

from conftest import ROOT, require_mxnet
from gpu_sources import (NO_SUCH_KERNEL, PRINTF_CU, REPLAY_CU, REPLAY_LAUNCH, TOO_BIG_GRID, TOO_MANY_THREADS,
                         TOO_MUCH_SHARED)
from teams import cli, reference_accuracies, team_project

from ece408_op.team import checks
from ece408_op.team.runtime import TeamRuntime

EXAMPLES = ROOT / "docs" / "team-examples"
COURSE = re.compile(r"Loading fashion-mnist data\.\.\. done\nLoading model\.\.\. done\nNew Inference\n"
                    r"Op Time: \d+\.\d{6}\nCorrectness: (\S+) Model: (\S+)\n\Z")


def engine():
    from ece408_op.grading.sandbox import BubblewrapSandbox, Limits, SandboxError
    try:
        BubblewrapSandbox(Limits()).check()
        return "bubblewrap"
    except SandboxError:
        return "host"


# ---------------------------------------------------------------------------- the kernels alone (PyCUDA)

def _runtime_forward(gpu, team, batch=3, repeats=0):
    """The team's kernels through TeamRuntime on device arrays; returns (Op Time, y, reference, bound)."""
    from ece408_op.conv import reference_and_bound
    from ece408_op.team.build import compile_kernels
    rng = np.random.default_rng(2)
    x = rng.random((batch, 2, 11, 13), dtype=np.float32)
    k = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    image = compile_kernels(team, gpu.arch)
    cuda = gpu.cuda
    y = np.empty((batch, 4, 9, 11), np.float32)
    with TeamRuntime(team, image, repeats=repeats, seed=3) as runtime:
        with gpu.active():
            xd, kd, yd = cuda.to_device(x), cuda.to_device(k), cuda.mem_alloc(y.nbytes)
        seconds = runtime.forward_device(int(yd), int(xd), int(kd), x.shape, k.shape, device=gpu.index)
        with gpu.active():
            cuda.memcpy_dtoh(y, yd)
            for buf in (xd, kd, yd):
                buf.free()
    ref, bound = reference_and_bound(x, k)
    return seconds, y, ref, bound


def test_template_kernel_through_the_runtime(gpu, tmp_path):
    seconds, y, ref, bound = _runtime_forward(gpu, team_project(tmp_path / "team"), batch=5, repeats=3)
    assert np.all(np.abs(y - ref) <= bound) and 0 < seconds < 1


def test_fresh_fill_on_the_device_matches_the_host(gpu, tmp_path):
    from ece408_op.kernels.team import TeamModule
    from ece408_op.team.build import compile_kernels
    team = team_project(tmp_path / "team")
    with gpu.active():
        module = TeamModule(gpu, compile_kernels(team, gpu.arch))
        n = 3_000_001
        buf = gpu.cuda.mem_alloc(n * 4)
        module.fill(int(buf), n, 987654321)
        got = np.empty(n, np.float32)
        gpu.cuda.memcpy_dtoh(got, buf)
    assert np.array_equal(got, checks.fresh_values(987654321, 0, n))


@pytest.mark.parametrize("launch, message", [
    (TOO_MUCH_SHARED, "bytes of dynamic shared memory"),
    (TOO_BIG_GRID, "exceeds the device's limit"),
    (NO_SUCH_KERNEL, "new-forward.cu has no kernel named forward_kernal; declare it extern \"C\""),
])
def test_plans_past_the_device_are_refused_in_one_line(gpu, tmp_path, launch, message):
    team = team_project(tmp_path / "team", launch=launch)
    with pytest.raises(Exception) as info:
        _runtime_forward(gpu, team)
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_block_past_the_kernel_s_own_limit_is_refused(gpu, tmp_path):
    team = team_project(tmp_path / "team", launch=TOO_MANY_THREADS,
                        gpu=(ROOT / "ece408_op/team/template/new-forward.cu").read_text()
                        .replace("#define TILE_WIDTH 16", "#define TILE_WIDTH 32").replace(
                            'extern "C" __global__ void forward_kernel',
                            'extern "C" __global__ void __launch_bounds__(256) forward_kernel'))
    with pytest.raises(Exception, match=r"has 1024 threads; this kernel allows at most 256"):
        _runtime_forward(gpu, team)


def test_replayed_result_fails_the_fresh_inputs(gpu, tmp_path):
    team = team_project(tmp_path / "team", gpu=REPLAY_CU, launch=REPLAY_LAUNCH)
    with pytest.raises(Exception, match=r"fresh run 1: the output differs from the reference"):
        _runtime_forward(gpu, team, repeats=2)


# ---------------------------------------------------------------------------- milestones (MXNet)

@pytest.fixture(scope="module")
def expected():
    require_mxnet()
    return reference_accuracies(1000)


def test_template_m3_final_and_profile(gpu, expected, tmp_path):
    team = team_project(tmp_path / "team")
    for milestone in ("m3", "final"):
        out = cli(milestone, 1000, cwd=team)
        assert out.returncode == 0, out.stderr
        match = COURSE.match(out.stdout)
        assert match and float(match[1]) == expected["ece408-high"], out.stdout
    profile = cli("m3", 1000, "--profile", cwd=team)
    assert profile.returncode == 0 and re.search(r"^\s*forward_kernel\s", profile.stdout, re.M), profile.stdout


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.iterdir()))
def test_worked_examples_are_correct_on_both_models(gpu, expected, tmp_path, example):
    team = team_project(tmp_path / "team", gpu=(EXAMPLES / example / "new-forward.cu").read_text(),
                        launch=(EXAMPLES / example / "launch.py").read_text())
    for model in ("ece408-high", "ece408-low"):
        out = cli("m3", model, 1000, "--team", team)
        assert out.returncode == 0, out.stderr
        match = COURSE.match(out.stdout)
        assert match and float(match[1]) == expected[model], out.stdout


def test_device_printf_stays_printed_text(gpu, expected, tmp_path):
    team = team_project(tmp_path / "team", gpu=PRINTF_CU)
    db = tmp_path / "r.db"
    out = cli("submit", team, "--submit", "m3", "--size", 1000, "--engine", engine(), "--db", db)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    from ece408_op.grading.store import open_store
    with open_store(str(db)) as store:
        (record,) = store.records()
    assert record.status == "ok" and record.correct and "Op Time: 0.000001" in record.transcript
    assert all(t > 1e-6 for m in record.models for t in m["op_times"])


def test_ranked_m3_and_final_of_a_team_made_by_init(gpu, expected, tmp_path):
    team = team_project(tmp_path / "team")
    db = tmp_path / "r.db"
    for milestone in ("m3", "final"):
        out = cli("submit", team, "--submit", milestone, "--size", 1000, "--engine", engine(), "--db", db,
                  "--team", "gpu-team")
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    from ece408_op.grading.store import open_store
    with open_store(str(db)) as store:
        m3, final = store.records()
    for record in (m3, final):
        assert record.status == "ok" and record.correct and "H100" in record.device or "H200" in record.device
        assert [f["name"] for f in record.team_files] == ["new-forward.cu", "launch.py"]
    assert all(len(m["layers"][0]["fresh"]) == 5 for m in final.models)          # final: five fresh runs
    assert all(m["layers"][0]["fresh"] == [] for m in m3.models)
    replay = team_project(tmp_path / "replay", gpu=REPLAY_CU, launch=REPLAY_LAUNCH)
    out = cli("submit", replay, "--submit", "final", "--size", 1000, "--engine", engine(), "--db", tmp_path / "x.db")
    assert out.returncode == 1 and "fresh run 1: the output differs from the reference" in out.stdout
