"""``serve --slurm``: each queued job becomes one Slurm job (a ``worker --once``) on the one-node
cluster the tests start (tests/services.py), running it in its bubblewrap sandbox. Run under
``flock /tmp/ece408-slurm.lock`` where other suites start Slurm on the same machine."""
import shutil
import stat
import subprocess

import pytest

from servicekit import Service, job_id_of
from services import SlurmCluster, Unavailable
from teams import PLAIN, team_project

pytestmark = [pytest.mark.service, pytest.mark.skipif(shutil.which("bwrap") is None, reason="the workers' sandbox needs bubblewrap")]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except Unavailable as exc:
        pytest.skip(str(exc))
    yield cluster
    cluster.stop()


@pytest.mark.timeout(600)
def test_each_job_runs_as_a_slurm_job(tmp_path, slurm):
    svc = Service(tmp_path / "svc", workers=0, env=slurm.env,
                  args=["--slurm", "--partition", "test", "--gres", "none", "--slurm-time", "00:10:00",
                        "--engine", "bubblewrap"]).start()
    try:
        tokens = svc.add_teams("north", "south")
        ranked = svc.cli("submit", "--submit", "m2", "--size", 100, cwd=team_project(tmp_path / "north", cpu=PLAIN),
                         token=tokens["north"])
        assert ranked.returncode == 0, ranked.stdout[-3000:] + ranked.stderr + svc.log()[-3000:]
        dev = svc.cli("submit", team_project(tmp_path / "south", commands=["hostname", "echo from slurm"]),
                      token=tokens["south"])
        assert dev.returncode == 0 and "from slurm\n" in dev.stdout, dev.stderr
        for out in (ranked, dev):
            job = svc.job(job_id_of(out.stderr))
            assert job["state"] == "done" and job["attempts"] == 1
            assert "/slurm/cpu0-job" in job["worker"], job["worker"]
        (record,) = svc.records()
        assert record.team == "north" and record.status == "ok" and record.correct and record.isolated
        folder = svc.root / "state" / "ece408_op" / "service" / "slurm"
        assert stat.S_IMODE((folder / "worker.token").stat().st_mode) == 0o600
        logs = sorted((folder / "logs").glob("*.out"))
        assert len(logs) >= 2 and any("job.finished" in p.read_text() for p in logs)
        assert svc.log().count("slurm.submitted") >= 2
        script = (folder / "worker-cpu.sh").read_text()
        assert "--once" in script and "--token-file" in script and "ece408_" not in script.replace("ece408_op", "")
        accounted = subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True,
                                   env={**svc.env, **slurm.env}).stdout
        assert "ECE408_DB" not in accounted
        east = team_project(tmp_path / "east")                        # the template asks for a GPU: --gres none
        count = (east / "rai_build.yml").read_text().splitlines().index("    count: 1") + 1
        gpu = svc.cli("submit", east, token=tokens["south"])
        assert gpu.returncode == 2 and gpu.stderr.splitlines()[-1] == (
            "error: this class's workers are Slurm jobs without a GPU (serve --slurm --gres none); rai_build.yml line "
            f"{count} asks for a GPU (resources.gpu.count: 1): set it to 0 for a CPU-only run, or ask your "
            "instructor"), gpu.stderr
    finally:
        svc.close()
