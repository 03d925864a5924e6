"""The workers' side of a real service (SQLite and PostgreSQL) under attack: forged worker calls
(a wrong lease, another job's lease, replays, chunk numbers up to 2^64 and past, gaps, NUL and lone
surrogates in the text), a development run whose output runs to megabytes (its end must reach the
service, as the run promises), and a second ``serve`` started by a careless instructor on the same
database (the first's workers and instructor must keep working)."""
import secrets
import shutil
import subprocess
import time

import pytest

from suitekit import python_command
from hostilekit import (EventStream, Worker, db_path, development, module_service, open_streams,
                        remote_worker, submit_development, submit_ranked,
                        tracebacks)
from pagekit import wait_until
from services import free_port
from teams import team_project

from ece408_op.service.upload import pack_development

pytestmark = [pytest.mark.service, pytest.mark.slow]
ENDED = ("done", "failed", "cancelled")


svc = module_service("workers", "--ranked-per-hour", "1000", "--development-per-hour", "1000")


def claimed(svc, worker, name):
    """A new team's ranked job, claimed by ``worker``: (token, claim)."""
    token = svc.add_teams(f"{name}-{secrets.token_hex(3)}").popitem()[1]
    job_id = submit_ranked(svc, token).json()["id"]
    claim = worker.claim(wait=5)
    assert claim and claim["job"]["id"] == job_id, claim
    return token, claim


# ---------------------------------------------------------------------------- forged calls

def test_a_lease_not_held_is_refused_on_every_route(svc):
    """A random lease, another job's lease, no lease: 409 (or 404) on the upload, chunks,
    heartbeat, release and finish; the jobs are untouched."""
    first, second = Worker(svc), Worker(svc)
    try:
        _, mine = claimed(svc, first, "lease-a")
        _, theirs = claimed(svc, second, "lease-b")
        problems = []
        for label, lease in (("a random lease", secrets.token_hex(16)), ("another job's lease", theirs["lease"]),
                             ("no lease", "")):
            for what, method, body in (("upload", "GET", None), ("chunks", "POST", {"chunks": [[50, "forged\n"]]}),
                                       ("heartbeat", "POST", None), ("release", "POST", {"why": "forged"}),
                                       ("finish", "POST", {"status": "failed", "exit_code": 1, "reason": "forged",
                                                           "record": None})):
                answer = first.call(mine, what, lease=lease, body=body, method=method)
                if answer.status_code not in (404, 409):
                    problems.append(f"{what} with {label}: {answer.status_code} {answer.text[:100]}")
        assert svc.job(mine["job"]["id"])["state"] == "running" and "forged" not in svc.transcript(mine["job"]["id"])
        assert first.finish(mine).status_code == 200 and second.finish(theirs).status_code == 200
    finally:
        first.close()
        second.close()
    assert not problems, "\n".join(problems)


def test_a_replayed_chunk_never_rewrites_a_line(svc):
    worker = Worker(svc)
    try:
        _, claim = claimed(svc, worker, "replay")
        seq = claim["job"]["next_seq"]
        assert worker.lines(claim, ["the first text\n"], seq).status_code == 200
        assert worker.lines(claim, ["a replay with other text\n"], seq).status_code == 200
        assert worker.finish(claim).status_code == 200
        text = svc.transcript(claim["job"]["id"])
    finally:
        worker.close()
    assert "the first text" in text and "a replay" not in text


@pytest.mark.parametrize("seq", [2**31 - 1, 2**31, 2**53, 2**63 - 1, 2**63, 2**64], ids=lambda s: f"seq {s}")
def test_a_chunk_number_of_any_size_is_refused_or_stored_never_a_500(svc, seq):
    """A worker posts a chunk numbered far past its job's: a 4xx, or stored; either way the job
    goes on (heartbeats, its end) and its transcript and stream still read; no traceback."""
    worker = Worker(svc)
    log_before = len(svc.log())
    try:
        _, claim = claimed(svc, worker, "seq")
        answer = worker.call(claim, "chunks", body={"chunks": [[seq, "far away\n"]]})
        problems = [f"chunk {seq}: {answer.status_code} {answer.text[:100]}"] if answer.status_code >= 500 else []
        for what in ("heartbeat", "finish"):
            answer = worker.finish(claim) if what == "finish" else worker.call(claim, what)
            if answer.status_code != 200:
                problems.append(f"{what} after chunk {seq}: {answer.status_code} {answer.text[:100]}")
        with svc.http(svc.instructor_token) as http:
            for path in (f"/api/jobs/{claim['job']['id']}/transcript", f"/api/jobs/{claim['job']['id']}"):
                if http.get(path).status_code != 200:
                    problems.append(f"{path} after chunk {seq}: {http.get(path).status_code}")
    finally:
        worker.close()
    problems += tracebacks(svc.log()[log_before:])
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("text", ["nul \0 inside\n", "a lone surrogate \ud800\n", "\0" * 1000],
                         ids=["NUL", "a lone surrogate", "only NULs"])
def test_chunk_text_the_databases_cannot_hold_is_never_a_500(svc, text):
    """Team output reaches the transcript through the worker as text: NUL (PostgreSQL's text cannot
    hold it) and lone surrogates (not UTF-8): stored escaped or refused 4xx, never a 500; the job
    can still end."""
    import json
    worker = Worker(svc)
    log_before = len(svc.log())
    try:
        _, claim = claimed(svc, worker, "text")
        body = json.dumps({"chunks": [[claim["job"]["next_seq"], text]]}).encode()          # escapes: valid JSON
        answer = worker.http.post(f"/api/worker/jobs/{claim['job']['id']}/chunks", content=body,
                                  headers={"X-Lease": claim["lease"], "Content-Type": "application/json"})
        problems = [f"chunks: {answer.status_code} {answer.text[:100]}"] if answer.status_code >= 500 else []
        ended = worker.finish(claim)
        if ended.status_code != 200:
            problems.append(f"finish: {ended.status_code} {ended.text[:100]}")
    finally:
        worker.close()
    problems += tracebacks(svc.log()[log_before:])
    assert not problems, "\n".join(problems)


def test_a_gap_in_the_numbers_loses_no_line_for_a_follower(svc):
    """A worker posts chunks out of order (a gap, filled later): a client that followed the job
    live from its start ends with exactly the transcript the service keeps (or the gap refused)."""
    worker = Worker(svc)
    try:
        token, claim = claimed(svc, worker, "gap")
        job_id, seq = claim["job"]["id"], claim["job"]["next_seq"]
        stream = open_streams([EventStream(svc.url, f"/api/jobs/{job_id}/events", token=token)])[0]
        wait_until(lambda: stream.events, 10, "the stream's first event")
        assert worker.lines(claim, ["line 0\n"], seq).status_code == 200
        late = worker.lines(claim, ["line 3\n"], seq + 3)
        time.sleep(0.5)
        assert worker.lines(claim, ["line 1\n", "line 2\n"], seq + 1).status_code == 200
        if late.status_code != 200:
            assert worker.lines(claim, ["line 3\n"], seq + 3).status_code == 200
        assert worker.finish(claim).status_code == 200
        wait_until(lambda: stream.ended_at, 20, "the stream's end")
    finally:
        worker.close()
    stored = svc.transcript(job_id)
    followed = stream.texts()
    assert followed == stored, f"the follower saw:\n{followed}\nthe service keeps:\n{stored}"


# ---------------------------------------------------------------------------- a long run's end

LONG_OUTPUT = {                       # each ends with a line of its own: "SPILL-" "ENDS" (not in the command)
    "1.5 MB of lines": "import sys\nfor i in range(15000): sys.stdout.write('%05d' % i + 'y' * 94 + '\\n')\n"
                     "print('SPILL-' + 'ENDS')\n",
    "one 1.5 MB line": "import sys\nsys.stdout.write('z' * 1500000 + '\\n')\nprint('SPILL-' + 'ENDS')\n",
    "1.5 MB of bytes": "import os, sys\nsys.stdout.buffer.write(os.urandom(1500000) + b'\\n')\nsys.stdout.flush()\n"
                     "print('SPILL-' + 'ENDS')\n",
}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("output", sorted(LONG_OUTPUT))
def test_the_end_of_a_long_run_reaches_the_service(svc, tmp_path, output):
    """A development run prints megabytes, then its command's last line, then a second command
    prints one line: the run's transcript says "its end follows the run", so both must reach the
    service's transcript; what the service keeps stays bounded (under 4 MiB)."""
    if shutil.which("bwrap") is None:
        pytest.skip("the workers' sandbox needs bubblewrap")
    token = svc.add_teams(f"long-{secrets.token_hex(3)}").popitem()[1]
    team = team_project(tmp_path / "team", commands=["python3 /src/spill.py", "cat /src/last.txt"],
                        files={"spill.py": LONG_OUTPUT[output], "last.txt": "THE-LAST-LINE-OF-THE-RUN\n"})
    worker = remote_worker(svc, f"long{secrets.token_hex(2)}")
    try:
        job_id = submit_development(svc, token, body=pack_development(team)[0]).json()["id"]
        job = svc.wait_for_state(job_id, ENDED, timeout=180)
    finally:
        worker.terminate()
        worker.wait(30)
    text = svc.transcript(job_id)
    assert job["state"] == "done" and job["status"] == "ok", job
    assert len(text.encode()) < 4 << 20, f"the service keeps {len(text.encode())} bytes"
    assert "SPILL-ENDS" in text and "THE-LAST-LINE-OF-THE-RUN" in text, text[-1500:]


# ---------------------------------------------------------------------------- a second serve

def second_serve(svc, port, state):
    """``serve`` started again on the first's database by the same instructor's hand, in the
    state folder ``state``; returns its process."""
    env = {**svc.env, "XDG_STATE_HOME": str(state), "ECE408_DB": db_path(svc)}
    return subprocess.Popen([*python_command(), "-m", "ece408_op", "serve", "--port", str(port), "--workers", "1",
                             "--engine", "bubblewrap"], env=env, cwd=svc.root, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["the same port", "another port and state folder"])
def test_a_second_serve_on_the_same_database_leaves_the_first_working(running_service, tmp_path, postgres_server, how):
    """The instructor starts ``serve`` again by mistake on the first's database: on the same port
    (it cannot listen), or on another port with a state folder (an instructor token) of its own
    (one serve a database: it refuses).
    The first service's own worker still runs a job to its end, and its instructor's token still
    works. (The first on SQLite, the second on PostgreSQL: each database once.)"""
    if shutil.which("bwrap") is None:
        pytest.skip("the workers' sandbox needs bubblewrap")
    database = "postgresql" if "state" in how else "sqlite"
    first = running_service.on(tmp_path / "first", database, postgres_server, workers=1,
                               args=["--engine", "bubblewrap"])
    second = None
    try:
        token = first.add_teams("steady")["steady"]
        if how == "the same port":
            second = second_serve(first, first.port, first.root / "state")
            assert second.wait(120) != 0                             # it cannot listen there
        else:                                                        # one serve a database: it refuses
            second = second_serve(first, free_port(), tmp_path / "second-state")
            assert second.wait(120) != 0
        time.sleep(11)                                               # past the first server's token cache
        assert first.admin("GET", "/api/admin/teams").status_code == 200, "the first instructor's token was revoked"
        job_id = submit_development(first, token, body=development()).json()["id"]
        wait_until(lambda: first.job(job_id)["state"] in ENDED, 45, "the first service's worker running the job")
        assert first.job(job_id)["state"] == "done"
    finally:
        if second is not None and second.poll() is None:
            second.terminate()
            second.wait(60)
        first.close()

