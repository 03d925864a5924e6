"""The submission service as the tests meet it: a real ``serve`` on a free loopback port, real
workers, the real client commands, each in its own process with its own folders (XDG state,
data and config under the test's folder), stopped afterwards by their process ids."""
import json
import os
import re
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from suitekit import ROOT, python_command
from services import Postgres, Unavailable, free_port

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (debug|info|warning|error) [a-z_.]+( |$)")


def service_env(root, extra=None):
    root = Path(root)
    env = {**os.environ, "XDG_STATE_HOME": str(root / "state"), "XDG_DATA_HOME": str(root / "data"),
           "XDG_CONFIG_HOME": str(root / "config"), "ECE408_MODEL_DIR": str(ROOT / "models")}
    for name in ("ECE408_SERVER", "ECE408_TOKEN", "ECE408_TOKEN_FILE", "ECE408_DB", "ECE408_INSTRUCTOR_TOKEN"):
        env.pop(name, None)
    env.update(extra or {})
    return env


def wait_until(check, timeout, what):
    """Poll ``check()`` every 0.2 s until it is true; AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen in {timeout} s")


class Service:
    """``python -m ece408_op serve`` in ``root`` (its log in root/serve-N.log)."""

    def __init__(self, root, workers=1, args=(), env=None, port=None):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workers = workers
        self.args = list(args)
        self.env = service_env(self.root, env)
        self.proc = None
        self.wrap = []                                    # a command the server runs under (prlimit ...)
        self.starts = 0
        self.others = []                                  # workers and clients started here

    # ------------------------------------------------------------ the server
    def start(self, timeout=90):
        self.starts += 1
        self.log_path = self.root / f"serve-{self.starts}.log"
        argv = [*self.wrap, *python_command(), "-m", "ece408_op", "serve", "--port", str(self.port),
                "--workers", str(self.workers), *self.args]
        self.log_file = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, env=self.env, stdout=self.log_file, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.root)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    if self.workers:
                        self.wait_for_log("worker.ready", timeout=max(5, deadline - time.monotonic()))
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"serve did not answer in {timeout} s:\n{self.log()}")

    def log(self, which=None):
        paths = sorted(self.root.glob("serve-*.log")) if which is None else [self.root / f"serve-{which}.log"]
        return "".join(p.read_text(errors="replace") for p in paths)

    def wait_for_log(self, text, timeout=60, count=1):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.log().count(text) >= count:
                return
            time.sleep(0.2)
        raise AssertionError(f"{text!r} not seen {count} time(s) in the log in {timeout} s:\n{self.log()[-4000:]}")

    def stop(self, sig=signal.SIGTERM, timeout=90):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self.log_file.close()

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        self.log_file.close()

    def close(self):
        for proc in self.others:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if self.proc is not None and self.proc.poll() is None:
            self.stop(timeout=60)

    # ------------------------------------------------------------ tokens and HTTP
    @property
    def instructor_token(self):
        return (self.root / "state" / "ece408_op" / "service" / "instructor.token").read_text().strip()

    def http(self, token=None, timeout=30):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def admin(self, method, path, **kwargs):
        with self.http(self.instructor_token) as client:
            return client.request(method, path, **kwargs)

    def add_teams(self, *names):
        """{name: token} of new teams."""
        answer = self.admin("POST", "/api/admin/teams", json={"names": list(names)})
        assert answer.status_code == 200, answer.text
        return {t["name"]: t["token"] for t in answer.json()["teams"]}

    def worker_token(self, name="remote"):
        answer = self.admin("POST", "/api/admin/workers", json={"name": name})
        assert answer.status_code == 200, answer.text
        return answer.json()["token"]

    # ------------------------------------------------------------ commands
    def command(self, *args, token=None, cwd=None, env=None):
        """argv and environment of ``python -m ece408_op ARGS`` against this service."""
        extra = {"ECE408_SERVER": self.url, **({"ECE408_TOKEN": token} if token else {}), **(env or {})}
        return [*python_command(), "-m", "ece408_op", *map(str, args)], {**self.env, **extra}, cwd or self.root

    def cli(self, *args, token=None, cwd=None, env=None, timeout=600, input=None):
        argv, environment, folder = self.command(*args, token=token, cwd=cwd, env=env)
        return subprocess.run(argv, env=environment, cwd=folder, capture_output=True, text=True, timeout=timeout,
                              input=input)

    def follow(self, *args, token=None, cwd=None):
        """A Follower of ``python -m ece408_op ARGS``."""
        return Follower(self.popen(*args, token=token, cwd=cwd))

    def popen(self, *args, token=None, cwd=None, env=None, **kwargs):
        argv, environment, folder = self.command(*args, token=token, cwd=cwd, env=env)
        proc = subprocess.Popen(argv, env=environment, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, **kwargs)
        self.others.append(proc)
        return proc

    def worker(self, token, *args, log_name="worker.log", wrap=()):
        """A ``worker --server`` process with its own log file (run under ``wrap``: nice ...)."""
        argv = [*wrap, *python_command(), "-m", "ece408_op", "worker", "--server", self.url, *args]
        log = open(self.root / log_name, "ab")
        proc = subprocess.Popen(argv, env={**self.env, "ECE408_TOKEN": token}, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=self.root)
        log.close()
        self.others.append(proc)
        return proc

    def job(self, job_id):
        answer = self.admin("GET", f"/api/jobs/{job_id}")
        assert answer.status_code == 200, answer.text
        return answer.json()

    def jobs(self):
        return self.admin("GET", "/api/jobs", params={"limit": 1000}).json()["jobs"]

    def transcript(self, job_id):
        return self.admin("GET", f"/api/jobs/{job_id}/transcript").text

    def wait_for_state(self, job_id, states, timeout=300):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job["state"] in states:
                return job
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} not {states} in {timeout} s: {job}\n{self.log()[-3000:]}")

    def wait_for_text(self, job_id, text, timeout=300):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.transcript(job_id):
                return
            time.sleep(0.2)
        raise AssertionError(f"{text!r} not in job {job_id}'s transcript in {timeout} s:\n"
                             f"{self.transcript(job_id)[-3000:]}\n{self.log()[-3000:]}")

    @property
    def sqlite_path(self):
        """The server's SQLite database where $ECE408_DB names none (under its XDG data folder)."""
        return str(self.root / "data" / "ece408_op" / "service.db")

    def chunks(self, db=None):
        """(job id, text, time stored) of every transcript chunk."""
        if db and db.startswith("postgresql://"):
            import psycopg
            with psycopg.connect(db) as conn:
                return conn.execute("SELECT job_id, text, at FROM service_chunks").fetchall()
        import sqlite3
        with sqlite3.connect(db or self.sqlite_path) as conn:
            return conn.execute("SELECT job_id, text, at FROM service_chunks").fetchall()

    def records(self, db=None):
        from ece408_op.grading.store import open_store
        with open_store(db or self.sqlite_path) as store:
            return store.records()


PG_CONNECTIONS = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                  "AND pid <> pg_backend_pid()")


def postgres_connections(conn):
    """Connections to ``conn``'s database as PostgreSQL sees them, ``conn`` itself left out."""
    return conn.execute(PG_CONNECTIONS).fetchone()[0]


def sqlite_connections(path, pid="self"):
    """Process ``pid``'s open descriptors of the SQLite file ``path`` (one a connection)."""
    target = str(Path(path).resolve())
    return sum(1 for fd in Path(f"/proc/{pid}/fd").iterdir() if _link(fd) == target)


def _link(path):
    try:
        return os.readlink(path)
    except OSError:                       # closed between the listing and the look
        return ""


def started_postgres(root):
    """A PostgreSQL server of the tests (tests/services.py) in ``root``, or the test skipped saying why."""
    server = Postgres(root)
    try:
        return server.start()
    except Unavailable as exc:
        pytest.skip(str(exc))


@contextmanager
def service_on(database, root, **kwargs):
    """A started Service (``kwargs``: Service's) whose database is SQLite (``database`` "sqlite") or
    a PostgreSQL server started for it in ``root`` ("postgresql"); both stopped afterwards."""
    root = Path(root)
    pg = started_postgres(root / "pg") if database == "postgresql" else None
    env = {**kwargs.pop("env", {}), **({"ECE408_DB": pg.url} if pg else {})}
    service = Service(root / "svc", env=env, **kwargs).start()
    try:
        yield service
    finally:
        service.close()
        if pg is not None:
            pg.stop()


class Follower:
    """A client command that follows a job, its stdout read as it comes: ``lines`` and the
    monotonic ``times`` they arrived at."""

    def __init__(self, proc):
        self.proc, self.lines, self.times = proc, [], []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            self.times.append(time.monotonic())
            self.lines.append(line)

    def wait_for(self, check, timeout=120, what="the line"):
        deadline = time.monotonic() + timeout
        while not check(self.lines):
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not come in {timeout} s: {''.join(self.lines)[-2000:]}")
            time.sleep(0.1)

    def finish(self, timeout=300):
        """(exit status, stderr) once it ends."""
        code = self.proc.wait(timeout=timeout)
        self.thread.join(10)
        return code, self.proc.stderr.read()

    @property
    def text(self):
        return "".join(self.lines)


def job_id_of(stderr):
    found = re.findall(r"\* Job ([0-9a-f]{32}) accepted", stderr)
    assert found, stderr
    return found[-1]


def log_lines_are_structured(text):
    """Every line of a service log: ``<UTC time> <level> <event> key=value...``."""
    bad = [line for line in text.splitlines() if line and not LOG_LINE.match(line)]
    return bad


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]
