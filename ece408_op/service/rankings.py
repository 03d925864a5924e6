"""The ranking as this server keeps it between records, for ``/api/ranking`` and the pages: the
boards with records, each board's ``Standing`` (standings.py), the class's names, the
instructor's choice of names or pseudonyms, and ``ranking``'s text as the API answers it.

Each is computed in a thread and kept: computed again when a record was added through this
server (at most once a second, ``hub.records_version``) and at least every ``ranking_seconds``
(records written by other processes). A board's records are read once, then only the new ones
(a record never changes once stored)."""
import asyncio
import time

from . import choices, overview, standings
from .runs import ranking_report


class Rankings:
    def __init__(self, service):
        self.service = service
        self._cache = {}                        # key -> (records version, monotonic time, value)
        self._locks = {}
        self._serial = 0
        self._names = (0.0, None)
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

    async def standing(self, milestone, size):
        """(serial, Standing) of a board; the serial changes only when the ranking does."""
        known = self._records.setdefault((milestone, size), {})

        def compute():
            st = standings.standing(self.service.db, milestone, size, known)
            fingerprint = (tuple((r.team, r.op_time, r.record_id, r.runs, r.submitted_at) for r in st.rows),
                           st.excluded, st.others, st.chosen.key if st.chosen else None)
            self._serial += 1
            return fingerprint, self._serial, st
        _, serial, st = await self._cached(("standing", milestone, size), compute)
        return serial, st

    async def class_names(self):
        """{a record's team: its name in the class} where they differ (standings.class_names)."""
        def compute():
            names = standings.class_names(overview.team_names(self.service.db))
            return tuple(sorted(names.items())), names
        return (await self._cached("class names", compute))[1]

    async def names(self):
        """``shown`` or ``anonymised`` (read again every 2 s)."""
        at, value = self._names
        if value is None or time.monotonic() - at > 2.0:
            value = await self.service.run(choices.names, self.service.db)
            self._names = (time.monotonic(), value)
        return value

    async def set_names(self, value):
        """The instructor's choice, stored (ValueError where it is neither) and in force at once."""
        await self.service.run(choices.set_names, self.service.db, value)
        self._names = (time.monotonic(), value)

    async def anonymised_for(self, principal):
        return principal.kind == "team" and await self.names() == "anonymised"

    async def pseudonyms(self, st, principal):
        """{name: pseudonym} of the board's teams where ``principal`` sees pseudonyms, else None."""
        return await self.key_pseudonyms(st) if await self.anonymised_for(principal) else None

    async def key_pseudonyms(self, st):
        if self._key is None:
            self._key = await self.service.run(choices.pseudonym_key, self.service.db)
        return choices.pseudonyms(self._key, [r.team for r in st.rows])

    async def report(self, principal, milestone, size, fmt):
        """``/api/ranking``'s text: as ``ranking`` prints it; for a team where names are
        anonymised, the other teams under their pseudonyms."""
        if await self.anonymised_for(principal):                             # the instructor's choice
            return await self._anonymised_report(milestone, size, fmt, principal.name)
        key = (milestone, size, fmt)
        lock = self._report_locks.setdefault(key, asyncio.Lock())
        async with lock:
            version, at, body = self._reports.get(key, (None, 0.0, None))
            if body is None or self._stale(version, at):
                version = self.service.hub.records_version
                body = await self.service.run(self.service.with_store,
                                              lambda store: ranking_report(store, milestone, size, fmt).text)
                self._reports[key] = (version, time.monotonic(), body)
        return body

    async def _anonymised_report(self, milestone, size, fmt, team):
        if milestone is None or size is None:
            found = await self.boards()
            if not found:
                return "No records yet: run 'python -m ece408_op submit --submit m2' first."
            milestone, size = milestone or found[0][0], size or found[0][1]
        _, st = await self.standing(milestone, size)
        return standings.report(st, fmt, team, await self.key_pseudonyms(st))
