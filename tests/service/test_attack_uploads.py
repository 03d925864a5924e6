"""Hostile uploads against a real service (SQLite and PostgreSQL): archives the server lets
through that a worker cannot unpack (the worker must live on and run the next honest job),
refusals that must come from the headers before a byte of the body is read (a team over its
limits costs the server nothing), bombs within every cap sent by a team already over its limit
(the server's peak memory and another team's latency stay bounded), two uploads of one team at
once, and PAX headers that break the tar reader (a 4xx, never a 500)."""
import json
import shutil
import socket
import tarfile
import threading
import time

import pytest

from hostilekit import (CONFIG, bomb_upload, bystander_during, development, exchange, folder, is_error_body, member,
                        module_service, percentile, proc_kib, remote_worker, request_bytes, reset_peak,
                        tar_gz, timed, tracebacks)
from pagekit import wait_until

pytestmark = [pytest.mark.service, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="the workers' sandbox needs bubblewrap")]

ENDED = ("done", "failed", "cancelled")
RULES = ["--lease", "5", "--development-per-hour", "5", "--ranked-per-hour", "5", "--max-waiting", "3"]


svc = module_service("uploads", *RULES)


def team(svc, name):
    return svc.add_teams(f"{name}-{time.monotonic_ns() % 10**9}").popitem()[1]


def over_hourly_limit(svc, token):
    """Five development runs submitted and cancelled: the team is at its hourly limit, none waiting."""
    with svc.http(token) as http:
        for _ in range(5):
            answer = http.post("/api/jobs", content=development())
            assert answer.status_code == 201, answer.text
            assert http.post(f"/api/jobs/{answer.json()['id']}/cancel").status_code == 200


# ---------------------------------------------------------------------------- a worker killed by an upload

LONG = "L" * 120
PREFIX = "p" * 90 + "/" + "q" * 20
SHAPES = {
    "x/y then the file x": ([member("x/y"), member("x")], tarfile.GNU_FORMAT),
    "a/b/c then the file a/b": ([member("a/b/c", b"c"), member("a/b", b"b")], tarfile.GNU_FORMAT),
    "a/b/c then an executable a": ([member("a/b/c"), member("a", b"#!/bin/sh\n", mode=0o755)], tarfile.GNU_FORMAT),
    "a folder entry x/y/ then the file x": ([folder("x/y/"), member("x")], tarfile.GNU_FORMAT),
    "PAX long names": ([member(f"{LONG}/y"), member(LONG)], tarfile.PAX_FORMAT),
    "ustar names split in prefix and name": ([member(f"{PREFIX}/y"), member(PREFIX)], tarfile.USTAR_FORMAT),
}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_an_upload_cannot_kill_a_worker(svc, shape):
    """A file after a folder of its own name (every encoding of the names): refused by the server,
    or the job ends with an error; either way the `worker --server` process lives on (same pid)
    and runs the next honest job."""
    members, fmt = SHAPES[shape]
    token = team(svc, "unpack")
    worker = remote_worker(svc, f"unpack{time.monotonic_ns() % 10**6}")
    hostile = None
    try:
        with svc.http(token) as http:
            answer = http.post("/api/jobs", content=tar_gz([member("rai_build.yml", CONFIG), *members],
                                                          fmt))
        assert answer.status_code in (201, 400), answer.text
        if answer.status_code == 201:
            hostile = answer.json()["id"]
            wait_until(lambda: svc.job(hostile)["state"] != "queued", 30, "the hostile job's claim")
            wait_until(lambda: worker.poll() is not None or svc.job(hostile)["state"] in ENDED, 20,
                       "the hostile job's end (or its worker's)")
            assert worker.poll() is None, f"the worker exited ({worker.returncode}) on the upload {shape!r}"
            assert svc.job(hostile)["state"] in ENDED
        with svc.http(token) as http:
            honest = http.post("/api/jobs", content=development())
        assert honest.status_code == 201, honest.text
        job = svc.wait_for_state(honest.json()["id"], ENDED, timeout=60)
        assert job["state"] == "done" and job["status"] == "ok", job
        assert worker.poll() is None
    finally:
        worker.terminate()
        worker.wait(30)
        if hostile and svc.job(hostile)["state"] not in ENDED:
            svc.admin("POST", f"/api/jobs/{hostile}/cancel")


# ---------------------------------------------------------------------------- refusals before the body

BIG = 5 << 20                                        # bytes the headers announce; none of them is sent


@pytest.mark.timeout(120)
@pytest.mark.parametrize("rule", ["over its hourly limit", "too many waiting", "past the deadline", "no token",
                                  "a worker's token", "an unknown kind", "larger than the cap"])
def test_a_refusal_the_headers_decide_comes_before_the_body(svc, rule):
    """Auth, the team's limits, the deadline: all known from the headers, so answered at once
    without waiting for (or reading) the body the request announces."""
    token = team(svc, "early")
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/gzip"}
    path, expected = "/api/jobs?kind=development", 429
    cleanup = []
    if rule == "over its hourly limit":
        over_hourly_limit(svc, token)
    elif rule == "too many waiting":
        with svc.http(token) as http:
            cleanup = [http.post("/api/jobs", content=development()).json()["id"] for _ in range(3)]
    elif rule == "past the deadline":
        assert svc.admin("PUT", "/api/admin/deadlines", json={"milestone": "m2", "deadline":
                                                              "2020-01-01T00:00:00Z"}).status_code == 200
        path, expected = "/api/jobs?kind=ranked&milestone=m2&size=100", 403
    elif rule == "no token":
        del headers["Authorization"]
        expected = 401
    elif rule == "a worker's token":
        headers["Authorization"] = f"Bearer {svc.worker_token('early')}"
        expected = 403
    elif rule == "an unknown kind":
        path, expected = "/api/jobs?kind=nothing", 400
    elif rule == "larger than the cap":
        expected = 413
    size = BIG if rule != "larger than the cap" else 64 << 20
    try:
        status, answer_headers, body, first = exchange(svc.url, request_bytes("POST", path, headers={
            **headers, "Content-Length": str(size)}, body=None), timeout=5)
        assert status == expected, (rule, status, body[:200])
        assert first is not None and first < 3, f"{rule}: answered after {first} s"
        assert is_error_body(status, answer_headers, body)
        if status == 429:
            assert "retry-after" in answer_headers
    finally:
        if rule == "past the deadline":
            svc.admin("PUT", "/api/admin/deadlines", json={"milestone": "m2", "deadline": None})
        for job_id in cleanup:
            svc.admin("POST", f"/api/jobs/{job_id}/cancel")


@pytest.fixture(scope="module")
def bomb():
    return bomb_upload()


@pytest.mark.timeout(300)
def test_bombs_of_a_team_over_its_limit_cost_the_server_little(svc, bomb):
    """A team already over its hourly limit posts 12 uploads at once, each within the caps but
    costly to check (10,000 entries, 63 MiB unpacked): each is refused (429) without being
    unpacked; the server's peak memory grows by less than 256 MiB; another team's requests stay fast."""
    assert len(bomb) < 400_000
    hostile, honest = team(svc, "bomber"), team(svc, "bystander")
    over_hourly_limit(svc, hostile)
    quiet = [timed("GET", svc.url, "/api/jobs", token=honest)[1] for _ in range(15)]
    pid = svc.proc.pid
    before = proc_kib(pid, "VmRSS")
    reset_peak(pid)
    answers = []

    def bomber():
        answers.append(exchange(svc.url, request_bytes("POST", "/api/jobs?kind=development", headers={
            "Authorization": f"Bearer {hostile}", "Content-Type": "application/gzip"}, body=bomb), timeout=120))
    during = bystander_during(svc, honest, [threading.Thread(target=bomber) for _ in range(12)], timeout=150)
    grown = (proc_kib(pid, "VmHWM") - before) / 1024
    statuses = sorted(a[0] for a in answers)
    assert statuses == [429] * 12, statuses
    slow = [s for _, s in during]
    assert all(code == 200 for code, _ in during), during
    report = f"quiet p50 {percentile(quiet, 50):.3f} s; during the bombs p50 {percentile(slow, 50):.3f} s, " \
             f"max {max(slow):.3f} s; the server's peak grew {grown:.0f} MiB"
    assert grown < 256, report
    assert max(slow) < 2.0 and percentile(slow, 90) < 1.0, report


@pytest.mark.timeout(120)
def test_one_upload_per_team_in_flight(svc, bomb):
    """While a team's upload is still arriving, a second upload of the same team is refused (429,
    with Retry-After) at once; another team's upload is not held back; the first ends accepted."""
    token, other = team(svc, "twice"), team(svc, "elsewhere")
    head = request_bytes("POST", "/api/jobs?kind=development", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/gzip"}, body=bomb)
    cut = len(head) - len(bomb) // 2
    first = socket.create_connection(("127.0.0.1", svc.port), timeout=60)
    try:
        first.sendall(head[:cut])                          # the headers and half of the body, then a pause
        time.sleep(1.0)
        status, headers, body, _ = exchange(svc.url, request_bytes("POST", "/api/jobs?kind=development", headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/gzip"}, body=development()), timeout=10)
        elsewhere = exchange(svc.url, request_bytes("POST", "/api/jobs?kind=development", headers={
            "Authorization": f"Bearer {other}", "Content-Type": "application/gzip"}, body=development()), timeout=10)
        first.sendall(head[cut:])
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = first.recv(65536)
            if not chunk:
                break
            answer += chunk
    finally:
        first.close()
    assert elsewhere[0] == 201, elsewhere[:3]
    assert answer.startswith(b"HTTP/1.1 201"), answer[:200]
    assert status == 429 and "retry-after" in headers, (status, body[:200])
    with svc.http(svc.instructor_token) as http:
        jobs = http.get("/api/jobs").json()["jobs"]
    for job in jobs:
        if job["state"] == "queued":
            svc.admin("POST", f"/api/jobs/{job['id']}/cancel")


# ---------------------------------------------------------------------------- PAX headers

PAX = {
    "GNU.sparse.map not numbers": {"GNU.sparse.map": "x"},
    "GNU.sparse.map empty": {"GNU.sparse.map": ""},
    "GNU.sparse.size not a number": {"GNU.sparse.size": "x"},
    "GNU.sparse.realsize not a number": {"GNU.sparse.realsize": "x"},
    "sparse format 1.0": {"GNU.sparse.major": "1", "GNU.sparse.minor": "0"},
    "sparse format 1.0 with a size": {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.realsize": "9"},
    "sparse map odd": {"GNU.sparse.map": "1,2,3"},
    "size not a number": {"size": "x"},
    "negative size": {"size": "-1"},
    "NUL in the path": {"path": "new-forward.py\0evil"},
    "a link path": {"linkpath": "/etc/shadow"},
    "binary charset": {"hdrcharset": "BINARY", "path": "n\udcffw"},
}


@pytest.mark.parametrize("kind", ["development", "ranked"])
@pytest.mark.parametrize("header", sorted(PAX))
def test_pax_headers_are_refused_in_one_line_never_a_500(svc, kind, header):
    token = team(svc, "pax")
    name, data = ("new-forward.py", b"def forward(y, x, k):\n    pass\n") if kind == "ranked" else \
        ("rai_build.yml", CONFIG)
    body = tar_gz([member(name, data, pax=PAX[header])], tarfile.PAX_FORMAT)
    path = "/api/jobs?kind=ranked&milestone=m2&size=100" if kind == "ranked" else "/api/jobs?kind=development"
    log_before = len(svc.log())
    status, headers, text, _ = exchange(svc.url, request_bytes("POST", path, headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/gzip"}, body=body), timeout=20)
    assert status is not None and status < 500, (header, status, text[:300])
    if status >= 400:
        assert is_error_body(status, headers, text), text[:300]
    else:
        svc.admin("POST", f"/api/jobs/{json.loads(text)['id']}/cancel")
    assert not tracebacks(svc.log()[log_before:])

