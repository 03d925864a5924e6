"""The live part of the service: the ``Hub`` of in-process wake-ups, and ``follow``, a job's
events as its followers (the API's stream, a job's page) receive them.

A live stream reads the database when it starts and when its job's state changes; a running
job's chunks and its worker's latest step reach it from memory as they are posted (``Hub``); a
waiting claim is woken by a new job, one claim a job.

The events: ``line`` (a chunk of the transcript, its number as the event's id), ``queued`` (the
place), ``progress`` (a running job's step, start and the server's time: ``progress.py``),
``notice``, and ``end`` (the job as the API shows it with its build folder: ``progress.end_event``)."""
import asyncio
import json
import time
import weakref
from collections import deque

from . import buildstore, jobs
from .db import Unavailable
from .http import DOWN_RETRY
from .jobs import ENDED, QUEUED, RUNNING, public
from .progress import end_event, progress_event

FOLLOW_BATCH = 500


class Hub:
    """In-process wake-ups and the newest transcript chunks, so that a live stream of a running job
    reads the database only when the job's state changes (claimed, ended, taken back, cancelled):
    a posted chunk wakes its followers with the chunk itself (``tails``), and the state changes
    count in ``versions``. Waiting claims are woken one at a time (``wake_claim``)."""

    TAIL = 256                                    # chunks of a job kept in memory for its followers
    STEPS = 10000                                 # running jobs' steps kept (a job's is dropped as it changes state)

    def __init__(self):
        self._jobs = weakref.WeakValueDictionary()
        self.versions = {}                        # job id -> number of its last state change here
        self.tails = {}                           # job id -> deque of (seq, text) posted here since then
        self.steps = {}                           # job id -> the step its worker last reported (progress.py)
        self.counter = 0
        self.queue_version = 0                    # counts changes of the queue (places are computed again)
        self.records_version = 0
        self.claimers = deque()                   # (future, gpu, device kind) of claims waiting for a job

    def job(self, job_id):
        event = self._jobs.get(job_id)
        if event is None:
            event = self._jobs[job_id] = asyncio.Event()
        return event

    def _wake(self, job_id):
        event = self._jobs.pop(job_id, None)
        if event is not None:
            event.set()

    def job_changed(self, job_id):
        """The job's state changed: its followers read it from the database."""
        self.counter += 1
        self.versions[job_id] = self.counter
        self.tails.pop(job_id, None)
        self.steps.pop(job_id, None)
        self._wake(job_id)

    def step_posted(self, job_id, step):
        """The running job's worker says where its run is now: its followers show it."""
        if step is None or self.steps.get(job_id) == step:
            return
        self.steps.pop(job_id, None)
        while len(self.steps) >= self.STEPS:          # jobs whose end this process never saw (bounded)
            del self.steps[next(iter(self.steps))]
        self.steps[job_id] = step
        self._wake(job_id)

    def chunks_posted(self, job_id, chunks):
        tail = self.tails.get(job_id)
        if tail is None:
            tail = self.tails[job_id] = deque(maxlen=self.TAIL)
        tail.extend(chunks)
        self._wake(job_id)

    def tail_after(self, job_id, cursor):
        """The chunks after ``cursor`` posted here, in order; None where some are not here."""
        tail = self.tails.get(job_id)
        if not tail:
            return []
        new = []
        for seq, text in reversed(tail):
            if seq <= cursor:
                break
            new.append((seq, text))
        new.reverse()
        return new if not new or new[0][0] == cursor + 1 else None

    def prune(self):
        """Forget the versions of jobs nobody follows (they are only compared by followers)."""
        for job_id in [j for j in self.versions if j not in self._jobs]:
            del self.versions[job_id]
            self.tails.pop(job_id, None)

    def wake_claim(self, gpu_needed=False, kind=None):
        """Wake one waiting claim able to take a job needing a GPU (``gpu_needed``) and asking for
        the device kind ``kind`` (None: any), oldest first: never the whole herd of idle workers
        for one job."""
        for item in list(self.claimers):
            future, gpu, own = item
            if future.done():
                self.claimers.remove(item)
            elif (gpu or not gpu_needed) and kind in (None, own):
                self.claimers.remove(item)
                future.set_result(True)
                return

    def wake_all(self):
        """Every waiting claim answers now (the server is draining)."""
        while self.claimers:
            future = self.claimers.popleft()[0]
            if not future.done():
                future.set_result(True)

    def queue_changed(self):
        self.queue_version += 1


async def wait_first(events, timeout):
    """Until one of ``events`` is set, or ``timeout`` seconds."""
    waits = [asyncio.ensure_future(e.wait()) for e in events if e is not None]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def worker_note(job, snap):
    if job.get("gpu_kind") and job["gpu_kind"] not in snap["kinds"]:
        return (f"no worker on {job['gpu_kind']} (the device kind asked for) has asked for work in the last 2 "
                "minutes; the job waits for one")
    if job["gpu"] and not snap["gpu_workers"]:
        change = "; set rai_build.yml's resources.gpu.count to 0 for a CPU-only run" \
            if job["kind"] == "development" else ""
        return f"no worker with a GPU has asked for work in the last 2 minutes; the job waits for one{change}"
    if not snap["gpu_workers"] and not snap["cpu_workers"]:
        return "no worker has asked for work in the last 2 minutes; the job waits for one"
    return None


async def with_place(service, job):
    """The job as the API shows it; a queued job with its place, the queue's size and a note
    where no worker able to run it asked for work lately; a running job with its progress."""
    view = public(job)
    if job["state"] == QUEUED:
        places, snap = await service.places(job["id"])
        view["place"] = places.get(job["id"])
        view["waiting"] = len(snap["queued"])
        view["running"] = snap["running"]
        view["note"] = worker_note(job, snap)
    elif job["state"] == RUNNING:
        view["progress"] = progress_event(job, service.hub.steps.get(job["id"]))
    return view


async def follow(service, job_id, cursor):
    """The job's events from chunk ``cursor`` on: what is new is read from the database at
    the start, after each change of the job's state and every 15 s; in between, a running
    job's chunks come from the hub as they are posted, and a queued job's place is looked
    at every 2 s."""
    shown, waited, job, seen, read_at, shown_step = None, False, None, None, 0.0, None
    hub = service.hub
    while True:
        wake = hub.job(job_id)
        version = hub.versions.get(job_id, 0)
        chunks = None
        if job is not None and version == seen and time.monotonic() - read_at < 15 and \
                job["state"] not in ENDED:
            chunks = hub.tail_after(job_id, cursor) if job["state"] != QUEUED else []
        if chunks is None:
            try:
                job, chunks = await service.run(jobs.follow, service.db, job_id, cursor, FOLLOW_BATCH)
            except Unavailable as exc:
                service.down(exc)
                if not waited:
                    yield {"event": "notice", "data": json.dumps("the service's database cannot be reached "
                                                                 "right now; waiting for it")}
                    waited = True
                await asyncio.sleep(DOWN_RETRY)
                continue
            waited, seen, read_at = False, version, time.monotonic()
            if job is None:
                return
            if len(chunks) >= FOLLOW_BATCH:
                seen = None                                # more to read: read again at once
        for seq, text in chunks:
            yield {"event": "line", "id": str(seq), "data": json.dumps(text)}
            cursor = seq
        if seen is None:
            continue
        if job["state"] in ENDED:
            yield {"event": "end", "data": json.dumps(await ended(service, job))}
            return
        if job["state"] == RUNNING:
            progress = progress_event(job, hub.steps.get(job_id))
            if (progress["step"], progress["started_at"]) != shown_step:
                yield {"event": "progress", "data": json.dumps(progress)}
                shown_step = (progress["step"], progress["started_at"])
        if job["state"] == QUEUED:
            view = await with_place(service, job)
            place = {k: view[k] for k in ("place", "waiting", "running", "note")}
            if place != shown:
                yield {"event": "queued", "data": json.dumps(place)}
                shown = place
        await wait_first([wake], 2.0 if job["state"] == QUEUED else 15.0)


async def ended(service, job):
    """The ``end`` event's data: the job and, for a development run, its build folder's row."""
    row = None
    if job["kind"] == "development" and service.builds is not None:
        try:
            row = await service.run(buildstore.lookup, service.db, job["id"])
        except Unavailable as exc:              # the end still goes out; the transcript names the folder
            service.down(exc)
    return end_event(job, row)
