"""The class on deadline night, with real workers, on SQLite and on PostgreSQL: 300 teams, 290 of
them honest (development runs of a tiny rai_build.yml in bubblewrap, one in ten a ranked m2 on 10
images), submitting through the service's API at a steady rate, first alone (the quiet run), then
with 10 hostile teams attacking at the same time: live streams held by the hundred, slowloris,
compression bombs from a team over its limit, archives a worker cannot unpack, cancel storms, a
flooded queue, malformed requests, guessed job ids, logins in a loop, cancels racing a run's end.

Checked: nothing lost (every accepted job ends, once; every honest job ends done and valid), no
worker lost (the same worker processes alive, every slot still claiming), the honest teams' submit
p99 (below), no 5xx to anyone, no job of another team opened, a team ranked
exactly when a ranked job of its ended done. The hostile teams run in a process of their own and
the workers in theirs, both in Linux's idle scheduling class (SCHED_IDLE: they run on what the
server and the honest teams leave), standing for laptops and GPU machines elsewhere: their own work
would otherwise take the CPU of this shared 2-core machine from the server, whose answers (to
the attack too) are what is measured. ``$SOAK_SECONDS`` sets the attacked period and the quiet
one alike, so that both p99s come from as many submissions (default 60; the record run uses 600);
``$SOAK_REPORT`` names a file the figures are written to as JSON. Every run checks that the honest
p99 under attack stays under a second; the record run (600 s, or ``SOAK_STRICT=1``) checks the
target, within 2x of the quiet run's, which this 2-core machine does not meet (docs/service.md
has the figures)."""
import json
import multiprocessing
import os
import random
import re
import secrets
import shutil
import sqlite3
import threading
import time
from collections import Counter

import httpx
import pytest

from hostilekit import (BUBBLEWRAP, CONFIG, DATABASES, Flood, bomb_upload, development, exchange, login, member,
                        open_descriptors, percentile, proc_kib, ranked_teams_api, request_bytes, tar_gz)
from teams import PLAIN, team_project

from ece408_op.service.upload import pack_ranked

pytestmark = [pytest.mark.service, pytest.mark.slow, pytest.mark.serial,    # p99s and a 2x target: alone
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="the workers' sandbox needs bubblewrap"),
              pytest.mark.skipif(shutil.which("chrt") is None, reason="the workers' idle class needs chrt")]

SECONDS = float(os.environ.get("SOAK_SECONDS", "60"))
QUIET = SECONDS
SLOWEST = 1.0                      # s: an honest submission's p99 under attack, in every run
STRICT = os.environ.get("SOAK_STRICT") == "1" or SECONDS >= 600    # the record run: p99 within 2x of quiet's
HONEST = 290
RATE = 1.0                         # honest submissions a second, in both runs
WORKERS, SLOTS = 2, 2              # `worker --server` processes and CPU slots each
ENDED = ("done", "failed", "cancelled")
END_LINE = re.compile(r"^\* (Record |Cancelled|Failed|Development run: no record)", re.M)


class Tally:
    """Statuses and failures of one team's requests, from any thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.statuses, self.notes = Counter(), []

    def add(self, status, note=None):
        with self.lock:
            self.statuses[status] += 1
            if note:
                self.notes.append(note)


class Honest:
    """The honest teams: submissions at RATE a second, round robin over the teams, each timed. Each
    goes on a new connection, as from its own laptop, through one client made once: what is timed
    is the service, not this process making an httpx client (and its TLS context, some 20 ms of
    CPU) for every call."""

    def __init__(self, svc, tokens, ranked_upload):
        self.svc, self.tokens, self.ranked = svc, tokens, ranked_upload
        self.names = sorted(tokens)
        self.count, self.jobs, self.tally = 0, {}, Tally()
        self.http = httpx.Client(timeout=120, limits=httpx.Limits(max_keepalive_connections=0))

    def one(self, name, ranked, times):
        params = {"kind": "ranked", "milestone": "m2", "size": 10} if ranked else {"kind": "development"}
        began = time.monotonic()
        try:
            answer = self.http.post(self.svc.url + "/api/jobs", params=params,
                                    content=self.ranked if ranked else development(),
                                    headers={"Authorization": f"Bearer {self.tokens[name]}"})
        except httpx.HTTPError as exc:
            self.tally.add(type(exc).__name__, f"{name}: {type(exc).__name__}")
            return
        times.append(time.monotonic() - began)
        self.tally.add(answer.status_code, None if answer.status_code == 201 else f"{name}: {answer.text[:100]}")
        if answer.status_code == 201:
            self.jobs[answer.json()["id"]] = name

    def run(self, seconds):
        """Submit for ``seconds``; the submit times (s)."""
        times, threads = [], []
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            name = self.names[self.count % len(self.names)]
            ranked = self.count % 10 == 9
            self.count += 1
            t = threading.Thread(target=self.one, args=(name, ranked, times), daemon=True)
            t.start()
            threads.append(t)
            time.sleep(1.0 / RATE)
        for t in threads:
            t.join(150)
        return times


# ---------------------------------------------------------------------------- the hostile teams

def api(svc, token, method, path, tally, **kwargs):
    try:
        answer = httpx.request(method, svc.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=60,
                               **kwargs)
    except httpx.HTTPError as exc:
        tally.add(type(exc).__name__)
        return None
    tally.add(answer.status_code)
    return answer


def stream_hog(svc, token, stop, tally, accepted):
    job = api(svc, token, "POST", "/api/jobs", tally, content=development())
    if job is None or job.status_code != 201:
        return
    accepted.append(job.json()["id"])
    payload = request_bytes("GET", f"/api/jobs/{job.json()['id']}/events", headers={
        "Authorization": f"Bearer {token}"}, body=None)
    while not stop.is_set():
        flood = Flood(svc.url, 300, payload, sources=("127.0.0.7",)).open()
        flood.poll(10)
        for status, n in flood.statuses().items():
            for _ in range(n):
                tally.add(f"stream {status}")
        flood.close()


def slowloris(svc, token, stop, tally, accepted):
    flood = Flood(svc.url, 300, b"GET /login HTTP/1.1\r\nHost: x\r\n", sources=("127.0.0.8",), trickle=True).open()
    while not stop.wait(2):
        flood.trickle_step()
        flood.poll(0.1)
    tally.add(f"{flood.still_open()} held to the end")
    flood.close()


def bomber(svc, token, stop, tally, accepted, bomb):
    for _ in range(30):                                 # over its hourly limit first
        job = api(svc, token, "POST", "/api/jobs", tally, content=development())
        if job is None or job.status_code != 201:
            break
        accepted.append(job.json()["id"])
        api(svc, token, "POST", f"/api/jobs/{job.json()['id']}/cancel", tally)
    while not stop.is_set():
        status = exchange(svc.url, request_bytes("POST", "/api/jobs?kind=development", headers={
            "Authorization": f"Bearer {token}"}, body=bomb), timeout=60)[0]
        tally.add(status)


def unpacker(svc, token, stop, tally, accepted):
    shapes = [[member("x/y"), member("x")], [member("a/b/c"), member("a/b")]]
    while not stop.wait(5):
        job = api(svc, token, "POST", "/api/jobs", tally, content=tar_gz([member("rai_build.yml",
                                                                                CONFIG)] +
                                                                        random.choice(shapes)))
        if job is not None and job.status_code == 201:
            accepted.append(job.json()["id"])


def canceller(svc, token, stop, tally, accepted):
    while not stop.wait(1):
        job = api(svc, token, "POST", "/api/jobs", tally, content=development())
        if job is None or job.status_code != 201:
            continue
        accepted.append(job.json()["id"])
        threads = [threading.Thread(target=api, args=(svc, token, "POST", f"/api/jobs/{job.json()['id']}/cancel",
                                                       tally)) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)


def flooder(svc, token, stop, tally, accepted):
    while not stop.wait(0.5):
        job = api(svc, token, "POST", "/api/jobs", tally, content=development())
        if job is not None and job.status_code == 201:
            accepted.append(job.json()["id"])


def fuzzer(svc, token, stop, tally, accepted):
    cookie = login(svc.url, token)
    job = api(svc, token, "POST", "/api/jobs", tally, content=development())
    if job is not None and job.status_code == 201:
        accepted.append(job.json()["id"])
        job_id = job.json()["id"]
    else:
        job_id = "0" * 32
    while not stop.wait(0.5):
        for method, path, headers, body in (
                ("GET", f"/api/jobs/{job_id}/events?after={2**64}", {"Authorization": f"Bearer {token}"}, None),
                ("POST", "/logout", {"Cookie": f"ece408_session={cookie}",
                                     "Content-Type": "application/x-www-form-urlencoded"}, "csrf=%C3%A9".encode()),
                ("POST", "/api/jobs?kind=ranked&milestone=m2&size=99999999999999999999",
                 {"Authorization": f"Bearer {token}"}, b"\x1f\x8b"),
                ("GET", "/api/ranking?size=-1&format=%00", {"Authorization": f"Bearer {token}"}, None)):
            tally.add(exchange(svc.url, request_bytes(method, path, headers=headers, body=body), timeout=3)[0])


def prober(svc, token, stop, tally, accepted, leaked):
    while not stop.wait(0.2):
        target = random.choice(list(leaked) or ["0" * 32]) if random.random() < 0.7 else secrets.token_hex(16)
        answer = api(svc, token, "GET", f"/api/jobs/{target}/transcript", tally)
        if answer is not None and answer.status_code == 200:
            tally.notes.append(f"opened job {target}")


def login_spammer(svc, token, stop, tally, accepted):
    while not stop.wait(0.1):
        try:
            login(svc.url, token, source="127.0.0.10")
            tally.add("login")
        except (httpx.HTTPError, AssertionError, AttributeError) as exc:
            tally.add(type(exc).__name__)


def racer(svc, token, stop, tally, accepted, upload):
    while not stop.is_set():
        job = api(svc, token, "POST", "/api/jobs", tally, params={"kind": "ranked", "milestone": "m2", "size": 10},
                  content=upload)
        if job is None or job.status_code != 201:
            stop.wait(5)
            continue
        job_id = job.json()["id"]
        accepted.append(job_id)
        seen = ""
        try:
            with httpx.stream("GET", f"{svc.url}/api/jobs/{job_id}/events", timeout=120,
                              headers={"Authorization": f"Bearer {token}"}) as events:
                for line in events.iter_lines():
                    seen += line
                    if seen.count("Correctness: ") >= 2 or "event: end" in line or stop.is_set():
                        break
        except httpx.HTTPError:
            pass
        api(svc, token, "POST", f"/api/jobs/{job_id}/cancel", tally)


ATTACKS = {"hog": stream_hog, "loris": slowloris, "bomber": bomber, "unpacker": unpacker, "canceller": canceller,
           "flooder": flooder, "fuzzer": fuzzer, "prober": prober, "spammer": login_spammer, "racer": racer}


def hostile_teams(svc, tokens, names, extra, stop, out):
    """The hostile teams, in a process of their own in the idle scheduling class: their own work
    stands for laptops elsewhere, so that it does not take the CPU the honest teams' timing and the
    server need on this shared machine; what they saw goes to ``out`` as JSON."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    done, tallies, accepted = threading.Event(), {n: Tally() for n in names}, []
    threads = [threading.Thread(target=ATTACKS[n], args=(svc, tokens[n], done, tallies[n], accepted,
                                                         *extra.get(n, ())), daemon=True) for n in names]
    for t in threads:
        t.start()
    stop.wait()
    done.set()
    for t in threads:
        t.join(120)
    out.write_text(json.dumps({"accepted": accepted, "tallies": {
        n: {"statuses": {str(k): v for k, v in t.statuses.items()}, "notes": t.notes} for n, t in tallies.items()}}))
    os._exit(0)


def read_hostile(path, names):
    """({name: Tally}, [accepted job ids]) the hostile teams' process wrote (status codes as numbers)."""
    data = json.loads(path.read_text())
    tallies = {n: Tally() for n in names}
    for name, seen in data["tallies"].items():
        for status, count in seen["statuses"].items():
            tallies[name].statuses[int(status) if status.isdigit() else status] += count
        tallies[name].notes.extend(seen["notes"])
    return tallies, data["accepted"]


# ---------------------------------------------------------------------------- the soak

def slot_seen(svc):
    """{worker slot: last seen (epoch s)} from the service's own table."""
    if svc.db_url:
        import psycopg
        with psycopg.connect(svc.db_url) as conn:
            return dict(conn.execute("SELECT name, last_seen FROM service_workers").fetchall())
    with sqlite3.connect(svc.sqlite_path) as conn:
        return dict(conn.execute("SELECT name, last_seen FROM service_workers").fetchall())


@pytest.mark.timeout(int(SECONDS + QUIET) + 600)
@pytest.mark.parametrize("database", DATABASES)
def test_the_class_on_deadline_night(running_service, tmp_path, postgres_server, database):
    svc = running_service.on(tmp_path / "svc", database, postgres_server,
                             args=["--lease", "10", "--max-failures", "100000"])
    hostile_names = ["hog", "loris", "bomber", "unpacker", "canceller", "flooder", "fuzzer", "prober", "spammer",
                     "racer"]
    names = [f"team{i:03d}" for i in range(HONEST)]
    tokens = svc.add_teams(*names, *hostile_names)
    upload = pack_ranked(team_project(tmp_path / "team", cpu=PLAIN), "m2")[0]
    workers = [svc.worker(svc.worker_token(f"soak{k}"), *BUBBLEWRAP, "--slots", str(SLOTS),
                          log_name=f"worker-soak{k}.log", wrap=("chrt", "--idle", "0")) for k in range(WORKERS)]
    pids = [w.pid for w in workers]
    honest = Honest(svc, {n: tokens[n] for n in names}, upload)
    quiet = honest.run(QUIET)
    extra = {"bomber": (bomb_upload(),), "prober": (dict(honest.jobs),), "racer": (upload,)}
    context = multiprocessing.get_context("fork")
    stop, out = context.Event(), tmp_path / "hostile.json"
    attackers = context.Process(target=hostile_teams, args=(svc, tokens, hostile_names, extra, stop, out))
    attackers.start()
    peak_fds = 0
    sampler_stop = threading.Event()

    def sample():
        nonlocal peak_fds
        while not sampler_stop.wait(1):
            peak_fds = max(peak_fds, open_descriptors(svc.proc.pid))
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    soak = honest.run(SECONDS)
    stop.set()
    attackers.join(180)
    sampler_stop.set()
    tallies, accepted = read_hostile(out, hostile_names)
    all_jobs = {**{j: n for j, n in honest.jobs.items()}, **{j: "hostile" for j in accepted}}
    deadline = time.monotonic() + 300 + SECONDS / 2
    while time.monotonic() < deadline:                       # the queue drains, or every worker is gone
        states = {j["id"]: j for j in svc.jobs()}
        if all(states.get(j, {}).get("state") in ENDED for j in all_jobs):
            break
        if not any(w.poll() is None for w in workers):
            break
        time.sleep(2)
    states = {j["id"]: j for j in svc.jobs()}
    problems = []
    for job_id, team in all_jobs.items():
        job = states.get(job_id)
        if job is None or job["state"] not in ENDED:
            problems.append(f"job {job_id} of {team} never ended ({job and job['state']})")
            continue
        ends = END_LINE.findall(svc.transcript(job_id))
        if len(ends) > 2 or (job["state"] == "done" and len(ends) != 1):
            problems.append(f"job {job_id} of {team} ended {len(ends)} times ({ends})")
        if team != "hostile" and not (job["state"] == "done" and (job["valid"] if job["kind"] == "ranked"
                                                                  else job["status"] == "ok")):
            problems.append(f"honest job {job_id} of {team}: {job['state']}, {job['status']}")
    for k, w in enumerate(workers):
        if w.poll() is not None or w.pid != pids[k]:
            problems.append(f"worker soak{k} (pid {pids[k]}) exited with {w.returncode}")
    seen = slot_seen(svc)
    for k in range(WORKERS):
        for j in range(SLOTS):
            last = seen.get(f"soak{k}/cpu{j}")
            if last is None or time.time() - last > 60:
                problems.append(f"slot soak{k}/cpu{j} last claimed {last and round(time.time() - last)} s ago")
    for name, tally in tallies.items():
        fives = {s: n for s, n in tally.statuses.items() if isinstance(s, int) and s >= 500 and s != 503}
        if fives:
            problems.append(f"{name}: {fives}")
    problems += [f"prober: {n}" for n in tallies["prober"].notes]
    problems += [f"honest: {s} x{n}" for s, n in honest.tally.statuses.items() if s != 201]
    ratio = percentile(soak, 99) / percentile(quiet, 99) if quiet and soak else None
    if not soak or percentile(soak, 99) > SLOWEST:
        problems.append(f"the honest submit p99 under attack: {percentile(soak, 99) if soak else None} s, over "
                        f"{SLOWEST} s")
    if STRICT and (ratio is None or ratio > 2.0):
        problems.append(f"the honest submit p99: quiet {percentile(quiet, 99):.3f} s, under attack "
                        f"{percentile(soak, 99) if soak else float('nan'):.3f} s (x{ratio and round(ratio, 1)})")
    racer_jobs = [j for j in accepted if states.get(j, {}).get("team") == "racer"]
    if racer_jobs:
        ranked = "racer" in ranked_teams_api(svc, "json", size=10)
        done = any(states[j]["state"] == "done" and states[j]["valid"] for j in racer_jobs)
        if ranked != done:
            problems.append(f"racer: ranked {ranked}, a ranked job ended done {done}")
    report = {"database": database, "date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(),
              "seconds": SECONDS, "quiet_seconds": QUIET, "teams": HONEST + len(hostile_names),
              "honest_submissions": honest.count, "hostile_accepted": len(accepted),
              "quiet_submit_s": {"p50": percentile(quiet, 50), "p99": percentile(quiet, 99), "n": len(quiet)},
              "soak_submit_s": {"p50": percentile(soak, 50), "p99": percentile(soak, 99), "n": len(soak)},
              "p99_ratio": ratio, "server_peak_rss_mib": round(proc_kib(svc.proc.pid) / 1024),
              "server_peak_fds": peak_fds, "workers_alive": sum(w.poll() is None for w in workers),
              "hostile": {n: {str(s): c for s, c in t.statuses.items()} for n, t in tallies.items()},
              "problems": len(problems)}
    print("\nsoak:", json.dumps(report))
    if os.environ.get("SOAK_REPORT"):
        with open(os.environ["SOAK_REPORT"], "a") as out:
            out.write(json.dumps(report) + "\n")
    assert not problems, "\n".join(problems[:80])
