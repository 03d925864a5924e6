"""The ranking as this server keeps it between records, for ``/api/ranking`` and the pages: the
boards with records, each board's tables (standings.board: one a device kind), the class's
names, the instructor's choices (names or pseudonyms, the kind each milestone's grade counts),
and ``ranking``'s text as the API answers it.

Each is computed in a thread and kept: computed again when a record was added through this
server (at most once a second, ``hub.records_version``) and at least every ``ranking_seconds``
(records written by other processes). A board's records are read once, then only the new ones
(a record never changes once stored)."""
import asyncio
import time

from . import choices, overview, standings
from .refused import Refused
from .grading_door import KindError, RankingError, no_records, ranking_report


class Rankings:
    def __init__(self, service):
        self.service = service
        self._cache = {}                        # key -> (records version, monotonic time, value)
        self._locks = {}
        self._serial = 0
        self._choices = {}                      # name -> (monotonic time read, the instructor's choice)
        self._key = None
        self._records = {}                      # (milestone, size) -> {record id: Record} read so far
        self._reports = {}                      # (milestone, size, format) -> (records version, time, text)
        self._report_locks = {}

    def _stale(self, version, at):
        age = time.monotonic() - at
        return age > self.service.settings.ranking_seconds or \
            (version != self.service.hub.records_version and age > 1.0)       # new records: at most once a second

    def forget(self):
        """Empty the caches (as right after a new record): the next reads compute afresh."""
        self._cache.clear()
        self._reports.clear()

    async def _cached(self, key, compute):
        """``compute()`` (in a thread), again when the kept value is stale. It returns
        (fingerprint, ...): where the fingerprint is unchanged, the value kept is the old one."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            version, at, value = self._cache.get(key, (None, 0.0, None))
            if value is None or self._stale(version, at):
                version = self.service.hub.records_version
                value = await self.service.run(compute)
                old = self._cache.get(key)
                if old is not None and old[2][0] == value[0]:
                    value = old[2]                                   # unchanged: the same serial
                self._cache[key] = (version, time.monotonic(), value)
            return value

    async def boards(self):
        """[(milestone, size, runs)], the newest board first."""
        def compute():
            found = standings.boards(self.service.db)
            return tuple(found), found
        return (await self._cached("boards", compute))[1]

    async def board(self, milestone, size):
        """(serial, the board's tables: grading's Board); the serial changes only when the ranking does."""
        known = self._records.setdefault((milestone, size), {})

        def compute():
            found = standings.board(self.service.db, milestone, size, known)
            fingerprint = (tuple((t.device, tuple((r.team, r.op_time, r.record_id, r.runs, r.submitted_at)
                                                  for r in t.rows), t.excluded, t.others,
                                  t.chosen.key if t.chosen else None) for t in found.tables), found.loose)
            self._serial += 1
            return fingerprint, self._serial, found
        _, serial, found = await self._cached(("board", milestone, size), compute)
        return serial, found

    async def team_standing(self, milestone, size, team):
        """(serial, the Table of the board that ``team``'s plot draws: standings.team_table)."""
        serial, found = await self.board(milestone, size)
        return serial, standings.team_table(found, team, (await self.grading_kinds()).get(milestone))

    async def _choice(self, read):
        """What ``read`` (a function of choices.py) gives, read again every 2 s."""
        at, value = self._choices.get(read.__name__, (0.0, None))
        if value is None or time.monotonic() - at > 2.0:
            value = await self.service.run(read, self.service.db)
            self._choices[read.__name__] = (time.monotonic(), value)
        return value

    async def grading_kinds(self):
        """{milestone: the kind its grade counts}."""
        return await self._choice(choices.grading_kinds)

    def forget_choices(self):
        """The instructor's choices are read again at their next use (one was just made)."""
        self._choices.clear()

    async def class_names(self):
        """{a record's team: its name in the class} where they differ (standings.class_names)."""
        def compute():
            names = standings.class_names(overview.team_names(self.service.db))
            return tuple(sorted(names.items())), names
        return (await self._cached("class names", compute))[1]

    async def names(self):
        """``shown`` or ``anonymised``."""
        return await self._choice(choices.names)

    async def set_names(self, value):
        """The instructor's choice, stored (ValueError where it is neither) and in force at once."""
        await self.service.run(choices.set_names, self.service.db, value)
        self._choices[choices.names.__name__] = (time.monotonic(), value)

    async def anonymised_for(self, principal):
        return principal.kind == "team" and await self.names() == "anonymised"

    async def pseudonyms(self, found, principal):
        """{name: pseudonym} of the board's teams where ``principal`` sees pseudonyms, else None."""
        return await self.key_pseudonyms(found) if await self.anonymised_for(principal) else None

    async def key_pseudonyms(self, found):
        if self._key is None:
            self._key = await self.service.run(choices.pseudonym_key, self.service.db)
        return choices.pseudonyms(self._key, [r.team for t in found.tables for r in t.rows])

    async def report(self, principal, milestone, size, fmt, device=None):
        """``/api/ranking``'s text: as ``ranking`` prints it (``device``: one kind's table, as
        ``ranking --device`` picks it; Refused 400 where it names none or several); for a team
        where names are anonymised, the other teams under their pseudonyms."""
        try:
            if await self.anonymised_for(principal):                         # the instructor's choice
                return await self._anonymised_report(milestone, size, fmt, principal.name, device)
            key = (milestone, size, fmt, device)
            lock = self._report_locks.setdefault(key, asyncio.Lock())
            async with lock:
                version, at, body = self._reports.get(key, (None, 0.0, None))
                if body is None or self._stale(version, at):
                    version = self.service.hub.records_version
                    body = await self.service.run(self.service.with_store, lambda store: ranking_report(
                        store, milestone, size, fmt, device=device).text)
                    self._reports[key] = (version, time.monotonic(), body)
            return body
        except (KindError, RankingError) as exc:
            raise Refused(400, str(exc)) from None

    async def _anonymised_report(self, milestone, size, fmt, team, device):
        if milestone is None or size is None:
            found = await self.boards()
            if not found:
                return no_records(fmt)
            milestone, size = milestone or found[0][0], size or found[0][1]
        _, found = await self.board(milestone, size)
        return standings.report(found, fmt, team, await self.key_pseudonyms(found), device)
