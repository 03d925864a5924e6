"""The server's descriptors under attack, for real: ``serve`` started with a small open-file limit
(``prlimit --nofile``), then more connections than it has descriptors, trickling their headers
(slowloris) or idle. Every other request (the login page, a team's API call) is still answered,
the trickling connections are closed after ``--header-timeout``, and the log says so in a few
lines, not one a failed accept."""
import resource
import shutil
import socket
import time

import httpx
import pytest

from servicekit import Service

pytestmark = [pytest.mark.service, pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit")]

LIMIT = 256                      # the server's open-file limit, soft and hard
ATTACKERS = 400                  # more connections than that


@pytest.fixture
def limited(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4 * ATTACKERS:
        pytest.skip(f"this test opens {ATTACKERS} sockets; the hard open-file limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4 * ATTACKERS), hard))
    svc = Service(tmp_path / "svc", workers=0, args=["--header-timeout", "4"])
    svc.wrap = ["prlimit", f"--nofile={LIMIT}:{LIMIT}", "--"]
    yield svc.start()
    svc.close()
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def connect(port, first=b"GET /login HTTP/1.1\r\nHost: x\r\n"):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(first)                                      # headers begun, never ended
    return s


def closed_by_server(sock):
    sock.settimeout(0.5)
    try:
        return sock.recv(4096) == b"" or True            # an answer (503) or the end: the server let go
    except (socket.timeout, BlockingIOError):
        return False
    except OSError:
        return True


@pytest.mark.serial                                 # every answer under 3 s: alone
def test_trickling_connections_past_the_descriptor_limit_stop_nobody(limited):
    svc = limited
    token = svc.add_teams("honest")["honest"]
    attackers = []
    for _ in range(ATTACKERS):
        try:
            attackers.append(connect(svc.port))
        except OSError:
            break
    answered, slowest = 0, 0.0
    deadline = time.monotonic() + 6
    with httpx.Client(base_url=svc.url, timeout=5) as client:
        while time.monotonic() < deadline:
            for path, headers in (("/login", {}), ("/api/whoami", {"Authorization": f"Bearer {token}"})):
                started = time.monotonic()
                answer = client.get(path, headers={**headers, "Connection": "close"})
                slowest = max(slowest, time.monotonic() - started)
                assert answer.status_code == 200, (path, answer.status_code, answer.text[:200])
                answered += 1
            for s in attackers[:50]:                      # the attackers keep trickling
                try:
                    s.send(b"X")
                except OSError:
                    pass
            time.sleep(0.1)
    assert answered >= 10 and slowest < 3.0, (answered, slowest)
    time.sleep(5)                                         # past the header timeout
    still_open = [s for s in attackers if not closed_by_server(s)]
    assert not still_open, f"{len(still_open)} of {len(attackers)} trickling connections are still held"
    for s in attackers:
        s.close()
    log = svc.log()
    assert log.count("Too many open files") < 30, log[-3000:]
    assert "connections.full" in log


def test_idle_connections_give_way_to_new_requests(limited):
    """Connections that sent nothing at all fill the budget: a new request still gets in (the
    oldest idle one is closed for it)."""
    svc = limited
    idle = []
    for _ in range(ATTACKERS):
        try:
            idle.append(socket.create_connection(("127.0.0.1", svc.port), timeout=5))
        except OSError:
            break
    try:
        for _ in range(20):
            assert httpx.get(svc.url + "/health", timeout=5).status_code == 200
    finally:
        for s in idle:
            s.close()
