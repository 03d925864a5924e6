"""A database that is slow, not down, on deadline night, against a real service (SQLite and
PostgreSQL): writes held for 75 s (PostgreSQL: another session's ``LOCK TABLE service_jobs IN
EXCLUSIVE MODE``; SQLite: another connection's write transaction). The client must not read the
wait as a refusal and make the team pay twice: it sends an ``Idempotency-Key`` with each
``POST /api/jobs`` (the same one on each retry of one submission), keeps waiting and says the
service is slow; the server answers a repeated key of the same team with the same job, charged
once."""
import json
import shutil
import socket
import threading
import time

import pytest

from hostilekit import (development, hold_writes, module_service, remote_worker,
                        submit_development)
from servicekit import job_id_of
from teams import team_project

pytestmark = [pytest.mark.service, pytest.mark.slow]

HELD = 75.0                                 # seconds the writes are held: past the client's 60 s


svc = module_service("slowdb", "--development-per-hour", "2")


def jobs_of(svc, team):
    return [j for j in svc.jobs() if j["team"] == team]


def test_a_repeated_key_is_the_same_job_charged_once(svc):
    """The same submission sent twice with its key: the same job (same id), one job stored. With a
    limit of 2 an hour, a second submission (another key) is still accepted: the repeat was not
    charged. The key of a cancelled job still names that job. Another team's equal key is its own."""
    tokens = svc.add_teams("keyed", "keyed-too")
    first = submit_development(svc, tokens["keyed"], key="key-1")
    again = submit_development(svc, tokens["keyed"], key="key-1")
    assert first.status_code == 201, first.text
    assert again.status_code in (200, 201), again.text
    assert again.json()["id"] == first.json()["id"]
    other = submit_development(svc, tokens["keyed"], key="key-2")
    assert other.status_code == 201, f"a second submission was refused: the repeat was charged ({other.text})"
    assert len(jobs_of(svc, "keyed")) == 2
    with svc.http(tokens["keyed"]) as http:
        assert http.post(f"/api/jobs/{first.json()['id']}/cancel").status_code == 200
    assert submit_development(svc, tokens["keyed"], key="key-1").json()["id"] == first.json()["id"]
    theirs = submit_development(svc, tokens["keyed-too"], key="key-1")
    assert theirs.status_code == 201 and theirs.json()["id"] != first.json()["id"]
    for job in jobs_of(svc, "keyed") + jobs_of(svc, "keyed-too"):
        svc.admin("POST", f"/api/jobs/{job['id']}/cancel")


def test_a_key_sent_six_times_at_once_is_one_job(svc):
    token = svc.add_teams("keyed-at-once")["keyed-at-once"]
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(submit_development(svc, token, key="together")))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(a.status_code < 500 for a in answers), [a.text for a in answers]
    ids = {a.json()["id"] for a in answers if a.status_code in (200, 201)}
    assert len(jobs_of(svc, "keyed-at-once")) == 1 and len(ids) == 1, [a.text[:100] for a in answers]
    for job in jobs_of(svc, "keyed-at-once"):
        svc.admin("POST", f"/api/jobs/{job['id']}/cancel")


class FlakyService(threading.Thread):
    """A stand-in for the service that answers the first ``POST /api/jobs`` with 503 and the next
    with 201, and keeps each request's headers: what the client sends, seen from the other end."""

    def __init__(self):
        super().__init__(daemon=True)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.posts = []

    def run(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
                length = int(headers.get("content-length", 0))
                while len(body) < length:
                    body += conn.recv(65536)
                if lines[0].startswith("POST /api/jobs"):
                    self.posts.append(headers)
                    if len(self.posts) == 1:
                        reply = json.dumps({"error": "the service's database cannot be reached right now"}).encode()
                        conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: "
                                     b"application/json\r\nConnection: close\r\nContent-Length: " +
                                     str(len(reply)).encode() + b"\r\n\r\n" + reply)
                        continue
                    reply = json.dumps({"id": "f" * 32, "team": "flaky", "state": "queued"}).encode()
                    conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nConnection: close\r\n"
                                 b"Content-Length: " + str(len(reply)).encode() + b"\r\n\r\n" + reply)
                else:
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")


def test_the_client_sends_one_key_per_submission_on_every_retry(tmp_path):
    """``submit --server`` sends an Idempotency-Key with its POST, the same on its retry after a
    503, and a new one for the next submission."""
    from servicekit import Service
    stand_in = FlakyService()
    stand_in.start()
    client = Service(tmp_path / "client")
    client.url = stand_in.url
    token = "ece408_" + "0" * 16 + "_" + "A" * 43
    team = team_project(tmp_path / "team", commands=["echo hi"])
    outs = [client.cli("submit", team, "--detach", token=token, timeout=120) for _ in range(2)]
    stand_in.sock.close()
    assert outs[0].returncode == 0, outs[0].stderr
    keys = [p.get("idempotency-key") for p in stand_in.posts]
    assert len(keys) == 3 and all(keys), stand_in.posts
    assert keys[0] == keys[1] and keys[2] != keys[0], keys


@pytest.mark.timeout(400)
def test_a_slow_database_is_waited_out_and_charged_once(svc, tmp_path):
    """Writes held 75 s while a team submits: the client keeps waiting (it says the service is
    slow) rather than giving up; once the writes go on, one job exists, the team's hourly quota is
    charged once (a second submission is accepted under a limit of 2), and the client exits 0
    with that job's id, the job run by a real worker."""
    if shutil.which("bwrap") is None:
        pytest.skip("the workers' sandbox needs bubblewrap")
    token = svc.add_teams("patient")["patient"]
    worker = remote_worker(svc, "patient")
    held = threading.Event()
    holder = threading.Thread(target=hold_writes, args=(svc, HELD, held), daemon=True)
    try:
        holder.start()
        assert held.wait(30)
        client = svc.popen("submit", team_project(tmp_path / "team", commands=["echo patient"]), token=token)
        out, err = client.communicate(timeout=HELD + 150)
        holder.join(30)
        jobs = jobs_of(svc, "patient")
        assert client.returncode == 0, f"exit {client.returncode}: {err[-1500:]}"
        assert len(jobs) == 1, [j["id"] for j in jobs]
        assert job_id_of(err) == jobs[0]["id"] and jobs[0]["state"] == "done"
        assert "patient" in out
        second = submit_development(svc, token, body=development())
        assert second.status_code == 201, f"the quota was charged twice: {second.text}"
    finally:
        worker.terminate()
        worker.wait(30)
