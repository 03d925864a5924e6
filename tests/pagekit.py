"""The pages' tests' helpers: runs stored through the service's own routes (a team submits over
the API; a worker token claims the job, posts its transcript and ends it with a record, as a real
worker does), the application in this process, and a headless Chromium where one can start."""
import os
import shutil
import statistics
import time
from datetime import datetime, timezone

from ece408_op.grading.options import options_key
from ece408_op.team import repeats as repeats_rule
from ece408_op.service.upload import Entry, _tar

FORWARD = "def forward(y, x, k):\n    pass\n"
MODELS = ("ece408-high", "ece408-low")
EXPECTED = {"ece408-high": 0.91, "ece408-low": 0.72}
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


def options(milestone="m2", size=100):
    return {"milestone": milestone, "size": size, "models": list(MODELS), "hidden": None, "repeats": 1,
            "engine": "bubblewrap", "timing": repeats_rule.rule()}


def ranked_upload(text=FORWARD):
    return _tar([Entry("new-forward.py", text.encode())])


def record_of(job, op_times, correct=True, device="AMD EPYC 7B13", reason=None, created=None, status="ok",
              model_names=MODELS, repeats=1, timing=None):
    """The record a worker would send for ``job`` (a dict of the API), its models' Op Times
    ``op_times`` [[per layer] a model]; ``timing``: [[repeat totals] a model] (team/repeats.py),
    each model's figure then their median (the rule's statistic)."""
    created = created or datetime.now(timezone.utc)
    models = []
    for i, (name, times) in enumerate(zip(model_names, op_times)):
        expected = EXPECTED.get(name, 0.5)
        models.append({"model": name, "op_times": list(times), "correctness": expected if correct else 0.1,
                       "expected": expected, "op_time": sum(times), "correct": correct})
        if timing:
            models[-1].update(repeats=list(timing[i]), stopped="bound", op_time=statistics.median(timing[i]))
    opts = {**options(job["milestone"], job["size"]), "repeats": repeats}
    return {"id": job["record_id"], "created_at": created.isoformat(timespec="milliseconds"),
            "team": job["team"],                                             # the stored name, as the worker sends it
            "milestone": job["milestone"], "size": job["size"], "status": status, "exit_code": 0 if status == "ok" else 1,
            "op_time": sum(m["op_time"] for m in models) if status == "ok" else None, "correct": correct,
            "models": models, "device": device, "engine": "bubblewrap", "host": "test", "duration_s": 12.5,
            "transcript": "", "team_files": job["files"], "isolated": True, "options": opts,
            "options_key": options_key(opts), "reason": reason}


class Runs:
    """Runs stored through the routes of a service reached by ``http(token)`` (a context manager
    giving an httpx-like client: httpx.Client or Starlette's TestClient)."""

    def __init__(self, http, worker_token):
        self.http = http
        self.worker = worker_token

    def submit(self, token, milestone="m2", size=100, text=FORWARD):
        with self.http(token) as c:
            answer = c.post("/api/jobs", params={"kind": "ranked", "milestone": milestone, "size": size},
                            content=ranked_upload(text))
        assert answer.status_code == 201, answer.text
        return answer.json()

    def submit_development(self, token, files):
        """A development job of the token's team: rai_build.yml (one echo) and ``files`` {name: text}."""
        from teams import rai_yaml
        entries = [Entry("rai_build.yml", rai_yaml(["echo hi"]).encode())]
        entries += [Entry(name, text.encode()) for name, text in files.items()]
        with self.http(token) as c:
            answer = c.post("/api/jobs", params={"kind": "development"}, content=_tar(entries))
        assert answer.status_code == 201, answer.text
        return answer.json()

    def cancel(self, token, job_id):
        with self.http(token) as c:
            answer = c.post(f"/api/jobs/{job_id}/cancel")
        assert answer.status_code == 200, answer.text
        return answer.json()

    def claim(self, device="AMD EPYC 7B13"):
        with self.http(self.worker) as c:
            answer = c.post("/api/worker/claim", json={"slot": "s0", "gpu": False, "device": device, "wait": 0})
        assert answer.status_code == 200, answer.text
        return answer.json()

    def lines(self, claimed, lines, first=None):
        """Post ``lines`` (texts) as the claimed job's next chunks; returns the next number."""
        seq = claimed["job"]["next_seq"] if first is None else first
        with self.http(self.worker) as c:
            answer = c.post(f"/api/worker/jobs/{claimed['job']['id']}/chunks", headers={"X-Lease": claimed["lease"]},
                            json={"chunks": [[seq + i, text] for i, text in enumerate(lines)]})
        assert answer.status_code == 200, answer.text
        return seq + len(lines)

    def finish(self, claimed, record=None, status="ok", reason=None):
        with self.http(self.worker) as c:
            answer = c.post(f"/api/worker/jobs/{claimed['job']['id']}/finish", headers={"X-Lease": claimed["lease"]},
                            json={"status": status, "exit_code": 0, "reason": reason, "record": record})
        assert answer.status_code == 200, answer.text

    def run(self, token, op_times, milestone="m2", size=100, lines=(), **record):
        """A ranked job of the token's team, run to its end with a record; returns the job's id."""
        job = self.submit(token, milestone, size)
        claimed = self.claim(record.get("device", "AMD EPYC 7B13"))
        assert claimed["job"]["id"] == job["id"], "another job was claimed first"
        transcript = ["* Running python -m ece408_op m2 (the grader's harness)\n", *lines,
                      *[f"Op Time: {t:.6f}\n" for times in op_times for t in times]]
        self.lines(claimed, transcript)
        job = {**job, "record_id": claimed["job"]["record_id"]}
        self.finish(claimed, record_of(job, op_times, **record))
        return job["id"]


def failed_record(job, reason="the harness exited with status 1 before any Op Time"):
    """The record of a ranked run that failed before it timed anything: its models named, no
    Op Time, no Correctness (as a run that crashed in its first layer stores it)."""
    record = record_of(job, [[], []], status="failed", correct=False, reason=reason)
    for m in record["models"]:
        m.update(op_times=[], op_time=None, correctness=None, correct=False)
    return record


def chromium_or_skip():
    """(sync_playwright, launch arguments) where Playwright and Chromium are here; else skip saying why."""
    import pytest
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the browser tests need Playwright: pip install playwright (its own browsers are not used)")
    path = os.environ.get("ECE408_CHROMIUM") or (CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium"))
    if not path:
        pytest.skip("the browser tests need Chromium: apt-get install chromium (.ci/system-packages)")
    return sync_playwright, {"executable_path": path, "args": CHROMIUM_ARGS}


def wait_until(check, timeout=30, what="the condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} did not hold in {timeout} s")

