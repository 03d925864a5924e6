"""A running job's progress as its followers see it: the step its worker last reported (``build
command 2 of 3: make``, ``model ece408-high (1 of 2): layer 1 (...), fresh run 3 of 5``), its
start (the elapsed time is counted from it, by the server's clock) and, at its end, what ended it.

A step comes from a worker with its transcript's chunks (``POST /api/worker/jobs/{id}/chunks``,
``{"progress": TEXT}``): a worker may send anything, so it is text, cut to STEP_LIMIT characters
with every control character written as an escape (``\\x1b``), and kept in memory only (the hub,
``live.Hub.steps``) while the job runs: a restart forgets it until the worker's next step."""
import time

from . import clock
from ..base.names import printable
from .jobs import RUNNING, public
from .refused import Refused

STEP_LIMIT = 200                         # characters of a step as kept and shown


def step_of(data):
    """The step a worker's post carries (None: none), as kept: one line of at most STEP_LIMIT
    characters, control characters escaped; 400 where it is not text."""
    step = data.get("progress")
    if step is None:
        return None
    if not isinstance(step, str):
        raise Refused(400, "progress is a text (the run's step) or null")
    return printable(" ".join(step[:4 * STEP_LIMIT].split()), STEP_LIMIT)


def progress_event(job, step, now=None):
    """The ``progress`` event of a running ``job``: its step (None: none reported yet), when it
    started and the server's time now (a viewer counts the elapsed time from the two, whatever its
    own clock says)."""
    return {"step": step if job["state"] == RUNNING else None, "started_at": job["started_at"],
            "now": clock.now() if now is None else now}


def build_summary(row, job_id):
    """The ``end`` event's word on a development run's build folder: None where none is kept."""
    if row is None or row["deleted_at"] is not None:
        return None
    return {"files": row["files"], "data_bytes": row["data_bytes"], "expires": time.strftime(
        "%Y-%m-%d %H:%M:%S UTC", time.gmtime(row["expires_at"])), "download": f"/api/jobs/{job_id}/build",
        "page": f"/jobs/{job_id}/build"}


def end_event(job, build_row=None):
    """The ``end`` event of an ended job: the job as the API shows it (state, status, end time,
    the record's summary line) and its build folder, where one is kept."""
    return {**public(job), "build": build_summary(build_row, job["id"]) if job["kind"] == "development" else None}
