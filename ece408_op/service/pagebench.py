"""The pages' render benchmark (the target: each page within 100 ms with 300 teams and 10,000 runs
in the database). Not a timed test: it fills a SQLite database of its own, starts the application
in this process (no network: the time is the server's, from the request to the last byte of the
page), asks each page ``repeats`` times and reports the first answer (caches empty, templates not
yet compiled, matplotlib not yet imported), the median of the rest (the ranking and the plots
cached, as between two new records), and the median with the pages' caches emptied before each
request (as right after a new record: the board ranked again, reading only the records it has not
read yet, and the plot drawn again), with the date and this machine's CPU:

    python -m ece408_op.service.pagebench [--teams 300] [--runs 10000] [--repeats 20] [--db PATH]

The class it makes: ``teams`` teams, ``runs`` ranked runs spread over them (three boards: m2 on
10,000 images, most of them, then m3 and final), a fifth of them not valid, each with a 40-line
transcript and its record; 30 jobs waiting, 4 running, 8 workers. The pages asked for: the ranking
as the instructor and as a team (names anonymised), a team's page and its plot, a job's page, the
instructor's page and the CSV export.
"""
import argparse
import hashlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from .jobs import JOB_COLUMNS
from .grading_door import RECORD_COLUMNS, Record, cpu_name
from .sessions import COOKIE

BOARDS = (("m2", 10000, 0.6), ("m3", 10000, 0.25), ("final", 10000, 0.15))
MODELS = (("ece408-high", 0.8562), ("ece408-low", 0.629))


@dataclass
class Figure:
    page: str
    path: str
    first_ms: float                # the first answer (caches empty, templates not yet compiled)
    median_ms: float               # the median of the others (the ranking and plots cached)
    fresh_ms: float                # the median with the pages' caches emptied before each request
    status: int
    bytes: int


def fill(db, teams, runs, seed=408):
    """The class (see the module docstring) in the service database ``db``; returns
    ({team: token}, instructor token, a job id with a transcript, a team with runs)."""
    from .tokens import new_token
    rng = random.Random(seed)
    names = [f"team-{i:03d}" for i in range(teams)]
    tokens = {}
    for start in range(0, teams, 100):
        tokens.update({t["name"]: t["token"] for t in db_tokens(db).add_teams(names[start:start + 100])})
    instructor = new_token()[2]
    db_tokens(db).register("instructor", "instructor", instructor)
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    jobs, chunks, records = [], [], []
    speed = {n: rng.uniform(0.5, 4.0) for n in names}
    for i in range(runs):
        team = names[i % teams]
        milestone, size, _ = rng.choices(BOARDS, weights=[b[2] for b in BOARDS])[0]
        job_id = f"{i:032x}"
        at = start + timedelta(seconds=i * 200)
        ok = rng.random() > 0.2
        times = [[speed[team] * rng.uniform(0.01, 0.02)] for _ in MODELS]
        models = [{"model": m, "op_times": t, "correctness": e if ok else 0.1, "expected": e, "op_time": sum(t),
                   "correct": ok} for (m, e), t in zip(MODELS, times)]
        options = {"milestone": milestone, "size": size, "models": [m for m, _ in MODELS], "hidden": None,
                   "repeats": 1, "engine": "bubblewrap"}
        files = [{"name": "new-forward.cu", "size": 4096, "sha256": f"{rng.getrandbits(256):064x}"},
                 {"name": "launch.py", "size": 1024, "sha256": f"{rng.getrandbits(256):064x}"}]
        transcript = [f"* Job {job_id} queued at {at:%Y-%m-%d %H:%M:%S} UTC: ranked {milestone}, {size} images\n"] + \
            [f"line {k} of the run's output: Loading model... done\n" for k in range(37)] + \
            [f"Op Time: {t[0]:.6f}\n" for t in times] + ["Correctness: 0.8562 Model: ece408-high\n"]
        total = sum(t[0] for t in times)
        records.append(Record(id=job_id, created_at=at.isoformat(timespec="milliseconds"), team=team,
                              milestone=milestone, size=size, status="ok", exit_code=0, op_time=total, correct=ok,
                              models=models, device="NVIDIA H100 80GB HBM3", engine="bubblewrap", host="node",
                              duration_s=30.0, transcript="".join(transcript), team_files=files, isolated=True,
                              options=options, options_key=hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:16],
                              reason=None if ok else "Correctness 0.1 on ece408-high, expected 0.8562"))
        row = dict(id=job_id, team=team, kind="ranked", milestone=milestone, size=size, gpu=1, state="done",
                   submitted_at=at.timestamp(), started_at=at.timestamp() + 5, finished_at=at.timestamp() + 40,
                   heartbeat_at=at.timestamp() + 40, time_limit=1800.0, attempts=1, lease=None, worker="node/gpu0",
                   cancel_requested=0, status="ok", exit_code=0, valid=int(ok), reason=records[-1].reason,
                   summary=None, record_id=job_id, next_seq=len(transcript), upload_bytes=5120,
                   upload_sha256="0" * 64, files=json.dumps(files), idem_key=None)
        jobs.append(tuple(row.get(c) for c in JOB_COLUMNS))         # columns not named: NULL
        chunks += [(job_id, k, text, at.timestamp()) for k, text in enumerate(transcript)]
    now = time.time()
    for k in range(34):                                          # 30 waiting, 4 running
        team = names[(k * 7) % teams]
        state = "running" if k < 4 else "queued"
        row = dict(id=f"f{k:031x}", team=team, kind="ranked", milestone="final", size=10000, gpu=1, state=state,
                   submitted_at=now - 600 + k, started_at=now - 60 if state == "running" else None, finished_at=None,
                   heartbeat_at=now if state == "running" else None, time_limit=1800.0, attempts=int(k < 4),
                   lease="a" * 32 if state == "running" else None, worker=f"node{k}/gpu0" if k < 4 else None,
                   cancel_requested=0, status=None, exit_code=None, valid=None, reason=None, summary=None,
                   record_id=f"f{k:031x}", next_seq=1, upload_bytes=5120, upload_sha256="0" * 64, files="[]",
                   idem_key=None)
        jobs.append(tuple(row.get(c) for c in JOB_COLUMNS))         # columns not named: NULL
    with db.transaction() as tx:
        tx.conn.executemany(f"INSERT INTO service_jobs ({', '.join(JOB_COLUMNS)}) VALUES "
                            f"({', '.join('?' * len(JOB_COLUMNS))})", jobs)
        tx.conn.executemany("INSERT INTO service_chunks (job_id, seq, text, at) VALUES (?, ?, ?, ?)", chunks)
        tx.conn.executemany(f"INSERT INTO runs ({', '.join(RECORD_COLUMNS)}) VALUES "
                            f"({', '.join('?' * len(RECORD_COLUMNS))})", [r.row() for r in records])
        tx.conn.executemany("INSERT INTO service_workers (name, gpu, device, last_seen) VALUES (?, 1, ?, ?)",
                            [(f"node{k}/gpu0", "NVIDIA H100 80GB HBM3", now) for k in range(8)])
    busiest = names[0]
    return tokens, instructor, f"{0:032x}", busiest


def db_tokens(db):
    from .tokens import Tokens
    return Tokens(db)


def run(path, teams=300, runs=10000, repeats=20):
    """[Figure] of each page against a new database at ``path`` (SQLite)."""
    from fastapi.testclient import TestClient

    from . import choices
    from .app import make_app
    from .db import Database
    from .state import Service, Settings
    db = Database(str(path))
    tokens, instructor, job, team = fill(db, teams, runs)
    choices.set_names(db, "anonymised")
    service = Service(db, Settings())
    figures = []
    app = make_app(service)
    with TestClient(app) as client:
        def session(token):
            form = client.get("/login")
            pair = form.text.split('name="login" value="', 1)[1].split('"', 1)[0]
            answer = client.post("/login", data={"login": pair, "token": token}, follow_redirects=False)
            value = answer.cookies.get(COOKIE)
            client.cookies.clear()
            return value
        as_team, as_instructor = session(tokens[team]), session(instructor)
        pages = [("ranking", "/?milestone=m2&size=10000", as_instructor),
                 ("ranking (a team, names anonymised)", "/?milestone=m2&size=10000", as_team),
                 ("team", "/team", as_team),
                 ("team plot", "/team/plot.svg?milestone=m2&size=10000", as_team),
                 ("job", f"/jobs/{job}", as_team),
                 ("admin", "/admin", as_instructor),
                 ("ranking csv", "/admin/ranking.csv?milestone=m2&size=10000&full=0.02&zero=0.1", as_instructor)]
        def timed(url, value, fresh):
            if fresh:                               # as after a new record: the ranking and plots computed again
                service.rankings.forget()
                app.state.site.plots.clear()
            started = time.perf_counter()
            answer = client.get(url, cookies={COOKIE: value})
            return (time.perf_counter() - started) * 1000, answer
        for name, url, value in pages:
            times = [timed(url, value, False)[0] for _ in range(repeats + 1)]
            fresh = [timed(url, value, True) for _ in range(repeats)]
            answer = fresh[-1][1]
            figures.append(Figure(name, url, times[0], statistics.median(times[1:]),
                                  statistics.median(f[0] for f in fresh), answer.status_code, len(answer.content)))
    db.close_all()
    return figures


def markdown(figures, teams, runs):
    lines = [f"{datetime.now(timezone.utc):%Y-%m-%d}, {cpu_name()}, {os.cpu_count()} cores; {teams} teams, {runs} "
             "runs (Python " + ".".join(map(str, sys.version_info[:3])) + ", SQLite):", "",
             "| page | first request (ms) | median, cached (ms) | median, computed afresh (ms) | size |",
             "| --- | --- | --- | --- | --- |"]
    for f in figures:
        lines.append(f"| {f.page} (`{f.path.split('?')[0]}`) | {f.first_ms:.1f} | {f.median_ms:.1f} | "
                     f"{f.fresh_ms:.1f} | {f.bytes / 1024:.0f} KiB |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m ece408_op.service.pagebench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--teams", type=int, default=300)
    parser.add_argument("--runs", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--db", help="the SQLite file to make (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ece408-pagebench-") as folder:
        path = Path(args.db) if args.db else Path(folder) / "bench.db"
        figures = run(path, args.teams, args.runs, args.repeats)
    print(markdown(figures, args.teams, args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
