"""``serve`` binds its port, then takes its database's serve lock, before it touches anything
shared: a second ``serve`` on the same port, or on another port with the same database (SQLite
and PostgreSQL), exits non-zero in one line and changes nothing; the first one's local worker
still runs a job to its end. A serve killed with -9 leaves no lock behind."""
import shutil
import sqlite3
import subprocess

import pytest

from suitekit import python_command
from servicekit import started_postgres
from services import free_port
from teams import team_project

pytestmark = [pytest.mark.service,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="the local worker's sandbox needs bubblewrap")]


def second_serve(svc, port):
    """(exit status, stderr) of another ``serve`` with ``svc``'s environment (its database, its
    files) on ``port``; a test failure where it keeps running."""
    argv = [*python_command(), "-m", "ece408_op", "serve", "--port", str(port), "--workers", "1",
            "--engine", "bubblewrap"]
    proc = subprocess.Popen(argv, env=svc.env, cwd=svc.root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"a second serve on port {port} kept running beside the first:\n{err[-3000:]}")
    return proc.returncode, err


def tokens(svc, db):
    query = "SELECT id, kind, name, secret_hash, revoked_at FROM service_tokens ORDER BY id"
    if db:
        import psycopg
        with psycopg.connect(db) as conn:
            return conn.execute(query).fetchall()
    with sqlite3.connect(svc.sqlite_path) as conn:
        return conn.execute(query).fetchall()


def check_second_serves_refused(running_service, tmp_path, db=None):
    svc = running_service(tmp_path / "svc", workers=1, args=["--engine", "bubblewrap"],
                          env={"ECE408_DB": db} if db else None)
    try:
        team = svc.add_teams("first")["first"]
        before = tokens(svc, db)
        instructor = svc.instructor_token
        code, err = second_serve(svc, svc.port)
        assert code != 0 and err.splitlines() == [
            f"error: cannot listen on 127.0.0.1:{svc.port}: Address already in use; choose another --port"], err
        code, err = second_serve(svc, free_port())
        shown = db.replace(":grading@", ":***@") if db else svc.sqlite_path
        assert code != 0 and err.splitlines() == [
            f"error: another serve uses the database {shown}; stop it first (one serve a database: its local "
            "workers' token and the queue's leases are its own)"], err
        assert tokens(svc, db) == before and svc.instructor_token == instructor          # nothing changed
        out = svc.cli("submit", team_project(tmp_path / "team", commands=["echo still-served"]), token=team,
                      timeout=300)
        assert out.returncode == 0 and "still-served" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
        svc.kill()                                                # kill -9: the lock goes with the process
        svc.start()
        assert svc.cli("jobs", "list", token=team).returncode == 0
    finally:
        svc.close()


@pytest.mark.timeout(600)
def test_a_second_serve_on_the_same_port_or_sqlite_database_is_refused(running_service, tmp_path):
    check_second_serves_refused(running_service, tmp_path)


@pytest.mark.timeout(600)
def test_a_second_serve_on_the_same_postgres_database_is_refused(running_service, tmp_path):
    postgres = started_postgres(tmp_path / "pg")
    try:
        check_second_serves_refused(running_service, tmp_path, postgres.url)
    finally:
        postgres.stop()
