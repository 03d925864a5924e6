"""Build folders against a worker that lost its job (a network partition, a laptop lid closed on a
worker), on a real service (SQLite and PostgreSQL): the server stores a build folder's file
before it checks, in the database, that the sender still holds the job, and deletes that file
again where it does not, unless the same file was there before. Two workers that ran the same
deterministic build send the same bytes, so the same file: the lost worker's late post and the
new holder's post interleave, and the lost worker's refusal deletes the file the new holder's
row names. The team's build folder is then gone though the service says it is kept."""
import os
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest

from hostilekit import (Worker, hold_writes, member, module_service, parse_response, request_bytes,
                        submit_development, tar_gz)
from pagekit import wait_until

pytestmark = [pytest.mark.service, pytest.mark.slow]

LEASE = 8                            # seconds a silent worker keeps its job


svc = module_service("builds2", "--lease", str(LEASE))


class SlowPost:
    """A build folder posted on a raw socket: all but its last byte now, the last on ``finish``."""

    def __init__(self, url, token, job_id, lease, archive):
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=120)
        self.sock.sendall(request_bytes("POST", f"/api/worker/jobs/{job_id}/build", headers={
            "Authorization": f"Bearer {token}", "X-Lease": lease, "Content-Type": "application/gzip"},
            body=archive)[:-1])
        self.last = archive[-1:]

    def finish(self):
        self.sock.sendall(self.last)

    def answer(self):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            data += chunk
        self.sock.close()
        return parse_response(data)[0]


def warm_pool(svc, job_id, threads=24, seconds=2.0):
    """Reads from many threads at once, so that the server's pool holds its connections open
    before the writes are held (SQLite: opening a connection writes its schema check, which
    would wait for the held writes too)."""
    deadline = time.monotonic() + seconds

    def read():
        with svc.http(svc.instructor_token) as http:
            while time.monotonic() < deadline:
                http.get(f"/api/jobs/{job_id}")
    pool = [threading.Thread(target=read) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(60)


@pytest.mark.timeout(240)
def test_a_lost_worker_s_late_build_does_not_delete_the_new_holder_s(svc):
    """Worker A claims a team's development run and starts sending its build folder; it falls
    silent past its lease, the job goes back to the queue and worker B claims it. While another
    session holds the database's writes for a few seconds, A's last byte arrives and B sends the
    same build folder (the same bytes, so the same kept file's name); both wait on the database.
    Then: A is refused (409), B's is kept (200), B ends the job ok, and the team downloads exactly
    that build folder (200, the same bytes): A's refusal never touched B's file."""
    token = svc.add_teams(f"rebuilt-{time.monotonic_ns() % 10**6}").popitem()[1]
    archive = tar_gz([member("out/kernel.bin", os.urandom(256 << 10))], level=1)
    job_id = submit_development(svc, token).json()["id"]
    a, b = Worker(svc, "lost-a"), Worker(svc, "holder-b")
    try:
        first = a.claim(wait=5)
        assert first["job"]["id"] == job_id
        late = SlowPost(svc.url, a.token, job_id, first["lease"], archive)
        wait_until(lambda: svc.job(job_id)["state"] == "queued", LEASE * 4, "A's lease taken back")
        second = b.claim(wait=5)
        assert second is not None and second["job"]["id"] == job_id, second
        warm_pool(svc, job_id)
        assert b.call(second, "heartbeat").status_code == 200
        held, release = threading.Event(), threading.Event()
        holder = threading.Thread(target=hold_writes, args=(svc, 30, held, release), daemon=True)
        holder.start()
        assert held.wait(30)
        answers = {}
        try:
            late.finish()                                # A's last byte: its post waits on the held writes
            time.sleep(2.0)
            poster = threading.Thread(target=lambda: answers.update(b=b.http.post(
                f"/api/worker/jobs/{job_id}/build", headers={"X-Lease": second["lease"]}, content=archive)))
            poster.start()
            time.sleep(2.0)                              # B's post waiting too, on the same bytes' file name
        finally:
            release.set()
            holder.join(30)
        answers["a"] = late.answer()
        poster.join(60)
        assert answers["a"] == 409, answers["a"]
        assert answers["b"].status_code == 200, answers["b"].text
        ended = b.call(second, "finish", body={"status": "ok", "exit_code": 0, "reason": None, "record": None})
        assert ended.status_code == 200, ended.text
    finally:
        a.close()
        b.close()
    with svc.http(token) as http:
        download = http.get(f"/api/jobs/{job_id}/build")
    assert download.status_code == 200, (f"the build folder the service kept for the job answers "
                                         f"{download.status_code}: {download.text[:200]}")
    assert download.content == archive


def test_a_build_posted_by_its_holder_alone_comes_back(svc):
    """A control of the test above: the same steps without the lost worker's post."""
    token = svc.add_teams(f"built-{time.monotonic_ns() % 10**6}").popitem()[1]
    archive = tar_gz([member("out/kernel.bin", os.urandom(64 << 10))], level=1)
    job_id = submit_development(svc, token).json()["id"]
    worker = Worker(svc, "holder-only")
    try:
        claim = worker.claim(wait=5)
        assert claim["job"]["id"] == job_id
        assert worker.http.post(f"/api/worker/jobs/{job_id}/build", headers={"X-Lease": claim["lease"]},
                                content=archive).status_code == 200
        assert worker.call(claim, "finish", body={"status": "ok", "exit_code": 0, "reason": None,
                                                  "record": None}).status_code == 200
    finally:
        worker.close()
    with svc.http(token) as http:
        download = http.get(f"/api/jobs/{job_id}/build")
    assert download.status_code == 200 and download.content == archive
