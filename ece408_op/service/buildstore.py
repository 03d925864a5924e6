"""The server's build folders: each development run's ``/build`` as its worker sent it at the run's
end (``buildfolder.py``'s archive), kept ``serve --keep-builds DAYS`` (7) and served to the job's
team only (the instructor: any job's).

* **Received** (``POST /api/worker/jobs/{id}/build`` under the job's lease, ``receive``): the body is
  written to a file under the state folder as it comes (at most ``buildfolder.sent_cap()`` bytes,
  within RECEIVE_SECONDS), hashed on the way, checked by the upload's archive check with the build
  folder's bounds (``buildfolder.check``), then renamed into place and recorded, in a transaction
  that checks the lease again, with its size, SHA-256, counts and expiry (``service_builds``). A
  run attempted again replaces the build of its earlier attempt.
* **Kept** on disk, ``<state>/builds/<job id>-<sha256>.tar.gz``, at most ``serve --build-quota MIB``
  (1024) of them per team (where a new one passes it, the team's oldest are deleted) and at most
  ``serve --build-folders-total BYTES`` (TOTAL: 20 GiB) of all teams' together (where a new one passes
  it, the service's oldest are deleted, whoever's they are; an archive larger than the whole total is
  refused, 413, so the folder never holds more), not in the database: a build
  folder may be hundreds of MiB, and in the database it would make every backup and every copy of
  the queue that large, hold SQLite's one writer while it is written, and pass through the pool's
  connections; on disk it is streamed to the client from its file, and deleting it frees the disk
  at once. The database keeps what the routes decide on (whose, how large, its digest, when it goes).
* **Served** (``response``) to ``GET /api/jobs/{id}/build`` and the job page's link: the file as
  stored, with its length and ``X-Build-SHA256`` (the client checks both).
* **Deleted** when it expires (``reaper``: every few seconds the expired ones, marked deleted, so
  that a download says when it went, and the oldest past the service's total where a restart lowered
  it; every SWEEP_EVERY seconds the files no row names, older than ORPHAN_AGE: a request cut while it
  was written, a server killed between the rename and the record). A job whose folder went says so,
  on its page and in ``jobs download``: when, after how long, and why (expired, the team's quota, the
  service's total).

Two builds stored at once never both pass a bound unseen: the transaction that records one holds
the store's lock (SQLite: its one writer; PostgreSQL: ``pg_advisory_xact_lock(LOCK_KEY)``).
"""
import asyncio
import hashlib
import os
import secrets
import time
from pathlib import Path

from starlette.background import BackgroundTask
from starlette.concurrency import iterate_in_threadpool
from starlette.responses import StreamingResponse

from . import buildfolder, clock, limits
from ..base.archive import size_text
from .db import Unavailable
from .jobs import DONE, ENDED, Lost, duration, when
from .refused import Refused
from .logs import log

KEEP_DAYS = 7.0
QUOTA_MIB = 1024                      # MiB of build folders kept per team (as stored): the oldest go first
TOTAL = 20 << 30                      # bytes of build folders kept on the whole service: the oldest go first
LOCK_KEY = 408435                     # pg_advisory_xact_lock key of the store's bounds (taken: 408408 the records'
                                      # migrations, 408433 the service's, 408434 serve's one-per-database lock)
RECEIVE_SECONDS = 600.0               # a build folder's body arrives within this, or 408
SWEEP_EVERY = 600.0                   # seconds between two looks for files no row names
ORPHAN_AGE = 3600.0                   # a file no row names is deleted once this old
INCOMING = ".incoming-"
CHUNK = 1 << 20
COLUMNS = ("job_id", "team", "bytes", "sha256", "files", "folders", "data_bytes", "created_at", "expires_at",
           "deleted_at", "deleted_why")
EXPIRED, QUOTA, OVER_TOTAL = "expired", "quota", "total"     # why a build folder was deleted


def kept_for(seconds):
    """``7 days``, ``2 h 5 min``: how long a build folder is kept."""
    days = seconds / 86400
    if days >= 1:
        return f"{days:g} day{'s' if days != 1 else ''}"
    return duration(seconds)


def bytes_text(n):
    """``100 bytes``, ``51 KiB``, ``16.0 MiB``, ``20.0 GiB``."""
    if n < 1 << 10:
        return f"{n} bytes"
    return size_text(n) if n < 1 << 30 else f"{n / (1 << 30):.1f} GiB"


class BuildStore:
    """The folder the archives are kept in, how long each is kept (seconds), how many bytes of
    them a team may have kept at once, and how many all teams together (the oldest deleted first)."""

    def __init__(self, folder, keep_seconds, quota=QUOTA_MIB << 20, total=TOTAL):
        self.folder = Path(folder)
        self.keep = float(keep_seconds)
        self.quota = int(quota)
        self.total = int(total)

    @classmethod
    def of(cls, settings):
        """The store ``settings`` asks for, or None where the service keeps no build folders."""
        if not settings.build_dir or settings.keep_builds <= 0:
            return None
        return cls(settings.build_dir, settings.keep_builds, settings.build_quota, settings.build_total)

    def path(self, job_id, sha256):
        return self.folder / f"{job_id}-{sha256}.tar.gz"

    def cap(self):
        """(the largest archive this store takes, as sent; the refusal's words past it)."""
        sent = buildfolder.sent_cap()
        if self.total < sent:
            return self.total, (f"the most this service keeps of all build folders together (serve "
                                f"--build-folders-total {self.total})")
        return sent, "the most this service takes"

    @staticmethod
    def _lock(tx):
        """The store's bounds held by this transaction until it ends (SQLite's write lock already is)."""
        if tx.postgres:
            tx.execute("SELECT pg_advisory_xact_lock(?)", (LOCK_KEY,))

    # ------------------------------------------------------------ receiving (the worker's route)
    async def body_to_file(self, request, cap, most="the most this service takes"):
        """The request's body written to a new file here: (path, size, SHA-256). 413 past ``cap``
        bytes (``most``: what the cap is), 408 past RECEIVE_SECONDS; the file is removed where it fails."""
        path = self.folder / f"{INCOMING}{secrets.token_hex(8)}"
        digest, size = hashlib.sha256(), 0
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            out = open(path, "xb")
        except OSError as exc:
            raise not_stored(exc) from None
        try:
            async def read():
                nonlocal size
                pending, held = [], 0
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > cap:
                        raise Refused(413, f"the build folder's archive is larger than {bytes_text(cap)}, "
                                           f"{most}")
                    digest.update(chunk)
                    pending.append(chunk)
                    held += len(chunk)
                    if held >= CHUNK:
                        out.write(b"".join(pending))
                        pending, held = [], 0
                out.write(b"".join(pending))
            try:
                await asyncio.wait_for(read(), RECEIVE_SECONDS)
            except asyncio.TimeoutError:
                raise Refused(408, f"the build folder did not arrive within {RECEIVE_SECONDS:g} s") from None
            except OSError as exc:
                raise not_stored(exc) from None
            out.close()
        except BaseException:
            out.close()
            path.unlink(missing_ok=True)
            raise
        return path, size, digest.hexdigest()

    def accept(self, db, job_id, lease, incoming, size, sha256, checked, now=None):
        """Put the checked archive ``incoming`` in place and record it, if the worker still holds
        the job (Lost otherwise); the row. A build of the job's earlier attempt is replaced; the
        team's oldest build folders are deleted where its kept ones would pass the quota, and the
        service's oldest where all kept ones would pass the total."""
        now = clock.now() if now is None else now
        final = self.path(job_id, sha256)
        files = sum(1 for e in checked.entries if e.data is not None)
        row = dict(job_id=job_id, bytes=size, sha256=sha256, files=files, folders=len(checked.entries) - files,
                   data_bytes=checked.total, created_at=now, expires_at=now + self.keep, deleted_at=None,
                   deleted_why=None)
        with db.transaction() as tx:               # the job's row held: a worker without the lease never
            job = tx.one("SELECT team, state, lease FROM service_jobs WHERE id = ?" + tx.lock_suffix(), (job_id,))
            if job is None or job[1] != "running" or job[2] != lease:
                raise Lost(job_id)                 # touches the kept file, whose name its bytes share
            self._lock(tx)                         # then the store's bounds (the job's row first, always)
            try:
                os.replace(incoming, final)        # a failure after this leaves a file no row names: swept
            except OSError as exc:
                raise not_stored(exc) from None
            row["team"] = job[0]
            earlier = tx.one("SELECT sha256 FROM service_builds WHERE job_id = ? AND deleted_at IS NULL", (job_id,))
            tx.execute("DELETE FROM service_builds WHERE job_id = ?", (job_id,))
            tx.execute(f"INSERT INTO service_builds ({', '.join(COLUMNS)}) "
                       f"VALUES ({', '.join('?' * len(COLUMNS))})", tuple(row[c] for c in COLUMNS))
            over = self._over_quota(tx, row["team"], now) + self._over_total(tx, now, keep=job_id)
        if earlier is not None and earlier[0] != sha256:
            self.path(job_id, earlier[0]).unlink(missing_ok=True)
        for old_job, old_sha in over:
            self.path(old_job, old_sha).unlink(missing_ok=True)
        return row

    def _over_quota(self, tx, team, now):
        """Mark deleted the team's kept build folders past the quota, newest kept first (the one
        just stored is always kept); their (job id, sha256), whose files go after the commit."""
        rows = tx.all("SELECT job_id, sha256, bytes FROM service_builds WHERE team = ? AND deleted_at IS NULL "
                      "ORDER BY created_at DESC, job_id", (team,))
        total, over = 0, []
        for i, (job_id, sha256, size) in enumerate(rows):
            total += size
            if i and total > self.quota:
                over.append((job_id, sha256))
        for job_id, sha256 in over:
            tx.execute("UPDATE service_builds SET deleted_at = ?, deleted_why = ? WHERE job_id = ?",
                       (now, QUOTA, job_id))
        return over

    def _over_total(self, tx, now, keep=None):
        """Mark deleted the service's oldest kept build folders (never ``keep``'s: the one just
        stored, which alone fits) until all kept ones are within the total; their (job id, sha256)."""
        kept = tx.value("SELECT COALESCE(SUM(bytes), 0) FROM service_builds WHERE deleted_at IS NULL")
        if kept <= self.total:
            return []
        over = []
        for job_id, sha256, size in tx.all("SELECT job_id, sha256, bytes FROM service_builds WHERE deleted_at IS NULL "
                                           "ORDER BY created_at, job_id"):
            if kept <= self.total:
                break
            if job_id != keep:
                over.append((job_id, sha256))
                kept -= size
        for job_id, sha256 in over:
            tx.execute("UPDATE service_builds SET deleted_at = ?, deleted_why = ? WHERE job_id = ?",
                       (now, OVER_TOTAL, job_id))
        return over

    # ------------------------------------------------------------ reading
    def open(self, row):
        """A binary file of the stored archive; FileNotFoundError where it is gone."""
        return open(self.path(row["job_id"], row["sha256"]), "rb")

    # ------------------------------------------------------------ deleting
    def reap(self, db, now=None):
        """Delete the expired build folders, each marked deleted, then the oldest past the total (a
        server started again with a smaller one); (the expired ones' job ids, the others')."""
        now = clock.now() if now is None else now
        with db.transaction(write=False) as tx:
            rows = tx.all("SELECT job_id, sha256 FROM service_builds WHERE deleted_at IS NULL AND expires_at < ?",
                          (now,))
        for job_id, sha256 in rows:
            self.path(job_id, sha256).unlink(missing_ok=True)
        if rows:
            with db.transaction() as tx:
                for job_id, sha256 in rows:
                    tx.execute("UPDATE service_builds SET deleted_at = ?, deleted_why = ? WHERE job_id = ? AND "
                               "sha256 = ? AND deleted_at IS NULL", (now, EXPIRED, job_id, sha256))
        with db.transaction(write=False) as tx:
            kept = tx.value("SELECT COALESCE(SUM(bytes), 0) FROM service_builds WHERE deleted_at IS NULL")
        over = []
        if kept > self.total:                      # a write, the store's lock held, only where it is needed
            with db.transaction() as tx:
                self._lock(tx)
                over = self._over_total(tx, now)
        for job_id, sha256 in over:
            self.path(job_id, sha256).unlink(missing_ok=True)
        return [job_id for job_id, _ in rows], [job_id for job_id, _ in over]

    def sweep(self, db, now=None):
        """Delete the files here that no kept build names, once ORPHAN_AGE old; their names."""
        now = clock.now() if now is None else now
        try:
            names = [(p, p.stat().st_mtime) for p in self.folder.iterdir()]
        except FileNotFoundError:
            return []
        with db.transaction(write=False) as tx:
            live = {self.path(j, s).name for j, s in
                    tx.all("SELECT job_id, sha256 FROM service_builds WHERE deleted_at IS NULL")}
        gone = []
        for path, mtime in names:
            if path.name not in live and now - mtime > ORPHAN_AGE:
                path.unlink(missing_ok=True)
                gone.append(path.name)
        return gone


def not_stored(exc):
    """The refusal of a build folder the server's disk could not take (full, read-only...)."""
    return Refused(507, f"the server could not store the build folder ({exc.strerror or exc})")


def lookup(db, job_id):
    """The build row of ``job_id`` (a dict), or None."""
    with db.transaction(write=False) as tx:
        row = tx.one(f"SELECT {', '.join(COLUMNS)} FROM service_builds WHERE job_id = ?", (job_id,))
    return dict(zip(COLUMNS, row)) if row else None


def shown(row):
    """What the job's page and the worker's answer say of a kept build folder."""
    return {"files": row["files"], "folders": row["folders"], "data_bytes": row["data_bytes"], "bytes": row["bytes"],
            "sha256": row["sha256"], "expires_at": row["expires_at"], "expires": when(row["expires_at"]),
            "deleted": row["deleted_at"] is not None}


# ---------------------------------------------------------------------------- the routes' halves

async def receive(service, request, job_id, lease):
    """``POST /api/worker/jobs/{id}/build``: the archive received, checked, stored; the answer."""
    store = service.builds
    if store is None:                               # 404, not 403: a worker reads 401 and 403 as its token refused
        raise Refused(404, "this service keeps no build folders (serve --keep-builds 0)")
    job = await service.run(_held_job, service.db, job_id, lease)
    if job[0] != "development":
        raise Refused(400, "only a development run keeps its build folder")
    cap, most = store.cap()
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:        # before any byte is read
        raise Refused(413, f"the build folder's archive is {bytes_text(int(declared))}, larger than "
                           f"{bytes_text(cap)}, {most}")
    async with service.uploads.slot("reading"):
        incoming, size, sha256 = await store.body_to_file(request, cap, most)
    try:
        async with service.uploads.slot("checking"):
            checked = await service.run(_check_file, incoming)
        row = await service.run(store.accept, service.db, job_id, lease, incoming, size, sha256, checked)
    finally:
        incoming.unlink(missing_ok=True)
    log("build.kept", job=job_id, team=row["team"], bytes=size, files=row["files"])
    return shown(row)


def _held_job(db, job_id, lease):
    with db.transaction(write=False) as tx:
        job = tx.one("SELECT kind, state, lease FROM service_jobs WHERE id = ?", (job_id,))
    if job is None or job[1] != "running" or job[2] != lease:
        raise Lost(job_id)
    return job


def _check_file(path):
    with open(path, "rb") as f:
        return buildfolder.check(f.read())


async def response(service, job, principal, address):
    """The download of ``job``'s build folder (the job already checked as ``principal``'s), or
    Refused with why there is none: 404 (none kept), 410 (deleted: expired, past the team's quota or
    the service's total), 429 (the asker's downloads at once: ``service.downloads``'s caps, per team
    and address)."""
    row = await service.run(lookup, service.db, job["id"])
    job_id = job["id"]
    if row is None:
        if job["kind"] == "ranked":
            raise Refused(404, f"job {job_id} is a ranked run: only development runs keep their build folder")
        if job["state"] not in ENDED:
            raise Refused(404, f"job {job_id} is {job['state']}: its build folder is kept when it ends")
        why = "" if job["state"] == DONE else f" (it ended {job['state']})"
        raise Refused(404, f"job {job_id} kept no build folder{why}; the end of its transcript says why "
                           f"(python -m ece408_op jobs show {job_id})")
    kept = kept_for(row["expires_at"] - row["created_at"])
    gone = Refused(410, f"the build folder of job {job_id} expired on {when(row['expires_at'])} (this service keeps "
                        f"build folders {kept})")
    if row["deleted_why"] == QUOTA:
        quota = service.builds.quota if service.builds is not None else QUOTA_MIB << 20
        raise Refused(410, f"the build folder of job {job_id} was deleted on {when(row['deleted_at'])} to keep your "
                           f"team's build folders within {size_text(quota)} (the newest are kept)")
    if row["deleted_why"] == OVER_TOTAL:
        raise Refused(410, f"the build folder of job {job_id} was deleted on {when(row['deleted_at'])}, "
                           f"{deleted_after(row)} after it was kept, to keep this service's build folders within "
                           f"{total_text(service)} (all teams' together: the oldest go first)")
    if row["deleted_at"] is not None or row["expires_at"] < clock.now():
        raise gone
    if service.builds is None:
        raise Refused(410, f"the build folder of job {job_id} is not served: this service keeps no build folders now "
                           "(serve --keep-builds 0)")
    ticket = service.downloads.open(principal, address)        # the caps before the file is opened
    try:
        handle = await service.run(service.builds.open, row)
    except BaseException as exc:
        service.downloads.close(ticket)
        if isinstance(exc, FileNotFoundError):
            raise gone from None
        raise

    def chunks():
        with handle:
            while True:
                data = handle.read(CHUNK)
                if not data:
                    return
                yield data
    body = limits.stream(service.downloads, ticket, iterate_in_threadpool(chunks()), last=False)
    return StreamingResponse(body, background=BackgroundTask(service.downloads.close, ticket),
                             media_type="application/gzip", headers={
        "Content-Length": str(os.fstat(handle.fileno()).st_size), "X-Build-SHA256": row["sha256"],
        "Cache-Control": "no-store",
        "Content-Disposition": f'attachment; filename="build-{job_id}.tar.gz"', "X-Content-Type-Options": "nosniff"})


def deleted_after(row):
    """How long a deleted build folder had been kept: ``2 h 5 min``."""
    return duration(row["deleted_at"] - row["created_at"])


def total_text(service):
    """The service's total of build folders, in words."""
    return bytes_text(service.builds.total if service.builds is not None else TOTAL)


async def reaper(service):
    """At the start and every few seconds (a quarter of the keep time, at most a minute): the
    expired build folders deleted, and the oldest past the total; every SWEEP_EVERY seconds, the
    files no row names."""
    store = service.builds
    if store is None:
        return
    every = max(1.0, min(60.0, store.keep / 4))
    swept = time.monotonic()
    while True:                                        # a first pass at the start: a total lowered by a restart
        try:
            expired, over = await service.run(store.reap, service.db)
            for job_id in expired:
                log("build.expired", job=job_id)
            for job_id in over:
                log("build.over_total", job=job_id, total=store.total)
            if time.monotonic() - swept > SWEEP_EVERY:
                swept = time.monotonic()
                for name in await service.run(store.sweep, service.db):
                    log("build.orphan_deleted", file=name)
        except Unavailable as exc:
            service.down(exc)
        except Exception as exc:                       # noqa: BLE001  the reaper must go on
            log("build.reaper_error", level="error", reason=f"{type(exc).__name__}: {exc}")
        await asyncio.sleep(every)
