"""What every route shares: a server's ``Settings`` and its ``Service`` (the database, tokens, the
failure limiter, the live hub, the queue places and the ranking's caches). ``make_app`` puts the
Service on the application (``app.state.service``); a route reaches it with ``service_of(request)``."""
import asyncio
import functools
import time
from dataclasses import dataclass, field

import anyio

from . import jobs
from . import upload as uploads
from . import uploadstore
from .checker import Checker
from .buildstore import KEEP_DAYS, QUOTA_MIB, TOTAL as BUILD_TOTAL, BuildStore
from .db import Unavailable
from .refused import Refused
from .limits import STREAMS_PER_ADDRESS, Refusals, Streams, Uploads
from .logs import log
from .rankings import Rankings
from .grading_door import StoreError
from .tokens import FailureLimiter, Tokens


@dataclass
class Settings:
    rules: jobs.Rules = field(default_factory=jobs.Rules)
    max_upload: int = uploads.MAX_UPLOAD
    max_failures: int = 20                       # failed token checks per address and window
    max_failures_total: int = None               # ... of all addresses together (None: 10 x max_failures)
    failure_window: float = 60.0
    failure_table: int = None                    # addresses the failure limiter holds (None: max_failures_total;
                                                 # smaller only in tests: $ECE408_FAILURE_TABLE)
    claim_wait: float = 25.0                     # seconds a worker's claim waits for a job
    reap_every: float = 5.0
    local_workers: tuple = ()                    # names of this server's own workers (serve --workers)
    slurm: object = None                         # serve --slurm: what its requests serve (capacity.Slurm; None: no Slurm)
    ranking_seconds: float = 10.0                # a ranking is computed again at least this often (new
                                                 # records through this server: within a second)
    upload_seconds: float = 120.0                # an upload's body arrives within this, or 408
    upload_reads: int = 16                       # bodies read at once on the whole server
    upload_checks: int = 2                       # uploads checked (unpacked, hashed) at once
    upload_bytes_in_flight: int = uploadstore.IN_FLIGHT_MIB << 20   # uploads received and checked at once
    upload_rate: int = uploadstore.RATE_MIB << 20  # bytes a second of all uploads received (0: no bound)
    team_upload_quota: int = uploadstore.TEAM_QUOTA_MIB << 20       # a team's waiting development uploads
    upload_quota: int = uploadstore.QUOTA_MIB << 20                 # everyone's waiting development uploads
    ranked_upload_quota: int = uploadstore.RANKED_QUOTA_MIB << 20   # ranked uploads waiting and kept
    keep_ranked_uploads: float = uploadstore.RANKED_KEEP_DAYS * 86400   # seconds a ranked upload is kept
    upload_dir: str = None                       # where uploads are kept (serve: <state folder>/uploads)
    build_dir: str = None                        # where build folders are kept (serve: <state folder>/builds)
    keep_builds: float = KEEP_DAYS * 86400       # seconds a build folder is kept (0: none kept)
    build_quota: int = QUOTA_MIB << 20           # bytes of build folders a team may have kept
    build_total: int = BUILD_TOTAL               # bytes of build folders all teams together may have kept
    streams_per_address: int = STREAMS_PER_ADDRESS   # live streams from one client address (0: no cap)
    names: str = "unicode"                       # the rule of team names (identity.RULES; serve --names)


class Service:
    """What the routes share: the database, tokens, limits, wake-ups, caches."""

    def __init__(self, db, settings):
        self.db = db
        self.settings = settings
        self.tokens = Tokens(db, settings.names)
        self.failures = FailureLimiter(settings.max_failures, settings.failure_window, settings.max_failures_total,
                                       settings.failure_table)
        self.hub = None                           # live.Hub, made by the application's lifespan
        self.loop = None
        self.draining = False
        self._places = (0.0, -1, {}, None)
        self._places_lock = None
        self._down_logged = 0.0
        self.tasks = []
        self._cancels = {}                        # (job id, team) -> the cancel being written
        self.rankings = Rankings(self)            # the ranking as the API and the pages show it
        self.streams = Streams(per_address=settings.streams_per_address)   # per team, session and address
        self.downloads = Streams(per_team=4, per_address=32, instructor=8, what="downloads")   # build folders
        self.refusals = Refusals()                # refusals that hold (a team past its hourly limit), kept
        self.uploads = Uploads(settings.upload_reads, settings.upload_checks)
        self.checker = Checker(settings.upload_checks)   # the uploads' checks, in processes of their own
        self.in_flight = uploadstore.InFlight(settings.upload_bytes_in_flight)
        self.upload_store = uploadstore.UploadStore(settings.upload_dir, settings) if settings.upload_dir else None
        self.builds = BuildStore.of(settings)    # the development runs' build folders, or None

    def started(self, hub):
        """Bind to the running event loop (the application's start)."""
        self.hub = hub
        self.loop = asyncio.get_running_loop()
        self._places_lock = asyncio.Lock()

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

    async def cancel(self, job_id, principal, **fields):
        """Cancel ``job_id`` for ``principal`` (a team: its own jobs only); the job, or None where
        there is none. Its followers and the queue's places are told; ``fields`` join the log line.
        A cancel storm costs the database one write: a job that has ended is refused (409) from a
        read, and cancels of one job that arrive while its first is being written wait for that
        one's answer rather than queueing a write each."""
        team = principal.name if principal.kind == "team" else None
        key = (job_id, team)
        pending = self._cancels.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        pending = self._cancels[key] = asyncio.ensure_future(self._cancel(job_id, team, principal, fields))
        pending.add_done_callback(lambda done: self._cancels.pop(key, None))
        return await asyncio.shield(pending)

    async def _cancel(self, job_id, team, principal, fields):
        seen = await self.run(jobs.get, self.db, job_id, team)
        if seen is None:
            return None
        if seen["state"] in jobs.ENDED:
            raise Refused(409, f"job {job_id} has already ended ({seen['state']})")
        if seen.get("cancel_requested"):
            return seen                                  # asked already: its worker stops it at its next report
        job = await self.run(jobs.cancel, self.db, job_id, team)
        if job is not None:
            log("job.cancel", job=job_id, by=principal.kind, state=job["state"], **fields)
            self.hub.job_changed(job_id)
            self.hub.queue_changed()
        return job

    def with_store(self, fn):
        """``fn(store)`` on a record store borrowed from the pool; Unavailable where the database
        is down."""
        try:
            with self.db.borrowed() as store:
                return fn(store)
        except StoreError as exc:
            raise Unavailable(str(exc)) from exc


def service_of(request):
    """The Service of the application serving ``request``."""
    return request.app.state.service
