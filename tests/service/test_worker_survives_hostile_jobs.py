"""A worker never dies on a job, against a real ``serve`` and a real ``worker --server``: hostile
uploads that an earlier check let through are refused by the server (HTTP 400, one line); the
same uploads written straight into the service's database (as a bug or a forger would) reach the
worker's own check, which ends each job with status error and the reason; forged jobs (a kind or
milestone of no course, bytes that are not the upload the server took) and a scratch folder the
worker cannot use end the same way; after each, the same worker process runs an honest job to
its end. A worker whose token the server stops accepting exits non-zero in one line; a slot
thread that dies is started again."""
import gzip
import hashlib
import io
import secrets
import shutil
import sqlite3
import tarfile
import threading
import time

import pytest

from servicekit import Service
from teams import rai_yaml, team_project

from ece408_op.service import upload as uploads
from ece408_op.service.jobs import JOB_COLUMNS
from ece408_op.service.worker import Slot, WorkerOptions, supervise

CONFIG = rai_yaml(["echo hi"]).encode()            # a rai_build.yml the server's own check takes


def tar_gz(members, fmt=tarfile.GNU_FORMAT):
    """A gzip-compressed tar of (name, data or None for a folder, PAX headers)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=fmt) as tar:
        for name, data, headers in members:
            info = tarfile.TarInfo(name)
            info.pax_headers = headers or {}
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue())


def config():
    return ("rai_build.yml", CONFIG, None)


# uploads an earlier check took (HTTP 201, or 500 for the PAX one), each with the reason it is refused for
HOSTILE = {
    "a file where a folder was": (tar_gz([config(), ("x/y", b"1", None), ("x", b"2", None)]),
                                  "the upload puts x/y under a file (x)"),
    "GNU.sparse.map": (tar_gz([config(), ("s", b"1", {"GNU.sparse.map": "zz"})], tarfile.PAX_FORMAT),
                       "sets GNU.sparse.map, which the service does not take"),
    "names equal but for case": (tar_gz([config(), ("Kernel.cu", b"1", None), ("kernel.cu", b"2", None)]),
                                 "names Kernel.cu and kernel.cu, one name where case"),
    "names equal but for normalisation": (tar_gz([config(), ("caf\u00e9", b"1", None), ("cafe\u0301", b"2", None)]),
                                          "one name where case or Unicode normalisation is ignored"),
}


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    service = Service(tmp_path_factory.mktemp("hostile") / "svc", workers=0,
                      args=["--engine", "bubblewrap", "--development-per-hour", "1000", "--max-waiting", "100"]).start()
    yield service
    service.close()


def inject(svc, team, upload, kind="development", milestone=None, size=None, sha256=None):
    """A job written straight into the service's SQLite database, past every check of the server."""
    job_id = secrets.token_hex(16)
    row = dict.fromkeys(JOB_COLUMNS)
    row.update(id=job_id, team=team, kind=kind, milestone=milestone, size=size, gpu=0, state="queued",
               submitted_at=time.time(), time_limit=600.0, attempts=0, cancel_requested=0,
               record_id=job_id if kind == "ranked" else None, next_seq=0, upload_bytes=len(upload),
               upload_sha256=sha256 or hashlib.sha256(upload).hexdigest(), files="[]")
    with sqlite3.connect(svc.sqlite_path, timeout=60) as conn:
        conn.execute(f"INSERT INTO service_jobs ({', '.join(JOB_COLUMNS)}) VALUES ({', '.join('?' * len(JOB_COLUMNS))})",
                     [row[c] for c in JOB_COLUMNS])
        conn.execute("INSERT INTO service_uploads (job_id, data) VALUES (?, ?)", (job_id, upload))
    return job_id


def honest(svc, token, folder):
    """An honest development run, through the server's own route; its job id."""
    with svc.http(token) as http:
        answer = http.post("/api/jobs", content=uploads.pack_development(folder)[0])
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def ended(svc, job_id, timeout=240):
    return svc.wait_for_state(job_id, ("done", "failed", "cancelled"), timeout=timeout)


@pytest.mark.service
@pytest.mark.timeout(900)
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the worker's sandbox needs bubblewrap")
def test_hostile_and_forged_jobs_end_in_error_and_the_worker_goes_on(tmp_path, svc):
    token = svc.add_teams("mallory")["mallory"]
    worker = svc.worker(svc.worker_token("w1"), "--gpus", "none", "--engine", "bubblewrap", log_name="w1.log")
    try:
        check_hostile_and_forged_jobs(tmp_path, svc, token, worker)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def check_hostile_and_forged_jobs(tmp_path, svc, token, worker):
    plain = team_project(tmp_path / "plain", commands=["echo honest-run"])
    with svc.http(token) as http:
        for case, (body, message) in HOSTILE.items():
            answer = http.post("/api/jobs", content=body)
            assert answer.status_code == 400, (case, answer.status_code, answer.text)
            assert message in answer.json()["error"] and "\n" not in answer.json()["error"], (case, answer.text)
    good = uploads.pack_development(plain)[0]
    forged = {
        "a kind of no course": (inject(svc, "mallory", good, kind="weird"),
                                "the upload was refused by the worker: the job's kind is weird, not ranked or development"),
        "a milestone of no course": (inject(svc, "mallory", tar_gz([("new-forward.py", b"x", None)]), kind="ranked",
                                            milestone="m9", size=10),
                                     "the upload was refused by the worker: a ranked job names a milestone (m2, m3, final), "
                                     "not m9"),
        "bytes the server did not take": (inject(svc, "mallory", good, sha256="0" * 64),
                                          "the upload the worker downloaded is not the one the server accepted"),
    }
    after = {}
    for case, (body, message) in HOSTILE.items():
        forged[case] = (inject(svc, "mallory", body), ("the upload was refused by the worker: ", message))
    for case, (job_id, _) in forged.items():
        after[case] = honest(svc, token, plain)
    for case, (job_id, message) in forged.items():
        job = ended(svc, job_id)
        assert job["state"] == "done" and job["status"] == "error", (case, job)
        fragments = (message,) if isinstance(message, str) else message
        assert all(f in job["reason"] for f in fragments) and "\n" not in job["reason"], (case, job["reason"])
        assert f"error: {fragments[0]}" in svc.transcript(job_id)                # the team reads it too
        run = ended(svc, after[case])
        assert run["status"] == "ok" and "honest-run" in svc.transcript(after[case]), (case, run)
        assert run["worker"] == job["worker"]
    assert worker.poll() is None                                       # the same process throughout
    log = (svc.root / "w1.log").read_text()
    assert log.count("worker.ready") == 1 and "slot_died" not in log and "Traceback" not in log, log[-3000:]
    worker.terminate()
    assert worker.wait(timeout=60) == 0                                # a signal: a clean stop


@pytest.mark.service
@pytest.mark.timeout(600)
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the worker's sandbox needs bubblewrap")
def test_a_scratch_folder_the_worker_cannot_use_ends_the_job_not_the_worker(tmp_path, svc):
    token = svc.add_teams("scratchy")["scratchy"]
    scratch = tmp_path / "scratch"
    scratch.write_text("a file where the worker's scratch folder should be")
    worker = svc.worker(svc.worker_token("w2"), "--gpus", "none", "--engine", "bubblewrap", "--scratch", scratch,
                        log_name="w2.log")
    try:
        plain = team_project(tmp_path / "plain", commands=["echo second-try"])
        first = ended(svc, honest(svc, token, plain))
        assert first["worker"] == "w2/cpu0" and first["status"] == "error" and first["reason"].startswith(
            f"the worker could not make a folder in {scratch} (Not a directory)"), first
        scratch.unlink()
        scratch.mkdir()
        second = ended(svc, honest(svc, token, plain))
        assert second["status"] == "ok" and "second-try" in svc.transcript(second["id"]), second
        assert worker.poll() is None
    finally:
        worker.kill()
        worker.wait()


@pytest.mark.service
@pytest.mark.timeout(300)
def test_a_worker_refused_by_the_server_exits_non_zero_in_one_line(svc):
    worker = svc.worker(svc.worker_token("doomed"), "--gpus", "none", log_name="doomed.log")
    deadline = time.monotonic() + 60
    while "worker.ready" not in (svc.root / "doomed.log").read_text():
        assert time.monotonic() < deadline and worker.poll() is None, (svc.root / "doomed.log").read_text()
        time.sleep(0.2)
    with sqlite3.connect(svc.sqlite_path, timeout=60) as conn:          # revoked, as a leaked token would be
        conn.execute("UPDATE service_tokens SET revoked_at = ? WHERE kind = 'worker' AND name = 'doomed'",
                     (time.time(),))
    code = worker.wait(timeout=200)
    log = (svc.root / "doomed.log").read_text()
    assert code == 2, log[-2000:]
    assert log.splitlines()[-1] == (f"error: the server at {svc.url} refused this worker: the token was not accepted "
                                    "(mistyped, revoked or rotated); ask the course staff for a new one"), log[-2000:]


class FlakySlot(Slot):
    """A slot whose loop dies once (as a bug would kill its thread), then works and stops."""

    def __init__(self, stop):
        self.name, self.stop, self.options = "flaky", stop, WorkerOptions(server="", token="")
        self.fatal = self.crash = None
        self.finished = False
        self.calls = 0

    def loop(self):
        self.calls += 1
        if self.calls == 1:
            raise KeyError("a bug")
        self.stop.set()


def test_a_slot_thread_that_dies_is_started_again(capfd):
    stop = threading.Event()
    slot = FlakySlot(stop)
    started = time.monotonic()
    supervise([slot], stop, poll=0.05)
    assert slot.calls == 2 and slot.finished and time.monotonic() - started < 10
    err = capfd.readouterr().err
    assert "error worker.slot_died slot=flaky reason=\"KeyError: 'a bug' at test_worker_survives_hostile_jobs.py:" in err
    assert "worker.slot_restarted slot=flaky" in err
