"""The uploads as the server keeps them: files on disk, content-addressed, never whole in memory
and never in the database; how many bytes of them may be in flight; how long each is kept.

* **Admitted** (``InFlight``) before a byte of the body is read: the upload's declared length
  (``Content-Length``; a chunked upload without one counts as ``serve --max-upload``) joins the
  bytes of uploads being received and checked on the whole server, at most ``serve
  --upload-bytes-in-flight MIB`` (256); past it the upload is answered ``503`` with
  ``Retry-After`` at once, with ``Connection: close`` (the server would otherwise read the unread
  body to its end to keep the connection: a storm's retries would cost it that much), so a storm
  of uploads costs the server neither memory nor disk.
* **Received** (``receive``) into ``<state>/uploads/.incoming/`` as it arrives, hashed on the
  way (SHA-256; both off the event loop, 1 MiB at a time), within the body rules of
  ``http.body_chunks`` (413 past the cap, 408 when it stalls or trickles); checked from that file
  (``upload.check_file``: the gzip stream read 1 MiB at a time, the tar inflated within the
  archive's cap, at most 2 checks at once).
* **Stored** (``place``) content-addressed, ``<state>/uploads/sha256/ab/abcdef...``: two jobs of the
  same bytes share one file. The database keeps the job's ``upload_sha256`` and ``upload_bytes``
  and whether the job holds its upload (``upload_held``); a worker fetches it by job (the route
  streams the file). Databases from before (uploads as BLOBs in ``service_uploads``) are read as
  they are: a job whose BLOB is there is served its BLOB, deleted when the job lets it go.
* **Quotas**, checked in the submitting transaction (``check_quota``), each refusal one line naming it:
  a team's queued and running development uploads at most ``serve --team-upload-quota MIB``
  (160: 10 waiting jobs of 16 MiB), the whole service's at most ``serve --upload-quota MIB``
  (4096); ranked uploads waiting or running at most ``serve --ranked-upload-quota MIB`` (1024)
  with the ranked ones kept.
* **Kept**: a development upload until its job ends (done, failed, cancelled); a ranked upload
  ``serve --keep-ranked-uploads DAYS`` (30) after it was sent, and past that while it is one of its
  team's last RANKED_KEEP_LAST (5); the ranked uploads kept, all teams together, at most the ranked
  quota (the oldest let go first). ``reap`` lets them go; a file that no job holds is deleted by
  the same pass (``sweep``; incoming files left by a server killed mid-upload: at start and once
  INCOMING_AGE old).
"""
import asyncio
import contextlib
import hashlib
import os
import secrets
import time
from collections import Counter
from pathlib import Path

from ..base.archive import size_text
from .http import body_chunks
from . import clock
from .jobs import ENDED, QUEUED, RUNNING
from .refused import Refused

IN_FLIGHT_MIB = 256                 # bytes of uploads received and checked at once, whole server
TEAM_QUOTA_MIB = 160                # a team's queued and running development uploads
QUOTA_MIB = 4096                    # everyone's queued and running development uploads
RANKED_QUOTA_MIB = 1024             # ranked uploads waiting, running and kept
RANKED_KEEP_DAYS = 30.0
RANKED_KEEP_LAST = 5                # a team's newest ranked uploads, kept past RANKED_KEEP_DAYS
INCOMING_AGE = 3600.0               # an incoming file this old belongs to no upload in flight
REAP_EVERY = 30.0                   # seconds between two passes of the reaper
RETRY = 5                           # seconds a refused upload waits before it is sent again
WRITE_BATCH = 1 << 20
RATE_MIB = 64                       # MiB a second all uploads together are received at (0: as they come)
BURST = 0.25                        # seconds of RATE that may arrive at once before the pace holds them
ENDED_SQL = ", ".join(f"'{s}'" for s in ENDED)


class InFlight:
    """The bytes of uploads being received and checked on the whole server, at most ``limit``."""

    def __init__(self, limit=IN_FLIGHT_MIB << 20):
        self.limit = int(limit)
        self.held = 0

    def take(self, size):
        """Room for an upload of ``size`` bytes (its declared length): ``size``, to be given back;
        Refused (503, Retry-After) where it would pass the limit."""
        if self.held + size > self.limit:
            refusal = Refused(503, f"the service is receiving {size_text(self.held)} of uploads, and with this one "
                                   f"({size_text(size)}) it would pass its bound of {size_text(self.limit)} in "
                                   "flight (serve --upload-bytes-in-flight); send it again in a few seconds",
                              retry_after=RETRY)
            refusal.close = True            # its body is never read: the connection closes, not drained
            raise refusal
        self.held += size
        return size

    def give(self, size):
        self.held -= size


class Pace:
    """The bytes of all uploads together received at ``rate`` bytes a second at most (0: no bound), in
    order of arrival: a batch past the pace waits (its connection's reading paused, the client held by
    TCP's window) so that receiving never takes the cores the other requests' answers need."""

    def __init__(self, rate=RATE_MIB << 20):
        self.rate = float(rate)
        self.next = 0.0

    async def take(self, size):
        if self.rate <= 0:
            return
        now = time.monotonic()
        self.next = max(now - BURST, self.next) + size / self.rate
        if self.next > now:
            await asyncio.sleep(self.next - now)


def declared(request, cap):
    """The bytes an upload is counted as before it is read: its Content-Length, else ``cap``."""
    text = request.headers.get("content-length")
    return int(text) if text is not None and text.isdigit() else cap


class UploadStore:
    """The folder the uploads are kept in and the quotas of ``Settings`` (see the module docstring)."""

    def __init__(self, folder, settings):
        self.folder = Path(folder)
        self.team_quota = settings.team_upload_quota
        self.quota = settings.upload_quota
        self.ranked_quota = settings.ranked_upload_quota
        self.keep_ranked = settings.keep_ranked_uploads
        self.keep_last = RANKED_KEEP_LAST
        self._lock = None                   # files placed and their jobs committed, or files deleted: not both
        self.pace = Pace(settings.upload_rate)

    @property
    def lock(self):
        """The SharedLock (of the running loop): ``shared()`` around each placement's transaction (any
        number at once: a team waiting for its own row holds back no other team), ``exclusive()``
        around ``sweep``. Awaited, not waited for in a thread, so that submissions waiting on it hold
        none of the threads the other routes' database calls run in."""
        if self._lock is None:
            self._lock = SharedLock()
        return self._lock

    def path(self, sha256):
        return self.folder / "sha256" / sha256[:2] / sha256

    # ------------------------------------------------------------ receiving
    async def receive(self, request, cap, seconds):
        """The request's body written to a new incoming file as it comes: (path, size, SHA-256);
        the body's refusals (413, 408) as ``http.body_chunks`` makes them, 507 where the disk
        cannot take it; the file is removed where it fails."""
        incoming = self.folder / ".incoming"
        path = incoming / secrets.token_hex(8)
        digest, size = hashlib.sha256(), 0
        try:
            incoming.mkdir(parents=True, exist_ok=True, mode=0o700)
            out = open(path, "xb")
        except OSError as exc:
            raise not_stored(exc) from None
        def write(data):
            digest.update(data)
            out.write(data)
        loop = asyncio.get_running_loop()
        try:
            pending, held = [], 0
            async for chunk in body_chunks(request, cap, "upload", seconds):
                size += len(chunk)
                pending.append(chunk)
                held += len(chunk)
                if held >= WRITE_BATCH:         # hashed and written off the event loop (a disk's stall too)
                    await loop.run_in_executor(None, write, b"".join(pending))
                    await self.pace.take(held)
                    pending, held = [], 0
            await loop.run_in_executor(None, write, b"".join(pending))
            out.close()
        except OSError as exc:
            out.close()
            path.unlink(missing_ok=True)
            raise not_stored(exc) from None
        except BaseException:
            out.close()
            path.unlink(missing_ok=True)
            raise
        return path, size, digest.hexdigest()

    def place(self, incoming, sha256):
        """Move the checked ``incoming`` file to its content address (a file of the same bytes
        there already: kept, ``incoming`` removed). Called under ``lock``."""
        final = self.path(sha256)
        try:
            final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if final.exists():
                incoming.unlink(missing_ok=True)
            else:
                os.replace(incoming, final)
        except OSError as exc:
            raise not_stored(exc) from None

    def open(self, sha256):
        """A binary file of the stored upload; FileNotFoundError where it is gone."""
        return open(self.path(sha256), "rb")

    # ------------------------------------------------------------ quotas (in the submitting transaction)
    def check_quota(self, tx, team, kind, size):
        """Refused (one line naming the quota) where one more ``kind`` upload of ``size`` bytes of
        ``team`` would pass a quota."""
        def held(where, args=()):
            return int(tx.value("SELECT COALESCE(SUM(upload_bytes), 0) FROM service_jobs WHERE upload_held = 1 "
                                f"AND {where}", args) or 0)
        live = f"state IN ('{QUEUED}', '{RUNNING}')"
        if kind == "development":
            mine = held(f"kind = 'development' AND {live} AND team = ?", (team,))
            if mine + size > self.team_quota:
                raise Refused(429, f"team {team}'s waiting development uploads hold {size_text(mine)}; with this "
                                   f"one ({size_text(size)}) they would pass the team's upload quota of "
                                   f"{size_text(self.team_quota)} (serve --team-upload-quota); wait for one to "
                                   "start and end, or cancel one", retry_after=30)
            everyone = held(f"kind = 'development' AND {live}")
            if everyone + size > self.quota:
                raise Refused(503, f"the service's waiting development uploads hold {size_text(everyone)}, its "
                                   f"upload quota is {size_text(self.quota)} (serve --upload-quota); send it again "
                                   "when jobs have run", retry_after=60)
        else:
            waiting = held(f"kind = 'ranked' AND {live}")
            if waiting + size > self.ranked_quota:
                raise Refused(503, f"the service's waiting ranked uploads hold {size_text(waiting)}, its ranked "
                                   f"upload quota is {size_text(self.ranked_quota)} (serve --ranked-upload-quota); "
                                   "send it again when jobs have run", retry_after=60)

    # ------------------------------------------------------------ letting go, deleting
    def reap(self, db, now=None):
        """Let go of the uploads no longer kept (see the module docstring); the job ids let go."""
        now = clock.now() if now is None else now
        with db.transaction() as tx:
            gone = [r[0] for r in tx.all("SELECT id FROM service_jobs WHERE upload_held = 1 AND kind = "
                                         f"'development' AND state IN ({ENDED_SQL})")]
            ranked = tx.all("SELECT id, team, submitted_at, upload_bytes FROM service_jobs WHERE upload_held = 1 "
                            f"AND kind = 'ranked' AND state IN ({ENDED_SQL}) ORDER BY submitted_at DESC, id")
            total = int(tx.value("SELECT COALESCE(SUM(upload_bytes), 0) FROM service_jobs WHERE upload_held = 1 "
                                 f"AND kind = 'ranked' AND state IN ('{QUEUED}', '{RUNNING}')") or 0)
            seen = Counter()
            for job_id, team, submitted, size in ranked:
                newest = seen[team] < self.keep_last
                seen[team] += 1
                if (submitted + self.keep_ranked < now and not newest) or total + size > self.ranked_quota:
                    gone.append(job_id)
                else:
                    total += size
            for job_id in gone:
                tx.execute("UPDATE service_jobs SET upload_held = 0 WHERE id = ?", (job_id,))
                tx.execute("DELETE FROM service_uploads WHERE job_id = ?", (job_id,))     # a BLOB from before
        return gone

    def sweep(self, db, now=None):
        """Delete the stored files that no job holds, and the incoming ones INCOMING_AGE old; the
        names deleted. Called under ``lock``."""
        now = clock.now() if now is None else now
        deleted = []
        for path in _files(self.folder / ".incoming"):
            try:
                if now - path.stat().st_mtime > INCOMING_AGE:
                    path.unlink(missing_ok=True)
                    deleted.append(path.name)
            except FileNotFoundError:
                pass
        with db.transaction(write=False) as tx:
            held = {r[0] for r in tx.all("SELECT DISTINCT upload_sha256 FROM service_jobs WHERE upload_held = 1")}
        for path in _files(self.folder / "sha256", 2):
            if path.name not in held:
                path.unlink(missing_ok=True)
                deleted.append(path.name)
        return deleted

    def clear_incoming(self):
        """At the server's start no upload is in flight: every incoming file is left over."""
        for path in _files(self.folder / ".incoming"):
            path.unlink(missing_ok=True)

    def usage(self):
        """(files, bytes) stored."""
        sizes = [p.stat().st_size for p in _files(self.folder / "sha256", 2)]
        return len(sizes), sum(sizes)


class SharedLock:
    """Many holders of ``shared()`` at once, or one of ``exclusive()``; a waiting exclusive holder
    lets no new shared one in (the sweep, every 30 s, is never starved by a stream of submissions)."""

    def __init__(self):
        self._cond = asyncio.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting = 0

    @contextlib.asynccontextmanager
    async def shared(self):
        async with self._cond:
            await self._cond.wait_for(lambda: not self._exclusive and not self._waiting)
            self._shared += 1
        try:
            yield
        finally:
            async with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def exclusive(self):
        async with self._cond:
            self._waiting += 1
            try:
                await self._cond.wait_for(lambda: not self._exclusive and not self._shared)
            finally:
                self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            async with self._cond:
                self._exclusive = False
                self._cond.notify_all()


def _files(folder, depth=1):
    try:
        entries = list(folder.iterdir())
    except FileNotFoundError:
        return []
    if depth == 1:
        return [p for p in entries if p.is_file()]
    return [f for p in entries if p.is_dir() for f in _files(p, depth - 1)]


def not_stored(exc):
    """The refusal of an upload the server's disk could not take (full, read-only...)."""
    return Refused(507, f"the server could not store the upload ({exc.strerror or exc}); send it again later")


async def reaper(service):
    """At the start, the incoming files left over; then every REAP_EVERY seconds (less where
    ranked uploads are kept less than a few minutes) the uploads no longer kept let go and the
    files no job holds deleted."""
    from .db import Unavailable
    from .logs import log
    store = service.upload_store
    if store is None:
        return
    await service.run(store.clear_incoming)
    every = max(1.0, min(REAP_EVERY, store.keep_ranked / 4))
    while True:
        try:
            gone = await service.run(store.reap, service.db)
            async with store.lock.exclusive():
                deleted = await service.run(store.sweep, service.db)
            if gone or deleted:
                log("upload.reaped", let_go=len(gone), files_deleted=len(deleted))
        except Unavailable as exc:
            service.down(exc)
        except Exception as exc:                       # noqa: BLE001  the reaper must go on
            log("upload.reaper_error", level="error", reason=f"{type(exc).__name__}: {exc}")
        await asyncio.sleep(every)
