"""One truth per job, against a real ``serve`` (SQLite and PostgreSQL): a job ends once, in one
transaction with its record; cancel against finish is decided in the database (whichever commits
first wins, the other is told); a finish from a worker that no longer holds the job's lease is
refused (409) and its record kept for the instructor as not counted; only a record whose job
ended ``done`` is ranked (the API's table, CSV and JSON, the instructor's CSV, ``ranking``).

The worker here is the test itself, through the workers' routes with a worker token, as
tests/pagekit.py does: it decides exactly when each call arrives."""
import json
import threading
import time

import pytest

from pagekit import Runs, record_of
from servicekit import Service, started_postgres

pytestmark = pytest.mark.service


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def svc(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"truth-{request.param}")
    pg = None
    env = {}
    if request.param == "postgresql":
        pg = started_postgres(root / "pg")
        env = {"ECE408_DB": pg.url}
    service = Service(root / "svc", workers=0, env=env,
                      args=["--lease", "3", "--ranked-per-hour", "1000", "--max-waiting", "100"]).start()
    service.runs = Runs(service.http, service.worker_token("tester"))
    yield service
    service.close()
    if pg is not None:
        pg.stop()


def ranked_teams(svc, token, fmt="json"):
    """The teams the API's ranking shows (m2, 100 images) to ``token``'s holder, read after the
    ranking's cache has seen every record stored so far (it is computed again within a second)."""
    time.sleep(1.2)
    with svc.http(token) as c:
        answer = c.get("/api/ranking", params={"milestone": "m2", "size": 100, "format": fmt})
    assert answer.status_code == 200, answer.text
    if fmt == "json":
        return {row["team"] for row in json.loads(answer.text)["ranking"]}
    return answer.text


def started(svc, token):
    """A ranked m2 job of ``token``'s team, claimed by the test's worker, its run's lines posted."""
    job = svc.runs.submit(token)
    claimed = svc.runs.claim()
    assert claimed["job"]["id"] == job["id"]
    svc.runs.lines(claimed, ["* Running python -m ece408_op m2 (the grader's harness)\n", "Op Time: 0.100000\n"])
    return claimed, record_of({**job, "record_id": claimed["job"]["record_id"]}, [[0.1], [0.1]])


def finish(svc, claimed, record):
    with svc.http(svc.runs.worker) as c:
        return c.post(f"/api/worker/jobs/{claimed['job']['id']}/finish", headers={"X-Lease": claimed["lease"]},
                      json={"status": "ok", "exit_code": 0, "reason": None, "record": record})


def cancel(svc, token, job_id):
    with svc.http(token) as c:
        return c.post(f"/api/jobs/{job_id}/cancel")


def uncounted(svc):
    answer = svc.admin("GET", "/api/admin/uncounted")
    assert answer.status_code == 200, answer.text
    return {row["job_id"]: row for row in answer.json()["uncounted"]}


def test_a_run_cancelled_after_its_last_line_is_not_ranked(svc):
    token = svc.add_teams("cancel-late")["cancel-late"]
    claimed, record = started(svc, token)
    assert cancel(svc, token, claimed["job"]["id"]).status_code == 200          # the cancel commits first
    answer = finish(svc, claimed, record)
    assert answer.status_code == 200 and answer.json()["state"] == "cancelled", answer.text
    job = svc.job(claimed["job"]["id"])
    assert job["state"] == "cancelled" and not job["valid"]
    assert "cancel-late" not in ranked_teams(svc, token)
    assert "cancel-late" not in ranked_teams(svc, svc.instructor_token, "csv")
    assert claimed["job"]["id"] in uncounted(svc)
    assert "not counted" in svc.transcript(claimed["job"]["id"])


def test_a_finish_that_commits_first_wins_and_the_cancel_is_told(svc):
    token = svc.add_teams("finish-first")["finish-first"]
    claimed, record = started(svc, token)
    assert finish(svc, claimed, record).json()["state"] == "done"
    answer = cancel(svc, token, claimed["job"]["id"])
    assert answer.status_code == 409 and "already ended (done)" in answer.json()["error"]
    assert "finish-first" in ranked_teams(svc, token)
    assert claimed["job"]["id"] not in uncounted(svc)


def test_a_late_finish_after_the_job_failed_is_refused_and_kept_not_counted(svc):
    """The worker goes silent past its lease on both attempts: the service fails the job. The
    first attempt's worker then sends its finish: 409, nothing ranked, the record kept."""
    token = svc.add_teams("late-finish")["late-finish"]
    first, record = started(svc, token)
    deadline = time.monotonic() + 60
    while svc.job(first["job"]["id"])["state"] != "queued":           # taken back after 3 s of silence
        assert time.monotonic() < deadline, svc.job(first["job"]["id"])
        time.sleep(0.3)
    second = svc.runs.claim()
    assert second["job"]["id"] == first["job"]["id"] and second["lease"] != first["lease"]
    while svc.job(first["job"]["id"])["state"] != "failed":           # attempt 2 silent too: failed
        assert time.monotonic() < deadline + 60
        time.sleep(0.3)
    for claimed in (first, second):                                   # both attempts' late ends
        answer = finish(svc, claimed, record)
        assert answer.status_code == 409, answer.text
    job = svc.job(first["job"]["id"])
    assert job["state"] == "failed" and not job["valid"]
    assert "late-finish" not in ranked_teams(svc, token)
    assert "late-finish" not in ranked_teams(svc, svc.instructor_token, "table")
    kept = uncounted(svc)[first["job"]["id"]]
    assert kept["team"] == "late-finish" and kept["why"].startswith("late")


def test_a_repeated_finish_with_the_same_lease_changes_nothing(svc):
    token = svc.add_teams("twice")["twice"]
    claimed, record = started(svc, token)
    assert finish(svc, claimed, record).json()["state"] == "done"
    again = finish(svc, claimed, {**record, "op_time": 0.000001})
    assert again.status_code == 200 and again.json()["state"] == "done"
    with svc.http(token) as c:
        rows = json.loads(c.get("/api/ranking", params={"milestone": "m2", "size": 100, "format": "json"}).text)["ranking"]
    assert [r["op_time"] for r in rows if r["team"] == "twice"] == [pytest.approx(0.2)]


@pytest.mark.parametrize("first", ["cancel", "finish"])
def test_cancel_against_finish_at_once_always_agrees_with_the_ranking(svc, first):
    """Both sent together, many times: whatever wins, the job's end and the ranking agree (done
    and ranked, or cancelled and not ranked), and exactly one of the two calls ends the job."""
    for round_ in range(6):
        name = f"race-{first}-{round_}"
        token = svc.add_teams(name)[name]
        claimed, record = started(svc, token)
        answers = {}
        calls = {"cancel": lambda: cancel(svc, token, claimed["job"]["id"]),
                 "finish": lambda: finish(svc, claimed, record)}
        order = [first, "finish" if first == "cancel" else "cancel"]
        threads = [threading.Thread(target=lambda k=k: answers.__setitem__(k, calls[k]())) for k in order]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        job = svc.job(claimed["job"]["id"])
        ranked = name in ranked_teams(svc, token)
        assert job["state"] in ("done", "cancelled")
        assert ranked == (job["state"] == "done"), (job, answers["cancel"].text, answers["finish"].text)
        assert answers["finish"].status_code == 200
        assert answers["cancel"].status_code == (409 if job["state"] == "done" else 200)
        assert (claimed["job"]["id"] in uncounted(svc)) == (job["state"] == "cancelled")
