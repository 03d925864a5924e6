"""Live streams and connections as a hostile team (or anyone) uses them, against a real service
(SQLite and PostgreSQL) whose open-file limit is 1,024: one team's 1,100 live job streams or page
streams, 1,100 connections trickling their headers (slowloris, from one address and from a
hundred), while another team and the login page must still be served, refusals must say when to
come back, and the log must not drown; streams of a team whose token is revoked or rotated must
close at once; stream cursors of any size never break a stream."""
import json
import time

import httpx
import pytest

from hostilekit import (EventStream, Flood, Worker, csrf_of, is_error_body, limit_open_files, login, module_service,
                        open_streams, request_bytes, submit_ranked, timed,
                        tracebacks)
from pagekit import wait_until

pytestmark = [pytest.mark.service, pytest.mark.slow]

LIMIT = 1024                         # the server's open files (soft and hard), as a small class server has
FLOOD = 1100


def limit_files(service):
    """The server's open files limited to LIMIT, as a small class server has them."""
    limit_open_files(service, LIMIT)


svc = module_service("streams", "--max-failures", "100000", then=limit_files)


@pytest.fixture(scope="module")
def people(svc):
    """{name: token} of the hostile team and a bystander, each with a waiting job (no worker here)."""
    tokens = svc.add_teams("flooder", "bystander")
    jobs = {name: submit_ranked(svc, token).json()["id"] for name, token in tokens.items()}
    return tokens, jobs


def probe(svc, token, seconds=10.0, every=2.0):
    """Another team's requests during an attack, from the address 127.0.0.1: [(what, status, s)]."""
    found = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for what, path, tok in (("the bystander's jobs", "/api/jobs", token), ("the login page", "/login", None)):
            status, took = timed("GET", svc.url, path, token=tok, timeout=5)
            found.append((what, status, round(took, 2)))
        time.sleep(every)
    return found


def emfile_lines(log):
    return sum(1 for line in log.splitlines() if "Too many open files" in line or "out of system resource" in line)


def check_flood(svc, flood, served, log_before, capped=True):
    problems = [f"{what}: {status} after {took} s" for what, status, took in served if status != 200 or took > 5]
    statuses = flood.statuses()
    if capped:
        if statuses.get(200, 0) > 200:
            problems.append(f"one team holds {statuses[200]} live streams at once ({dict(statuses)})")
        if flood.retry_after_missing():
            problems.append(f"{flood.retry_after_missing()} refusals without Retry-After")
    flooded = emfile_lines(svc.log()[log_before:])
    if flooded > 10:
        problems.append(f"the log got {flooded} lines of 'Too many open files'")
    return problems


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["job streams", "page streams"])
def test_one_team_s_streams_cannot_take_every_descriptor(svc, people, kind):
    """The team opens 1,100 live streams (its job's events with its token, or the ranking page's
    with one session): most are refused (429/503, Retry-After) rather than accepted until the
    server runs out of descriptors; the bystander's requests and the login page are answered in
    under 5 s throughout; the log does not fill with the same error."""
    tokens, jobs = people
    if kind == "job streams":
        payload = request_bytes("GET", f"/api/jobs/{jobs['flooder']}/events", headers={
            "Authorization": f"Bearer {tokens['flooder']}", "Accept": "text/event-stream"}, body=None)
    else:
        cookie = login(svc.url, tokens["flooder"], source="127.0.0.2")
        payload = request_bytes("GET", "/ranking/events", headers={"Cookie": f"ece408_session={cookie}",
                                                                     "Accept": "text/event-stream"}, body=None)
    log_before = len(svc.log())
    flood = Flood(svc.url, FLOOD, payload).open()
    try:
        flood.poll(3)
        served = probe(svc, tokens["bystander"], seconds=6)
        flood.poll(1)
        problems = check_flood(svc, flood, served, log_before)
    finally:
        flood.close()
    wait_until(lambda: timed("GET", svc.url, "/health", timeout=5)[0] == 200, 60, "the server's recovery")
    assert not problems, "\n".join(problems)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("sources", [1, 100], ids=["one address", "a hundred addresses"])
def test_slowloris_cannot_stop_the_service(svc, people, sources):
    """1,100 connections that send a request line and then one header line every 2 s, never
    ending their headers: the bystander and the login page are still served in under 5 s; the
    server closes the trickling connections (a header timeout) rather than holding them."""
    tokens, _ = people
    log_before = len(svc.log())
    addresses = [f"127.0.{1 + i // 250}.{2 + i % 250}" for i in range(sources)]
    flood = Flood(svc.url, FLOOD, b"GET /login HTTP/1.1\r\nHost: x\r\n", sources=addresses, trickle=True).open()
    served = []
    try:
        started = time.monotonic()
        while time.monotonic() - started < (30 if sources == 1 else 12):
            flood.trickle_step()
            flood.poll(0.5)
            if len(served) < 8:
                served += probe(svc, tokens["bystander"], seconds=0.1)
            time.sleep(1.5)
        flood.poll(0.5)
        problems = check_flood(svc, flood, served, log_before, capped=False)
        if sources == 1 and flood.still_open() > FLOOD // 10:
            problems.append(f"{flood.still_open()} of {FLOOD} connections still held after 30 s without a "
                            "complete request")
    finally:
        flood.close()
    wait_until(lambda: timed("GET", svc.url, "/health", timeout=5)[0] == 200, 60, "the server's recovery")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------- revocation

@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["teams revoke", "teams rotate", "the admin page's revoke"])
def test_a_revoked_team_s_streams_close_within_a_second(svc, how):
    """A team follows its running job (the API's stream and the job page's) and the live ranking
    page; its token is revoked (or rotated): every one of its streams ends within a second (2 s
    here, for the shared machine), and no line posted after reaches any of them."""
    name = f"revoked-{how.split()[-1].replace(chr(39), '')}-{time.monotonic_ns() % 10**6}"
    token = svc.add_teams(name)[name]
    job_id = submit_ranked(svc, token).json()["id"]
    worker = Worker(svc)
    held, claim = [], None
    try:
        while claim is None:                          # other teams' waiting jobs are held meanwhile
            found = worker.claim(wait=5)
            assert found is not None, "the job was not claimed"
            (held.append(found) if found["job"]["id"] != job_id else None)
            claim = found if found["job"]["id"] == job_id else None
        seq = claim["job"]["next_seq"]
        assert worker.lines(claim, ["before the revocation\n"], seq).status_code == 200
        cookie = login(svc.url, token)
        streams = open_streams([EventStream(svc.url, f"/api/jobs/{job_id}/events", token=token),
                                EventStream(svc.url, f"/jobs/{job_id}/events", cookie=cookie),
                                EventStream(svc.url, "/ranking/events", cookie=cookie)])
        wait_until(lambda: "before the revocation" in streams[0].texts(), 10, "the first line")
        revoked_at = time.monotonic()
        if how == "teams revoke":
            assert svc.admin("POST", "/api/admin/teams/revoke", json={"name": name}).status_code == 200
        elif how == "teams rotate":
            assert svc.admin("POST", "/api/admin/teams/rotate", json={"name": name}).status_code == 200
        else:
            instructor = login(svc.url, svc.instructor_token)
            answer = httpx.post(svc.url + "/admin/teams/revoke", data={"name": name, "csrf": csrf_of(
                svc.url, instructor, "/admin")}, cookies={"ece408_session": instructor}, timeout=30)
            assert answer.status_code == 303, answer.text[:300]
        for i in range(6):
            time.sleep(0.4)
            worker.lines(claim, [f"after the revocation {i}\n"], seq + 1 + i)
        time.sleep(0.5)
        problems = []
        for s in streams:
            if s.ended_at is None or s.ended_at - revoked_at > 2.0:
                problems.append(f"{s.path}: still open {time.monotonic() - revoked_at:.1f} s after the token went"
                                if s.ended_at is None else f"{s.path}: closed after {s.ended_at - revoked_at:.1f} s")
            if "after the revocation" in s.texts() or any("after the revocation" in d for _, _, d in s.events):
                problems.append(f"{s.path}: a line posted after the revocation reached it")
        worker.finish(claim)
    finally:
        for other in held:
            worker.call(other, "release", body={"why": "held while another job was claimed"})
        worker.close()
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------- cursors

CURSORS = [str(2**64), str(2**63), str(2**63 - 1), str(-2**63 - 1), str(2**31), "1e3", "0x10", "٣", "9" * 400]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["after=", "Last-Event-ID"])
def test_a_stream_cursor_of_any_size_never_breaks_a_stream(svc, people, where):
    """``after`` and ``Last-Event-ID`` far past 2^64, negative, in other notations: a 4xx in one
    line, or a stream that works (no 500, no stream cut short by an error), on the API and the
    job page; no traceback in the log."""
    tokens, jobs = people
    cookie = login(svc.url, tokens["bystander"])
    log_before = len(svc.log())
    problems = []
    job, bearer = jobs["bystander"], {"Authorization": f"Bearer {tokens['bystander']}"}
    for cursor in CURSORS:
        for path, auth in ((f"/api/jobs/{job}/events", bearer), (f"/jobs/{job}/events", {})):
            headers = {**auth, **({"Last-Event-ID": cursor.encode()} if where == "Last-Event-ID" else {})}
            params = {"after": cursor} if where == "after=" else None
            try:
                with httpx.Client(base_url=svc.url, timeout=httpx.Timeout(5, read=0.5),
                                  cookies={"ece408_session": cookie}) as http:
                    with http.stream("GET", path, params=params, headers=headers) as answer:
                        if answer.status_code >= 500:
                            problems.append(f"{path} {where}{cursor}: {answer.status_code}")
                        elif answer.status_code >= 400:
                            body = answer.read()
                            if not is_error_body(answer.status_code, {"content-type": answer.headers.get(
                                    "content-type", "")}, body):
                                problems.append(f"{path} {where}{cursor}: {answer.status_code} {body[:100]!r}")
                        else:
                            for _ in answer.iter_lines():
                                pass
            except httpx.ReadTimeout:
                pass                                        # a stream still open and quiet: it works
            except httpx.LocalProtocolError:
                pass                                        # not even sent: this client refuses such a header
            except httpx.HTTPError as exc:
                problems.append(f"{path} {where}{cursor}: {type(exc).__name__}: {exc}")
    problems += tracebacks(svc.log()[log_before:])
    assert not problems, "\n".join(problems)


def test_events_are_json_lines_of_the_job(svc, people):
    """A control of the stream reader: the bystander's own stream answers with its queued place."""
    tokens, jobs = people
    stream = open_streams([EventStream(svc.url, f"/api/jobs/{jobs['bystander']}/events", token=tokens["bystander"])])[0]
    wait_until(lambda: any(e == "queued" for _, e, _ in stream.events), 10, "the place")
    assert stream.status == 200
    assert json.loads(next(d for _, e, d in stream.events if e == "queued"))["place"] is not None
