"""``serve``: the HTTP application on uvicorn, the class's tokens, and the workers it starts.

One command starts a whole class service on one machine: the server on ``--host``/``--port``
(the loopback address by default: put a TLS reverse proxy in front of it, docs/service.md),
the database (``$ECE408_DB``, else a SQLite file of its own), ``--workers N`` local worker
processes (one per GPU; on a machine without one, CPU slots for m2 and CPU development runs), or
with ``--slurm`` one Slurm job per queued job (``slurm.py``).

Secrets: the instructor's token is read from ``$ECE408_INSTRUCTOR_TOKEN`` or its file (made,
mode 600, on the first start); the local workers' token is made at each start and handed to them
in their environment; a PostgreSQL password comes in ``$ECE408_DB`` (or libpq's own files), never
on the command line, which ``ps`` shows to every user of the machine.

SIGTERM (or Ctrl-C): the server stops handing out jobs, asks its workers to stop (each gives its
job back to the queue, not counted as an attempt), waits for them, ends the live streams and
exits 0; the queue, the transcripts and the records are in the database. A second signal stops
at once. After kill -9, the next start takes the jobs its dead workers held back into the queue
(``jobs.restarted``).
"""
import fcntl
import os
import signal
import socket
import stat
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import capacity, clock
from .app import make_app
from .db import Database, Unavailable, first_line
from ..base.extras import install_hint
from .errors import ServeError
from .guard import ACCEPT_BURST, HEADER_SECONDS, QUEUE, Guard, deepen_queue, protocol_class
from .jobrun import PARENT_ENV
from .logs import log, set_level, uvicorn_log_config
from .paths import default_db, default_state_dir, instructor_token_file
from .state import Service, Settings
from ..base.terms import looks_like_token
from .tokens import INSTRUCTOR, new_token

INSTRUCTOR_ENV = "ECE408_INSTRUCTOR_TOKEN"
TOKEN_ENV = "ECE408_TOKEN"
DEFAULT_PORT = 8408
SERVE_LOCK_KEY = 408434                   # PostgreSQL session advisory lock: one serve a database


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    db: str = None                            # None: $ECE408_DB, else default_db()
    db_connections: int = None                # None: $ECE408_DB_CONNECTIONS, else db.pool_size()
    state_dir: str = None                     # None: default_state_dir()
    instructor_token_file: str = None         # None: <state dir>/instructor.token
    workers: int = None                       # local worker processes (None: one per GPU, else 1)
    worker_args: list = field(default_factory=list)      # passed to each local worker (engine, scratch...)
    settings: Settings = field(default_factory=Settings)
    forwarded_allow_ips: str = None           # behind a reverse proxy: its address(es)
    drain_seconds: float = 60.0
    header_seconds: float = HEADER_SECONDS    # a connection's request headers must arrive within this
    log_level: str = "info"
    slurm: object = None                      # slurm.SlurmOptions, or None


def read_secret_file(path, what):
    """A token from ``path``: a regular file only its owner can read; ServeError otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ServeError(f"cannot read the {what} file {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd) as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ServeError(f"the {what} file {path} is not a regular file")
        if info.st_mode & 0o077:
            raise ServeError(f"the {what} file {path} can be read by others (mode {stat.S_IMODE(info.st_mode):o}); "
                             f"chmod 600 {path}")
        text = f.read(4096).strip()
    if not looks_like_token(text):
        raise ServeError(f"the {what} file {path} does not hold a token of this service")
    return text


def write_secret_file(path, text):
    """Write ``text`` to a new file ``path`` with mode 600 (never over an existing file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")


def instructor_token(options):
    """(token, where it came from): $ECE408_INSTRUCTOR_TOKEN, else its file (made on first use)."""
    if os.environ.get(INSTRUCTOR_ENV):
        text = os.environ[INSTRUCTOR_ENV].strip()
        if not looks_like_token(text):
            raise ServeError(f"${INSTRUCTOR_ENV} does not hold a token of this service")
        return text, f"${INSTRUCTOR_ENV}"
    path = Path(options.instructor_token_file or instructor_token_file(options.state_dir))
    if not path.exists():
        write_secret_file(path, new_token()[2])
        log("instructor.token_made", file=str(path))
    return read_secret_file(path, "instructor token"), str(path)


class LocalWorkers:
    """The ``--workers N`` processes: started, restarted where one dies, stopped on drain."""

    def __init__(self, url, token, slots, args):
        self.url, self.token, self.slots, self.args = url, token, slots, args
        self.procs = {}
        self.stopping = False
        self.lock = threading.Lock()

    def argv(self, slot, gpu):
        from ..base.processes import python_command
        return [*python_command(), "-m", "ece408_op", "worker", "--server", self.url, "--slot", slot,
                "--gpus", gpu if gpu is not None else "none", *self.args]

    def start_one(self, slot, gpu):
        env = {**os.environ, TOKEN_ENV: self.token, PARENT_ENV: str(os.getpid())}   # the worker dies with the server
        for name in (INSTRUCTOR_ENV, "ECE408_DB", "ECE408_TOKEN_FILE"):
            env.pop(name, None)                     # a worker holds no database credentials
        proc = subprocess.Popen(self.argv(slot, gpu), env=env, stdin=subprocess.DEVNULL, start_new_session=True)
        proc.started = time.monotonic()
        self.procs[slot] = (proc, gpu)
        log("worker.started", slot=slot, pid=proc.pid, gpu=gpu)

    def start(self):
        with self.lock:
            for slot, gpu in self.slots:
                self.start_one(slot, gpu)
        threading.Thread(target=self._watch, name="local-workers", daemon=True).start()

    def _watch(self):
        """Start again a worker that died; one that dies within a minute of its start waits
        longer each time (up to 5 minutes), so that a worker that cannot start does not spin."""
        failures, due = {}, {}
        while True:
            time.sleep(1)
            with self.lock:
                if self.stopping:
                    return
                now = time.monotonic()
                for slot, (proc, gpu) in list(self.procs.items()):
                    if proc.poll() is None:
                        continue
                    if slot not in due:
                        failures[slot] = failures.get(slot, 0) + 1 if now - proc.started < 60 else 0
                        due[slot] = now + min(300, 2 ** failures[slot])
                        log("worker.died", level="warning", slot=slot, code=proc.returncode,
                            restart_in=round(due[slot] - now))
                    if now >= due[slot]:
                        del due[slot]
                        self.start_one(slot, gpu)

    def stop(self, seconds):
        """SIGTERM to every worker (each gives its job back), then SIGKILL to those left."""
        with self.lock:
            self.stopping = True
            procs = [p for p, _ in self.procs.values()]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + seconds
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def local_slots(count, gpus):
    """[(slot name, GPU index or None)]: one slot per GPU, else CPU slots."""
    if gpus:
        if count is not None and count > len(gpus):
            raise ServeError(f"--workers {count}: this machine has {len(gpus)} GPU(s), and ranked timings need "
                             "one job per GPU; give at most that many")
        return [(f"gpu{g}", g) for g in gpus[:count or len(gpus)]]
    return [(f"cpu{i}", None) for i in range(1 if count is None else count)]


class ServeLock:
    """One ``serve`` per database: held for the server's life, released by its end however it
    ends (kill -9 included). SQLite: an exclusive flock on ``<database>-serve.lock`` beside the
    file; PostgreSQL: a session advisory lock on a connection of its own (a restart of PostgreSQL
    ends that session, and with it the lock). ServeError (one line) where another ``serve``
    holds it."""

    def __init__(self, db):
        self.db, self.fd, self.conn = db, None, None

    def take(self):
        if self.db.postgres:
            self._take_postgres()
        else:
            self._take_sqlite()
        return self

    def _busy(self):
        return ServeError(f"another serve uses the database {self.db.shown}; stop it first (one serve a database: "
                          "its local workers' token and the queue's leases are its own)")

    def _take_sqlite(self):
        path = Path(self.db.url)
        lock = path.with_name(path.name + "-serve.lock")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise ServeError(f"cannot open {lock}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            self.fd = None
            raise self._busy() from None

    def _take_postgres(self):
        try:
            import psycopg
        except ImportError:
            raise ServeError(f"$ECE408_DB is a PostgreSQL URL but psycopg is not installed; "
                             f"{install_hint('grade')}") from None
        try:
            self.conn = psycopg.connect(self.db.url, connect_timeout=30, autocommit=True)
            held = self.conn.execute("SELECT pg_try_advisory_lock(%s)", (SERVE_LOCK_KEY,)).fetchone()[0]
        except psycopg.Error as exc:
            self.release()
            raise ServeError(f"the database cannot be used: {first_line(exc)}") from None
        if not held:
            self.release()
            raise self._busy()

    def release(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:                           # noqa: BLE001  a connection already gone
                pass
            self.conn = None


def serve(options):
    """Run the service until SIGTERM/SIGINT; returns the exit status. The port is bound first
    and the database's serve lock taken next, so that a second ``serve`` on the same port or the
    same database stops in one line before it changes anything."""
    import uvicorn

    from .grading_door import device_name, gpu_indices
    clock.install_test_offset()                           # tests only: $ECE408_TEST_CLOCK_OFFSET_FILE
    clock.anchor()                                        # the service's clock starts from the wall clock now
    set_level(options.log_level)
    try:
        sock = bind(options.host, options.port)
    except OSError as exc:
        raise ServeError(f"cannot listen on {options.host}:{options.port}: {exc.strerror or exc}; "
                         "choose another --port") from None
    try:
        db = Database(options.db or os.environ.get("ECE408_DB") or default_db(), connections=options.db_connections)
    except ValueError as exc:
        sock.close()
        raise ServeError(str(exc)) from None
    lock = ServeLock(db)
    try:
        lock.take()
        db.schema_version()                                   # connect and migrate now: errors in one line
    except Unavailable as exc:
        sock.close()
        lock.release()
        raise ServeError(f"the database cannot be used: {exc}") from None
    except BaseException:
        sock.close()
        lock.release()
        raise
    try:
        return _serve(options, db, sock, uvicorn, gpu_indices, device_name)
    finally:
        lock.release()


def _serve(options, db, sock, uvicorn, gpu_indices, device_name):
    settings = options.settings
    if settings.build_dir is None:
        settings.build_dir = str(Path(options.state_dir or default_state_dir()) / "builds")
    if settings.upload_dir is None:
        settings.upload_dir = str(Path(options.state_dir or default_state_dir()) / "uploads")
    host_name = socket.gethostname()
    slots = local_slots(options.workers, gpu_indices()) if options.slurm is None else []
    local_name = f"{host_name}/local"
    settings.local_workers = tuple(f"{local_name}/{slot}" for slot, _ in slots)
    if options.slurm is not None:                            # what Slurm's requests serve, for capacity.check
        from .slurm import gets_gpu
        settings.slurm = capacity.Slurm(gets_gpu(options.slurm.gres), options.slurm.serves(),
                                        {k.kind: k.shown() for k in options.slurm.kinds}, f"{host_name}/slurm/")
    service = Service(db, settings)
    try:                                                     # its own workers count as seen from the start
        capacity.register(db, [(f"{local_name}/{slot}", gpu is not None, device_name(gpu)) for slot, gpu in slots])
    except Unavailable as exc:
        raise ServeError(f"the database cannot be used: {exc}") from None
    token, where = instructor_token(options)
    service.tokens.register("instructor", INSTRUCTOR, token)
    workers = None
    if slots:
        worker_token = new_token()[2]
        service.tokens.register("worker", local_name, worker_token)
    url = f"http://{'127.0.0.1' if options.host in ('0.0.0.0', '::', '') else options.host}:{options.port}"
    if ":" in options.host and not options.host.startswith("["):
        url = f"http://[{options.host}]:{options.port}"
    dispatcher = None
    if options.slurm is not None:
        from .slurm import SlurmDispatcher
        dispatcher = SlurmDispatcher(db, service, url, options.slurm, Path(options.state_dir or default_state_dir()))
    guard = Guard.for_this_process(reserved=db.connections + 4 * len(slots) + 16, header_seconds=options.header_seconds)
    config = uvicorn.Config(make_app(service), host=options.host, port=options.port, log_config=uvicorn_log_config(
        options.log_level), access_log=False, http=protocol_class(guard), loop="asyncio", lifespan="on",
        proxy_headers=options.forwarded_allow_ips is not None,
        forwarded_allow_ips=options.forwarded_allow_ips or "127.0.0.1", timeout_graceful_shutdown=10,
        timeout_keep_alive=30, server_header=False, backlog=ACCEPT_BURST)
    server = DrainingServer(config, service, options.drain_seconds)
    if slots:
        workers = LocalWorkers(url, worker_token, slots, options.worker_args)
        server.workers = workers
    server.dispatcher = dispatcher
    log("server.starting", url=url, db=db.shown, workers=len(slots), slurm=options.slurm is not None,
        instructor_token=where, connections=guard.budget)
    if workers is not None:
        workers.start()
    if dispatcher is not None:
        dispatcher.start()
    try:
        server.run(sockets=[sock])
    finally:
        if workers is not None and not workers.stopping:
            workers.stop(5)
        if dispatcher is not None:
            dispatcher.stop()
    log("server.stopped")
    return 0


def bind(host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(QUEUE)
    sock.set_inheritable(True)
    return sock


def _uvicorn_server():
    import uvicorn
    return uvicorn.Server


class DrainingServer(_uvicorn_server()):
    """uvicorn's server whose first SIGTERM/SIGINT drains (no new claims, workers give their
    jobs back) before it stops; a second one stops at once."""

    def __init__(self, config, service, drain_seconds):
        super().__init__(config)
        self.service = service
        self.drain_seconds = drain_seconds
        self.workers = None
        self.dispatcher = None
        self.draining = False

    async def startup(self, sockets=None):
        await super().startup(sockets=sockets)
        deepen_queue(sockets)

    def handle_exit(self, sig, frame):
        if self.draining:
            log("server.stop_now", signal=signal.Signals(sig).name)
            if self.workers is not None:
                for proc, _ in self.workers.procs.values():
                    if proc.poll() is None:
                        proc.kill()
            self._exit(force=True)
            return
        self.draining = True
        self.service.draining = True
        if self.service.loop is not None:
            self.service.loop.call_soon_threadsafe(self.service.hub.wake_all)     # waiting claims answer 204 now
        log("server.draining", signal=signal.Signals(sig).name)
        threading.Thread(target=self._drain, name="drain", daemon=True).start()

    def _drain(self):
        if self.dispatcher is not None:
            self.dispatcher.stop()
        if self.workers is not None:
            self.workers.stop(self.drain_seconds)
        self._exit()

    def _exit(self, force=False):
        try:
            from sse_starlette.sse import AppStatus
            AppStatus.should_exit = True                # end the live streams
        except ImportError:
            pass
        self.should_exit = True
        if force:
            self.force_exit = True

