"""The upload storm of issue 46, against a real ``serve`` on loopback: N teams each post one
development upload of M MiB at once (each within its team's limits), retrying after a 503's
Retry-After; an honest team asks for its jobs meanwhile. Measured: the server's peak resident
memory, the database's growth, the upload folder's size, the honest team's GET /api/jobs p50
and p99 quiet and under the storm. tests/service/test_upload_storm.py runs a small one and asserts
bounds; the figures of docs/service.md come from

    PYTHONPATH=. python tests/uploadstorm.py --database sqlite --uploads 200 --mib 15.9
    PYTHONPATH=. python tests/uploadstorm.py --database postgresql --uploads 200 --mib 15.9

The uploads are gzip at level 0 (stored: sending them costs the client no CPU), all of one
random body but each with its own rai_build.yml, so that each has its own SHA-256 (the server
keeps one file per upload, as a class's distinct uploads would be); the client holds the shared
body once, not N copies."""
import argparse
import io
import json
import os
import random
import re
import secrets
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import zlib
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hostilekit import CONFIG, percentile, proc_kib, proc_stat, reset_peak  # noqa: E402
from servicekit import Service, started_postgres  # noqa: E402

QUIET_REQUESTS = 60


class Bodies:
    """Development uploads of ``size`` bytes as sent, each its own: a shared compressed prefix (the
    data file), and per team the compressor's state copied to end it with its own rai_build.yml."""

    def __init__(self, size):
        self.size = size
        data = os.urandom(max(1, size - 8192))
        head = _member("data.bin", data)
        self.compressor = zlib.compressobj(0, zlib.DEFLATED, 31)
        self.prefix = self.compressor.compress(head)

    def tail(self, team):
        compressor = self.compressor.copy()
        config = CONFIG + f"# team {team}\n".encode()
        return compressor.compress(_member("rai_build.yml", config) + b"\0" * 1024) + compressor.flush()

    def chunks(self, tail):
        view = memoryview(self.prefix)
        for start in range(0, len(view), 1 << 20):
            yield bytes(view[start:start + (1 << 20)])
        yield tail


def _member(name, data):
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    raw = io.BytesIO()
    raw.write(info.tobuf(tarfile.GNU_FORMAT))
    raw.write(data)
    raw.write(b"\0" * (-len(data) % 512))
    return raw.getvalue()


def folder_bytes(folder):
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def database_bytes(svc):
    """The database's size now: the SQLite file with its WAL, or pg_database_size."""
    if svc.db_url:
        import psycopg
        with psycopg.connect(svc.db_url) as conn:
            return conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    return sum(os.path.getsize(svc.sqlite_path + s) for s in ("", "-wal") if os.path.exists(svc.sqlite_path + s))


def storm(svc, uploads, mib, deadline=900.0, clients_nice=0):
    """Run the storm against the started ``svc``; its figures (a dict). ``clients_nice``: the storm's
    upload threads niced by this much (standing in for clients on machines of their own)."""
    bodies = Bodies(int(mib * 2**20))
    names = [f"storm{i}-{secrets.token_hex(3)}" for i in range(uploads)]
    tokens = svc.add_teams(*names, f"honest-{secrets.token_hex(3)}")
    honest = tokens.pop(next(n for n in tokens if n.startswith("honest-")))
    with httpx.Client(base_url=svc.url, timeout=30, headers={"Authorization": f"Bearer {honest}"}) as http:
        quiet = []                                # as the bystander asks below: one kept-alive connection
        for _ in range(QUIET_REQUESTS):
            started = time.monotonic()
            http.get("/api/jobs").raise_for_status()
            quiet.append(time.monotonic() - started)
            time.sleep(0.05)
    pid = svc.proc.pid
    quiet_served = served_ms(svc)
    cpu_before = cpu_seconds(pid)
    rss_before = proc_kib(pid, "VmRSS")
    db_before = database_bytes(svc)
    reset_peak(pid)
    answers, refused = {}, []
    stop = time.monotonic() + deadline
    start = threading.Barrier(len(names) + 1)

    def team(name, token):
        if clients_nice:
            os.nice(clients_nice)                 # this thread only (Linux): the laptops' CPU is not the server's
        tail = bodies.tail(name)
        length = len(bodies.prefix) + len(tail)
        start.wait()
        while time.monotonic() < stop:
            try:
                with httpx.Client(base_url=svc.url, timeout=300) as http:
                    answer = http.post("/api/jobs", content=bodies.chunks(tail), headers={
                        "Authorization": f"Bearer {token}", "Content-Type": "application/gzip",
                        "Content-Length": str(length)})
                status = answer.status_code
            except httpx.HTTPError as exc:
                status, answer = type(exc).__name__, None
            if status == 503 and answer is not None and answer.headers.get("retry-after"):
                refused.append(name)
                time.sleep(float(answer.headers["retry-after"]) * random.uniform(0.5, 1.5))
                continue
            answers[name] = status
            return
        answers[name] = "deadline"

    threads = [threading.Thread(target=team, args=(n, tokens[n]), daemon=True) for n in names]
    for t in threads:
        t.start()
    with tempfile.TemporaryDirectory(prefix="bystander-") as folder:
        out, ending = Path(folder) / "times.json", Path(folder) / "stop"
        watcher = subprocess.Popen([sys.executable, __file__, "--bystander", svc.url, str(out), str(ending)],
                                   env={**os.environ, "BYSTANDER_TOKEN": honest})
        while not out.with_suffix(".ready").exists() and watcher.poll() is None:
            time.sleep(0.1)                       # its first request answered: it asks from now on
        started = time.monotonic()
        start.wait()
        for t in threads:
            t.join(max(1.0, stop - time.monotonic()))
        took = time.monotonic() - started
        ending.touch()
        watcher.wait(90)
        during = [tuple(x) for x in json.loads(out.read_text())]
    checkers = children(pid)                     # the upload checks' processes (service/checker.py)
    server_peak = proc_kib(pid, "VmHWM")
    checkers_peak = sum(proc_kib(c, "VmHWM") for c in checkers)
    peak = server_peak + checkers_peak           # (peaks summed: a bound on the two at once)
    cpu = cpu_seconds(pid) - cpu_before + sum(cpu_seconds(c) for c in checkers)
    storm_served = served_ms(svc)[len(quiet_served):]
    seconds = [s for code, s in during if code == 200]
    statuses = {}
    for status in answers.values():
        statuses[status] = statuses.get(status, 0) + 1
    return {"uploads": uploads, "mib": mib, "sent_bytes": uploads * bodies.size, "statuses": statuses,
            "retried_503": len(refused), "seconds": took, "rss_before_mib": rss_before / 1024,
            "peak_rss_mib": peak / 1024, "server_peak_rss_mib": server_peak / 1024,
            "checkers_peak_rss_mib": checkers_peak / 1024, "db_growth_mib": (database_bytes(svc) - db_before) / 2**20,
            "upload_folder_mib": folder_bytes(svc.root / "state" / "ece408_op" / "service" / "uploads") / 2**20,
            "quiet_p50": percentile(quiet, 50), "quiet_p99": percentile(quiet, 99),
            "storm_p50": percentile(seconds, 50), "storm_p99": percentile(seconds, 99),
            "storm_requests": len(during), "storm_failed": sum(1 for code, _ in during if code != 200),
            "served_quiet_p50": percentile(quiet_served, 50), "served_quiet_p99": percentile(quiet_served, 99),
            "served_storm_p50": percentile(storm_served, 50), "served_storm_p99": percentile(storm_served, 99),
            "server_cpu_seconds": cpu, "checking_processes": len(checkers), "clients_nice": clients_nice}


def served_ms(svc):
    """The milliseconds the server's access log gives each GET /api/jobs answered 200, in order
    (the time inside the server, from the request's arrival: the client's adds its own waits)."""
    return [float(m.group(1)) / 1000 for m in re.finditer(r"method=GET path=/api/jobs status=200 ms=([0-9.]+)",
                                                          svc.log())]


def children(pid):
    """The processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int(proc_stat(entry.name)[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                pass
    return found


def cpu_seconds(pid):
    """The CPU time (user and system) the process ``pid`` has used."""
    fields = proc_stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(figures, database):
    f = figures
    return (f"{database}: {f['uploads']} uploads of {f['mib']:g} MiB in {f['seconds']:.0f} s, answers {f['statuses']} "
            f"({f['retried_503']} 503s retried); server RSS {f['rss_before_mib']:.0f} MiB before, peak "
            f"{f['peak_rss_mib']:.0f} MiB (itself {f['server_peak_rss_mib']:.0f}, its checking processes "
            f"{f['checkers_peak_rss_mib']:.0f}); database grew {f['db_growth_mib']:.1f} MiB; upload folder "
            f"{f['upload_folder_mib']:.0f} MiB; honest GET /api/jobs quiet p50 {f['quiet_p50'] * 1000:.0f} ms, p99 "
            f"{f['quiet_p99'] * 1000:.0f} ms; under the storm p50 {f['storm_p50'] * 1000:.0f} ms, p99 "
            f"{f['storm_p99'] * 1000:.0f} ms ({f['storm_requests']} requests, {f['storm_failed']} not 200); inside the "
            f"server p50 {f['served_quiet_p50'] * 1000:.0f} / p99 {f['served_quiet_p99'] * 1000:.0f} ms quiet, "
            f"{f['served_storm_p50'] * 1000:.0f} / {f['served_storm_p99'] * 1000:.0f} ms under the storm; server CPU "
            f"{f['server_cpu_seconds']:.0f} s (with its {f['checking_processes']} checking processes); storm clients niced "
            f"{f['clients_nice']}; load average {os.getloadavg()[0]:.1f}")


def bystander(url, out, ending):
    """The honest team, a process of its own (not behind the storm's threads in this one): GET
    /api/jobs in a loop until the file ``ending`` exists; [(status, seconds)] written to ``out``."""
    token, during = os.environ["BYSTANDER_TOKEN"], []
    with httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {token}"}) as http:
        while not os.path.exists(ending):       # one kept-alive connection, as the project's client keeps it
            started = time.monotonic()
            try:
                status = http.get("/api/jobs").status_code
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            during.append((status, time.monotonic() - started))
            Path(out).with_suffix(".ready").touch()
            time.sleep(0.05)
    Path(out).write_text(json.dumps(during))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--bystander"]:
        return bystander(*argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--uploads", type=int, default=200)
    parser.add_argument("--mib", type=float, default=15.9)
    parser.add_argument("--args", default="", help="more serve arguments, space-separated")
    parser.add_argument("--clients-nice", type=int, default=0,
                        help="nice the storm's upload threads (standing in for clients with CPUs of their own)")
    parser.add_argument("--json", help="append the figures to this file (a JSON line)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="uploadstorm-") as root:
        root = Path(root)
        pg = started_postgres(root / "pg") if args.database == "postgresql" else None
        env = {"ECE408_DB": pg.url} if pg else {}
        svc = Service(root / "svc", workers=0, args=args.args.split(), env=env).start()
        svc.db_url = pg.url if pg else None
        try:
            figures = storm(svc, args.uploads, args.mib, clients_nice=args.clients_nice)
            print(report(figures, args.database), flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps({"database": args.database, "date": time.strftime("%Y-%m-%d %H:%M"),
                                        "serve_args": args.args,
                                        "load_after": os.getloadavg()[0], **figures}) + "\n")
        finally:
            svc.close()
            if pg is not None:
                pg.stop()


if __name__ == "__main__":
    main()
