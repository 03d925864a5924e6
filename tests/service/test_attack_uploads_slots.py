"""The server's upload slots (limits.Uploads: 16 bodies read at once, 2 checked, one upload per
team) against teams that hold them, on a real service (SQLite and PostgreSQL): sixteen teams
each send the headers of a 1 MiB development upload and then its body a byte a second. Each
holds a reading slot for the 120 s a body may take, is never charged (its upload never
arrives), and may start again at once: an honest team's upload waits for a slot and is
refused (503) after 60 s. Wanted: the honest upload accepted in under 30 s."""
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
import pytest

from hostilekit import (development, module_service, request_bytes,
                        submit_development)

pytestmark = [pytest.mark.service, pytest.mark.slow]

STALLERS = 16                        # limits.Uploads' reading slots
DECLARED = 1 << 20


svc = module_service("uploads2")


class Trickle(threading.Thread):
    """A development upload whose headers announce DECLARED bytes and whose body then comes a
    byte a second, until ``stop`` is set or the server answers; ``answer`` is what it said."""

    def __init__(self, url, token, stop):
        super().__init__(daemon=True)
        parts = urlsplit(url)
        self.address, self.token, self.stop, self.answer = (parts.hostname, parts.port), token, stop, b""

    def run(self):
        with socket.create_connection(self.address, timeout=5) as sock:
            sock.sendall(request_bytes("POST", "/api/jobs?kind=development", headers={
                "Authorization": f"Bearer {self.token}", "Content-Type": "application/gzip",
                "Content-Length": str(DECLARED)}, body=None) + b"\x1f")
            sock.settimeout(1.0)
            while not self.stop.is_set():
                try:
                    data = sock.recv(4096)
                    self.answer += data
                    if not data or self.answer:
                        return
                except socket.timeout:
                    pass
                try:
                    sock.sendall(b"\x8b")
                except OSError:
                    return


@pytest.mark.timeout(300)
def test_stalled_uploads_of_sixteen_teams_do_not_starve_an_honest_one(svc):
    """Sixteen teams trickle their uploads; then an honest team submits a development run (a
    few hundred bytes, sent at once): accepted (201) in under 30 s."""
    names = [f"staller{i}-{time.monotonic_ns() % 10**6}" for i in range(STALLERS)]
    tokens = svc.add_teams(*names, "honest-uploader")
    stop = threading.Event()
    stallers = [Trickle(svc.url, tokens[n], stop) for n in names]
    for s in stallers:
        s.start()
    try:
        time.sleep(3)                                       # their headers read, their slots taken
        started = time.monotonic()
        try:
            with svc.http(tokens["honest-uploader"], timeout=90) as http:
                answer = http.post("/api/jobs", content=development())
            status, text = answer.status_code, answer.text[:200]
        except httpx.HTTPError as exc:
            status, text = type(exc).__name__, str(exc)
        took = time.monotonic() - started
    finally:
        stop.set()
        for s in stallers:
            s.join(10)
    cancel_queued(svc)
    assert status == 201 and took < 30, f"the honest upload was answered {status} after {took:.0f} s: {text}"


def test_one_stalled_upload_leaves_the_others_alone(svc):
    """A control: one team trickling its upload does not delay another team's (201 at once)."""
    tokens = svc.add_teams(f"lone-staller-{time.monotonic_ns() % 10**6}", f"lone-honest-{time.monotonic_ns() % 10**6}")
    staller, honest = tokens.values()
    stop = threading.Event()
    trickle = Trickle(svc.url, staller, stop)
    trickle.start()
    try:
        time.sleep(2)
        started = time.monotonic()
        answer = submit_development(svc, honest)
        took = time.monotonic() - started
    finally:
        stop.set()
        trickle.join(10)
    cancel_queued(svc)
    assert answer.status_code == 201 and took < 10, (answer.status_code, took)


def cancel_queued(svc):
    for job in svc.jobs():
        if job["state"] == "queued":
            svc.admin("POST", f"/api/jobs/{job['id']}/cancel")
