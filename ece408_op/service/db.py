"""The service's tables, in the record store's own database: one SQLite file (one machine) or
PostgreSQL (a class). The queue lives here, beside the records, so that a restart loses nothing
and there is no second store to keep in step.

Connections are the store's (``open_store``: its runs table and migrations come along), from a
bounded pool (``Database``: at most ``serve --db-connections`` or ``$ECE408_DB_CONNECTIONS``,
default 32 for PostgreSQL, 8 for SQLite). The service's schema has its own migration list
(``MIGRATIONS``) and version table (``service_schema_version``), applied once per process in one
transaction under a lock (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: ``pg_advisory_xact_lock``).

Every operation is one transaction (``Database.transaction``); a PostgreSQL read's statements run
in autocommit (the same snapshots under READ COMMITTED, two round trips fewer). Writers lock rows,
never the database: PostgreSQL's ``FOR UPDATE`` on the rows a write changes (a team's, a job's),
``SKIP LOCKED`` where workers claim, so that two teams' writes proceed at once; SQLite has one
writer at a time (``BEGIN IMMEDIATE``). No advisory lock, table lock or lock in this process is
taken on the way to a write (the one advisory lock is the migrations'). A database that cannot be
reached (PostgreSQL down, a connection cut, SQLite locked past its busy timeout or out of disk)
raises ``Unavailable``: the HTTP layer answers 503 with a retry time; the transaction was rolled
back, so nothing is half-written, and its connection is closed rather than given back to the
pool, so the next request connects again: the service recovers by itself when the database is back.
"""
import os
import sqlite3
import threading
import time
from contextlib import contextmanager

from .grading_door import POSTGRES_PREFIXES, StoreError, describe, open_store, resolve_url

LOCK_KEY = 408433                         # pg_advisory_xact_lock key of the service's migrations
CONNECTIONS_ENV = "ECE408_DB_CONNECTIONS"
DEFAULT_CONNECTIONS = 32                  # PostgreSQL: under its default max_connections (100), room for the class's tools
SQLITE_CONNECTIONS = 8                    # SQLite: one writer at a time anyway; readers share the file
POOL_WAIT = 30.0                          # seconds a transaction waits for a free connection
IDLE_CHECK = 2.0                          # seconds after which an idle PostgreSQL connection is pinged before use
SQLITE_DOWN = ("locked", "busy", "disk", "unable to open", "readonly", "full", "i/o", "malformed")

MIGRATIONS = [
    # 1: teams, tokens, jobs (the queue), their uploads and transcript chunks, deadlines, workers
    ["""CREATE TABLE service_teams (
            name TEXT PRIMARY KEY,
            created_at DOUBLE PRECISION NOT NULL,
            last_started DOUBLE PRECISION)""",
     """CREATE TABLE service_tokens (
            id TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            name TEXT NOT NULL,
            secret_hash TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            revoked_at DOUBLE PRECISION)""",
     "CREATE INDEX service_tokens_owner ON service_tokens (kind, name)",
     """CREATE TABLE service_jobs (
            id TEXT PRIMARY KEY,
            team TEXT NOT NULL,
            kind TEXT NOT NULL,
            milestone TEXT,
            size INTEGER,
            gpu INTEGER NOT NULL,
            state TEXT NOT NULL,
            submitted_at DOUBLE PRECISION NOT NULL,
            started_at DOUBLE PRECISION,
            finished_at DOUBLE PRECISION,
            heartbeat_at DOUBLE PRECISION,
            time_limit DOUBLE PRECISION NOT NULL,
            attempts INTEGER NOT NULL,
            lease TEXT,
            worker TEXT,
            cancel_requested INTEGER NOT NULL,
            status TEXT,
            exit_code INTEGER,
            valid INTEGER,
            reason TEXT,
            summary TEXT,
            record_id TEXT,
            next_seq INTEGER NOT NULL,
            upload_bytes INTEGER NOT NULL,
            upload_sha256 TEXT NOT NULL,
            files TEXT NOT NULL)""",
     "CREATE INDEX service_jobs_queue ON service_jobs (state, team, submitted_at)",
     "CREATE INDEX service_jobs_team ON service_jobs (team, submitted_at)",
     "CREATE TABLE service_uploads (job_id TEXT PRIMARY KEY, data {blob} NOT NULL)",
     """CREATE TABLE service_chunks (
            job_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            text TEXT NOT NULL,
            at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (job_id, seq))""",
     """CREATE TABLE service_deadlines (
            milestone TEXT PRIMARY KEY,
            deadline DOUBLE PRECISION NOT NULL,
            shown TEXT NOT NULL)""",
     """CREATE TABLE service_workers (
            name TEXT PRIMARY KEY,
            gpu INTEGER NOT NULL,
            device TEXT,
            last_seen DOUBLE PRECISION NOT NULL)"""],
    # 2: the pages' sessions (the cookie's secret kept as its SHA-256, tied to the token that
    # opened it: revoking or rotating that token ends them) and the class's settings (key, value)
    ["""CREATE TABLE service_sessions (
            id TEXT PRIMARY KEY,
            token_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            name TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL)""",
     "CREATE INDEX service_sessions_token ON service_sessions (token_id)",
     """CREATE TABLE service_settings (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL)"""],
    # 3: one truth per job and per team. A submission's idempotency key (a retry returns the job it
    # made); the records that did not count (a worker's finish after its lease was taken back, a run
    # cancelled before its end was stored), kept for the instructor; each team's name key (the form
    # in which names that store, print or export alike coincide: one team per key)
    ["ALTER TABLE service_jobs ADD COLUMN idem_key TEXT",
     "CREATE UNIQUE INDEX service_jobs_idem ON service_jobs (team, idem_key)",
     """CREATE TABLE service_uncounted (
            job_id TEXT NOT NULL,
            lease TEXT NOT NULL,
            team TEXT NOT NULL,
            record_id TEXT,
            received_at DOUBLE PRECISION NOT NULL,
            why TEXT NOT NULL,
            record TEXT NOT NULL,
            PRIMARY KEY (job_id, lease))""",
     "ALTER TABLE service_teams ADD COLUMN name_key TEXT",
     "CREATE UNIQUE INDEX service_teams_key ON service_teams (name_key)"],
    # 4: the development runs' build folders. The archives are files under the server's state folder
    # (buildstore.py: hundreds of MiB do not belong in the queue's database); here each one's size as
    # stored, SHA-256, what it holds, when it goes, when it went and why (expired, or past the team's quota)
    ["""CREATE TABLE service_builds (
            job_id TEXT PRIMARY KEY,
            team TEXT NOT NULL,
            bytes BIGINT NOT NULL,
            sha256 TEXT NOT NULL,
            files INTEGER NOT NULL,
            folders INTEGER NOT NULL,
            data_bytes BIGINT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL,
            deleted_at DOUBLE PRECISION,
            deleted_why TEXT)""",
     "CREATE INDEX service_builds_expiry ON service_builds (deleted_at, expires_at)",
     "CREATE INDEX service_builds_team ON service_builds (team, deleted_at, created_at)"],
    # 5: the device kind a team asked its job to run on (submit --gpu; grading/kinds.py); NULL: any worker
    ["ALTER TABLE service_jobs ADD COLUMN gpu_kind TEXT"],
    # 6: uploads are files (uploadstore.py: content-addressed under the state folder, by the job's
    # upload_sha256); whether the job still holds its upload (a quota counts it, its file is kept).
    # The BLOBs of service_uploads from before are read as they are, and deleted as before.
    ["ALTER TABLE service_jobs ADD COLUMN upload_held INTEGER NOT NULL DEFAULT 0",
     "UPDATE service_jobs SET upload_held = 1 WHERE id IN (SELECT job_id FROM service_uploads)",
     "CREATE INDEX service_jobs_uploads ON service_jobs (upload_held, kind, state)"],
]


class Unavailable(Exception):
    """The database cannot be reached now (HTTP 503, retry later); the message is for the log."""


class Tx:
    """One transaction's statements, written with ``?`` placeholders for both databases."""

    def __init__(self, conn, postgres, write=True):
        self.conn = conn
        self.postgres = postgres
        self.write = write

    def execute(self, sql, params=()):
        if not self.write and not sql.lstrip()[:6].upper() == "SELECT":
            raise ValueError(f"a read transaction runs SELECTs only, not {sql.split()[0]!r}: open it with write=True")
        cur = self.conn.cursor()
        cur.execute(sql.replace("?", "%s") if self.postgres else sql, tuple(params))
        return cur

    def one(self, sql, params=()):
        return self.execute(sql, params).fetchone()

    def all(self, sql, params=()):
        return self.execute(sql, params).fetchall()

    def value(self, sql, params=()):
        row = self.one(sql, params)
        return row[0] if row else None

    def insert_many(self, table, columns, rows):
        """Insert ``rows`` (tuples in the order of ``columns``) in one go: PostgreSQL's COPY (one
        stream, no round trip a row), SQLite's executemany. ``table`` and ``columns`` are ours,
        never a client's."""
        if not rows:
            return
        if self.postgres:
            with self.conn.cursor().copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            return
        self.conn.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                              rows)

    def lock_suffix(self, skip=False):
        """``FOR UPDATE [SKIP LOCKED]`` in PostgreSQL; nothing in SQLite (its BEGIN IMMEDIATE
        already holds the one write lock)."""
        if not self.postgres:
            return ""
        return " FOR UPDATE SKIP LOCKED" if skip else " FOR UPDATE"


class Database:
    """The service's view of one database URL (a SQLite path or a postgresql:// URL), with a
    bounded pool of connections.

    Why a pool rather than a connection per thread: the server's threads come and go (anyio
    retires a thread idle for 10 s and starts another under load), so connections kept per thread
    piled up past PostgreSQL's ``max_connections`` in a busy minute. Here at most ``connections``
    are open at once; a transaction borrows one (the most recently returned first, so the rest
    age out of use) and gives it back when it ends; one that failed with the database down is
    closed instead, so the next borrower connects again. A borrower that finds every connection
    busy waits up to ``wait`` seconds, then gets Unavailable (HTTP 503 with a retry time).
    """

    def __init__(self, url=None, connections=None, wait=POOL_WAIT):
        self.url = resolve_url(url)
        self.postgres = self.url.startswith(POSTGRES_PREFIXES)
        self.shown = describe(self.url)
        self.connections = pool_size(self.postgres) if connections is None else connections
        if self.connections < 1:
            raise ValueError(f"--db-connections {self.connections}: at least 1")
        self.wait = wait
        self._migrated = False
        self._migrate_lock = threading.Lock()
        self._cond = threading.Condition()
        self._idle = []                           # [(store, monotonic time it was given back)], newest last
        self._open = 0                            # connections open: idle + borrowed + being opened
        self._closed = False

    # ------------------------------------------------------------ connections
    @property
    def open_connections(self):
        with self._cond:
            return self._open

    @contextmanager
    def borrowed(self):
        """A Store (connected, the store's and the service's schema migrated) for this block
        alone. A PostgreSQL connection idle for IDLE_CHECK seconds is pinged first: one the server
        dropped (a restart) is replaced before any statement runs on it. Where the block raises
        an error that means the database is down, the connection is closed, not given back."""
        store = self._take()
        healthy = False
        try:
            yield store
            healthy = True
        except BaseException as exc:
            healthy = not (isinstance(exc, Exception) and self.is_down(exc))
            raise
        finally:
            self._give_back(store, healthy)

    def _take(self):
        deadline = time.monotonic() + self.wait
        with self._cond:
            while True:
                if self._closed:
                    raise Unavailable(f"{self.shown}: the server is stopping")
                if self._idle:
                    store, since = self._idle.pop()
                    break
                if self._open < self.connections:
                    self._open += 1
                    store = None
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Unavailable(f"{self.shown}: all {self.connections} connections busy for "
                                      f"{self.wait:g} s")
                self._cond.wait(left)
        if store is not None and self.postgres and time.monotonic() - since > IDLE_CHECK:
            try:
                with self._read_on(store.conn) as tx:       # one round trip, no BEGIN or ROLLBACK
                    tx.value("SELECT 1")
            except Exception:                      # noqa: BLE001  any failure: a new connection
                _close(store)
                store = None
            except BaseException:                  # interrupted: the slot back, then the interrupt
                self._give_back(store, healthy=False)
                raise
        if store is None:
            try:
                store = self._connect()
            except BaseException:
                with self._cond:
                    self._open -= 1
                    self._cond.notify()
                raise
        return store

    def _connect(self):
        try:
            store = open_store(self.url)
        except StoreError as exc:
            raise Unavailable(str(exc)) from exc
        try:
            if not self.postgres:
                # WAL without a sync at every commit: a commit survives the server's crash (kill -9),
                # not the machine's power cut; the sync comes at each checkpoint
                store.conn.execute("PRAGMA synchronous = NORMAL")
            if not self._migrated:
                with self._migrate_lock:
                    if not self._migrated:
                        self._migrate(store)
                        self._migrated = True
        except BaseException as exc:
            _close(store)
            if isinstance(exc, Exception) and self.is_down(exc):
                raise Unavailable(f"{self.shown}: {first_line(exc)}") from exc
            raise
        return store

    def _give_back(self, store, healthy):
        healthy = healthy and self._settled(store)
        with self._cond:
            if healthy and not self._closed:
                self._idle.append((store, time.monotonic()))
                store = None
            else:
                self._open -= 1
            self._cond.notify()
        if store is not None:
            _close(store)

    def _settled(self, store):
        """Whether ``store``'s connection is outside any transaction, after a rollback where it
        was not (a read left open, a failed statement): only such a connection is lent again."""
        try:
            if self.postgres and store.conn.autocommit:
                return False                       # a read's autocommit not undone: not lent as a writer's
            if self._idle_conn(store.conn):
                return True
            store.conn.rollback() if self.postgres else store.conn.execute("ROLLBACK")
            return self._idle_conn(store.conn)
        except Exception:                          # noqa: BLE001  a connection that cannot say: closed
            return False

    def _idle_conn(self, conn):
        if self.postgres:
            from psycopg.pq import TransactionStatus
            return conn.info.transaction_status == TransactionStatus.IDLE
        return not conn.in_transaction

    def close_all(self):
        """Close the idle connections and refuse new borrowers; a borrowed one is closed when it
        comes back."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._open -= len(idle)
            self._cond.notify_all()
        for store, _ in idle:
            _close(store)

    def is_down(self, exc):
        """Whether ``exc`` means the database cannot be reached now (rather than a bug)."""
        if isinstance(exc, (Unavailable, StoreError)):
            return True
        if isinstance(exc, sqlite3.OperationalError):
            return any(word in str(exc).lower() for word in SQLITE_DOWN)
        if self.postgres:
            import psycopg
            return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))
        return False

    @contextmanager
    def transaction(self, write=True):
        """One transaction (SQLite: BEGIN IMMEDIATE to write, BEGIN to read) on a borrowed
        connection; committed when the block ends, rolled back when it raises. Unavailable where
        the database is down."""
        try:
            with self.borrowed() as store:
                with self._transaction_on(store.conn, write) as tx:
                    yield tx
        except Unavailable:
            raise
        except Exception as exc:                   # noqa: BLE001
            if self.is_down(exc):
                raise Unavailable(f"{self.shown}: {first_line(exc)}") from exc
            raise

    @contextmanager
    def _transaction_on(self, conn, write):
        if self.postgres and not write:
            with self._read_on(conn) as tx:
                yield tx
            return
        if not self.postgres:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield Tx(conn, self.postgres, write)
            conn.execute("COMMIT") if not self.postgres else conn.commit()
        except BaseException:
            try:
                conn.execute("ROLLBACK") if not self.postgres else conn.rollback()
            except Exception:                      # noqa: BLE001  the connection may be gone
                pass
            raise

    @contextmanager
    def _read_on(self, conn):
        """A PostgreSQL read: its statements in autocommit, each its own round trip and no more.
        Under READ COMMITTED (PostgreSQL's default, the service's) every statement takes its own
        snapshot inside a transaction too, so a read sees what it would have seen between BEGIN
        and COMMIT; only those two round trips go, and they were two of a read's three (the
        soak: a team's submission makes some twenty round trips, each a wait for the database's
        process on a busy machine). A read cannot write (Tx refuses: nothing is committed half)."""
        conn.autocommit = True
        try:
            yield Tx(conn, self.postgres, write=False)
        finally:
            try:
                conn.autocommit = False
            except Exception:                      # noqa: BLE001  a connection gone: closed, never lent to a writer
                conn.close()

    def ping(self):
        """One round trip (readiness)."""
        with self.transaction(write=False) as tx:
            tx.value("SELECT 1")

    # ------------------------------------------------------------ schema
    def _migrate(self, store):
        with self._transaction_on(store.conn, write=True) as tx:
            if self.postgres:
                tx.execute("SELECT pg_advisory_xact_lock(?)", (LOCK_KEY,))
            tx.execute("CREATE TABLE IF NOT EXISTS service_schema_version (version INTEGER NOT NULL)")
            current = tx.value("SELECT MAX(version) FROM service_schema_version") or 0
            blob = "BYTEA" if self.postgres else "BLOB"
            for version, statements in enumerate(MIGRATIONS[current:], start=current + 1):
                for statement in statements:
                    tx.execute(statement.replace("{blob}", blob))
                tx.execute("INSERT INTO service_schema_version (version) VALUES (?)", (version,))

    def schema_version(self):
        with self.transaction(write=False) as tx:
            return tx.value("SELECT MAX(version) FROM service_schema_version")


def pool_size(postgres):
    """``$ECE408_DB_CONNECTIONS``, else DEFAULT_CONNECTIONS (PostgreSQL) or SQLITE_CONNECTIONS."""
    text = os.environ.get(CONNECTIONS_ENV, "").strip()
    if not text:
        return DEFAULT_CONNECTIONS if postgres else SQLITE_CONNECTIONS
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"${CONNECTIONS_ENV}={text!r}: a whole number of connections, at least 1")
    return value


def _close(store):
    try:
        store.close()
    except Exception:                             # noqa: BLE001  a dead connection may fail to close
        pass


def first_line(exc):
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
