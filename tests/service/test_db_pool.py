"""The service's database connections (service/db.py): a bounded pool, on SQLite and on a real
PostgreSQL server. The server's threads come and go (anyio retires one idle for 10 s), so
connections kept per thread piled up past PostgreSQL's max_connections in a busy minute: these
tests make threads come and go and count the connections the server itself sees."""
import threading
import time

import pytest

from servicekit import Service, postgres_connections, sqlite_connections, started_postgres

from ece408_op.service.db import MIGRATIONS, Database, Unavailable

WAVES = 6
THREADS = 10                  # short-lived threads a wave, each running a few transactions


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.service)])    # a PostgreSQL server
def url(request, tmp_path):
    if request.param == "sqlite":
        yield str(tmp_path / "service.db")
        return
    server = started_postgres(tmp_path / "pg")
    try:
        yield server.url
    finally:
        server.stop()


def server_connections(url):
    """Connections to the database as its server sees them (this check's own left out); for
    SQLite, this process's open descriptors of the file."""
    if url.startswith("postgresql://"):
        import psycopg
        with psycopg.connect(url, autocommit=True) as conn:
            return postgres_connections(conn)
    return sqlite_connections(url)


def test_connections_stay_within_the_pool_while_threads_come_and_go(url):
    db = Database(url, connections=3)
    with db.transaction() as tx:
        tx.execute("CREATE TABLE hits (thread TEXT NOT NULL, k INTEGER NOT NULL)")
    errors, peaks = [], []

    def work(name):
        try:
            for k in range(5):
                with db.transaction() as tx:
                    tx.execute("INSERT INTO hits (thread, k) VALUES (?, ?)", (name, k))
                    time.sleep(0.002)
        except Exception as exc:                           # noqa: BLE001  reported below
            errors.append(f"{name}: {type(exc).__name__}: {exc}")

    for wave in range(WAVES):                             # new threads each wave, the old ones gone
        threads = [threading.Thread(target=work, args=(f"w{wave}t{i}",)) for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        peaks.append(server_connections(url))
        assert db.open_connections <= 3
    assert not errors, errors[:5]
    with db.transaction(write=False) as tx:
        assert tx.value("SELECT count(*) FROM hits") == WAVES * THREADS * 5
    assert 1 <= max(peaks) <= 3, peaks                    # a connection per thread would be 10 a wave, 60 in all
    db.close_all()
    assert db.open_connections == 0 and server_connections(url) == 0


@pytest.mark.serial                                 # told within 5 s: alone
def test_a_borrower_waits_for_a_free_connection_then_is_told_in_one_line(tmp_path):
    db = Database(str(tmp_path / "service.db"), connections=1, wait=0.5)
    held, release = threading.Event(), threading.Event()

    def hold():
        with db.transaction(write=False):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    began = time.monotonic()
    with pytest.raises(Unavailable, match=r"all 1 connections busy for 0.5 s$"):
        db.ping()
    assert 0.45 <= time.monotonic() - began < 5
    waiter_result = []
    waiter = threading.Thread(target=lambda: waiter_result.append(db.schema_version()))
    waiter.start()                                         # waits, and gets the connection once it is back
    time.sleep(0.1)
    release.set()
    holder.join()
    waiter.join()
    assert waiter_result == [len(MIGRATIONS)] and db.open_connections == 1


@pytest.mark.service                                # a PostgreSQL server
def test_a_connection_cut_by_a_restart_is_closed_not_lent_again(tmp_path):
    server = started_postgres(tmp_path / "pg")
    try:
        db = Database(server.url, connections=2)
        db.ping()
        assert db.open_connections == 1
        server.stop()
        with pytest.raises(Unavailable):
            db.ping()                                      # the connection idle < 2 s is used without a ping: it fails
        assert db.open_connections == 0                    # closed, not given back to the pool
        server.start_again()
        db.ping()
        assert db.open_connections == 1 and server_connections(server.url) == 1
        db.close_all()
    finally:
        server.stop()


def test_a_bug_in_a_transaction_rolls_back_and_keeps_the_connection(tmp_path):
    db = Database(str(tmp_path / "service.db"), connections=1)
    with db.transaction() as tx:
        tx.execute("CREATE TABLE t (v INTEGER)")
    with pytest.raises(ZeroDivisionError):
        with db.transaction() as tx:
            tx.execute("INSERT INTO t (v) VALUES (1)")
            1 / 0
    with db.transaction(write=False) as tx:
        assert tx.value("SELECT count(*) FROM t") == 0     # rolled back
    assert db.open_connections == 1                        # the same connection, lent again


@pytest.mark.parametrize("how, code, shown", [
    (["--db-connections", "0"], 2, "invalid positive whole number value: '0'"),
    (["--db-connections", "many"], 2, "invalid positive whole number value: 'many'"),
    ({"ECE408_DB_CONNECTIONS": "-3"}, 1, "$ECE408_DB_CONNECTIONS='-3': a whole number of connections, at least 1"),
])
def test_a_bad_pool_size_is_refused_in_one_line(tmp_path, how, code, shown):
    args, env = (how, {}) if isinstance(how, list) else ([], how)
    out = Service(tmp_path / "svc").cli("serve", "--port", "0", *args, env=env, timeout=60)
    assert out.returncode == code, out
    line = out.stderr.strip().splitlines()[-1]                 # argparse: its usage line, then the error
    assert shown in line and "Traceback" not in out.stderr


def test_a_connection_left_inside_a_transaction_is_rolled_back_before_it_is_lent_again(url):
    db = Database(url, connections=1)
    with db.transaction() as tx:
        tx.execute("CREATE TABLE t (v INTEGER)")
    with db.borrowed() as store:                           # a read left open, a write not committed
        if db.postgres:
            store.conn.execute("INSERT INTO t (v) VALUES (1)")
        else:
            store.conn.execute("BEGIN")
            store.conn.execute("INSERT INTO t (v) VALUES (1)")
    with db.transaction() as tx:                           # SQLite: BEGIN inside BEGIN would fail here
        tx.execute("INSERT INTO t (v) VALUES (2)")
    with db.transaction(write=False) as tx:
        assert [v for (v,) in tx.all("SELECT v FROM t")] == [2]
    assert db.open_connections == 1
    if db.postgres:                                        # a failed statement: the next borrower is not told "aborted"
        with pytest.raises(Exception, match="no_such_table"):
            with db.borrowed() as store:
                store.conn.execute("SELECT * FROM no_such_table")
        with db.transaction(write=False) as tx:
            assert tx.value("SELECT count(*) FROM t") == 1
