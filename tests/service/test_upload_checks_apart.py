"""Uploads checked in processes of their own and received at a pace (service/checker.py,
uploadstore.Pace), against a real ``serve``: the check runs in a niced child process that dies with
the server; a checking process killed costs one upload a 503 with Retry-After, and the next is
checked; a refusal made in the checking process reaches the client whole; and a storm of uploads is
received no faster than ``--upload-rate``. SQLite only: the database plays no part in where a check
runs or how fast bodies are read (the storm's tests cover both databases)."""
import asyncio
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from hostilekit import development, member, proc_stat, start_service, tar_gz
from uploadstorm import children

from ece408_op.service.uploadstore import Pace

pytestmark = [pytest.mark.service]


def checkers(pid):
    """The checking processes of the server ``pid`` (spawned workers of its process pool)."""
    lines = {c: Path(f"/proc/{c}/cmdline").read_bytes() for c in children(pid)}
    return [c for c, line in lines.items() if b"spawn_main" in line and b"resource_tracker" not in line]


def alive(pid):
    try:
        return proc_stat(pid)[0] != "Z"
    except FileNotFoundError:
        return False


def post(svc, token, body, timeout=60):
    with httpx.Client(base_url=svc.url, timeout=timeout, headers={"Authorization": f"Bearer {token}"}) as http:
        return http.post("/api/jobs", content=body)


@pytest.fixture
def svc(tmp_path):
    service = start_service(tmp_path / "svc", "sqlite", None)
    yield service
    service.close()


def test_an_upload_is_checked_in_a_niced_process_that_dies_with_the_server(svc):
    token = svc.add_teams("alpha")["alpha"]
    assert checkers(svc.proc.pid) == []                    # none before the first upload
    answer = post(svc, token, development(member("a.cu", b"int x;")))
    assert answer.status_code == 201, answer.text
    found = checkers(svc.proc.pid)
    assert found, children(svc.proc.pid)
    server_nice = int(proc_stat(svc.proc.pid)[16])
    assert all(int(proc_stat(c)[16]) >= server_nice + 5 for c in found), [(c, proc_stat(c)[16]) for c in found]
    svc.kill()                                             # SIGKILL: no shutdown of its pool
    deadline = time.monotonic() + 10
    while any(alive(c) for c in found) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(c) for c in found), f"checking processes {found} outlived their server"


def test_a_killed_checking_process_costs_one_upload_a_503_and_the_next_is_checked(svc):
    token = svc.add_teams("bravo")["bravo"]
    assert post(svc, token, development()).status_code == 201
    for pid in checkers(svc.proc.pid):
        os.kill(pid, signal.SIGKILL)
    time.sleep(1.0)                                        # the pool sees its process gone
    answers = [post(svc, token, development(member(f"f{i}.cu", b"//"))) for i in range(3)]
    statuses = [a.status_code for a in answers]
    assert statuses.count(503) <= 1 and statuses[-1] == 201, [(a.status_code, a.text) for a in answers]
    for a in answers:
        if a.status_code == 503:
            assert "checking process" in a.json()["error"] and a.headers.get("retry-after"), a.text
    assert "Traceback" not in svc.log()


def test_a_refusal_made_in_the_checking_process_reaches_the_client_whole(svc):
    token = svc.add_teams("charlie")["charlie"]
    bad_config = tar_gz([member("rai_build.yml", b"rai:\n  version: 0.2\nresources: [\n")])
    answer = post(svc, token, bad_config)
    assert answer.status_code == 400 and answer.json()["error"].startswith("rai_build.yml"), answer.text
    not_gzip = post(svc, token, b"plain bytes, not an archive")
    assert not_gzip.status_code == 400 and "gzip" in not_gzip.json()["error"], not_gzip.text


def test_uploads_are_received_no_faster_than_the_upload_rate(running_service, tmp_path):
    svc = running_service.on(tmp_path / "paced", "sqlite", None, args=["--upload-rate", "4"])
    token = svc.add_teams("delta")["delta"]
    body = development(member("data.bin", os.urandom(10 << 20)))     # 10 MiB, stored: it does not shrink
    started = time.monotonic()
    answer = post(svc, token, body)
    took = time.monotonic() - started
    assert answer.status_code == 201, answer.text
    assert took >= len(body) / (4 << 20) - 0.25 - 1.0, f"{len(body)} bytes received in {took:.2f} s at 4 MiB/s"


def test_the_pace_holds_batches_to_its_rate_in_order_and_none_at_rate_zero():
    async def batches(pace, n, size):
        started = time.monotonic()
        await asyncio.gather(*(pace.take(size) for _ in range(n)))
        return time.monotonic() - started
    assert asyncio.run(batches(Pace(8 << 20), 16, 1 << 20)) >= 2.0 - 0.25 - 0.05     # 16 MiB at 8 MiB/s
    assert asyncio.run(batches(Pace(0), 1000, 1 << 20)) < 1.0
