"""Uploads as the server keeps them (service/uploadstore.py), on a real service (SQLite and
PostgreSQL): a file named by its SHA-256 under the state folder, none in the database, deleted
once no job holds it; a bound on the bytes in flight, answered 503 before the body is read; the
upload quotas, each refusal one line naming its quota; ranked uploads kept for a time and a team's
last five longer. The storm of large uploads: tests/service/test_upload_storm.py."""
import hashlib
import os
import socket
import subprocess
import time

import pytest

from hostilekit import (db_path, development, exchange, member, module_service,  # noqa: F401
                        request_bytes)
from suitekit import python_command
from pagekit import FORWARD, ranked_upload, wait_until

pytestmark = [pytest.mark.service]

IN_FLIGHT_MIB = 8
MAX_UPLOAD_MIB = 7                       # what a chunked upload (no Content-Length) counts as
TEAM_QUOTA = 7 << 20                     # bytes: one upload of RANDOM, not two
QUOTA = 10 << 20                         # bytes: two teams' uploads of RANDOM, not three
RANDOM = 4 << 20                         # bytes of incompressible file data in a quota's upload
KEEP_DAYS = 0.0001                       # ranked uploads kept 8.6 s (the reaper looks every 2 s)

svc = module_service("uploadstore", "--upload-bytes-in-flight", str(IN_FLIGHT_MIB), "--max-upload", str(MAX_UPLOAD_MIB),
                     "--team-upload-quota", str(TEAM_QUOTA / 2**20), "--upload-quota", str(QUOTA / 2**20),
                     "--keep-ranked-uploads", str(KEEP_DAYS), "--max-waiting", "20", "--ranked-per-hour", "20")


def team(svc, name):
    return svc.add_teams(f"{name}-{time.monotonic_ns() % 10**9}").popitem()[1]


def stored(svc, sha256):
    return svc.root / "state" / "ece408_op" / "service" / "uploads" / "sha256" / sha256[:2] / sha256


def query(svc, sql):
    url = db_path(svc)
    if url.startswith("postgresql://"):
        import psycopg
        with psycopg.connect(url) as conn:
            return conn.execute(sql).fetchall()
    import sqlite3
    with sqlite3.connect(url, timeout=30) as conn:
        return conn.execute(sql).fetchall()


def post(svc, token, body, **params):
    with svc.http(token) as http:
        return http.post("/api/jobs", params=params or None, content=body)


def random_upload():
    return development(member("data.bin", os.urandom(RANDOM)))


def cancel(svc, job_id):
    assert svc.admin("POST", f"/api/jobs/{job_id}/cancel").status_code == 200


def test_an_upload_is_a_file_named_by_its_sha256_and_not_in_the_database(svc):
    """A development upload is kept as <state>/uploads/sha256/ab/abc..., its bytes as sent; the
    database holds none of it; once its job ends (cancelled) the file is deleted."""
    token = team(svc, "filed")
    body = development(member("src/notes.txt", b"kept on disk"))
    answer = post(svc, token, body)
    assert answer.status_code == 201, answer.text
    job_id, sha256 = answer.json()["id"], hashlib.sha256(body).hexdigest()
    path = stored(svc, sha256)
    assert path.is_file() and path.read_bytes() == body
    assert query(svc, "SELECT COUNT(*) FROM service_uploads")[0][0] == 0
    assert query(svc, f"SELECT upload_sha256, upload_bytes, upload_held FROM service_jobs WHERE id = '{job_id}'") \
        == [(sha256, len(body), 1)]
    cancel(svc, job_id)
    wait_until(lambda: not path.exists(), 20, f"the upload of the cancelled job {job_id} deleted")
    assert query(svc, f"SELECT upload_held FROM service_jobs WHERE id = '{job_id}'") == [(0,)]


def headers_only(svc, token, length=None):
    """An upload's headers (its Content-Length ``length``, else chunked) and no byte of its body:
    (status, headers, body, seconds to the answer) as the server answers within 5 s."""
    framing = {"Content-Length": str(length)} if length is not None else {"Transfer-Encoding": "chunked"}
    return exchange(svc.url, request_bytes("POST", "/api/jobs?kind=development", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/gzip", **framing}, body=None), timeout=5)


def test_past_the_bytes_in_flight_an_upload_is_refused_before_its_body(svc):
    """With 8 MiB in flight at most: while one team's 6 MiB upload is being received, another
    team's 3 MiB upload and a chunked one (no length: counted as the 7 MiB --max-upload) are
    answered 503 with Retry-After from their headers alone, and a small one is accepted; the
    6 MiB one, once whole, is accepted too."""
    first, second, third = team(svc, "sender"), team(svc, "crowded"), team(svc, "small")
    big = development(member("data.bin", os.urandom(6 << 20)))
    head = request_bytes("POST", "/api/jobs?kind=development", headers={
        "Authorization": f"Bearer {first}", "Content-Type": "application/gzip"}, body=big)
    cut = len(head) - len(big) // 2
    sender = socket.create_connection(("127.0.0.1", svc.port), timeout=60)
    try:
        sender.sendall(head[:cut])                       # headers and half of the body: 6 MiB in flight
        time.sleep(1.0)
        status, headers, body, took = headers_only(svc, second, 3 << 20)
        chunked = headers_only(svc, second)
        small = post(svc, third, development())
        sender.sendall(head[cut:])
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sender.recv(65536)
            if not chunk:
                break
            answer += chunk
    finally:
        sender.close()
    assert status == 503 and "retry-after" in headers and took is not None and took < 3, (status, body[:300])
    assert chunked[0] == 503 and "retry-after" in chunked[1] and b"--upload-bytes-in-flight" in chunked[2], chunked
    assert b"in flight" in body and b"\\n" not in body, body
    assert small.status_code == 201, small.text
    assert answer.startswith(b"HTTP/1.1 201"), answer[:300]
    for job in svc.admin("GET", "/api/jobs").json()["jobs"]:
        if job["state"] == "queued":
            cancel(svc, job["id"])


def test_the_upload_quotas_refuse_in_one_line_naming_the_quota(svc):
    """A team's waiting development uploads stay within --team-upload-quota (429), everyone's
    within --upload-quota (503); a cancelled job's upload no longer counts."""
    a, b, c = team(svc, "quota-a"), team(svc, "quota-b"), team(svc, "quota-c")
    first = post(svc, a, random_upload())
    assert first.status_code == 201, first.text
    again = post(svc, a, random_upload())
    assert again.status_code == 429 and "--team-upload-quota" in again.json()["error"], again.text
    assert "retry-after" in again.headers
    other = post(svc, b, random_upload())
    assert other.status_code == 201, other.text
    full = post(svc, c, random_upload())
    assert full.status_code == 503 and "--upload-quota" in full.json()["error"], full.text
    assert "\n" not in full.json()["error"]
    cancel(svc, first.json()["id"])
    later = post(svc, c, random_upload())
    assert later.status_code == 201, later.text
    for job in (other, later):
        cancel(svc, job.json()["id"])


def test_ranked_uploads_expire_and_a_teams_last_five_are_kept(svc):
    """Seven ranked uploads of one team, each its own bytes, their jobs ended (cancelled): once
    --keep-ranked-uploads has passed, the two oldest files are deleted, the last five kept."""
    token = team(svc, "ranked-keeper")
    shas = []
    for i in range(7):
        body = ranked_upload(FORWARD + f"\n# version {i}\n")
        answer = post(svc, token, body, kind="ranked", milestone="m2", size=100)
        assert answer.status_code == 201, answer.text
        cancel(svc, answer.json()["id"])
        shas.append(hashlib.sha256(body).hexdigest())
        assert stored(svc, shas[-1]).is_file()
    time.sleep(KEEP_DAYS * 86400)
    wait_until(lambda: not stored(svc, shas[0]).exists() and not stored(svc, shas[1]).exists(), 20,
               "the two oldest ranked uploads deleted")
    assert all(stored(svc, s).is_file() for s in shas[2:])


def test_a_bound_in_flight_under_the_largest_upload_is_refused_in_one_line(tmp_path):
    """serve --upload-bytes-in-flight below --max-upload would never receive the largest upload:
    refused at the start, one line, exit 2."""
    result = subprocess.run([*python_command(), "-m", "ece408_op", "serve", "--upload-bytes-in-flight", "8",
                             "--max-upload", "16", "--state-dir", str(tmp_path)], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines[-1:]) == 1 and "--upload-bytes-in-flight 8 is less than" in lines[-1], \
        result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_database_from_before_serves_its_blob_uploads_and_lets_them_go(database, tmp_path, postgres_server):
    """A database at schema 5 (uploads as BLOBs in service_uploads): migration 6 marks the job as
    holding its upload; the worker's read of it gives the BLOB; the job's end deletes the BLOB."""
    from ece408_op.service import jobs
    from ece408_op.service.db import MIGRATIONS, Database
    upload = development(member("old.txt", b"from before"))
    job_id, lease, now = "a" * 32, "b" * 32, time.time()
    row = dict.fromkeys(jobs.JOB_COLUMNS)
    row.update(id=job_id, team="old-team", kind="development", gpu=0, state="running", submitted_at=now,
               started_at=now, heartbeat_at=now, time_limit=600.0, attempts=1, lease=lease, worker="w",
               cancel_requested=0, next_seq=0, upload_bytes=len(upload), upload_sha256=hashlib.sha256(upload).hexdigest(),
               files="[]")
    url = str(tmp_path / "old.db") if database == "sqlite" else postgres_server().create_database("old5")
    if database == "sqlite":
        import sqlite3
        conn = sqlite3.connect(url)
        mark, blob = "?", "BLOB"
    else:
        import psycopg
        conn = psycopg.connect(url)
        mark, blob = "%s", "BYTEA"
    conn.execute("CREATE TABLE service_schema_version (version INTEGER NOT NULL)")
    for version, statements in enumerate(MIGRATIONS[:5], start=1):
        for statement in statements:
            conn.execute(statement.replace("{blob}", blob))
        conn.execute(f"INSERT INTO service_schema_version (version) VALUES ({version})")
    conn.execute(f"INSERT INTO service_teams (name, created_at, name_key) VALUES ({mark}, {mark}, {mark})",
                 ("old-team", now, "old-team"))
    conn.execute(f"INSERT INTO service_jobs ({', '.join(jobs.JOB_COLUMNS)}) VALUES "
                 f"({', '.join([mark] * len(jobs.JOB_COLUMNS))})", [row[c] for c in jobs.JOB_COLUMNS])
    conn.execute(f"INSERT INTO service_uploads (job_id, data) VALUES ({mark}, {mark})", (job_id, upload))
    conn.commit()
    conn.close()
    db = Database(url)
    try:
        assert db.schema_version() == len(MIGRATIONS)
        with db.transaction(write=False) as tx:
            assert tx.value("SELECT upload_held FROM service_jobs WHERE id = ?", (job_id,)) == 1
        assert jobs.upload(db, job_id, lease) == (upload, row["upload_sha256"])
        jobs.finish(db, job_id, lease, "ok", exit_code=0)
        with db.transaction(write=False) as tx:
            assert tx.value("SELECT COUNT(*) FROM service_uploads") == 0
            assert tx.value("SELECT upload_held FROM service_jobs WHERE id = ?", (job_id,)) == 0
    finally:
        db.close_all()
