"""Where records live: a SQLite file (one machine) or PostgreSQL (many nodes), one interface.

``open_store(url)``: ``url`` is ``$ECE408_DB`` when not given; a ``postgresql://`` URL opens
PostgreSQL through psycopg (the ``grade`` extra), anything else is a SQLite file path
(default ``<user data folder>/ece408_op/submissions.db``). Both hold the same schema, created
or migrated on first use (``MIGRATIONS``, one transaction each, under a lock so that many
tasks starting together migrate once; a schema already current is read without the lock, so that
connections opened at once, a pool's under a burst, do not wait for one another).

A record (``record.py``) is one row of ``runs``, inserted once under the id its writer chose; a
write that keeps failing leaves it in a spool folder (``spool.py``), and every ``open_store``
delivers what the spool holds first. A row that cannot be read back (a column not of its type) is
skipped with one warning line, never a crash. This module is the records' door for the rest of
the package: the names of ``record.py`` and ``spool.py`` that others use are importable from here.
"""
import json
import os
import sqlite3
import sys
import time
from pathlib import Path

from ..base.extras import install_hint
from ..base.files import user_folder
from .record import COLUMNS, Record, SpooledError, StoreError, insert_statement
from .spool import move_spool, spool, spool_dir, spooled_files, spooled_record, stored_or_spooled

__all__ = ["COLUMNS", "DB_ENV", "Delivery", "MIGRATIONS", "POSTGRES_PREFIXES", "PostgresStore", "Record", "SpooledError",
           "SqliteStore", "Store", "StoreError", "default_sqlite_path", "describe", "insert_statement", "move_spool",
           "open_store", "resolve_url", "spool", "spool_dir", "spooled_files", "spooled_record", "stored_or_spooled",
           "warn"]

DB_ENV = "ECE408_DB"
POSTGRES_PREFIXES = ("postgresql://", "postgres://")
LOCK_KEY = 408408                              # pg_advisory_xact_lock key for migrations

MIGRATIONS = [
    # 1: records and the reference accuracies
    ["""CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            created_at TEXT NOT NULL,
            team TEXT NOT NULL,
            milestone TEXT NOT NULL,
            size INTEGER NOT NULL,
            status TEXT NOT NULL,
            exit_code INTEGER,
            op_time DOUBLE PRECISION,
            correct INTEGER NOT NULL,
            models TEXT NOT NULL,
            git_commit TEXT,
            content_hash TEXT,
            device TEXT,
            engine TEXT,
            image TEXT,
            host TEXT,
            duration_s DOUBLE PRECISION,
            transcript TEXT NOT NULL)""",
     "CREATE INDEX runs_ranking ON runs (milestone, size, team)",
     "CREATE INDEX runs_content ON runs (team, content_hash)",
     """CREATE TABLE expected (
            model TEXT NOT NULL,
            size INTEGER NOT NULL,
            environment TEXT NOT NULL,
            accuracy DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (model, size, environment))"""],
    # 2: the team's files a ranked run measured (JSON: name, sha256, size) and whether it ran isolated
    ["ALTER TABLE runs ADD COLUMN team_files TEXT",
     "ALTER TABLE runs ADD COLUMN isolated INTEGER"],
    # 3: what a ranked run was measured with (grading/options.py): the skip key and the ranking's
    # groups; and why a run is not valid, in one line
    ["ALTER TABLE runs ADD COLUMN options TEXT",
     "ALTER TABLE runs ADD COLUMN options_key TEXT",
     "ALTER TABLE runs ADD COLUMN reason TEXT",
     "CREATE INDEX runs_options ON runs (milestone, size, options_key)"],
]


def default_sqlite_path():
    return user_folder("data", "submissions.db")


def warn(text):
    print(f"warning: {text}", file=sys.stderr)


def describe(url):
    """The database as shown to a person: a path, or the URL without its password."""
    if url.startswith(POSTGRES_PREFIXES):
        import re
        return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)
    return url


class Store:
    """Common SQL; subclasses give ``_connect``, the placeholder and the migration lock."""

    placeholder = "?"

    def __init__(self, url):
        self.url = url
        self.conn = self._connect()
        self._migrate()
        self.deliver_spool()

    def close(self):
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _sql(self, text):
        return text.replace("?", self.placeholder)

    def _execute(self, text, params=()):
        try:
            cur = self.conn.cursor()
            cur.execute(self._sql(text), params)
        except self._errors() as exc:
            raise StoreError(f"{describe(self.url)}: {_first_line(str(exc))}") from exc
        return cur

    def _errors(self):
        return (sqlite3.Error,)

    def _end_read(self):
        try:
            self.conn.commit()
        except self._errors() as exc:
            raise StoreError(f"{describe(self.url)}: {_first_line(str(exc))}") from exc

    def _migrate(self):
        """Bring the schema to the last migration, under the migrations' lock; a schema already there
        (every connection but the first one ever) is read without it. The lock is PostgreSQL's
        advisory lock, SQLite's write lock: taken at every connection, it made the service's pool
        open its connections one at a time where a burst needed new ones (the soak, 2026-12-02: a
        dozen backends waiting on ``pg_advisory_xact_lock`` the second the attack began)."""
        if self._schema_current():
            return
        with self._transaction():
            self._lock()
            self._execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = self._execute("SELECT MAX(version) FROM schema_version").fetchone()
            current = row[0] or 0
            for version, statements in enumerate(MIGRATIONS[current:], start=current + 1):
                for statement in statements:
                    self._execute(statement)
                self._execute("INSERT INTO schema_version (version) VALUES (?)", (version,))

    def _schema_current(self):
        """Whether the schema has every migration, read without a lock (False where it cannot be
        read: no version table yet, or an error the locked migration then reports)."""
        try:
            row = self._execute("SELECT MAX(version) FROM schema_version").fetchone()
            self._end_read()
        except StoreError:
            try:
                self.conn.rollback()
            except Exception:                   # noqa: BLE001  the migration says what is wrong
                pass
            return False
        return row[0] is not None and row[0] >= len(MIGRATIONS)

    def schema_version(self):
        return self._execute("SELECT MAX(version) FROM schema_version").fetchone()[0]

    # ------------------------------------------------------------ records
    def _insert(self, record):
        with self._transaction():
            cur = self._execute(*insert_statement(record))
            return cur.rowcount == 1

    def add(self, record, retry_seconds=None):
        """Insert ``record``; returns False where a record of that id was already there. A failing
        write is retried (reconnecting) for ``retry_seconds`` ($ECE408_DB_RETRY, else RETRY_SECONDS),
        then the record is spooled and SpooledError says where."""
        return stored_or_spooled(record, self.url, lambda: self._insert(record), self.reconnect, retry_seconds)

    def reconnect(self):
        """A new connection in place of one that may be dead (the server restarted); quiet where
        none can be made yet (the next statement then says why)."""
        try:
            self.conn.close()
        except Exception:                       # noqa: BLE001  a dead connection may fail to close
            pass
        try:
            self.conn = self._connect()
        except StoreError:
            pass

    def deliver_spool(self, folder=None):
        """Store the records the spool ``folder`` (default ``spool_dir()``) holds, each file then
        removed; returns how many were new (a record whose id is stored already is not replaced).
        Stops at the first failing write (the database is still away); several processes may
        deliver one folder at once (a record is inserted once)."""
        folder = Path(folder) if folder is not None else spool_dir()
        delivered = 0
        for path in spooled_files(folder).values():
            try:
                data = json.loads(path.read_text())
                if data.get("url") not in (None, self.url):
                    continue                    # another database's record
                inserted = self._insert(Record(**data["record"]))
            except FileNotFoundError:
                continue                        # delivered by another process meanwhile
            except (OSError, ValueError, TypeError, KeyError) as exc:
                warn(f"spooled record {path.name} could not be read ({exc}); left in {folder}")
                continue
            except StoreError:
                break
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            delivered += inserted               # not where the id was stored already (it stays)
        if delivered:
            warn(f"{delivered} spooled record(s) stored in {describe(self.url)}")
        return delivered

    def has(self, record_id):
        return self._execute("SELECT 1 FROM runs WHERE id = ?", (record_id,)).fetchone() is not None

    def records(self, milestone=None, size=None, team=None):
        where, params = [], []
        for column, value in (("milestone", milestone), ("size", size), ("team", team)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        text = f"SELECT {', '.join(COLUMNS)} FROM runs"
        if where:
            text += " WHERE " + " AND ".join(where)
        rows = self._execute(text + " ORDER BY created_at, id", params).fetchall()
        self._end_read()
        records = []
        for row in rows:
            try:
                records.append(Record.from_row(row))
            except (ValueError, TypeError, KeyError) as exc:
                warn(f"record {str(row[0])[:40]!r} skipped: it cannot be read ({exc})")
        return records

    def graded(self, team, milestone, size, content_hash, options_key, retry_stopped=False):
        """True where this team's submission with this content was already measured with these
        options (``options_key``: grading/options.py; a record without options never matches).
        An ``error`` record (the grading itself failed) never counts; with ``retry_stopped``, a
        ``killed`` one (the task was stopped from outside) does not either: only ok, failed,
        timeout do."""
        counted = ("ok", "failed", "timeout") if retry_stopped else ("ok", "failed", "timeout", "killed")
        text = ("SELECT 1 FROM runs WHERE team = ? AND milestone = ? AND size = ? AND content_hash = ? "
                f"AND options_key = ? AND status IN ({', '.join('?' * len(counted))})")
        row = self._execute(text, (team, milestone, size, content_hash, options_key, *counted)).fetchone()
        self._end_read()
        return row is not None

    def statuses(self, record_ids):
        """{record id: status} of those of ``record_ids`` that have a record."""
        ids = list(record_ids)
        found = {}
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            marks = ", ".join("?" * len(chunk))
            found.update(self._execute(f"SELECT id, status FROM runs WHERE id IN ({marks})", chunk).fetchall())
        self._end_read()
        return found

    def latest(self):
        """(milestone, size) of the newest record, or None."""
        row = self._execute("SELECT milestone, size FROM runs ORDER BY created_at DESC, id DESC LIMIT 1").fetchone()
        self._end_read()
        return tuple(row) if row else None

    # ------------------------------------------------------------ reference accuracies
    def expected(self, model, size, environment):
        row = self._execute("SELECT accuracy FROM expected WHERE model = ? AND size = ? AND environment = ?",
                            (model, size, environment)).fetchone()
        self._end_read()
        return row[0] if row else None


def _wal(conn, seconds=120.0):
    """Put the database in WAL mode. Switching a new file's journal to WAL takes an exclusive lock
    for which SQLite may answer "database is locked" at once, its busy handler not called (another
    process opening the same new file at that moment): tried again until it holds or ``seconds`` pass.
    WAL stays with the file: once one process has switched it, the others find it so."""
    deadline = time.monotonic() + seconds
    pause = 0.01
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


class SqliteStore(Store):
    """A SQLite file in WAL mode; writers take the write lock up front (BEGIN IMMEDIATE) and wait
    for one another (busy timeout), so parallel processes on one machine lose nothing. Not for
    a network file system: use PostgreSQL there."""

    def _connect(self):
        path = Path(self.url)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # not tied to the thread that opened it: the service's pool lends it to one thread at a time
            conn = sqlite3.connect(str(path), timeout=120, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 120000")
            _wal(conn)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the SQLite database {path}: {exc}; "
                             f"set {DB_ENV} to a writable path") from exc
        return conn

    def _lock(self):
        pass                                      # BEGIN IMMEDIATE already holds the write lock

    def _transaction(self):
        return _SqliteTransaction(self.conn, self.url)


class _SqliteTransaction:
    def __init__(self, conn, path):
        self.conn, self.path = conn, path

    def __enter__(self):
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write to the SQLite database {self.path}: {exc}") from exc

    def __exit__(self, kind, exc, tb):
        try:
            self.conn.execute("COMMIT" if kind is None else "ROLLBACK")
        except sqlite3.Error as error:
            if kind is None:
                try:
                    self.conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise StoreError(f"SQLite database {self.path}: {error}") from error
        if isinstance(exc, sqlite3.Error):
            raise StoreError(f"SQLite database {self.path}: {exc}") from exc


class PostgresStore(Store):
    """PostgreSQL through psycopg 3; each write is its own transaction."""

    placeholder = "%s"

    def _connect(self):
        try:
            import psycopg
        except ImportError as exc:
            raise StoreError(f"{DB_ENV} is a PostgreSQL URL but psycopg is not installed: "
                             f"{install_hint('grade')}") from exc
        self.psycopg = psycopg
        try:
            return psycopg.connect(self.url, connect_timeout=30)
        except psycopg.Error as exc:
            first = _first_line(str(exc))
            raise StoreError(f"cannot connect to PostgreSQL at {describe(self.url)}: {first}") from exc

    def _lock(self):
        self._execute("SELECT pg_advisory_xact_lock(?)", (LOCK_KEY,))

    def _errors(self):
        return (self.psycopg.Error,)

    def _transaction(self):
        return _PostgresTransaction(self)


class _PostgresTransaction:
    def __init__(self, store):
        self.store = store

    def __enter__(self):
        pass                                      # psycopg opens a transaction on the first statement

    def __exit__(self, kind, exc, tb):
        conn, errors = self.store.conn, self.store.psycopg.Error
        if kind is None:
            try:
                conn.commit()
            except errors as error:
                raise StoreError(f"PostgreSQL at {describe(self.store.url)}: {_first_line(str(error))}") from error
            return
        try:
            conn.rollback()
        except errors:
            pass
        if isinstance(exc, self.store.psycopg.Error):
            raise StoreError(f"PostgreSQL at {describe(self.store.url)}: {_first_line(str(exc))}") from exc


def _first_line(text):
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "no reason given"


def resolve_url(url=None):
    """The database ``url`` names: $ECE408_DB where None, else the user's SQLite file; a
    ``sqlite:///`` URL as its path."""
    url = url or os.environ.get(DB_ENV) or str(default_sqlite_path())
    if url.startswith("sqlite:///"):
        url = url[len("sqlite://"):]
    return url


def open_store(url=None):
    """The Store for ``url`` (default $ECE408_DB, else the user's SQLite file)."""
    url = resolve_url(url)
    if url.startswith(POSTGRES_PREFIXES):
        return PostgresStore(url)
    return SqliteStore(url)


class Delivery:
    """Where a run's record goes when the run ends, for runs longer than a database's good mood:
    ``add`` opens the database then (retrying for the retry time), stores the record and closes;
    where it cannot, the record is spooled and SpooledError says so in one line."""

    def __init__(self, url=None):
        self.url = resolve_url(url)

    def add(self, record):
        def attempt():
            with open_store(self.url) as store:
                return store._insert(record)
        return stored_or_spooled(record, self.url, attempt)
