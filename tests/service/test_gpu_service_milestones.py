"""m3 and final through the service on the GPU machine, in one command: a real server, its local
worker on GPU 0 (each run in its sandbox: bubblewrap where it runs there, else host) and the real
client, from a team's folder; skipped where there is no GPU (or MXNet, or the data).

    source .devkit/env.sh && mxpy -m pytest tests/service/test_gpu_service_milestones.py -q
"""
import re
import sys

import pytest

from suitekit import ranked_engine as engine, require_mxnet

require_mxnet()

from servicekit import Service, job_id_of  # noqa: E402
from teams import PLAIN, team_project  # noqa: E402

from ece408_op.grading.inputs import data_dir  # noqa: E402
from ece408_op.grading.machine import gpu_name  # noqa: E402
from ece408_op.grading.request import SubmitError  # noqa: E402

pytestmark = [pytest.mark.service, pytest.mark.skipif(gpu_name() is None, reason="no GPU (nvidia-smi lists none)")]


@pytest.fixture
def service(tmp_path):
    try:
        data_dir()
    except SubmitError as exc:
        pytest.skip(str(exc))
    svc = Service(tmp_path / "svc", workers=1, args=["--engine", engine()]).start()
    yield svc
    svc.close()


@pytest.mark.timeout(1800)
def test_m3_and_final_through_the_service(tmp_path, service):
    tokens = service.add_teams("gpu-team", "cpu-team")
    team = team_project(tmp_path / "gpu-team", cpu=PLAIN)      # NumPy only: the GPU machine's kit has no Numba
    for milestone in ("m3", "final"):
        out = service.cli("submit", "--submit", milestone, "--size", 1000, cwd=team, token=tokens["gpu-team"])
        assert out.returncode == 0, out.stdout[-4000:] + out.stderr + service.log()[-3000:]
        assert re.search(r"^\* Running nvcc -cubin -arch[ =]sm_\d+", out.stdout, re.M), out.stdout[-3000:]
        assert len(re.findall(r"^Op Time: ", out.stdout, re.M)) >= 2
        assert re.search(rf"^\* Record [0-9a-f]{{32}} \(gpu-team, {milestone}, 1000 images\): ok; total Op Time",
                         out.stdout, re.M), out.stdout[-2000:]
        job = service.job(job_id_of(out.stderr))
        assert job["state"] == "done" and job["valid"] and job["worker"].endswith("/gpu0")
    m3, final = sorted(service.records(), key=lambda r: r.milestone != "m3")
    for record in (m3, final):
        assert record.status == "ok" and record.correct and ("H100" in record.device or "H200" in record.device)
        assert [f["name"] for f in record.team_files] == ["new-forward.cu", "launch.py"]
    assert all(len(m["layers"][0]["fresh"]) == 5 for m in final.models)          # final: five fresh runs a layer
    ranking = service.cli("ranking", "--milestone", "final", "--size", 1000, token=tokens["cpu-team"])
    assert ranking.returncode == 0 and "gpu-team" in ranking.stdout, ranking.stderr
    m2 = service.cli("submit", "--submit", "m2", "--size", 100, cwd=team_project(tmp_path / "cpu-team", cpu=PLAIN),
                     token=tokens["cpu-team"])                                     # the CPU milestone on a GPU worker
    assert m2.returncode == 0, m2.stdout[-3000:] + m2.stderr
    import importlib.util
    if sys.flags.no_site:            # the GPU machine's MXNet kit: a team's own `python` there starts with the
        return                       # machine's site packages (SciPy for NumPy 2), which MXNet's import meets
    if importlib.util.find_spec("yaml") is None:                                  # the GPU machine's MXNet kit
        out = service.cli("submit", cwd=team, token=tokens["gpu-team"])
        assert out.returncode == 2 and "PyYAML is not installed" in out.stderr, out.stderr   # refused in one line
        return
    dev = service.cli("submit", cwd=team, token=tokens["gpu-team"])              # the template's rai_build.yml
    assert dev.returncode == 0, dev.stdout[-3000:] + dev.stderr + service.log()[-3000:]
    assert len(re.findall(r"^Op Time: ", dev.stdout, re.M)) >= 2                 # m2 1000, then m3 1000 on the GPU
    assert not re.search(r"^No GPU here", dev.stdout, re.M)
