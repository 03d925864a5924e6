"""The failed-token limit against a guesser, on a real service (SQLite and PostgreSQL) whose
limit is the default (20 failed checks a minute an address, then one check a second): a burst
of guesses sent together on many connections must get no more checks than that, and a guesser
hammering from a lab's shared address must not lock the lab's students out (docs/service.md,
"Failed token checks": "one student guessing cannot lock out a lab behind one address")."""
import math
import re
import secrets
import threading
import time
from urllib.parse import urlencode

import httpx
import pytest

from hostilekit import Flood, module_service, parse_response, request_bytes  # noqa: F401
from pagekit import wait_until

pytestmark = [pytest.mark.service, pytest.mark.slow]

MAX_FAILURES = 20                  # serve's default --max-failures
BURST = 300

svc = module_service("auth2")


def guess():
    """A well-formed token nobody holds."""
    return f"ece408_{secrets.token_hex(8)}_{secrets.token_urlsafe(32)}"


def fresh_address(tag):
    """A loopback address of its own per test (the limit is per address, kept for a minute)."""
    n = abs(hash(tag)) % 60000
    return f"127.{10 + n // 250 % 200}.{n % 250}.{2 + n % 200}"


def login_pair(url, source):
    """(the login form's cookie and field value) as a browser at ``source`` gets them."""
    with httpx.Client(base_url=url, timeout=30, transport=httpx.HTTPTransport(local_address=source)) as http:
        form = http.get("/login")
        return re.search(r'name="login" value="([^"]+)"', form.text).group(1)


def guess_request(where, pair=None, token=None):
    token = token or guess()
    if where == "the API":
        return request_bytes("GET", "/api/jobs", headers={"Authorization": f"Bearer {token}"}, body=None)
    body = urlencode({"token": token, "login": pair}).encode()
    return request_bytes("POST", "/login", headers={"Content-Type": "application/x-www-form-urlencoded",
                                                    "Cookie": f"ece408_login={pair}"}, body=body)


@pytest.mark.timeout(180)
@pytest.mark.serial                                 # the checks counted against the burst's time: alone
@pytest.mark.parametrize("where", ["the API", "the login form"])
def test_a_burst_of_guesses_gets_no_more_checks_than_the_limit(svc, where):
    """300 connections from one fresh address, each sending a guessed token at the same moment
    (the connections opened first, the requests written one after the other): each guess checked
    is answered 401, each refused by the limit 429. At most the limit's 20 checks plus the slow
    lane's one a second may be made; a limit counted only after each check has run lets the
    whole burst through (300 guesses a minute from one address instead of 80)."""
    source = fresh_address(f"burst {where} {time.monotonic_ns()}")
    pair = login_pair(svc.url, source) if where == "the login form" else None
    flood = Flood(svc.url, BURST, b"", sources=(source,)).open(send=False)
    try:
        assert len(flood.socks) == BURST, f"only {len(flood.socks)} connections opened"
        started = time.monotonic()
        flood.send_all([guess_request(where, pair) for _ in range(BURST)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(1 for s in flood.socks if parse_response(flood.data[s])[0]) < BURST:
            flood.poll(0.5)
        took = time.monotonic() - started
        statuses = flood.statuses()
    finally:
        flood.close()
    checked = statuses.get(401, 0)
    allowed = MAX_FAILURES + math.ceil(took) + 1
    assert statuses.get(None, 0) == 0, f"{statuses[None]} guesses got no answer in 60 s ({dict(statuses)})"
    assert checked + statuses.get(429, 0) == BURST, dict(statuses)
    assert checked <= allowed, (f"{checked} of {BURST} guesses sent at once were checked in {took:.1f} s "
                                f"(at most {allowed}: the limit's {MAX_FAILURES}, then one a second); "
                                f"answers {dict(statuses)}")


class Guesser:
    """Threads guessing tokens from ``source`` as fast as their keep-alive connections go."""

    def __init__(self, url, source, threads=4):
        self.url, self.source, self.stop = url, source, threading.Event()
        self.answers = []
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(threads)]

    def run(self):
        transport = httpx.HTTPTransport(local_address=self.source)
        with httpx.Client(base_url=self.url, transport=transport, timeout=30) as http:
            while not self.stop.is_set():
                try:
                    self.answers.append(http.get("/api/jobs", headers={"Authorization": f"Bearer {guess()}"})
                                        .status_code)
                except httpx.HTTPError:
                    time.sleep(0.05)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(30)


def let_in(url, token, source, how, tries=1):
    """[status...] of a student's tries at ``source`` (a second apart), stopping at the first
    success: the API's 200, the login form's 303."""
    transport = httpx.HTTPTransport(local_address=source)
    out = []
    for _ in range(tries):
        with httpx.Client(base_url=url, transport=transport, timeout=30) as http:
            if how == "the API":
                status = http.get("/api/jobs", headers={"Authorization": f"Bearer {token}"}).status_code
            else:
                pair = re.search(r'name="login" value="([^"]+)"', http.get("/login").text).group(1)
                status = http.post("/login", data={"token": token, "login": pair}).status_code
        out.append(status)
        if status in (200, 303):
            break
        time.sleep(1.0)
    return out


@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["the API", "the login form"])
def test_a_guesser_behind_a_lab_s_address_locks_no_one_out(svc, how):
    """A lab behind one address (a campus NAT): one student guesses tokens as fast as four
    keep-alive connections go; five other teams of the lab, whose tokens the service has not
    seen in the last seconds, then ask for their jobs (or log in on the form), once each, as the
    client does (it gives up at a 429). Each must get in: the limit is documented to slow the
    guesser without locking out the lab. A slow lane that any request of the address may take
    goes to the guesser's flood nearly every second, and the students are refused (429)."""
    lab = fresh_address(f"lab {how} {time.monotonic_ns()}")
    names = [f"lab-{how.split()[-1]}-{i}-{time.monotonic_ns() % 10**6}" for i in range(5)]
    tokens = svc.add_teams(*names)
    problems = []
    with Guesser(svc.url, lab, threads=8) as guesser:
        wait_until(lambda: 429 in guesser.answers, 60, "the lab's address limited")
        time.sleep(2.0)
        for name in names:
            tries = let_in(svc.url, tokens[name], lab, how)
            if tries[-1] not in (200, 303):
                problems.append(f"{name}: {tries} while the guesser got {len(guesser.answers)} answers "
                                f"({guesser.answers.count(401)} checked)")
    assert not problems, "\n".join(problems)


def test_a_student_of_another_address_is_let_in_meanwhile(svc):
    """A control of the tests above: while the guesser is limited, a team at another address is
    answered at once (the limit is per address)."""
    lab = fresh_address(f"control {time.monotonic_ns()}")
    token = svc.add_teams(f"elsewhere-{time.monotonic_ns() % 10**6}").popitem()[1]
    with Guesser(svc.url, lab, threads=2) as guesser:
        wait_until(lambda: 429 in guesser.answers, 60, "the guesser's address limited")
        assert let_in(svc.url, token, fresh_address(f"other {time.monotonic_ns()}"), "the API", tries=1) == [200]
