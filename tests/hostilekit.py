"""What the hostile-class suite (tests/service/test_attack_*.py, tests/service/test_deadline_night_soak.py) attacks the
submission service with: a real ``serve`` on SQLite or PostgreSQL, tar archives written entry by
entry (any name, type, order and PAX header), the worker protocol spoken by hand (any lease, any
sequence number, any order), raw sockets (many at once, from other loopback addresses, headers
trickled a byte at a time), live streams read in threads, the server's memory and descriptors
read from /proc, and a scan of its log for what a 4xx should have been."""
import gzip
import io
import json
import os
import re
import secrets
import selectors
import socket
import tarfile
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from pagekit import record_of, ranked_upload
from servicekit import Service, started_postgres
from teams import rai_yaml

from ece408_op.client.api import sse_events

DATABASES = ("sqlite", "postgresql")
BUBBLEWRAP = ["--engine", "bubblewrap", "--gpus", "none"]
CONFIG = rai_yaml(["echo hi"]).encode()
TRACEBACK = re.compile(r"Exception in ASGI application|Traceback \(most recent call last\)|error uvicorn")


# ---------------------------------------------------------------------------- a service on either database

@pytest.fixture(scope="module")
def postgres_server(tmp_path_factory):
    """A callable giving the module's PostgreSQL server, started on first use (or the test skipped
    saying why); stopped after the module."""
    holder = []

    def get():
        if not holder:
            holder.append(started_postgres(tmp_path_factory.mktemp("pg")))
        return holder[0]
    yield get
    if holder:
        holder[0].stop()


def module_service(name, *args, then=None):
    """A module-scoped fixture ``svc``: a service of that module on each database in turn, started
    with ``args`` (``then(svc)`` after its start), closed after the module's tests."""
    @pytest.fixture(scope="module", params=DATABASES)
    def svc(request, tmp_path_factory, postgres_server):
        service = start_service(tmp_path_factory.mktemp(f"{name}-{request.param}"), request.param, postgres_server,
                                args=args)
        if then is not None:
            then(service)
        yield service
        service.close()
    return svc


def start_service(root, database, postgres, workers=0, args=(), env=None):
    """A started Service on ``database`` (sqlite: its own file; postgresql: a new database of the
    module's server); ``svc.db_url`` is what ``records``/``chunks`` take (None: the SQLite file)."""
    extra = dict(env or {})
    url = None
    if database == "postgresql":
        url = postgres().create_database(f"h{secrets.token_hex(6)}")
        extra["ECE408_DB"] = url
    svc = Service(root, workers=workers, args=list(args), env=extra)
    svc.db_url = url
    svc.database = database
    return svc.start()


def remote_worker(svc, name, *args, timeout=60):
    """A ``worker --server`` process (bubblewrap, CPU slots) of its own worker token, its log in
    worker-NAME.log, once it says it is ready."""
    log = svc.root / f"worker-{name}.log"
    proc = svc.worker(svc.worker_token(name), *BUBBLEWRAP, *args, log_name=log.name)
    deadline = time.monotonic() + timeout
    while "worker.ready" not in (log.read_text(errors="replace") if log.exists() else ""):
        assert proc.poll() is None, f"the worker exited ({proc.returncode}): {log.read_text(errors='replace')}"
        assert time.monotonic() < deadline, f"the worker did not start in {timeout} s"
        time.sleep(0.2)
    return proc


def db_path(svc):
    """The database a test opens beside the server: the PostgreSQL URL or the SQLite file."""
    return svc.db_url or svc.sqlite_path


# ---------------------------------------------------------------------------- uploads

def member(name, data=b"x", kind=tarfile.REGTYPE, link="", pax=None, mode=0o644):
    """(TarInfo, data) of one entry, any name, type and PAX header."""
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    info.size = len(data) if kind in (tarfile.REGTYPE, tarfile.AREGTYPE) else 0
    if pax:
        info.pax_headers = dict(pax)
    return info, data if kind in (tarfile.REGTYPE, tarfile.AREGTYPE) else None


def folder(name):
    return member(name, kind=tarfile.DIRTYPE, mode=0o755)


def tar_gz(members, fmt=tarfile.GNU_FORMAT, trailer=b"", level=6):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=fmt) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return gzip.compress(raw.getvalue(), compresslevel=level, mtime=0) + trailer


def development(*members, fmt=tarfile.GNU_FORMAT):
    """A development upload: a valid rai_build.yml, then ``members``."""
    return tar_gz([member("rai_build.yml", CONFIG), *members], fmt)


def bomb_upload(entries=9_890, each=6_600):
    """A development upload within every cap of the service that costs it most to check: about
    ``entries`` files of ``each`` zero bytes (about 63 MiB unpacked, under 200 KB sent), in 99
    folders: with them, under the 10,000 entries an upload may hold."""
    zeros = b"\0" * each
    return tar_gz([member("rai_build.yml", CONFIG)] + [member(f"d{i // 100}/f{i}", zeros) for i in range(entries)],
                  level=9)


# ---------------------------------------------------------------------------- the worker protocol by hand

class Worker:
    """A worker token's calls, each returning the response (nothing asserted): what a forged,
    late or replaying worker sends."""

    def __init__(self, svc, name=None):
        self.token = svc.worker_token(name or f"w{secrets.token_hex(3)}")
        self.http = httpx.Client(base_url=svc.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=60)

    def close(self):
        self.http.close()

    def claim(self, wait=0, gpu=False, slot="s0"):
        """The claim (job and lease) or None (204)."""
        answer = self.http.post("/api/worker/claim", json={"slot": slot, "gpu": gpu, "device": "AMD EPYC",
                                                          "wait": wait})
        assert answer.status_code in (200, 204), answer.text
        return answer.json() if answer.status_code == 200 else None

    def call(self, claim_or_id, what, lease=None, body=None, method="POST"):
        job_id = claim_or_id if isinstance(claim_or_id, str) else claim_or_id["job"]["id"]
        lease = lease if lease is not None else (None if isinstance(claim_or_id, str) else claim_or_id["lease"])
        headers = {"X-Lease": lease} if lease is not None else {}
        if body is None:
            return self.http.request(method, f"/api/worker/jobs/{job_id}/{what}", headers=headers)
        return self.http.request(method, f"/api/worker/jobs/{job_id}/{what}",           # NaN and infinity as sent
                                 headers={**headers, "Content-Type": "application/json"},
                                 content=json.dumps(body, allow_nan=True).encode())

    def lines(self, claim, texts, first=None):
        seq = claim["job"]["next_seq"] if first is None else first
        return self.call(claim, "chunks", body={"chunks": [[seq + i, t] for i, t in enumerate(texts)]})

    def finish(self, claim, op_time=0.05, lease=None, status="ok"):
        """End the claimed job: a valid record where it is ranked."""
        job = claim["job"]
        record = None
        if job["kind"] == "ranked":
            record = record_of({**job, "files": []}, [[op_time / 2], [op_time / 2]])
        return self.call(claim, "finish", lease=lease, body={"status": status, "exit_code": 0, "reason": None,
                                                             "record": record})


def stored_build(svc, token, archive, worker=None):
    """A development run of ``token``'s team, claimed by a worker of this test (the only job
    waiting), its build folder ``archive`` (a tar.gz) sent and kept, the job ended ok: its id."""
    own = worker is None
    worker = worker or Worker(svc)
    try:
        job_id = submit_development(svc, token).json()["id"]
        claim = worker.claim(wait=5)
        assert claim is not None and claim["job"]["id"] == job_id, claim
        answer = worker.http.post(f"/api/worker/jobs/{job_id}/build", headers={"X-Lease": claim["lease"]},
                                  content=archive)
        assert answer.status_code == 200, answer.text
        ended = worker.call(claim, "finish", body={"status": "ok", "exit_code": 0, "reason": None, "record": None})
        assert ended.status_code == 200, ended.text
        return job_id
    finally:
        if own:
            worker.close()


def submit_ranked(svc, token, size=100, key=None):
    headers = {"Idempotency-Key": key} if key else {}
    with svc.http(token) as http:
        return http.post("/api/jobs", params={"kind": "ranked", "milestone": "m2", "size": size},
                         content=ranked_upload(), headers=headers)


def submit_development(svc, token, body=None, key=None):
    headers = {"Idempotency-Key": key} if key else {}
    with svc.http(token) as http:
        return http.post("/api/jobs", content=body or development(), headers=headers)


# ---------------------------------------------------------------------------- the ranking, everywhere

def ranked_teams_api(svc, fmt, token=None, size=100):
    """The team names ``/api/ranking?format=fmt`` ranks on m2 (the instructor's view by default)."""
    with svc.http(token or svc.instructor_token) as http:
        answer = http.get("/api/ranking", params={"milestone": "m2", "size": size, "format": fmt})
    assert answer.status_code == 200, answer.text
    return ranked_teams_of(answer.text, fmt)


def ranked_teams_of(text, fmt):
    if fmt == "json":
        return {r["team"] for r in json.loads(text)["ranking"]}
    if fmt == "csv":
        import csv
        rows = list(csv.reader(io.StringIO(text)))
        return {r[1] for r in rows[1:] if r and r[0]}
    teams = set()
    for line in text.splitlines():
        cells = line.split()
        if len(cells) > 2 and cells[0].isdigit():
            teams.add(cells[1])
    return teams


def page_ranked_teams(svc, cookie, size=100):
    """The team names of the ranking page's rows (m2)."""
    answer = httpx.get(svc.url + "/", params={"milestone": "m2", "size": size}, cookies={"ece408_session": cookie},
                       timeout=30)
    assert answer.status_code == 200, answer.text[:500]
    return {re.sub(r"\s*<span.*", "", t).strip() for t in re.findall(r'<td class="team">(.*?)</td>', answer.text, re.S)}


def admin_csv_ranked(svc, cookie, size=100):
    """(the ranked team names, every row) of the instructor's CSV export (m2)."""
    import csv
    answer = httpx.get(svc.url + "/admin/ranking.csv", params={"milestone": "m2", "size": size},
                       cookies={"ece408_session": cookie}, timeout=30)
    assert answer.status_code == 200, answer.text[:500]
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    return {r["team"] for r in rows if r["rank"]}, rows


def ranked_everywhere(svc, size=100):
    """{where: the team names ranked there} on m2: /api/ranking as table, CSV and JSON, the
    ranking page, the instructor's CSV, ``ranking --server`` and the local ``ranking`` on the
    service's database (what ``grade`` prints)."""
    cookie = login(svc.url, svc.instructor_token)
    found = {f"/api/ranking {fmt}": ranked_teams_api(svc, fmt, size=size) for fmt in ("table", "csv", "json")}
    found["the ranking page"] = page_ranked_teams(svc, cookie, size)
    found["the instructor's CSV"] = admin_csv_ranked(svc, cookie, size)[0]
    server = svc.cli("ranking", "--milestone", "m2", "--size", size, "--json", token=svc.instructor_token)
    assert server.returncode == 0, server.stderr
    found["ranking --server"] = ranked_teams_of(server.stdout, "json")
    local = svc.cli("ranking", "--milestone", "m2", "--size", size, "--json", "--db", db_path(svc),
                    env={"ECE408_SERVER": ""})
    assert local.returncode == 0, local.stderr
    found["ranking (local, as grade)"] = ranked_teams_of(local.stdout, "json")
    return found


# ---------------------------------------------------------------------------- the pages

def login(url, token, source=None):
    """The session cookie the login form gives ``token`` (from the loopback address ``source``)."""
    transport = httpx.HTTPTransport(local_address=source) if source else None
    with httpx.Client(base_url=url, timeout=30, transport=transport) as http:
        form = http.get("/login")
        pair = re.search(r'name="login" value="([^"]+)"', form.text).group(1)
        answer = http.post("/login", data={"token": token, "login": pair})
        assert answer.status_code == 303, answer.text[:500]
        return answer.cookies["ece408_session"]


def csrf_of(url, cookie, path="/team"):
    page = httpx.get(url + path, cookies={"ece408_session": cookie}, timeout=30)
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    return found.group(1) if found else None


# ---------------------------------------------------------------------------- live streams

class EventStream(threading.Thread):
    """A live stream (server-sent events) read in a thread: its status, its events as
    (monotonic time, event, data), and when the server ended it."""

    def __init__(self, url, path, token=None, cookie=None, params=None, headers=None, source=None):
        super().__init__(daemon=True)
        self.url, self.path, self.params = url, path, params
        self.headers = {**({"Authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
        self.cookies = {"ece408_session": cookie} if cookie else None
        self.source = source
        self.status, self.events, self.ended_at, self.error = None, [], None, None
        self.opened = threading.Event()
        self.client = None

    def run(self):
        transport = httpx.HTTPTransport(local_address=self.source) if self.source else None
        try:
            with httpx.Client(base_url=self.url, timeout=httpx.Timeout(10, read=120), transport=transport,
                              cookies=self.cookies) as client:
                self.client = client
                with client.stream("GET", self.path, params=self.params, headers=self.headers) as response:
                    self.status = response.status_code
                    self.opened.set()
                    for event, data, _ in sse_events(response.iter_lines()):
                        self.events.append((time.monotonic(), event, data))
        except Exception as exc:                       # noqa: BLE001  the stream's end, whatever it was
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.ended_at = time.monotonic()
            self.opened.set()

    def texts(self, event="line"):
        return "".join(json.loads(d) for _, e, d in self.events if e == event)


def open_streams(streams, timeout=15):
    for s in streams:
        s.start()
    for s in streams:
        assert s.opened.wait(timeout), f"{s.path} did not answer in {timeout} s"
    return streams


# ---------------------------------------------------------------------------- raw sockets

def parse_response(raw):
    """(status, {header: value}, body) of the bytes of an HTTP/1.1 response; (None, {}, b"") where
    none came."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    if not lines or not lines[0].startswith(b"HTTP/"):
        return None, {}, b""
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return status, headers, body


def exchange(url, payload, timeout=10.0, source=None, pause_after=None, pause=0.0):
    """Send ``payload`` (bytes: a whole request, written by hand) on a new connection and read the
    answer until the server closes, a response with its Content-Length is whole, or ``timeout``;
    (status or None, headers, body, seconds to the first byte or None)."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout,
                                    source_address=(source, 0) if source else None)
    started = time.monotonic()
    first = None
    data = b""
    try:
        try:                                 # a server may answer (and close) before the body is all sent
            if pause_after is not None:
                sock.sendall(payload[:pause_after])
                time.sleep(pause)
            sock.sendall(payload[pause_after or 0:])
        except OSError:
            pass
        deadline = started + timeout
        while time.monotonic() < deadline:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                break
            except OSError:
                break
            if not chunk:
                break
            first = first if first is not None else time.monotonic() - started
            data += chunk
            if whole(data):
                break
    finally:
        sock.close()
    status, headers, body = parse_response(data)
    return status, headers, body, first


def whole(data):
    """Whether ``data`` holds a whole response: its headers and the body they announce."""
    if b"\r\n\r\n" not in data:
        return False
    status, headers, body = parse_response(data)
    if status is None:
        return False
    if status in (204, 304) or 100 <= status < 200:
        return True
    if "content-length" in headers:
        return len(body) >= int(headers["content-length"])
    return headers.get("transfer-encoding", "").lower() == "chunked" and body.endswith(b"0\r\n\r\n")


def request_bytes(method, path, host="127.0.0.1", headers=None, body=b""):
    target = "".join(c if ord(c) < 128 else "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))
                     for c in path)                     # non-ASCII as UTF-8, percent-encoded
    lines = [f"{method} {target} HTTP/1.1".encode("ascii"), f"Host: {host}".encode()]
    for name, value in (headers or {}).items():
        lines.append((name.encode("latin-1") if isinstance(name, str) else name) + b": " +
                     (value.encode("latin-1") if isinstance(value, str) else value))
    if body is not None and "Content-Length" not in (headers or {}):
        lines.append(f"Content-Length: {len(body)}".encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")


class Flood:
    """``count`` connections to the service, from the loopback addresses ``sources`` in turn, each
    sending ``payload`` at once (or, with ``trickle``, its first bytes now and a header line at
    each ``trickle_step``). ``poll`` reads what came back: the status each got, which the server
    closed."""

    def __init__(self, url, count, payload, sources=("127.0.0.2",), trickle=False, rcvbuf=None):
        parts = urlsplit(url)
        self.address = (parts.hostname, parts.port)
        self.count, self.payload, self.sources, self.trickle = count, payload, sources, trickle
        self.rcvbuf = rcvbuf                      # bytes of receive buffer: a client that reads slowly
        self.socks, self.data, self.closed, self.failed = [], {}, set(), 0
        self.selector = selectors.DefaultSelector()

    def open(self, spread=0.0, send=True):
        """Open the connections (each sending its payload, unless ``send`` is False: ``send_all``)."""
        for i in range(self.count):
            sock = socket.socket()
            if self.rcvbuf:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
            sock.bind((self.sources[i % len(self.sources)], 0))
            sock.settimeout(5)
            try:
                sock.connect(self.address)
                if send:
                    sock.sendall(self.payload[:40] if self.trickle else self.payload)
            except OSError:
                self.failed += 1
                sock.close()
                continue
            sock.setblocking(False)
            self.socks.append(sock)
            self.data[sock] = b""
            self.selector.register(sock, selectors.EVENT_READ)
            if spread:
                time.sleep(spread)
        return self

    def send_all(self, payloads=None):
        """Send each connection its payload (``payloads[i]``, else the flood's), one after the other
        as fast as the loop goes: requests that reach the server together."""
        for i, sock in enumerate(self.socks):
            try:
                sock.setblocking(True)
                sock.sendall(payloads[i] if payloads else self.payload)
                sock.setblocking(False)
            except OSError:
                self.closed.add(sock)

    def trickle_step(self, line=b"X-Slow: 1\r\n"):
        for sock in self.socks:
            if sock not in self.closed:
                try:
                    sock.send(line)
                except OSError:
                    self.closed.add(sock)

    def poll(self, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for key, _ in self.selector.select(timeout=max(0.01, min(0.2, deadline - time.monotonic()))):
                sock = key.fileobj
                try:
                    chunk = sock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    self.closed.add(sock)
                    self.selector.unregister(sock)
                elif len(self.data[sock]) < 4096:
                    self.data[sock] += chunk
        return self

    def statuses(self):
        """Counter of the statuses answered (None: nothing yet)."""
        return Counter(parse_response(self.data[s])[0] for s in self.socks)

    def retry_after_missing(self, refused=(429, 503)):
        """How many refusals came without a Retry-After header."""
        return sum(1 for s in self.socks if parse_response(self.data[s])[0] in refused
                   and "retry-after" not in parse_response(self.data[s])[1])

    def still_open(self):
        return sum(1 for s in self.socks if s not in self.closed)

    def close(self):
        for sock in self.socks:
            try:
                self.selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()
        self.socks = []
        self.selector.close()


# ---------------------------------------------------------------------------- the server process

def proc_stat(pid):
    """The fields of /proc/PID/stat after the command's name (state first, then ppid, ...)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def proc_kib(pid, key="VmHWM"):
    """A value of /proc/PID/status in KiB (VmHWM: the peak resident memory; VmRSS: now)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def reset_peak(pid):
    """Start VmHWM again from the process's resident memory now (Linux: clear_refs 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def open_descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def limit_open_files(svc, limit):
    """The server's open files limited to ``limit`` (soft and hard), as a small class server has them."""
    import subprocess
    out = subprocess.run(["prlimit", "--pid", str(svc.proc.pid), f"--nofile={limit}:{limit}"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def hold_writes(svc, seconds, held, release=None):
    """Another session holding the service's writes (PostgreSQL: ``LOCK TABLE service_jobs IN
    EXCLUSIVE MODE``; SQLite: a write transaction) for ``seconds``, or until ``release`` (an Event)
    is set; ``held`` (an Event) is set once it holds them."""
    release = release or threading.Event()
    if svc.db_url:
        import psycopg
        with psycopg.connect(svc.db_url) as conn:
            conn.execute("LOCK TABLE service_jobs IN EXCLUSIVE MODE")
            held.set()
            release.wait(seconds)
            conn.rollback()
    else:
        import sqlite3
        conn = sqlite3.connect(db_path(svc), timeout=60, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        release.wait(seconds)
        conn.execute("ROLLBACK")
        conn.close()


def timed(method, url, path, token=None, cookie=None, timeout=10.0, source=None, **kwargs):
    """(status or the transport error's name, seconds) of one request on a new connection."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = httpx.HTTPTransport(local_address=source) if source else None
    started = time.monotonic()
    try:
        with httpx.Client(base_url=url, timeout=timeout, transport=transport,
                          cookies={"ece408_session": cookie} if cookie else None) as http:
            answer = http.request(method, path, headers=headers, **kwargs)
            return answer.status_code, time.monotonic() - started
    except httpx.HTTPError as exc:
        return type(exc).__name__, time.monotonic() - started


def bystander_during(svc, token, attackers, timeout=200):
    """Run the threads ``attackers`` (not started yet) to their end while another team asks for
    its jobs in a loop: [(status, seconds)] of that team's requests meanwhile."""
    during, done = [], threading.Event()

    def ask():
        while not done.is_set():
            during.append(timed("GET", svc.url, "/api/jobs", token=token, timeout=30))
            time.sleep(0.05)
    watcher = threading.Thread(target=ask)
    watcher.start()
    for t in attackers:
        t.start()
    for t in attackers:
        t.join(timeout)
    done.set()
    watcher.join(60)
    return during


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))] if ordered else None


def tracebacks(log):
    """The server log's lines that tell of an unhandled error (what a 4xx should have been)."""
    return [line[:300] for line in log.splitlines() if TRACEBACK.search(line)]


def is_error_body(status, headers, body):
    """A 4xx/5xx answer in the service's forms: a JSON object with its one-line "error", or a page."""
    kind = headers.get("content-type", "")
    if kind.startswith("application/json"):
        try:
            data = json.loads(body)
        except ValueError:
            return False
        return isinstance(data, dict) and isinstance(data.get("error"), str) and "\n" not in data["error"]
    return kind.startswith("text/html")
