"""Failed token checks limited across addresses: per address (IPv6 per /64) and for the whole
service, so that a guesser with many addresses gets no more checks than the service's budget; the
limiter's table bounded without letting a limited address go free; a repeated log line names the
addresses it stands for. A real server is sprayed from 200 loopback addresses."""
import io
import secrets
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from ece408_op.service import logs
from ece408_op.service.tokens import FailureLimiter, address_key
from servicekit import python_command, service_env, service_on


def _guess():
    return f"ece408_{secrets.token_hex(8)}_{secrets.token_urlsafe(32)}"


def test_ipv6_addresses_count_per_64_and_mapped_ipv4_as_ipv4():
    assert address_key("2001:db8:1:2:aaaa::1") == address_key("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert address_key("2001:db8:1:3::1") != address_key("2001:db8:1:2::1")
    assert address_key("::ffff:10.1.2.3") == "10.1.2.3" and address_key("10.1.2.3") == "10.1.2.3"
    assert address_key("testclient") == "testclient"
    limiter = FailureLimiter(max_failures=3, window=60, max_total=1000)
    for host in range(3):
        limiter.fail(f"2001:db8:1:2::{host + 1}")
    wait, whose = limiter.wait("2001:db8:1:2:dead::beef")          # another address of the same /64
    assert wait > 0 and whose == "address"
    assert limiter.wait("2001:db8:1:3::1") == (0.0, None)


def test_the_service_wide_budget_holds_across_addresses():
    limiter = FailureLimiter(max_failures=20, window=60, max_total=50)
    checked = 0
    for i in range(1000):                                             # one guess from each of 1,000 addresses
        address = f"10.0.{i // 250}.{i % 250}"
        if limiter.wait(address)[0]:
            continue
        limiter.fail(address)
        checked += 1
    assert checked == 50
    wait, whose = limiter.wait("192.0.2.1")                           # a new address: the service's limit
    assert wait > 0 and whose == "service"


def test_a_spray_of_addresses_neither_grows_the_table_nor_frees_a_limited_address():
    limiter = FailureLimiter(max_failures=5, window=60, max_total=100)
    for _ in range(5):
        limiter.fail("198.51.100.7")
    assert limiter.wait("198.51.100.7")[1] == "address"
    for i in range(100_000):
        address = f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"
        if not limiter.wait(address)[0]:
            limiter.fail(address)
    assert len(limiter._failures) <= 2 * limiter.max_total + 1, len(limiter._failures)
    assert limiter.wait("198.51.100.7")[1] == "address"                # still limited


def test_the_table_holds_its_bound_whatever_its_callers_do():
    limiter = FailureLimiter(max_failures=5, window=60, max_total=100)
    for _ in range(5):
        limiter.fail("198.51.100.7")
    for i in range(100_000):                                          # failures recorded without asking first
        limiter.fail(f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}")
        limiter.fail("198.51.100.7")
    assert len(limiter) <= limiter.max_addresses == 100, len(limiter)
    assert len(limiter._total) <= 100 and all(len(t) <= 5 for t in limiter._failures.values())
    assert limiter.wait("198.51.100.7")[1] == "address"                # still limited


def test_a_full_table_gives_up_rows_under_their_limit_never_a_limited_one():
    limiter = FailureLimiter(max_failures=3, window=60, max_total=100_000, max_addresses=8)
    limited = [f"198.51.100.{i}" for i in range(1, 6)]
    for address in limited:
        for _ in range(3):
            limiter.fail(address)
    for i in range(1000):                                             # more addresses than the table holds
        address = f"10.0.{i // 250}.{i % 250}"
        if not limiter.wait(address)[0]:
            limiter.fail(address)
        assert len(limiter) <= 8
    assert all(limiter.wait(a)[1] == "address" for a in limited)      # none went free
    assert limiter.evicted >= 990 and limiter.unplaced == 0
    for address in ("192.0.2.1", "192.0.2.2", "192.0.2.3"):           # every row a limited address now
        for _ in range(3):
            limiter.fail(address)
    assert len(limiter) == 8 and all(limiter.wait(a)[1] == "address" for a in limited + ["192.0.2.3"])
    for _ in range(10):                                               # the next address: no row to take
        limiter.fail("203.0.113.9")
    assert limiter.unplaced == 10 and limiter.wait("203.0.113.9") == (0.0, None)
    assert len(limiter._total) == 5 * 3 + 1000 + 9 + 10                # counted toward the service's budget
    assert all(limiter.wait(a)[1] == "address" for a in limited)


def test_a_repeated_line_names_the_addresses_it_stands_for(monkeypatch):
    repeats = logs.Repeats()
    for i in range(logs.Repeats.LINES):
        assert repeats.allow("auth.failed", now=0.0, address="10.0.0.1")[0]
    for i in range(40):
        assert not repeats.allow("auth.failed", now=1.0, address=f"10.0.0.{1 + i % 3}")[0]
    for i in range(7):
        repeats.allow("auth.failed", now=2.0, address="192.0.2.9")
    ended = repeats.ended(now=61.0)
    ((key, count, addresses),) = ended
    assert key == "auth.failed" and count == 47
    assert addresses[0] in (("10.0.0.1", 14), ("10.0.0.2", 13)) and ("192.0.2.9", 7) in addresses
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    logs._say_repeats(ended)
    line = out.getvalue()
    assert "event=auth.failed count=47" in line and "addresses=10.0.0.1:14,10.0.0.2:13,10.0.0.3:13,192.0.2.9:7" \
        in line and "address_count=4" in line, line


@pytest.mark.service
def test_guesses_from_200_addresses_get_no_more_checks_than_the_budget(running_service, tmp_path):
    service = running_service(tmp_path / "svc", workers=0, args=["--max-failures", "20", "--max-failures-total", "100"])
    good = service.add_teams("honest")["honest"]

    def guess(i):
        address = f"127.0.{1 + i // 200}.{1 + i % 200}"
        transport = httpx.HTTPTransport(local_address=address)
        with httpx.Client(transport=transport, base_url=service.url, timeout=30) as client:
            return client.get("/api/jobs", headers={"Authorization": f"Bearer {_guess()}"}).status_code

    with ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(guess, range(1000)))
    assert codes.count(401) <= 100 and codes.count(401) + codes.count(429) == 1000, \
        (codes.count(401), codes.count(429))
    assert codes.count(401) >= 80                                   # the budget is spent, not refused early
    honest = httpx.get(service.url + "/api/jobs", headers={"Authorization": f"Bearer {good}"})
    assert honest.status_code == 200                                 # a valid token passes all the same
    wrong = httpx.get(service.url + "/api/jobs", headers={"Authorization": f"Bearer {_guess()}"})
    assert wrong.status_code == 429 and "many addresses" in wrong.json()["error"], wrong.text


@pytest.mark.service
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_spray_past_a_small_table_frees_no_limited_address(tmp_path, database):
    """A real server whose table holds 8 addresses ($ECE408_FAILURE_TABLE, tests only): one address
    limited, then 40 others sprayed from loopback; the limited one stays refused, the spray's
    addresses are checked (the service's budget is far off), an honest token passes from the
    limited address, and the log says the table was full."""
    with service_on(database, tmp_path, workers=0, env={"ECE408_FAILURE_TABLE": "8"},
                    args=["--max-failures", "3", "--max-failures-total", "1000"]) as service:
        good = service.add_teams("honest")["honest"]

        def get(address, token):
            transport = httpx.HTTPTransport(local_address=address)
            with httpx.Client(transport=transport, base_url=service.url, timeout=30) as client:
                return client.get("/api/jobs", headers={"Authorization": f"Bearer {token}"})

        assert [get("127.0.0.2", _guess()).status_code for _ in range(3)] == [401] * 3
        refused = get("127.0.0.2", _guess())
        assert refused.status_code == 429 and "from this address" in refused.json()["error"], refused.text
        with ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(lambda i: get(f"127.0.3.{1 + i}", _guess()).status_code, range(40)))
        assert codes == [401] * 40, codes
        still = get("127.0.0.2", _guess())
        assert still.status_code == 429 and "from this address" in still.json()["error"], still.text
        assert get("127.0.0.2", good).status_code == 200
        assert "auth.failure_table_full" in service.log() and "bound=8" in service.log(), service.log()[-3000:]


def test_a_bad_failure_table_size_is_one_line(tmp_path):
    out = subprocess.run([*python_command(), "-m", "ece408_op", "serve", "--workers", "0"], capture_output=True,
                         text=True, env=service_env(tmp_path, {"ECE408_FAILURE_TABLE": "many"}), timeout=120)
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1] == (
        "ece408_op serve: error: $ECE408_FAILURE_TABLE must be a positive whole number of addresses, not 'many'"), \
        out.stderr
