"""Writers at once, on a real ``serve`` (service/db.py, jobs.py): on PostgreSQL a write locks the
rows it changes (``FOR UPDATE`` on the submitting team's row, ``SKIP LOCKED`` where workers claim),
never the database: a team's submission waiting for its own row holds back no other team's,
which commits meanwhile. A global lock anywhere on the way to a write (an advisory lock, a table
lock, a lock of the server's process around transactions) would make the second wait for the
first: this test fails then. On SQLite one writer at a time is the rule (``BEGIN IMMEDIATE``): the
same test shows what such a wait looks like, and that both then go through."""
import threading
import time

import httpx
import pytest

import hostilekit
from hostilekit import DATABASES, development

pytestmark = pytest.mark.service
postgres_server = hostilekit.postgres_server               # the module's PostgreSQL server (a fixture)


def hold_writes_of(svc, team):
    """Another connection holding what ``team``'s submission must wait for: PostgreSQL, that team's
    row (``FOR UPDATE``, as the service's submit takes it); SQLite, the file's one write lock.
    Its ``close`` releases it."""
    if svc.db_url:
        import psycopg
        conn = psycopg.connect(svc.db_url)
        assert conn.execute("SELECT name FROM service_teams WHERE name = %s FOR UPDATE", (team,)).fetchone()
        return conn
    import sqlite3
    conn = sqlite3.connect(svc.sqlite_path, isolation_level=None, check_same_thread=False)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def waiting_on_a_lock(svc, timeout=30):
    """Wait until one of the service's PostgreSQL connections waits on a lock (its transaction open)."""
    import psycopg
    deadline = time.monotonic() + timeout
    with psycopg.connect(svc.db_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            if conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND "
                            "wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE%'").fetchone()[0]:
                return
            time.sleep(0.05)
    raise AssertionError(f"no submission waited for the held row within {timeout} s")


def submit(svc, token, timeout=60):
    return httpx.post(svc.url + "/api/jobs", params={"kind": "development"}, content=development(),
                      headers={"Authorization": f"Bearer {token}"}, timeout=timeout)


@pytest.mark.parametrize("database", DATABASES)
def test_a_team_waiting_for_its_row_holds_back_no_other_team(running_service, tmp_path, postgres_server, database):
    svc = running_service.on(tmp_path / "svc", database, postgres_server)
    tokens = svc.add_teams("held", "free")
    holder = hold_writes_of(svc, "held")
    answers = {}
    held = threading.Thread(target=lambda: answers.update(held=submit(svc, tokens["held"])), daemon=True)
    try:
        held.start()
        if svc.db_url:
            waiting_on_a_lock(svc)                     # the service's own transaction for "held": open, waiting
            began = time.monotonic()
            try:
                free = submit(svc, tokens["free"], timeout=15)
            except httpx.TimeoutException:
                raise AssertionError("team free's submission waited for team held's row: a lock wider than "
                                     "the row") from None
            assert free.status_code == 201, free.text
            assert time.monotonic() - began < 15
            assert held.is_alive() and "held" not in answers  # held's still waits for its row, its transaction open
        else:
            time.sleep(1)
            threading.Timer(2, holder.close).start()   # one writer at a time: free waits for the holder
            began = time.monotonic()
            free = submit(svc, tokens["free"])
            assert free.status_code == 201, free.text
            assert time.monotonic() - began > 1.5
    finally:
        holder.close()
    held.join(60)
    assert answers["held"].status_code == 201, answers["held"].text
    queued = {j["team"] for j in svc.jobs() if j["state"] == "queued"}
    assert queued == {"held", "free"}
