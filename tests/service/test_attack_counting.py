"""Only what was measured and ended ``done`` counts: a real service (SQLite and PostgreSQL) where a
team cancels its run around the worker's end (many tries, every order), a worker reports after the
service has given up on it (failed after its silent attempts, cancelled while silent), and a real
worker's ranked run is cancelled right after its last line. After each, the invariant is checked
everywhere the ranking is shown (/api/ranking as table, CSV and JSON, the ranking page, the
instructor's CSV, ``ranking --server``, the local ``ranking`` that ``grade`` prints): a team is
ranked exactly when its job ended ``done``; and a job ends once."""
import shutil
import threading
import time

import pytest

from hostilekit import (Worker, module_service, ranked_everywhere, ranked_teams_api, remote_worker,
                        submit_ranked)
from pagekit import wait_until
from teams import PLAIN, team_project

from ece408_op.service.upload import pack_ranked

pytestmark = [pytest.mark.service, pytest.mark.slow]

ENDED = ("done", "failed", "cancelled")
ORDERS = ("cancel, then finish", "finish, then cancel", "both at once")
TRIES = 24


svc = module_service("counting", "--lease", "3", "--ranked-per-hour", "100")


def end_lines(transcript):
    """The lines that end a job: its record's summary, a cancellation, a failure."""
    return [line for line in transcript.splitlines()
            if line.startswith(("* Record ", "* Cancelled", "* Failed", "* The job failed"))]


def check_everywhere(svc, jobs, size=100):
    """Every view ranks exactly the teams of ``jobs`` {team: job id} whose job ended done."""
    states = {team: svc.job(job_id) for team, job_id in jobs.items()}
    done = {team for team, job in states.items() if job["state"] == "done"}
    problems = []
    for where, ranked in ranked_everywhere(svc, size).items():
        ranked = ranked & set(jobs)
        for team in sorted(ranked ^ done):
            problems.append(f"{where}: {team} is {'ranked' if team in ranked else 'not ranked'} with its job "
                            f"{states[team]['state']}")
    return problems


@pytest.mark.timeout(400)
def test_cancel_against_finish_ranked_exactly_when_done(svc):
    """The race as a loop: the run's last line is posted, then the team's cancel and the worker's
    finish in each order and at once. Each try: the job ends once (one end line), and is ranked
    (everywhere) exactly when it ended done."""
    names = [f"race{i:02d}" for i in range(TRIES)]
    tokens = svc.add_teams(*names)
    worker = Worker(svc)
    jobs, problems = {}, []
    try:
        for i, name in enumerate(names):
            order = ORDERS[i % len(ORDERS)]
            answer = submit_ranked(svc, tokens[name])
            assert answer.status_code == 201, answer.text
            jobs[name] = answer.json()["id"]
            claim = worker.claim(wait=5)
            assert claim and claim["job"]["id"] == jobs[name], claim
            assert worker.lines(claim, ["Op Time: 0.025000\n", "Correctness: 0.91 Model: ece408-high\n"]).status_code \
                == 200

            def cancel():
                with svc.http(tokens[name]) as http:
                    http.post(f"/api/jobs/{jobs[name]}/cancel")
            finish = lambda: worker.finish(claim, op_time=0.05 + i / 1000)          # noqa: E731
            if order == "cancel, then finish":
                cancel()
                finish()
            elif order == "finish, then cancel":
                finish()
                cancel()
            else:
                barrier = threading.Barrier(2)
                threads = [threading.Thread(target=lambda f=f: (barrier.wait(), f())) for f in (cancel, finish)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(30)
            job = wait_until(lambda: (lambda j: j if j["state"] in ENDED else None)(svc.job(jobs[name])), 20,
                             "the job's end")
            ends = end_lines(svc.transcript(jobs[name]))
            if len(ends) != 1:
                problems.append(f"{name} ({order}): {job['state']}, end lines {ends}")
    finally:
        worker.close()
    time.sleep(1.5)                                   # the rankings are computed again at most once a second
    problems += check_everywhere(svc, jobs)
    assert not problems, "\n".join(problems)


@pytest.mark.timeout(300)
def test_a_worker_s_end_after_the_service_gave_up_is_refused(svc):
    """A worker silent past its lease twice: the service fails the job; its late finish (with the
    last lease) is refused (409) and nothing of it is ranked. A worker silent while its job was
    being cancelled: the service cancels it; the late finish is refused likewise. The old lease of
    a job now held by another worker is refused too; that worker's own end counts."""
    tokens = svc.add_teams("late-failed", "late-cancelled", "late-requeued")
    worker = Worker(svc)
    jobs, problems = {}, []
    try:
        # failed after two silent attempts
        jobs["late-failed"] = submit_ranked(svc, tokens["late-failed"]).json()["id"]
        first = worker.claim(wait=5)
        wait_until(lambda: svc.job(jobs["late-failed"])["state"] == "queued", 30, "attempt 1 taken back")
        second = worker.claim(wait=5)
        assert second["job"]["id"] == jobs["late-failed"] and second["lease"] != first["lease"]
        wait_until(lambda: svc.job(jobs["late-failed"])["state"] == "failed", 30, "the job failed")
        for claim, which in ((second, "the last lease"), (first, "the first lease")):
            answer = worker.finish(claim)
            if answer.status_code != 409:
                problems.append(f"a finish with {which} after the job failed: {answer.status_code} {answer.text}")
        # cancelled while its worker was silent
        jobs["late-cancelled"] = submit_ranked(svc, tokens["late-cancelled"]).json()["id"]
        silent = worker.claim(wait=5)
        with svc.http(tokens["late-cancelled"]) as http:
            assert http.post(f"/api/jobs/{jobs['late-cancelled']}/cancel").status_code == 200
        wait_until(lambda: svc.job(jobs["late-cancelled"])["state"] == "cancelled", 30, "the silent job cancelled")
        answer = worker.finish(silent)
        if answer.status_code != 409:
            problems.append(f"a finish after the service cancelled the job: {answer.status_code} {answer.text}")
        # the old lease of a job another worker holds now
        jobs["late-requeued"] = submit_ranked(svc, tokens["late-requeued"]).json()["id"]
        old = worker.claim(wait=5)
        wait_until(lambda: svc.job(jobs["late-requeued"])["state"] == "queued", 30, "attempt 1 taken back")
        other = Worker(svc)
        new = other.claim(wait=5)
        answer = worker.finish(old)
        assert answer.status_code == 409, answer.text
        assert other.finish(new).status_code == 200
        other.close()
    finally:
        worker.close()
    for team, job_id in jobs.items():
        if team != "late-requeued" and "* Record " in svc.transcript(job_id):
            problems.append(f"{team}: its transcript holds a record's summary though its job "
                            f"{svc.job(job_id)['state']}")
    time.sleep(1.5)
    problems += check_everywhere(svc, jobs)
    assert not problems, "\n".join(problems)


@pytest.mark.timeout(400)
def test_a_real_run_cancelled_right_after_its_last_line(svc, tmp_path):
    """A real `worker --server` runs a team's ranked m2 (10 images); the team follows the stream
    and cancels the moment the run's last Correctness line arrives. Two tries: each ranked
    exactly when its job ended done."""
    if shutil.which("bwrap") is None:
        pytest.skip("the workers' sandbox needs bubblewrap")
    names = [f"real{i}" for i in range(2)]
    tokens = svc.add_teams(*names)
    worker = remote_worker(svc, f"real-{time.monotonic_ns() % 10**6}")
    upload = pack_ranked(team_project(tmp_path / "team", cpu=PLAIN), "m2")[0]
    jobs = {}
    try:
        for name in names:
            with svc.http(tokens[name]) as http:
                answer = http.post("/api/jobs", params={"kind": "ranked", "milestone": "m2", "size": 10},
                                   content=upload)
                assert answer.status_code == 201, answer.text
                job_id = jobs[name] = answer.json()["id"]
                seen = ""
                with http.stream("GET", f"/api/jobs/{job_id}/events", timeout=120) as stream:
                    for line in stream.iter_lines():
                        seen += line + "\n"
                        if seen.count("Correctness: ") >= 2 and line.startswith("data:"):
                            http.post(f"/api/jobs/{job_id}/cancel")
                            break
            svc.wait_for_state(job_id, ENDED, timeout=60)
        assert worker.poll() is None
    finally:
        worker.terminate()
        worker.wait(30)
    time.sleep(1.5)
    problems = check_everywhere(svc, jobs, size=10)
    assert not problems, "\n".join(problems)


def test_the_views_agree_on_a_plain_done_run(svc):
    """A control of the checks above: a run ended done with nothing in the way is ranked in every
    view (the views are read as the tests read them)."""
    token = svc.add_teams("plain-done")["plain-done"]
    worker = Worker(svc)
    try:
        job_id = submit_ranked(svc, token).json()["id"]
        claim = worker.claim(wait=5)
        assert worker.finish(claim).status_code == 200
    finally:
        worker.close()
    time.sleep(1.5)
    assert "plain-done" in ranked_teams_api(svc, "json")
    assert not check_everywhere(svc, {"plain-done": job_id})


@pytest.mark.serial          # its stand-in worker sends no heartbeat: under a loaded parallel phase its lease ran out
@pytest.mark.timeout(300)
def test_a_cancel_storm_costs_the_database_one_write(svc):
    """A team sends 20 cancels of its running job at once, then 20 more one by one: every one is
    answered (200, or 409 once it has ended), the job ends cancelled once, and the cancel is
    written once (one ``job.cancel`` log line), not once a request: a storm of cancels takes
    the database's write lock from nobody."""
    token = svc.add_teams("storm")["storm"]
    worker = Worker(svc)
    try:
        answer = submit_ranked(svc, token)
        assert answer.status_code == 201, answer.text
        job_id = answer.json()["id"]
        claim = worker.claim(wait=5)
        assert claim and claim["job"]["id"] == job_id, claim
        before = svc.log().count("job.cancel ")
        statuses = []

        def cancel():
            with svc.http(token) as http:
                statuses.append(http.post(f"/api/jobs/{job_id}/cancel").status_code)
        barrier = threading.Barrier(20)
        threads = [threading.Thread(target=lambda: (barrier.wait(), cancel())) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for _ in range(20):
            cancel()
        assert sorted(set(statuses)) == [200] and len(statuses) == 40, statuses
        assert svc.log().count("job.cancel ") - before == 1
        assert worker.call(claim, "heartbeat").json().get("cancel") is True
        assert worker.finish(claim, op_time=0.05).status_code in (200, 409)
        job = wait_until(lambda: (lambda j: j if j["state"] in ENDED else None)(svc.job(job_id)), 20, "the job's end")
        assert job["state"] == "cancelled" and len(end_lines(svc.transcript(job_id))) == 1
        with svc.http(token) as http:
            assert http.post(f"/api/jobs/{job_id}/cancel").status_code == 409
    finally:
        worker.close()
