"""The service's tables, in the record store's own database: one SQLite file (one machine) or
PostgreSQL (a class). The queue lives here, beside the records, so that a restart loses nothing
and there is no second store to keep in step.

Connections are the store's (``open_store``: its runs table and migrations come along), one per
thread. The service's schema has its own migration list (``MIGRATIONS``) and version table
(``service_schema_version``), applied once per process in one transaction under a lock
(SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: ``pg_advisory_xact_lock``).

Every operation is one transaction (``Database.transaction``). A database that cannot be
reached (PostgreSQL down, a connection cut, SQLite locked past its busy timeout or out of disk)
raises ``Unavailable``: the HTTP layer answers 503 with a retry time; the transaction was rolled
back, so nothing is half-written, and the thread's connection is dropped, so the next request
connects again: the service recovers by itself when the database is back.
"""
import sqlite3
import threading
import time
from contextlib import contextmanager

from .runs import POSTGRES_PREFIXES, StoreError, describe, open_store, resolve_url

LOCK_KEY = 408433                         # pg_advisory_xact_lock key of the service's migrations
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
]


class Unavailable(Exception):
    """The database cannot be reached now (HTTP 503, retry later); the message is for the log."""


class Tx:
    """One transaction's statements, written with ``?`` placeholders for both databases."""

    def __init__(self, conn, postgres):
        self.conn = conn
        self.postgres = postgres

    def execute(self, sql, params=()):
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

    def lock_suffix(self, skip=False):
        """``FOR UPDATE [SKIP LOCKED]`` in PostgreSQL; nothing in SQLite (its BEGIN IMMEDIATE
        already holds the one write lock)."""
        if not self.postgres:
            return ""
        return " FOR UPDATE SKIP LOCKED" if skip else " FOR UPDATE"


class Database:
    """The service's view of one database URL (a SQLite path or a postgresql:// URL)."""

    def __init__(self, url=None):
        self.url = resolve_url(url)
        self.postgres = self.url.startswith(POSTGRES_PREFIXES)
        self.shown = describe(self.url)
        self._local = threading.local()
        self._migrated = False
        self._migrate_lock = threading.Lock()
        self._stores = set()
        self._stores_lock = threading.Lock()

    # ------------------------------------------------------------ connections
    def store(self):
        """This thread's Store (connected, the store's and the service's schema migrated). A
        PostgreSQL connection idle for IDLE_CHECK seconds is pinged first: one the server dropped
        (a restart) is replaced before any statement of a transaction runs on it."""
        store = getattr(self._local, "store", None)
        if store is not None and self.postgres and time.monotonic() - self._local.used > IDLE_CHECK:
            try:
                store.conn.execute("SELECT 1")
                store.conn.rollback()
            except Exception:                      # noqa: BLE001  any failure: a new connection
                self.drop()
                store = None
        if store is None:
            try:
                store = open_store(self.url)
            except StoreError as exc:
                raise Unavailable(str(exc)) from exc
            if not self.postgres:
                # WAL without a sync at every commit: a commit survives the server's crash (kill -9),
                # not the machine's power cut; the sync comes at each checkpoint
                store.conn.execute("PRAGMA synchronous = NORMAL")
            self._local.store = store
            self._local.used = time.monotonic()
            with self._stores_lock:
                self._stores.add(store)
            if not self._migrated:
                with self._migrate_lock:
                    if not self._migrated:
                        self._migrate()
                        self._migrated = True
        return store

    def drop(self):
        """Forget this thread's connection (after a failure): the next use connects again."""
        store = getattr(self._local, "store", None)
        self._local.store = None
        if store is not None:
            with self._stores_lock:
                self._stores.discard(store)
            try:
                store.close()
            except Exception:                     # noqa: BLE001  a dead connection may fail to close
                pass

    def close_all(self):
        with self._stores_lock:
            stores, self._stores = list(self._stores), set()
        for store in stores:
            try:
                store.close()
            except Exception:                     # noqa: BLE001
                pass

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
        """One transaction (SQLite: BEGIN IMMEDIATE to write, BEGIN to read); committed when the
        block ends, rolled back when it raises. Unavailable where the database is down."""
        try:
            conn = self.store().conn
            if not self.postgres:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except Exception as exc:                   # noqa: BLE001
            if self.is_down(exc):
                self.drop()
                raise Unavailable(f"{self.shown}: {_first_line(exc)}") from exc
            raise
        try:
            yield Tx(conn, self.postgres)
            conn.execute("COMMIT") if not self.postgres else conn.commit()
            self._local.used = time.monotonic()
        except BaseException as exc:
            try:
                conn.execute("ROLLBACK") if not self.postgres else conn.rollback()
            except Exception:                      # noqa: BLE001  the connection may be gone
                pass
            if isinstance(exc, Exception) and self.is_down(exc):
                self.drop()
                raise Unavailable(f"{self.shown}: {_first_line(exc)}") from exc
            raise

    def ping(self):
        """One round trip (readiness)."""
        with self.transaction(write=False) as tx:
            tx.value("SELECT 1")

    # ------------------------------------------------------------ schema
    def _migrate(self):
        with self.transaction() as tx:
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


def _first_line(exc):
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
