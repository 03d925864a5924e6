"""``serve --slurm``: each queued job becomes one Slurm job (a ``worker --once``) on the one-node
cluster the tests start (tests/services.py), running it in its bubblewrap sandbox. Run under
``flock /tmp/ece408-slurm.lock`` where other suites start Slurm on the same machine."""
import html
import re
import shlex
import shutil
import stat
import subprocess
import time

import httpx
import pytest

from servicekit import job_id_of, service_on
from services import SlurmCluster, Unavailable
from teams import PLAIN, team_project

from ece408_op.base.processes import python_command

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
def test_each_job_runs_as_a_slurm_job(running_service, tmp_path, slurm):
    svc = running_service(tmp_path / "svc", workers=0, env=slurm.env,
                  args=["--slurm", "--partition", "test", "--gres", "none", "--slurm-time", "00:10:00",
                        "--engine", "bubblewrap"])
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


H100 = "NVIDIA H100 80GB HBM3"


def slurm_jobs(env):
    """{Slurm job id: (partition, job name)} of every job squeue still knows (ended ones: MinJobAge, 5 min)."""
    out = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i %P %j"], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    return {i: (p, n) for i, p, n in (line.split() for line in out.stdout.splitlines())}


def slurm_job_of(job):
    """The Slurm job that ran a service job: its worker's slot is named ``cpu0-job<id>``."""
    return re.fullmatch(r".*/slurm/cpu0-job(\d+)", job["worker"]).group(1)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_device_kind_goes_to_its_partition_and_an_unmapped_one_is_refused(tmp_path, slurm, database):
    args = ["--slurm", "--partition", "test", "--gres", "none", "--slurm-time", "00:10:00", "--engine", "bubblewrap",
            "--slurm-kind", f"{H100}=partition:{slurm.KIND_PARTITION}"]
    with service_on(database, tmp_path, workers=0, env=slurm.env, args=args) as svc:
        env = {**svc.env, **slurm.env}
        tokens = svc.add_teams("north", "south")
        listed = svc.cli("kinds", "list")
        assert listed.returncode == 0 and listed.stdout.splitlines()[1] == (
            "Slurm's device kinds (serve --slurm-kind; submit --gpu names one; another only where a worker of it "
            f"asks for work): {H100} (partition {slurm.KIND_PARTITION})"), listed.stdout + listed.stderr
        # first a run asking for no kind (a worker for a kind may take such a job: one the dispatcher sent while
        # the other started would), in the default partition
        plain = svc.cli("submit", team_project(tmp_path / "south", commands=["echo anywhere"]), token=tokens["south"])
        assert plain.returncode == 0 and "anywhere\n" in plain.stdout, plain.stderr
        assert slurm_jobs(env)[slurm_job_of(svc.job(job_id_of(plain.stderr)))][0] == "test"
        on_kind = svc.cli("submit", "--gpu", "H100", team_project(tmp_path / "north", commands=["echo on its kind"]),
                          token=tokens["north"])                      # a CPU run asking for the mapped kind
        assert on_kind.returncode == 0 and "on its kind\n" in on_kind.stdout, on_kind.stderr + svc.log()[-3000:]
        job = svc.job(job_id_of(on_kind.stderr))
        assert job["state"] == "done" and job["gpu_kind"] == H100
        assert slurm_jobs(env)[slurm_job_of(job)][0] == slurm.KIND_PARTITION
        assert f"({H100}) took the job" in svc.transcript(job["id"])
        folder = svc.root / "state" / "ece408_op" / "service" / "slurm"
        assert shlex.split((folder / "worker-cpu-k1.sh").read_text().splitlines()[-1])[-2:] == ["--kind", H100]
        # the node's CPU is a kind of the class's workers now (the default request's worker reported it), but
        # no mapping serves it and Slurm's own workers come and go: refused, naming the kinds served
        cpu = next(k for k in svc.admin("GET", "/api/kinds").json()["worker_kinds"] if k != H100)
        before, submitted = slurm_jobs(env), svc.log().count("slurm.submitted")
        with svc.http(tokens["south"]) as http:
            answer = http.post("/api/jobs", params={"kind": "development", "gpu": cpu}, content=b"")
        assert answer.status_code == 409 and answer.json() == {"error": (
            f"no Slurm partition or gres is mapped to {cpu} (serve --slurm-kind) and no worker on it has asked for "
            f"work in the last 2 min; --gpu {cpu} asks for {cpu}: leave --gpu out, or ask your instructor (the kinds "
            f"served now: {H100})")}, answer.text
        unknown = svc.cli("submit", "--gpu", "B200", tmp_path / "south", token=tokens["south"])
        assert unknown.returncode == 2 and unknown.stderr.splitlines()[-1] == (
            "error: gpu B200 names no device kind of this class's workers (seen in the last 7 days) or of its Slurm "
            f"mapping; the kinds: {'; '.join(sorted([cpu, H100]))}"), unknown.stderr
        assert svc.admin("PUT", "/api/admin/settings", json={"unknown_gpus": "accepted"}).status_code == 200
        waits = svc.cli("submit", "--gpu", "B200", "--detach", tmp_path / "south", token=tokens["south"])
        assert waits.returncode == 0 and "(queued anyway: your instructor accepts GPU kinds no worker has " \
            "reported)" in waits.stderr, waits.stderr
        time.sleep(11)                                                # two of the dispatcher's looks: no sbatch
        assert slurm_jobs(env) == before and svc.log().count("slurm.submitted") == submitted, svc.log()[-2000:]
        assert "slurm.unmapped" in svc.log() and svc.job(job_id_of(waits.stderr))["state"] == "queued"
        with httpx.Client(base_url=svc.url, timeout=30) as http:           # the instructor's page marks it
            pair = re.search(r'name="login" value="([^"]+)"', http.get("/login").text).group(1)
            assert http.post("/login", data={"login": pair, "token": svc.instructor_token}).status_code == 303
            assert ("No worker seen can take this job: no Slurm partition or gres is mapped to B200 (serve "
                    "--slurm-kind) and no worker on it has asked for work in the last 2 min.") in html.unescape(
                        http.get("/admin").text)
        assert svc.cli("jobs", "cancel", job_id_of(waits.stderr), token=tokens["south"]).returncode == 0


def test_a_bad_kind_mapping_is_one_line():
    for value, reason in (("H100", "'H100' is not KIND=partition:P,gres:G,constraint:C (at least one of the three)"),
                          ("H100=queue:gpu", "'queue:gpu' in --slurm-kind H100 is not partition:P, gres:G or "
                                             "constraint:C"),
                          ("H100=partition:a b", "--slurm-kind H100: partition 'a b' is not a Slurm partition name")):
        out = subprocess.run([*python_command(), "-m", "ece408_op", "serve", "--slurm", "--slurm-kind", value],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and out.stderr.splitlines()[-1] == (
            f"ece408_op serve: error: argument --slurm-kind: {reason}"), out.stderr
    twice = subprocess.run([*python_command(), "-m", "ece408_op", "serve", "--slurm", "--slurm-kind", "H100=gres:gpu:1",
                            "--slurm-kind", "h100=partition:p"], capture_output=True, text=True, timeout=60)
    assert twice.returncode == 2 and twice.stderr.splitlines()[-1] == (
        "ece408_op serve: error: --slurm-kind maps h100 twice: give each kind once"), twice.stderr
