"""The HTTP application (FastAPI): the queue's state behind authenticated routes.

    GET  /health                              the process answers (liveness)
    GET  /ready                               the database answers (readiness); 503 otherwise
    GET  /api/whoami                          any token: its kind and name
    POST /api/jobs?kind=ranked&milestone=m2&size=100   team: queue an upload (body: the tar.gz)
    GET  /api/jobs[?team=T]                   team: its own jobs; instructor: all (or one team's)
    GET  /api/jobs/{id}                       team: its own (another team's id: 404); instructor: any
    GET  /api/jobs/{id}/transcript            the transcript so far, as text
    GET  /api/jobs/{id}/events?after=SEQ      server-sent events: queued (place), line, notice, end
    POST /api/jobs/{id}/cancel
    GET  /api/ranking?milestone=&size=&format=table|csv|json   team or instructor (a team: pseudonyms for the
                                              other teams where the instructor chose them on /admin)
    GET  /api/deadlines
    POST /api/admin/teams {names, skip_existing}     instructor: tokens shown once
    GET  /api/admin/teams, POST /api/admin/teams/revoke {name}, POST /api/admin/teams/rotate {name}
    GET  /api/admin/uncounted                        instructor: records kept as not counted (late, cancelled)
    POST /api/admin/workers {name}                   instructor: a worker token
    PUT  /api/admin/deadlines {milestone, deadline}  instructor (ISO 8601 with its zone; null clears)
    POST /api/worker/claim {slot, gpu, device, wait} worker: the next job and its lease, or 204
    GET  /api/worker/jobs/{id}/upload                worker (X-Lease): the job's upload
    POST /api/worker/jobs/{id}/chunks {chunks}       worker: transcript chunks [[seq, text]]
    POST /api/worker/jobs/{id}/heartbeat, /finish {status, exit_code, reason, record}, /release
    GET  /, /team, /jobs/{id}, /admin, /login ...    the class's pages (pages.py: a session cookie, not a token)

Tokens travel only in ``Authorization: Bearer``; an error is JSON ``{"error": "one line"}``
(``Retry-After`` where waiting helps: 429, and 503 while the database is down). Database work
runs in threads (``anyio.to_thread``), each transaction on a connection borrowed from a bounded
pool (db.py). A live stream reads the database when it starts and when its job's state changes;
a running job's chunks reach it from memory as they are posted (``Hub``); a waiting claim is
woken by a new job, one claim a job.
"""
import asyncio
import functools
import json
import math
import time
import weakref
from collections import deque
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from sse_starlette import EventSourceResponse

from . import jobs
from . import upload as uploads
from .db import Unavailable
from .jobs import ENDED, QUEUED, Lost, Refused, duration, public
from .http import (DOWN_RETRY, AccessLog, address, check_job_id, error, int_param, parse_deadline, read_body,
                   read_json)
from .logs import flush_repeats, log
from .pages import add_pages
from .runs import (ConfigError, DEFAULT_SIZE, GPU_MILESTONES, MILESTONES, StoreError, check_build_config, printable,
                   ranking_report)
from .tokens import FailureLimiter, Tokens
from .worker_api import add_worker_routes

FOLLOW_BATCH = 500


@dataclass
class Settings:
    rules: jobs.Rules = field(default_factory=jobs.Rules)
    max_upload: int = uploads.MAX_UPLOAD
    max_failures: int = 20                       # failed token checks per address and window
    failure_window: float = 60.0
    claim_wait: float = 25.0                     # seconds a worker's claim waits for a job
    reap_every: float = 5.0
    local_workers: tuple = ()                    # names of this server's own workers (serve --workers)
    ranking_seconds: float = 10.0                # a ranking is computed again at least this often (new
                                                 # records through this server: within a second)


class Hub:
    """In-process wake-ups and the newest transcript chunks, so that a live stream of a running job
    reads the database only when the job's state changes (claimed, ended, taken back, cancelled):
    a posted chunk wakes its followers with the chunk itself (``tails``), and the state changes
    count in ``versions``. Waiting claims are woken one at a time (``wake_claim``)."""

    TAIL = 256                                    # chunks of a job kept in memory for its followers

    def __init__(self):
        self._jobs = weakref.WeakValueDictionary()
        self.versions = {}                        # job id -> number of its last state change here
        self.tails = {}                           # job id -> deque of (seq, text) posted here since then
        self.counter = 0
        self.queue_version = 0                    # counts changes of the queue (places are computed again)
        self.records_version = 0
        self.claimers = deque()                   # (future, gpu) of claims waiting for a job

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

    def wake_claim(self, gpu_needed=False):
        """Wake one waiting claim able to take a job needing a GPU (``gpu_needed``), oldest first:
        never the whole herd of idle workers for one job."""
        for item in list(self.claimers):
            future, gpu = item
            if future.done():
                self.claimers.remove(item)
            elif gpu or not gpu_needed:
                self.claimers.remove(item)
                future.set_result(True)
                return

    def wake_all(self):
        """Every waiting claim answers now (the server is draining)."""
        while self.claimers:
            future, _ = self.claimers.popleft()
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


class Service:
    """What the routes share: the database, tokens, limits, wake-ups, caches."""

    def __init__(self, db, settings):
        self.db = db
        self.settings = settings
        self.tokens = Tokens(db)
        self.failures = FailureLimiter(settings.max_failures, settings.failure_window)
        self.hub = None
        self.loop = None
        self.draining = False
        self._places = (0.0, -1, {}, None)
        self._places_lock = None
        self._ranking = {}
        self._ranking_locks = {}
        self._down_logged = 0.0
        self.tasks = []
        self.web = None                           # the pages (pages.Web), made with the application

    async def run(self, fn, *args, **kwargs):
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))

    def down(self, exc):
        now = time.monotonic()
        if now - self._down_logged > 5:
            self._down_logged = now
            log("db.unavailable", level="warning", reason=str(exc))

    async def places(self, job_id=None):
        """({job id: jobs ahead}, snapshot), computed at most twice a second, and again after a
        change of the queue (or every 5 s, for changes made by another server process); at once
        where it lacks ``job_id`` (queued since)."""
        def fresh():
            at, version, places, snap = self._places
            age = time.monotonic() - at
            return snap is not None and (age < 0.5 or (version == self.hub.queue_version and age < 5)) and \
                (job_id is None or job_id in places)
        if fresh():
            return self._places[2:]
        async with self._places_lock:
            if fresh():
                return self._places[2:]
            version = self.hub.queue_version
            snap = await self.run(jobs.snapshot, self.db)
            places = jobs.places(snap)
            self._places = (time.monotonic(), version, places, snap)
            return places, snap

    def with_store(self, fn):
        """``fn(store)`` on a record store borrowed from the pool; Unavailable where the database
        is down."""
        try:
            with self.db.borrowed() as store:
                return fn(store)
        except StoreError as exc:
            raise Unavailable(str(exc)) from exc


# ---------------------------------------------------------------------------- the application

def make_app(service):
    settings = service.settings
    db = service.db

    @asynccontextmanager
    async def lifespan(app):
        service.hub = Hub()
        service.loop = asyncio.get_running_loop()
        service._places_lock = asyncio.Lock()
        try:
            await service.run(jobs.restarted, db, settings.local_workers)
        except Unavailable as exc:
            service.down(exc)
        service.tasks.append(asyncio.ensure_future(reaper()))
        log("server.ready", db=db.shown)
        try:
            yield
        finally:
            for task in service.tasks:
                task.cancel()
            db.close_all()

    async def reaper():
        while True:
            await asyncio.sleep(settings.reap_every)
            try:
                changed = await service.run(jobs.reap, db, settings.rules)
            except Unavailable as exc:
                service.down(exc)
                continue
            except Exception as exc:                       # noqa: BLE001  the reaper must go on
                log("reaper.error", level="error", reason=f"{type(exc).__name__}: {exc}")
                continue
            for job_id, state in changed:
                log("job.taken_back" if state == QUEUED else "job.ended", job=job_id, state=state)
                service.hub.job_changed(job_id)
                service.hub.wake_claim(gpu_needed=False)
            if changed:
                service.hub.queue_changed()
            service.hub.prune()
            flush_repeats()

    app = FastAPI(title="ece408_op submission service", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.add_middleware(AccessLog)

    @app.exception_handler(Refused)
    async def refused(request, exc):
        return error(exc.status, str(exc), exc.retry_after)

    @app.exception_handler(Unavailable)
    async def unavailable(request, exc):
        service.down(exc)
        return error(503, f"the service's database cannot be reached right now; try again in {DOWN_RETRY} s",
                     DOWN_RETRY)

    @app.exception_handler(Lost)
    async def lost(request, exc):
        return error(409, "this worker no longer holds the job (taken back, cancelled or ended)")

    @app.exception_handler(uploads.UploadError)
    async def bad_upload(request, exc):
        return error(400, str(exc))

    async def authenticate(request, *kinds):
        where = address(request)
        wait = service.failures.wait(where)
        if wait:
            raise Refused(429, f"too many failed token checks from this address; try again in {duration(wait)}",
                          retry_after=math.ceil(wait))
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Refused(401, "this needs a token: python -m ece408_op login (or $ECE408_TOKEN)")
        principal = service.tokens.cached(token.strip())
        if principal is None:
            principal = await service.run(service.tokens.verify, token.strip())
        if not principal:
            service.failures.fail(where)
            log("auth.failed", level="warning", address=where, path=request.url.path)
            raise Refused(401, "the token was not accepted (mistyped, revoked or rotated); ask the course staff "
                               "for a new one")
        if principal.kind not in kinds:
            needs = {"instructor": "the instructor's token", "worker": "a worker's token"}
            raise Refused(403, f"this needs {' or '.join(needs.get(k, 'a team token') for k in kinds)}")
        return principal

    async def own_job(request, job_id):
        principal = await authenticate(request, "team", "instructor")
        team = principal.name if principal.kind == "team" else None
        job = await service.run(jobs.get, db, check_job_id(job_id), team)
        if job is None:
            raise Refused(404, f"no job {job_id} here (jobs list shows yours)")
        return principal, job

    async def with_place(job):
        view = public(job)
        if job["state"] == QUEUED:
            places, snap = await service.places(job["id"])
            view["place"] = places.get(job["id"])
            view["waiting"] = len(snap["queued"])
            view["running"] = snap["running"]
            view["note"] = worker_note(job, snap)
        return view

    def worker_note(job, snap):
        if job["gpu"] and not snap["gpu_workers"]:
            return "no worker with a GPU has asked for work in the last 2 minutes; the job waits for one"
        if not snap["gpu_workers"] and not snap["cpu_workers"]:
            return "no worker has asked for work in the last 2 minutes; the job waits for one"
        return None

    # ------------------------------------------------------------ health
    @app.get("/health")
    async def health():
        return {"status": "ok", "draining": service.draining}

    @app.get("/ready")
    async def ready():
        await service.run(db.ping)
        if service.draining:
            return error(503, "the service is shutting down", DOWN_RETRY)
        return {"status": "ready"}

    @app.get("/api/whoami")
    async def whoami(request: Request):
        principal = await authenticate(request, "team", "worker", "instructor")
        return {"kind": principal.kind, "name": principal.name}

    # ------------------------------------------------------------ teams: jobs
    @app.post("/api/jobs")
    async def submit(request: Request):
        principal = await authenticate(request, "team")
        params = request.query_params
        kind = params.get("kind", "development")
        if kind not in jobs.KINDS:
            raise Refused(400, f"kind is ranked or development, not {printable(kind, 20)}")
        milestone = size = None
        if kind == "ranked":
            milestone = params.get("milestone")
            if milestone not in MILESTONES:
                raise Refused(400, f"a ranked run names its milestone: {', '.join(MILESTONES)}")
            size = int_param(params, "size", 1, 10000, DEFAULT_SIZE)
        body = await read_body(request, settings.max_upload, "upload")
        checked = await service.run(uploads.check, body, kind, milestone, settings.max_upload)
        if kind == "ranked":
            gpu = milestone in GPU_MILESTONES
        else:
            try:
                config = await service.run(check_build_config, uploads.config_text(checked))
            except ConfigError as exc:
                raise Refused(400, "; ".join(f"rai_build.yml: {p}" for p in exc.problems)) from None
            gpu = config.gpu_count > 0
        job = await service.run(jobs.submit, db, settings.rules, principal.name, kind, milestone, size, gpu, body,
                                checked.files())
        log("job.queued", job=job["id"], team=principal.name, kind=kind, milestone=milestone, size=size,
            bytes=len(body))
        service.hub.queue_changed()
        service.hub.wake_claim(gpu_needed=gpu)
        return JSONResponse(await with_place(job), status_code=201)

    @app.get("/api/jobs")
    async def list_jobs(request: Request):
        principal = await authenticate(request, "team", "instructor")
        limit = int_param(request.query_params, "limit", 1, 1000, 50)
        team = principal.name if principal.kind == "team" else request.query_params.get("team")
        found = await service.run(jobs.listing, db, team, limit)
        return {"jobs": [public(j) for j in found]}

    @app.get("/api/jobs/{job_id}")
    async def show_job(request: Request, job_id: str):
        _, job = await own_job(request, job_id)
        return await with_place(job)

    @app.get("/api/jobs/{job_id}/transcript")
    async def show_transcript(request: Request, job_id: str):
        _, job = await own_job(request, job_id)
        return PlainTextResponse(await service.run(jobs.transcript, db, job["id"]))

    @app.post("/api/jobs/{job_id}/cancel")
    async def cancel_job(request: Request, job_id: str):
        principal = await authenticate(request, "team", "instructor")
        team = principal.name if principal.kind == "team" else None
        job = await service.run(jobs.cancel, db, check_job_id(job_id), team)
        if job is None:
            raise Refused(404, f"no job {job_id} here (jobs list shows yours)")
        log("job.cancel", job=job_id, by=principal.kind, state=job["state"])
        service.hub.job_changed(job_id)
        service.hub.queue_changed()
        return public(job)

    @app.get("/api/jobs/{job_id}/events")
    async def events(request: Request, job_id: str):
        _, job = await own_job(request, job_id)
        after = request.headers.get("last-event-id") or request.query_params.get("after") or "-1"
        try:
            after = int(after)
        except ValueError:
            raise Refused(400, "after (or Last-Event-ID) is a chunk number") from None
        return EventSourceResponse(follow(job["id"], after), ping=15, send_timeout=30)

    async def follow(job_id, cursor):
        """The job's events from chunk ``cursor`` on: what is new is read from the database at
        the start, after each change of the job's state and every 15 s; in between, a running
        job's chunks come from the hub as they are posted, and a queued job's place is looked
        at every 2 s."""
        shown, waited, job, seen, read_at = None, False, None, None, 0.0
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
                    job, chunks = await service.run(jobs.follow, db, job_id, cursor, FOLLOW_BATCH)
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
                yield {"event": "end", "data": json.dumps(public(job))}
                return
            if job["state"] == QUEUED:
                view = await with_place(job)
                place = {k: view[k] for k in ("place", "waiting", "running", "note")}
                if place != shown:
                    yield {"event": "queued", "data": json.dumps(place)}
                    shown = place
            await wait_first([wake], 2.0 if job["state"] == QUEUED else 15.0)

    # ------------------------------------------------------------ the ranking
    @app.get("/api/ranking")
    async def ranking(request: Request):
        principal = await authenticate(request, "team", "instructor")
        params = request.query_params
        milestone = params.get("milestone")
        if milestone is not None and milestone not in MILESTONES:
            raise Refused(400, f"milestone is one of {', '.join(MILESTONES)}")
        size = int_param(params, "size", 1, 10000)
        fmt = params.get("format", "table")
        if fmt not in ("table", "csv", "json"):
            raise Refused(400, "format is table, csv or json")
        media = "application/json" if fmt == "json" else "text/plain"
        if principal.kind == "team" and await service.web.anonymised_for(principal):    # the instructor's choice
            return Response(await service.web.api_ranking(milestone, size, fmt, principal.name) + "\n", media_type=media)
        key = (milestone, size, fmt)
        lock = service._ranking_locks.setdefault(key, asyncio.Lock())
        async with lock:
            version, at, body = service._ranking.get(key, (None, 0.0, None))
            age = time.monotonic() - at
            if body is None or age > settings.ranking_seconds or \
                    (version != service.hub.records_version and age > 1.0):       # new records: at most once a second
                version = service.hub.records_version
                body = await service.run(service.with_store,
                                         lambda store: ranking_report(store, milestone, size, fmt).text)
                service._ranking[key] = (version, time.monotonic(), body)
        return Response(body + "\n", media_type=media)

    @app.get("/api/deadlines")
    async def show_deadlines(request: Request):
        await authenticate(request, "team", "instructor")
        return {"deadlines": await service.run(jobs.deadlines, db), "now": time.time()}

    # ------------------------------------------------------------ the instructor
    @app.post("/api/admin/teams")
    async def add_teams(request: Request):
        await authenticate(request, "instructor")
        data = await read_json(request)
        names = data.get("names")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise Refused(400, "names is a list of team names")
        added = await service.run(service.tokens.add_teams, names, bool(data.get("skip_existing")))
        log("teams.added", count=sum(1 for a in added if "token" in a))
        return {"teams": added}

    @app.get("/api/admin/teams")
    async def list_teams(request: Request):
        await authenticate(request, "instructor")
        return {"teams": await service.run(service.tokens.list_teams)}

    @app.post("/api/admin/teams/revoke")
    async def revoke_team(request: Request):
        await authenticate(request, "instructor")
        name = (await read_json(request)).get("name")
        await service.run(service.tokens.revoke_team, name)
        log("team.revoked", team=name)
        return {"name": name, "active": False}

    @app.post("/api/admin/teams/rotate")
    async def rotate_team(request: Request):
        await authenticate(request, "instructor")
        name = (await read_json(request)).get("name")
        token = await service.run(service.tokens.rotate_team, name)
        log("team.rotated", team=name)
        return {"name": name, "token": token}

    @app.get("/api/admin/uncounted")
    async def list_uncounted(request: Request):
        await authenticate(request, "instructor")
        return {"uncounted": await service.run(jobs.uncounted, db)}

    @app.post("/api/admin/workers")
    async def add_worker(request: Request):
        await authenticate(request, "instructor")
        name = (await read_json(request)).get("name")
        token = await service.run(service.tokens.worker_token, name)
        log("worker.token", worker=name)
        return {"name": name, "token": token}

    @app.put("/api/admin/deadlines")
    async def set_deadline(request: Request):
        await authenticate(request, "instructor")
        data = await read_json(request)
        milestone = data.get("milestone")
        if milestone not in MILESTONES:
            raise Refused(400, f"milestone is one of {', '.join(MILESTONES)}")
        at, shown = parse_deadline(data["deadline"]) if data.get("deadline") is not None else (None, None)
        await service.run(jobs.set_deadline, db, milestone, at, shown)
        log("deadline.set", milestone=milestone, deadline=shown)
        return {"milestone": milestone, "deadline": at, "shown": shown}

    add_worker_routes(app, service, authenticate)
    add_pages(app, service, follow=follow, with_place=with_place)   # the class's pages
    return app
