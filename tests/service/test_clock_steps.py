"""The service's clock (ece408_op/service/clock.py): a step of the server's wall clock, forward or
back, changes no lease, heartbeat or per-hour window. The clock helpers alone; then a real
``serve`` whose ``time.time()`` the test steps (``$ECE408_TEST_CLOCK_OFFSET_FILE``) with a real
worker holding a job on SQLite and PostgreSQL: its heartbeats keep being accepted and its job
runs once, and a worker gone silent still loses its job after its lease, timed monotonically."""
import shutil
import time

import pytest

from ece408_op.service import clock
from pagekit import Runs
from servicekit import job_id_of, service_on, wait_until
from teams import team_project

ENGINE = ["--engine", "bubblewrap"]
LEASE = 20                                   # the worker heartbeats every 5 s (a quarter of it); reaped every 5 s


# ---------------------------------------------------------------------------- the helpers

class Fake:
    def __init__(self, value):
        self.value = value

    def __call__(self):
        return self.value


def test_steady_moves_with_the_monotonic_clock_only():
    wall, mono = Fake(1_000_000.0), Fake(50.0)
    steady = clock.Steady(wall, mono)
    assert steady.now() == 1_000_000.0
    mono.value += 7.5
    wall.value += 120                                        # a step forward: not seen
    assert steady.now() == 1_000_007.5
    wall.value -= 240                                        # a step back: not seen
    mono.value += 1
    assert steady.now() == 1_000_008.5
    steady.anchor()                                          # a new start reads the wall clock again
    assert steady.now() == 999_880.0


def test_now_is_the_wall_clock_at_the_start():
    clock.anchor()
    assert abs(clock.now() - time.time()) < 0.5


def test_offset_reads_its_file_again_and_counts_a_bad_one_as_zero(tmp_path):
    path = tmp_path / "offset"
    mono = Fake(0.0)
    offset = clock.Offset(str(path), real=Fake(100.0), monotonic=mono)
    assert offset() == 100.0                                 # no file yet: 0
    path.write_text("120\n")
    assert offset() == 100.0                                 # read again only after REREAD
    mono.value += clock.REREAD * 2
    assert offset() == 220.0
    for text, expected in (("-120", -20.0), ("not a number", 100.0), ("", 100.0), ("inf", 100.0), ("nan", 100.0), ("1e3", 1100.0)):
        path.write_text(text)
        mono.value += clock.REREAD * 2
        assert offset() == expected, text
    path.write_bytes(b"\xff\xfe")
    mono.value += clock.REREAD * 2
    assert offset() == 100.0


def test_install_test_offset_needs_its_variable():
    assert clock.install_test_offset({}) is False
    assert not isinstance(time.time, clock.Offset)


# ---------------------------------------------------------------------------- a real serve and worker

def job_of(svc, team):
    found = []
    wait_until(lambda: found.extend(j for j in svc.jobs() if j["team"] == team) or found, 60, f"{team}'s job")
    return found[0]["id"]


def still_held(svc, job_id, worker):
    job = svc.job(job_id)
    assert job["state"] == "running" and job["attempts"] == 1 and job["worker"] == worker, job
    assert "stopped answering" not in svc.transcript(job_id)


@pytest.mark.service
@pytest.mark.timeout(400)
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the workers' sandbox needs bubblewrap")
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_clock_step_either_way_leaves_a_heartbeating_worker_its_job(tmp_path, database):
    offset = tmp_path / "clock-offset"
    offset.write_text("0")
    with service_on(database, tmp_path, workers=0, args=["--lease", str(LEASE)],
                    env={clock.OFFSET_ENV: str(offset)}) as svc:
        tokens = svc.add_teams("alpha", "beta")
        worker = svc.worker(svc.worker_token("far"), *ENGINE, "--gpus", "none")
        client = svc.follow("submit", team_project(tmp_path / "alpha", commands=["echo one", "sleep 32.5"]),
                            token=tokens["alpha"])
        job_id = job_of(svc, "alpha")
        svc.wait_for_text(job_id, "one\n", timeout=120)
        held_by = svc.job(job_id)["worker"]
        for step in ("120", "0"):                           # forward 120 s, then back 120 s
            offset.write_text(step)
            time.sleep(12)                                   # two heartbeats and two reaps at least
            still_held(svc, job_id, held_by)
        code, err = client.finish()
        assert code == 0, err
        job = svc.job(job_id_of(err))
        assert job["id"] == job_id and job["state"] == "done" and job["attempts"] == 1, job
        text = svc.transcript(job_id)
        assert text.count("took the job") == 1 and "stopped answering" not in text, text

        silent = svc.follow("submit", team_project(tmp_path / "beta", commands=["echo two", "sleep 301.25"]),
                            token=tokens["beta"])
        job_id = job_of(svc, "beta")
        svc.wait_for_text(job_id, "two\n", timeout=120)
        worker.kill()                                        # truly silent from here
        worker.wait()
        silent_at = time.monotonic()
        offset.write_text("-120")                            # back 120 s: the lease still ends on time
        time.sleep(LEASE / 2)
        assert svc.job(job_id)["state"] == "running"         # not before its lease
        job = svc.wait_for_state(job_id, ("queued",), timeout=LEASE + 20)
        waited = time.monotonic() - silent_at
        assert LEASE - 6 < waited < LEASE + 15, waited
        assert job["attempts"] == 1 and "the job goes back to the queue (attempt 1 of 2" in svc.transcript(job_id)
        silent.proc.kill()
        silent.proc.wait()


@pytest.mark.service
@pytest.mark.timeout(200)
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_clock_step_neither_unlocks_nor_locks_a_team_longer(tmp_path, database):
    offset = tmp_path / "clock-offset"
    offset.write_text("0")
    with service_on(database, tmp_path, workers=0, args=["--development-per-hour", "1"],
                    env={clock.OFFSET_ENV: str(offset)}) as svc:
        token = svc.add_teams("gamma")["gamma"]
        runs = Runs(svc.http, svc.worker_token("far"))
        runs.submit_development(token, {})
        for n, step in enumerate(("0", "3700", "-120")):     # forward past the hour, then back 120 s
            offset.write_text(step)
            time.sleep(0.3)
            with svc.http(token) as http:                    # a key of its own: the rule is read each time
                answer = http.post("/api/jobs", params={"kind": "development"}, content=b"",
                                   headers={"Idempotency-Key": f"clock-step-{n}"})
            assert answer.status_code == 429, (step, answer.text)
            assert 3500 < int(answer.headers["retry-after"]) <= 3600, (step, answer.headers["retry-after"])
