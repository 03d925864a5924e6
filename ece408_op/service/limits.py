"""What one team, session or address may hold of the server at once: live streams and uploads.

Live streams (a job's events, a page's live ranking or transcript) are capped per team, per page
session and per client address (``Streams``); past a cap the request is refused (429 with
``Retry-After``) before its stream starts, so that one team cannot hold the server's connections.
Each stream holds a ``Ticket``: revoking or rotating a team's token closes its team's tickets at
once (the streams end within a second), as does the server's drain.

Uploads (``Uploads``): a team has at most one upload being read and checked at a time (a second
one is refused, 429); the whole server reads at most ``reads`` bodies and checks at most
``checks`` at once (the others wait for a slot, or are refused with 503 after ``wait`` seconds).
With the upload's caps (``serve --max-upload`` as sent, the archive's caps unpacked) this bounds
the memory and CPU that uploads take (docs/service.md states the figures).
"""
import asyncio
import contextlib
import json
import math
import time
from collections import Counter
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from . import jobs
from .refused import Refused

STREAMS_PER_TEAM = 16
STREAMS_PER_SESSION = 6                     # what a browser opens to one host at most
STREAMS_PER_ADDRESS = 512                   # a campus behind one NAT address (serve --streams-per-address)
STREAMS_INSTRUCTOR = 64
RETRY = 10


@dataclass(eq=False)
class Ticket:
    """One live stream's place; ``closed`` is set when the stream must end (revoked, draining)."""
    keys: tuple
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    why: str = None


class Streams:
    def __init__(self, per_team=STREAMS_PER_TEAM, per_session=STREAMS_PER_SESSION, per_address=STREAMS_PER_ADDRESS,
                 instructor=STREAMS_INSTRUCTOR, what="live streams"):
        self.what = what
        self.caps = {"team": per_team, "session": per_session, "address": per_address, "instructor": instructor}
        self.counts = Counter()
        self.tickets = set()

    def _keys(self, principal, session, address):
        keys = [("address", address)]
        keys.append(("instructor", "") if principal.kind == "instructor" else ("team", principal.name))
        if session:
            keys.append(("session", session))
        return tuple(keys)

    def open(self, principal, address, session=None):
        """A Ticket for one more stream of ``principal`` from ``address`` (and page ``session``);
        Refused (429) where a cap is reached."""
        keys = self._keys(principal, session, address)
        for key in keys:
            if self.caps[key[0]] and self.counts[key] >= self.caps[key[0]]:
                what = {"team": "your team", "session": "this browser session", "address": "this address",
                        "instructor": "the instructor"}[key[0]]
                raise Refused(429, f"{what} already has {self.caps[key[0]]} {self.what} open, the most it may; "
                                   "close one and try again", retry_after=RETRY)
        for key in keys:
            self.counts[key] += 1
        ticket = Ticket(keys)
        self.tickets.add(ticket)
        return ticket

    def close(self, ticket):
        """The stream ended (idempotent)."""
        if ticket in self.tickets:
            self.tickets.discard(ticket)
            for key in ticket.keys:
                self.counts[key] -= 1
                if self.counts[key] <= 0:
                    del self.counts[key]

    def end_team(self, name, why):
        """Every live stream of team ``name`` ends now (its token revoked or rotated)."""
        for ticket in list(self.tickets):
            if ("team", name) in ticket.keys:
                ticket.why = why
                ticket.closed.set()

    def end_all(self, why):
        for ticket in list(self.tickets):
            ticket.why = why
            ticket.closed.set()

    def held(self, kind, value):
        return self.counts[(kind, value)]


def stream(streams, ticket, events, last=True):
    """``events`` (an async generator: SSE events, or a download's bytes) that ends as soon as
    ``ticket`` is closed (with a last ``gone`` event where ``last``), and gives the ticket back
    however it ends."""
    async def run():
        ended = asyncio.ensure_future(ticket.closed.wait())
        source = events.__aiter__()
        step = None
        try:
            while True:
                step = asyncio.ensure_future(source.__anext__())
                done, _ = await asyncio.wait({step, ended}, return_when=asyncio.FIRST_COMPLETED)
                if step not in done:
                    if last:
                        yield {"event": "gone", "data": json.dumps(ticket.why or "the stream was closed")}
                    return
                try:
                    event = step.result()
                except StopAsyncIteration:
                    return
                yield event
        finally:
            ended.cancel()
            streams.close(ticket)
            if step is not None and not step.done():     # the source is inside a step: end that first
                step.cancel()
                with contextlib.suppress(BaseException):
                    await step
            with contextlib.suppress(RuntimeError):
                await source.aclose()
    return run()


class Uploads:
    """Uploads in flight: one per team (``upload``), and at most ``reads`` bodies being read and
    ``checks`` being checked on the whole server (``slot``); a request that finds every slot busy
    for ``wait`` seconds is refused (503, Retry-After)."""

    def __init__(self, reads=16, checks=2, wait=60.0):
        self.sizes = {"reading": reads, "checking": checks}
        self.wait = wait
        self.semaphores = {}                    # made on the running loop
        self.teams = {}                      # team -> the marker of its upload in flight

    @asynccontextmanager
    async def upload(self, team):
        """The one upload of ``team`` in flight; Refused (429) where it has one already. Yields a
        function that gives the team's slot back before the block ends (once the upload is received
        and checked: its job's transaction may wait on the database, and a retry of it must not be
        refused as an upload in flight)."""
        if team in self.teams:
            raise Refused(429, "your team's previous upload is still being received and checked; send the next "
                               "when it is answered", retry_after=5)
        mine = object()
        self.teams[team] = mine

        def give_back():
            if self.teams.get(team) is mine:
                del self.teams[team]
        try:
            yield give_back
        finally:
            give_back()

    @asynccontextmanager
    async def slot(self, which):
        """One of the server's ``reading`` or ``checking`` slots."""
        semaphore = self.semaphores.get(which)
        if semaphore is None:
            semaphore = self.semaphores[which] = asyncio.Semaphore(self.sizes[which])
        try:
            await asyncio.wait_for(semaphore.acquire(), self.wait)
        except asyncio.TimeoutError:
            raise Refused(503, "the service is receiving and checking many uploads; try again in a minute",
                          retry_after=30) from None
        try:
            yield
        finally:
            semaphore.release()


class Refusals:
    """The refusals that hold whatever happens meanwhile (a team past its hourly limit: cancelled
    runs count too), kept in memory until they end (at most a minute): the same request again in
    that time, without an idempotency key, is refused without a database read, so that a team
    hammering the service costs it little. A request with a key is always looked up (it may be
    the retry of a job accepted meanwhile); refusals that a cancel or the instructor may lift (a
    full queue, a deadline) are never kept."""

    def __init__(self, longest=60.0):
        self.longest = longest
        self.kept = {}                           # (team, kind) -> (until, Refused, when it was decided)

    def held(self, team, kind):
        """The kept refusal of ``team``'s submissions of ``kind`` as it stands now (its Retry-After
        counting down the refusal's own wait), or None."""
        now = time.monotonic()
        found = self.kept.get((team, kind))
        if found is None or found[0] <= now:
            return None
        until, refusal, at = found
        wait = refusal.retry_after - (now - at) if refusal.retry_after is not None else until - now
        return Refused(refusal.status, str(refusal), retry_after=max(1, math.ceil(wait)))

    async def admit(self, service, team, kind, milestone, key, asked):
        """``jobs.admit``'s answer (the job of an earlier try of ``key``, or None), or its refusal."""
        now = time.monotonic()
        kept = self.held(team, kind) if key is None else None
        if kept is not None:
            raise kept
        try:
            return await service.run(jobs.admit, service.db, service.settings.rules, team, kind, milestone, key, asked)
        except Refused as exc:
            if exc.holds:
                if len(self.kept) > 10_000:
                    self.kept.clear()
                self.kept[(team, kind)] = (now + min(exc.holds, self.longest), exc, now)
            raise
