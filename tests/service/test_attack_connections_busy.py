"""Connections that are being served, not idle, against a real service (SQLite and PostgreSQL)
whose open-file limit is 1,024: the guard (guard.py) may close only connections waiting for a
request, and caps only live streams, so requests that never finish are what is left to an
attacker. One team downloading its own build folder on 1,100 connections that never read; anyone
(no token) posting a login form whose body never ends; a team's session posting a logout form
likewise. Wanted: another team and the login page served in under 5 s throughout, the server
never out of descriptors (a 500, an accept loop stopped), its memory bounded, and a stalled body
closed as an upload's is (within 120 s) rather than held."""
import os
import time

import pytest

from hostilekit import (Flood, limit_open_files, login, member, module_service, open_descriptors,
                        proc_kib, request_bytes, stored_build, tar_gz, timed,
                        tracebacks)
from pagekit import wait_until

pytestmark = [pytest.mark.service, pytest.mark.slow]

LIMIT = 1024                         # the server's open files, as a small class server has them
FLOOD = 1100
BUILD = 8 << 20                      # bytes of the attacker's build folder (random: gzip keeps them)
MEMORY_MIB = 256                     # what one team's unread requests may add to the server's memory


svc = module_service("connections2", "--max-failures", "100000", then=lambda s: limit_open_files(s, LIMIT))


@pytest.fixture(scope="module")
def people(svc):
    """Tokens of the attacking team and a bystander; the attacker's kept build folder (8 MiB)."""
    tokens = svc.add_teams("reader", "bystander")
    job_id = stored_build(svc, tokens["reader"], tar_gz([member("profile.bin", os.urandom(BUILD))], level=1))
    return tokens, job_id


def watch(svc, token, seconds, every=2.0):
    """The server's descriptors and resident memory, and another team's requests (its jobs, the
    login page), every ``every`` s for ``seconds``: [(descriptors, MiB, [(what, status, s)])]."""
    samples = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        served = []
        for what, path, tok in (("the bystander's jobs", "/api/jobs", token), ("the login page", "/login", None)):
            status, took = timed("GET", svc.url, path, token=tok, timeout=5)
            served.append((what, status, round(took, 2)))
        samples.append((open_descriptors(svc.proc.pid), proc_kib(svc.proc.pid, "VmRSS") // 1024, served))
        time.sleep(every)
    return samples


def judged(samples, rss_before, log):
    problems = [f"{what}: {status} after {took} s" for _, _, served in samples for what, status, took in served
                if status != 200 or took > 5]
    most = max(d for d, _, _ in samples)
    if most >= LIMIT - 8:
        problems.append(f"the server held {most} of its {LIMIT} descriptors")
    grown = max(m for _, m, _ in samples) - rss_before
    if grown > MEMORY_MIB:
        problems.append(f"the server's memory grew by {grown} MiB")
    emfile = sum(1 for line in log.splitlines() if "Too many open files" in line)
    if emfile:
        problems.append(f"{emfile} log lines of 'Too many open files'")
    problems += sorted(set(tracebacks(log)))[:5]
    return problems


def under(svc, flood, bystander, seconds, settle=0.0):
    """Open ``flood``, watch the server for ``seconds`` (after ``settle`` s of reading what the
    flood gets back), close the flood and wait for the server's recovery: the problems seen."""
    log_before = len(svc.log())
    rss_before = proc_kib(svc.proc.pid, "VmRSS") // 1024
    flood.open()
    try:
        if settle:
            flood.poll(settle)
        problems = judged(watch(svc, bystander, seconds=seconds), rss_before, svc.log()[log_before:])
    finally:
        flood.close()
    wait_until(lambda: timed("GET", svc.url, "/health", timeout=5)[0] == 200, 60, "the server's recovery")
    return problems


@pytest.mark.timeout(240)
def test_unread_downloads_of_a_build_hold_neither_descriptors_nor_memory(svc, people):
    """The team asks for its 8 MiB build folder on 1,100 connections whose receive buffers are
    4 KiB and which never read. Each download is a request being served (the guard cannot close
    it) that holds an open file besides its socket and a MiB chunk waiting to be sent: the budget
    of connections is spent twice over in descriptors, and the server runs out (its accept loop
    stops, opening the build file fails with a 500) while its memory grows by the chunks."""
    tokens, job_id = people
    payload = request_bytes("GET", f"/api/jobs/{job_id}/build", headers={"Authorization": f"Bearer {tokens['reader']}"},
                            body=None)
    problems = under(svc, Flood(svc.url, FLOOD, payload, rcvbuf=4096), tokens["bystander"], seconds=10)
    assert not problems, "\n".join(problems)


FORMS = {
    "the login form, no session": ("/login", None),
    "the logout form, a team's session": ("/logout", "reader"),
}


@pytest.mark.timeout(240)
@pytest.mark.serial         # the bystander answered within 5 s under 1,100 connections (a ReadTimeout in the parallel phase): alone
@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_form_body_that_never_ends_holds_no_connection(svc, people, form):
    """1,100 connections from a hundred addresses each post a form announcing 60,000 bytes, send
    six and stop. A form's body is read without a time limit (pages/site.py's read_form), and a
    request whose body is being read is served, not waiting: the guard neither times it out nor
    closes it for room, so the connections fill the budget and every new one is refused (503) -
    the login form needs no token at all."""
    tokens, _ = people
    path, team = FORMS[form]
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Content-Length": "60000"}
    if team:
        headers["Cookie"] = f"ece408_session={login(svc.url, tokens[team])}"
    payload = request_bytes("POST", path, headers=headers, body=None) + b"token="
    sources = [f"127.0.{60 + i // 250}.{2 + i % 250}" for i in range(100)]
    problems = under(svc, Flood(svc.url, FLOOD, payload, sources=sources), tokens["bystander"], seconds=8, settle=3)
    assert not problems, "\n".join(problems)


@pytest.mark.timeout(300)
def test_a_stalled_login_body_is_closed_as_an_upload_s_is(svc):
    """One login form whose body stops after six of 60,000 bytes: closed by the server (any
    answer, or the connection closed) within an upload body's 120 s and a margin, rather than held
    for as long as the client likes."""
    payload = request_bytes("POST", "/login", headers={"Content-Type": "application/x-www-form-urlencoded",
                                                       "Content-Length": "60000"}, body=None) + b"token="
    flood = Flood(svc.url, 1, payload, sources=("127.0.0.3",)).open()
    try:
        started = time.monotonic()
        while time.monotonic() - started < 140 and flood.still_open() and not any(flood.data.values()):
            flood.poll(1)
        held = time.monotonic() - started
        still = flood.still_open() and not any(flood.data.values())
    finally:
        flood.close()
    assert not still, f"a login body stalled at 6 of 60,000 bytes was still held after {held:.0f} s"


@pytest.mark.timeout(240)
def test_a_download_nobody_reads_gives_its_descriptors_back_while_the_client_holds_on(svc, people):
    """Four downloads of the build folder (the team's cap) on connections that never read and never
    close: after the write stall's 30 s the server lets them go at once, its sockets and the build
    files closed, rather than waiting (transport.close) for clients that will never read."""
    from ece408_op.service.guard import WRITE_STALL_SECONDS
    if svc.database != "sqlite":
        pytest.skip("descriptors, not the database: once is enough")
    tokens, job_id = people
    payload = request_bytes("GET", f"/api/jobs/{job_id}/build", headers={"Authorization": f"Bearer {tokens['reader']}"},
                            body=None)
    before = open_descriptors(svc.proc.pid)

    def builds_open():
        held = 0
        for fd in os.listdir(f"/proc/{svc.proc.pid}/fd"):
            try:
                held += "build" in os.readlink(f"/proc/{svc.proc.pid}/fd/{fd}")
            except OSError:
                pass
        return held
    flood = Flood(svc.url, 4, payload, rcvbuf=4096).open()
    try:
        wait_until(lambda: builds_open() == 4, 20, "four downloads under way")
        time.sleep(WRITE_STALL_SECONDS + 5)
        assert builds_open() == 0 and open_descriptors(svc.proc.pid) <= before + 2, \
            f"{builds_open()} build files and {open_descriptors(svc.proc.pid)} descriptors (before: {before})"
    finally:
        flood.close()
