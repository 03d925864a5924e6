"""A job no worker can take is refused at submission in one line saying what to change, or
queued with that line as a warning where the instructor accepts such jobs (capacity.py): against
a real ``serve`` whose only worker is its own CPU worker (this machine has no GPU), on SQLite and
on PostgreSQL; a class that has never seen a worker; the line's pieces without a server."""
import html
import re
import shutil
import sqlite3
import time
from contextlib import contextmanager

import httpx
import pytest

from servicekit import Service, job_id_of, started_postgres
from teams import rai_yaml, team_project

from ece408_op.service import capacity

pytestmark = [pytest.mark.service, pytest.mark.skipif(shutil.which("bwrap") is None,
                                                      reason="the workers' sandbox needs bubblewrap")]
H100 = "NVIDIA H100 80GB HBM3"
ONE_CPU = "no worker of this class has a GPU (seen in the last 2 min: 1 CPU worker)"
FIX = "set it to 0 for a CPU-only run, or ask your instructor"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def svc(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"capacity-{request.param}")
    env = {}
    if request.param == "postgresql":
        server = started_postgres(root / "pg")
        request.addfinalizer(server.stop)
        env = {"ECE408_DB": server.url}
    service = Service(root / "svc", workers=1, args=["--engine", "bubblewrap"], env=env).start()
    service.db = env.get("ECE408_DB") or service.sqlite_path
    service.tokens = service.add_teams("alpha", "beta", "gamma", "delta", "eps")
    yield service
    service.close()


def line_of(folder, text):
    """The line (from 1) of rai_build.yml in ``folder`` that reads ``text``."""
    lines = (folder / "rai_build.yml").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.strip() == text)


def refused(out):
    """The one error line of a refused submission (after the client's upload line)."""
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("* Uploading to "), out.stderr
    return lines[1]


def execute(db, sql):
    if db.startswith("postgresql://"):
        import psycopg
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(sql.replace("?", "%s"))
        return
    with sqlite3.connect(db) as conn:
        conn.execute(sql)


@contextmanager
def login(svc, token):
    with httpx.Client(base_url=svc.url, timeout=30) as http:
        pair = re.search(r'name="login" value="([^"]+)"', http.get("/login").text).group(1)
        assert http.post("/login", data={"login": pair, "token": token}).status_code == 303
        yield http


def test_a_development_run_asking_a_gpu_of_a_cpu_only_class_is_refused_naming_the_line(svc, tmp_path):
    folder = team_project(tmp_path / "alpha")                         # the template: gpu count 1
    number = line_of(folder, "count: 1")
    started = time.monotonic()
    out = svc.cli("submit", cwd=folder, token=svc.tokens["alpha"])
    took = time.monotonic() - started
    assert refused(out) == (f"error: {ONE_CPU}; rai_build.yml line {number} asks for a GPU (resources.gpu.count: 1): "
                            f"{FIX}")
    assert took < 20, took                                            # the client's start included: no waiting
    two = team_project(tmp_path / "beta", commands=["echo two"])
    (two / "rai_build.yml").write_text("# two GPUs\n\n" + rai_yaml(["echo two"], gpu_count=2))
    out = svc.cli("submit", cwd=two, token=svc.tokens["alpha"])
    assert refused(out) == (f"error: {ONE_CPU}; rai_build.yml line {line_of(two, 'count: 2')} asks for 2 GPUs "
                            f"(resources.gpu.count: 2): {FIX}")
    assert svc.jobs() == []                                           # nothing queued


def test_a_cpu_development_run_is_accepted_and_runs(svc, tmp_path):
    folder = team_project(tmp_path / "beta", commands=["echo on the cpu worker"])
    out = svc.cli("submit", cwd=folder, token=svc.tokens["beta"])
    assert out.returncode == 0 and "on the cpu worker\n" in out.stdout, out.stdout + out.stderr
    assert "Warning" not in out.stderr + out.stdout


@pytest.mark.parametrize("milestone", ["m3", "final"])
def test_a_ranked_gpu_milestone_on_a_cpu_only_class_is_refused_naming_it(svc, tmp_path, milestone):
    folder = team_project(tmp_path / "gamma")
    out = svc.cli("submit", "--submit", milestone, "--size", 100, cwd=folder, token=svc.tokens["gamma"])
    assert refused(out) == f"error: {milestone} runs on a GPU: {ONE_CPU}; ask your instructor when one will be up"
    assert not [j for j in svc.jobs() if j["team"] == "gamma"]


def test_a_kind_no_worker_serves_now_is_refused_naming_the_kinds_served(svc, tmp_path):
    folder = team_project(tmp_path / "delta")
    unknown = svc.cli("submit", "--submit", "m3", "--gpu", "V100", cwd=folder, token=svc.tokens["delta"])
    assert "gpu V100 names no device kind of this class's workers" in refused(unknown)
    with svc.http(svc.worker_token("far")) as http:                   # an H100 worker seen, then gone quiet
        answer = http.post("/api/worker/claim", json={"slot": "g0", "gpu": True, "device": H100, "wait": 0})
    assert answer.status_code == 204, answer.text
    execute(svc.db, "UPDATE service_workers SET last_seen = last_seen - 600 WHERE name = 'far/g0'")
    out = svc.cli("submit", "--submit", "m3", "--gpu", "H100", cwd=folder, token=svc.tokens["delta"])
    assert refused(out) == (f"error: no worker on {H100} has asked for work in the last 2 min (seen in the last "
                            f"2 min: 1 CPU worker); --gpu H100 asks for {H100}: leave --gpu out, or ask your "
                            "instructor (the kinds served now: none)")
    assert svc.admin("PUT", "/api/admin/settings", json={"unknown_gpus": "accepted"}).status_code == 200
    try:                                                              # a kind no worker reported, accepted: it waits
        waits = svc.cli("submit", "--submit", "m3", "--gpu", "B200", "--detach", cwd=folder, token=svc.tokens["delta"])
        assert waits.returncode == 0, waits.stderr
        assert ("* Warning: no worker on B200 has asked for work in the last 2 min (seen in the last 2 min: 1 CPU "
                "worker); --gpu B200 asks for B200: leave --gpu out, or ask your instructor (the kinds served now: "
                "none) (queued anyway: your instructor accepts GPU kinds no worker has reported)\n") in waits.stderr
        assert svc.cli("jobs", "cancel", job_id_of(waits.stderr), token=svc.tokens["delta"]).returncode == 0
    finally:
        svc.admin("PUT", "/api/admin/settings", json={"unknown_gpus": "refused"})
    cpu_kind = next(k for k in svc.admin("GET", "/api/kinds").json()["worker_kinds"] if k != H100)
    quiet = team_project(tmp_path / "quiet", commands=["echo on the kind asked"])
    ok = svc.cli("submit", "--gpu", cpu_kind, cwd=quiet, token=svc.tokens["delta"])   # the CPU worker's own kind
    assert ok.returncode == 0 and "on the kind asked\n" in ok.stdout, ok.stdout + ok.stderr
    assert [j["state"] for j in svc.jobs() if j["team"] == "delta" and j["kind"] == "ranked"] == ["cancelled"]


def test_jobs_the_instructor_accepts_are_queued_with_the_warning_shown(svc, tmp_path):
    answer = svc.admin("PUT", "/api/admin/settings", json={"unserved_jobs": "sometimes"})
    assert answer.status_code == 400 and answer.json() == {"error": "unserved_jobs is refused or accepted"}
    answer = svc.admin("PUT", "/api/admin/settings", json={"unserved_jobs": "accepted"})
    assert answer.status_code == 200 and answer.json()["unserved_jobs"] == "accepted", answer.text
    try:
        folder = team_project(tmp_path / "eps")
        out = svc.cli("submit", "--detach", cwd=folder, token=svc.tokens["eps"])
        assert out.returncode == 0, out.stderr
        job_id = job_id_of(out.stderr)
        line = (f"{ONE_CPU}; rai_build.yml line {line_of(folder, 'count: 1')} asks for a GPU (resources.gpu.count: 1): "
                f"{FIX} (queued anyway: your instructor accepts jobs no worker can take now)")
        assert f"* Warning: {line}\n" in out.stderr
        assert svc.transcript(job_id).splitlines()[1] == f"* Warning: {line}"
        with login(svc, svc.tokens["eps"]) as team:                     # the job's page shows it
            assert f"* Warning: {line}" in html.unescape(team.get(f"/jobs/{job_id}").text)
        with login(svc, svc.instructor_token) as instructor:
            page = html.unescape(instructor.get("/admin").text)
            assert f"No worker seen can take this job: {ONE_CPU}." in page
            assert 'name="unserved_jobs" value="accepted" checked' in page
            csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)
            saved = instructor.post("/admin/unserved-jobs", data={"csrf": csrf, "unserved_jobs": "refused"})
            assert saved.status_code == 303
            assert 'name="unserved_jobs" value="refused" checked' in instructor.get("/admin").text
        again = svc.cli("submit", "--detach", cwd=folder, token=svc.tokens["eps"])
        assert refused(again).startswith(f"error: {ONE_CPU}; rai_build.yml line")
        assert svc.cli("jobs", "cancel", job_id, token=svc.tokens["eps"]).returncode == 0
    finally:
        svc.admin("PUT", "/api/admin/settings", json={"unserved_jobs": "refused"})


def test_a_class_that_never_saw_a_worker_queues_with_a_warning_then_refuses(running_service, tmp_path):
    svc = running_service(tmp_path / "svc", workers=0)
    token = svc.add_teams("zeta")["zeta"]
    folder = team_project(tmp_path / "zeta")
    out = svc.cli("submit", "--detach", cwd=folder, token=token)
    assert out.returncode == 0 and ("* Warning: no worker has asked this service for work yet: the job waits for "
                                    "the first one your instructor starts\n") in out.stderr, out.stderr
    with login(svc, svc.instructor_token) as instructor:
        assert ("No worker seen can take this job: no worker of this class has asked for work in the last 2 min."
                in html.unescape(instructor.get("/admin").text))
    with svc.http(svc.worker_token("cpu")) as http:
        assert http.post("/api/worker/claim", json={"slot": "c0", "gpu": False, "device": "AMD EPYC",
                                                    "wait": 0}).status_code == 204
    with svc.http(token) as http:
        answer = http.post("/api/jobs", params={"kind": "ranked", "milestone": "m3"}, content=b"")
    assert answer.status_code == 409 and answer.json() == {"error": (
        "m3 runs on a GPU: no worker of this class has a GPU (seen in the last 2 min: 1 CPU worker); ask your "
        "instructor when one will be up")}, answer.text
    execute(svc.sqlite_path, "UPDATE service_workers SET last_seen = last_seen - 600")    # the CPU worker away
    with svc.http(token) as http:
        answer = http.post("/api/jobs", params={"kind": "ranked", "milestone": "m3"}, content=b"")
        assert answer.status_code == 409 and answer.json()["error"] == (
            "m3 runs on a GPU: no worker of this class has a GPU (seen in the last 7 days: 1 CPU worker); ask "
            "your instructor when one will be up"), answer.text
    waits = svc.cli("submit", "--submit", "m2", "--size", 10, "--detach", cwd=folder, token=token)
    assert waits.returncode == 0 and re.search(
        r"\* Warning: no worker has asked for work in the last 2 min \(the last was seen \d{4}-\d\d-\d\d "
        r"\d\d:\d\d:\d\d UTC\): the job waits for one\n", waits.stderr), waits.stderr


def test_the_line_s_pieces():
    cpu, h100 = (False, "AMD EPYC"), (True, H100)
    assert capacity.missing(True, None, [cpu, h100]) is None and capacity.missing(False, H100, [h100]) is None
    assert capacity.missing(True, H100, [(False, H100)]) == (f"no worker on {H100} has a GPU (seen in the last 2 min: "
                                                              f"1 CPU worker)")
    assert capacity.missing(False, None, []) == "no worker of this class has asked for work in the last 2 min"
    assert capacity.seen_text([cpu, cpu, h100, (True, None)]) == (
        "2 CPU workers, 1 GPU worker on NVIDIA H100 80GB HBM3, 1 GPU worker on an unreported device")
    # serve --slurm: whether Slurm's requests serve it, the default one or the mapping of the kind asked for
    slurm = capacity.Slurm(gpus=True, kinds={H100: True}, workers="node/slurm/")
    assert capacity.missing(True, None, [], slurm) is None and capacity.missing(True, H100, [], slurm) is None
    assert capacity.missing(True, None, [], capacity.Slurm(gpus=False)) == (
        "this class's workers are Slurm jobs without a GPU (serve --slurm --gres none)")
    assert capacity.missing(True, H100, [], capacity.Slurm(gpus=False, kinds={H100: False})) == (
        f"this class's Slurm jobs on {H100} get no GPU (its --slurm-kind gives no gres, and --gres is none)")
    assert capacity.missing(False, "Tesla V100", [], slurm) == (          # a kind no mapping names: refused...
        "no Slurm partition or gres is mapped to Tesla V100 (serve --slurm-kind) and no worker on it has asked for "
        "work in the last 2 min")
    assert capacity.missing(False, "Tesla V100", [(True, "Tesla V100")], slurm) is None   # ...unless one of its asks
    assert slurm.served(True) == [H100] and capacity.Slurm(True, {H100: False}).served(True) == []
