"""Faults of the service, made for real while a job runs: kill -9 of the server (with a worker on
its own, the job goes on; with the server's own worker, the job runs again once), SIGTERM of the
server (the job is given back, not counted), kill -9 of a worker (back to the queue once, then
failed with the reason), kill -9 of PostgreSQL (every request 503 with a retry time, the run goes
on, the service recovers by itself). In each: no accepted job lost, no received line lost or
doubled, at most one record a job, and the following client ends with the job's status."""
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from servicekit import job_id_of, log_lines_are_structured, started_postgres, wait_until
from teams import PLAIN, team_project

pytestmark = [pytest.mark.service, pytest.mark.skipif(shutil.which("bwrap") is None, reason="the workers' sandbox needs bubblewrap")]

ENGINE = ["--engine", "bubblewrap"]


@pytest.fixture
def postgres(tmp_path):
    server = started_postgres(tmp_path / "pg")
    yield server
    server.stop()


def kill_postgres(server):
    """SIGKILL to the postmaster (its pid: postmaster.pid's first line), and wait for its backends."""
    pid = int((server.data / "postmaster.pid").read_text().splitlines()[0])
    children = [int(p) for p in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()]
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not any(Path(f"/proc/{p}").exists() for p in [pid, *children]), 30, "PostgreSQL's end")
    server.started = False


def running_marker(marker):
    """Whether a process whose command line holds ``marker`` runs on this machine."""
    return subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0


# ---------------------------------------------------------------------------- the server

@pytest.mark.timeout(400)
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_kill_9_of_the_server_loses_nothing_and_the_job_runs_once(running_service, tmp_path, request, database):
    env = {"ECE408_DB": request.getfixturevalue("postgres").url} if database == "postgresql" else {}
    svc = running_service(tmp_path / "svc", workers=0, env=env)
    token = svc.add_teams("alpha")["alpha"]
    worker = svc.worker(svc.worker_token("far"), *ENGINE, "--gpus", "none")
    team = team_project(tmp_path / "alpha", commands=["echo one", "sleep 3", "echo two", "sleep 8", "echo three"])
    client = svc.follow("submit", team, token=token)
    client.wait_for(lambda lines: "one\n" in lines)
    svc.kill()                                           # kill -9: no clean-up of any kind
    time.sleep(6)                                        # "two" is produced while no server runs
    svc.start()
    code, err = client.finish()
    assert code == 0, err
    text = client.text
    assert [l for l in client.lines if l in ("one\n", "two\n", "three\n")] == ["one\n", "two\n", "three\n"], text
    job = svc.job(job_id_of(err))
    assert job["state"] == "done" and job["status"] == "ok" and job["attempts"] == 1
    assert svc.transcript(job["id"]) == text            # what the client printed is what the server kept
    assert "* Lost the connection to the service" in err and "* Connected again" in err
    assert worker.poll() is None
    log = (tmp_path / "svc" / "worker.log").read_text()
    assert "server.unreachable" in log and "server.back" in log
    assert not log_lines_are_structured(log), log


@pytest.mark.timeout(400)
def test_kill_9_of_the_server_takes_its_own_worker_s_job_back_once(running_service, tmp_path):
    svc = running_service(tmp_path / "svc", workers=1, args=ENGINE)
    token = svc.add_teams("beta")["beta"]
    team = team_project(tmp_path / "beta", commands=["echo one", "sleep 7.25", "echo two"])
    client = svc.follow("submit", team, token=token)
    client.wait_for(lambda lines: "one\n" in lines)
    svc.kill()
    wait_until(lambda: not running_marker("sleep 7.25"), 30, "the run's processes ending with the server")
    svc.start()
    code, err = client.finish()
    assert code == 0, err
    job = svc.job(job_id_of(err))
    assert job["state"] == "done" and job["attempts"] == 2
    text = svc.transcript(job["id"])
    assert "stopped answering" in text and "the job goes back to the queue (attempt 1 of 2 ended without a " \
                                          "result)" in text
    assert "took the job (attempt 2 of 2)" in text and text.count("\ntwo\n") == 1


@pytest.mark.timeout(400)
def test_sigterm_of_the_server_gives_the_job_back_not_counted(running_service, tmp_path):
    svc = running_service(tmp_path / "svc", workers=1, args=ENGINE)
    token = svc.add_teams("gamma")["gamma"]
    team = team_project(tmp_path / "gamma", commands=["echo one", "sleep 8.5", "echo two"])
    client = svc.follow("submit", team, token=token)
    client.wait_for(lambda lines: "one\n" in lines)
    started = time.monotonic()
    assert svc.stop(signal.SIGTERM) == 0
    assert time.monotonic() - started < 30
    assert not running_marker("sleep 8.5")
    svc.start()
    code, err = client.finish()
    assert code == 0, err
    job = svc.job(job_id_of(err))
    assert job["state"] == "done" and job["attempts"] == 1       # the given-back attempt is not counted
    text = svc.transcript(job["id"])
    assert "* The worker stopped (the worker was stopped); the job goes back to the queue and runs again from " \
           "the start\n" in text
    assert not log_lines_are_structured(svc.log()), svc.log()
    assert "server.draining signal=SIGTERM" in svc.log(1) and "server.stopped" in svc.log(1)


# ---------------------------------------------------------------------------- a worker

@pytest.mark.timeout(400)
def test_kill_9_of_a_worker_requeues_its_job_once_then_fails_it(running_service, tmp_path):
    svc = running_service(tmp_path / "svc", workers=0, args=["--lease", "4"])
    token = svc.add_teams("delta")["delta"]
    worker_token = svc.worker_token("far")
    team = team_project(tmp_path / "delta", commands=["echo one", "sleep 301.25"])
    client = svc.follow("submit", team, token=token)
    for attempt in (1, 2):
        worker = svc.worker(worker_token, *ENGINE, "--gpus", "none", log_name=f"worker-{attempt}.log")
        client.wait_for(lambda lines: lines.count("one\n") == attempt, what=f"attempt {attempt}'s first line")
        worker.kill()
        worker.wait()
        wait_until(lambda: not running_marker("sleep 301.25"), 30, "the run's processes ending with the worker")
    code, err = client.finish()
    assert code == 1
    job = svc.job(job_id_of(err))
    assert job["state"] == "failed" and job["status"] == "error" and job["attempts"] == 2
    assert job["reason"].startswith("its worker stopped answering on each of its 2 attempts (the last: far/cpu0")
    assert f"* The job failed: {job['reason']}" in err
    text = svc.transcript(job["id"])
    assert text.count("took the job") == 2 and "the job goes back to the queue (attempt 1 of 2" in text
    assert text.endswith(f"* Failed: {job['reason']}\n")


# ---------------------------------------------------------------------------- PostgreSQL

@pytest.mark.timeout(600)
def test_kill_9_of_postgresql_mid_run(running_service, tmp_path, postgres):
    svc = running_service(tmp_path / "svc", workers=1, args=ENGINE, env={"ECE408_DB": postgres.url})
    tokens = svc.add_teams("eps", "zeta")
    team = team_project(tmp_path / "eps", cpu=PLAIN)
    client = svc.follow("submit", "--submit", "m2", "--size", 100, token=tokens["eps"], cwd=team)
    client.wait_for(lambda lines: any(l.startswith("* Running python -m ece408_op m2") for l in lines))
    kill_postgres(postgres)
    with svc.http(tokens["zeta"]) as http:
        for method, path in (("GET", "/api/jobs"), ("GET", "/ready"), ("GET", "/api/ranking"),
                             ("POST", "/api/jobs")):
            answer = http.request(method, path, content=b"")
            assert answer.status_code == 503, (path, answer.text)
            assert answer.headers["retry-after"] == "5"
            assert answer.json() == {"error": "the service's database cannot be reached right now; try again "
                                              "in 5 s"}
        assert http.get("/health").status_code == 200
    time.sleep(15)                                       # the run ends while the database is away
    postgres.start_again()
    code, err = client.finish()
    assert code == 0, err
    job = svc.job(job_id_of(err))
    assert job["state"] == "done" and job["valid"] and job["attempts"] == 1
    (record,) = svc.records(postgres.url)
    assert record.id == job["id"] and record.status == "ok" and record.correct
    text = client.text
    assert text == svc.transcript(job["id"])
    assert text.count("Op Time: ") == 2 and text.endswith("Correctness as expected\n")
    with svc.http(tokens["zeta"]) as http:
        assert http.get("/ready").status_code == 200
    assert "db.unavailable" in svc.log()
