"""Tokens: a team's, a worker's, the instructor's. Made here, shown once, stored hashed.

A token reads ``ece408_<id>_<secret>``: a 64-bit id (hex, not secret: it finds the row) and a
256-bit secret (``secrets.token_urlsafe(32)``). The database keeps the id, the owner (kind and
name) and the SHA-256 of the secret; the check hashes what was presented and compares the two
digests with ``hmac.compare_digest``, also when the id is unknown (against a dummy digest), so
that the time a check takes says nothing about the secret or whether the id exists.

Failed checks are counted per client address (``FailureLimiter``): past ``max_failures`` in a
window, every request from that address is refused (HTTP 429) until the window has passed.
A token is never logged, never put in a URL or an error message.
"""
import functools
import hashlib
import hmac
import ipaddress
import secrets
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass

from ..base.terms import parse_token
from . import clock, identity
from .refused import Refused
from .logs import log
from .grading_door import csv_cell
from ..base.names import printable, team_name

PREFIX = "ece408"
KINDS = ("team", "worker", "instructor")
INSTRUCTOR = "instructor"
DUMMY_HASH = hashlib.sha256(b"no such token").hexdigest()
CACHE_SECONDS = 10.0                 # the active tokens are read again at least this often
MAX_TEAM_NAME = 100
@dataclass(frozen=True)
class Principal:
    kind: str                        # team, worker, instructor
    name: str


def new_token():
    """(id, secret hash, token text) of a fresh token."""
    token_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    return token_id, secret_hash(secret), f"{PREFIX}_{token_id}_{secret}"


def secret_hash(secret):
    return hashlib.sha256(secret.encode("ascii", "replace")).hexdigest()


class Tokens:
    """Token checks in memory: the active tokens' ids, owners and secret digests (a few hundred
    rows) are read from the database at the start, after every change this process makes
    (``forget``) and every CACHE_SECONDS (``refresh``, the server's reaper): a check never waits
    for the database, so a burst of guesses is decided one by one in the order it comes, and a
    spray of made-up tokens costs the database nothing. Another server process's change is seen
    within CACHE_SECONDS."""

    def __init__(self, db, names="unicode"):
        self.db = db
        self.names = names                       # the rule of team names: identity.RULES
        self._table = None                       # {id: (secret digest, Principal)} of the active tokens
        self._read_at = 0.0
        self._lock = threading.Lock()

    def refresh(self):
        """Read the active tokens again (a thread may do this while checks go on)."""
        with self.db.transaction(write=False) as tx:
            rows = tx.all("SELECT id, kind, name, secret_hash FROM service_tokens WHERE revoked_at IS NULL")
        table = {r[0]: (r[3], Principal(r[1], r[2])) for r in rows}
        with self._lock:
            self._table, self._read_at = table, time.monotonic()

    def stale(self):
        return self._table is None or time.monotonic() - self._read_at > CACHE_SECONDS

    def lookup(self, token):
        """The Principal of a valid token, else None; constant time in the secret, also for an
        unknown id (compared against a dummy digest). The table must have been read (``refresh``)."""
        parsed = parse_token(token)
        token_id, secret = parsed if parsed else ("", "")
        with self._lock:
            found = (self._table or {}).get(token_id)
        stored, principal = found if found else (DUMMY_HASH, None)
        good = hmac.compare_digest(stored, secret_hash(secret))
        return principal if good and found is not None else None

    def verify(self, token):
        """``lookup`` with the table read first where it is missing or stale (the command line's
        checks, tests; the server keeps its table fresh itself)."""
        if self.stale():
            self.refresh()
        return self.lookup(token)

    def forget(self):
        """A token of this process changed: read the table again at once."""
        self.refresh()

    # ------------------------------------------------------------ making and revoking
    def _issue(self, tx, kind, name, now):
        token_id, digest, text = new_token()
        tx.execute("INSERT INTO service_tokens (id, kind, name, secret_hash, created_at) VALUES (?, ?, ?, ?, ?)",
                   (token_id, kind, name, digest, now))
        return text

    def _revoke(self, tx, kind, name, now):
        return tx.execute("UPDATE service_tokens SET revoked_at = ? WHERE kind = ? AND name = ? AND revoked_at IS NULL",
                          (now, kind, name)).rowcount

    def add_teams(self, names, skip_existing=False):
        """[{name, token} or {name, skipped}] for ``names`` (escaped as records name teams). All
        or nothing: Refused (409) where one exists already (unless ``skip_existing``), or where a
        name would store, print, export or look like another team's (``name_key``), in the class or
        in the same call; Refused (400) where a name breaks the rule of names (``identity``). A
        look-alike is refused as one, naming the team it looks like, before its form is judged."""
        given = [given_name(n) for n in names]
        key = {name: name_key(name) for name in given}
        first = {}                                                    # key -> where it is first given
        for i, name in enumerate(given):
            other = given[first.setdefault(key[name], i)]             # one look-up a name, not a count
            if other == name and first[key[name]] != i:
                raise Refused(400, f"team {name} is named twice")
            if other != name:
                raise Refused(409, identity.collision(name, other, csv_cell, in_call=True) + "; nothing was added "
                                   "(choose names that differ in more than case, spacing, Unicode form or look)")
        now = clock.now()
        out = []
        with self.db.transaction() as tx:
            self._fill_keys(tx)                                       # kept even where this call is refused
        with self.db.transaction() as tx:
            stored, same = {}, {}                                     # same: the existing team a name is
            for name in given:
                if tx.value("SELECT 1 FROM service_teams WHERE name = ?", (name,)) is not None:
                    stored[name], same[name] = None, name             # an existing team, as given
                    continue
                other = tx.value("SELECT name FROM service_teams WHERE name_key = ?", (key[name],))
                if other is not None and self._stored_form(name, key[name]) == other:
                    stored[name], same[name] = None, other            # its PRECIS form exists (full width)
                elif other is not None:
                    raise Refused(409, identity.collision(name, other, csv_cell) + "; nothing was added "
                                       "(choose a name that differs in more than case, spacing, Unicode form or look)")
            for name in given:
                if name not in stored:
                    stored[name] = stored_form(name, key[name], self.names)
            existing = sorted(same.values())
            if existing and not skip_existing:
                raise Refused(409, f"team(s) already exist: {', '.join(existing)}; nothing was added "
                                   "(teams rotate NAME gives an existing team a new token)")
            for name in given:
                if stored[name] is None:
                    out.append({"name": same[name], "skipped": True})
                    continue
                tx.execute("INSERT INTO service_teams (name, created_at, name_key) VALUES (?, ?, ?)",
                           (stored[name], now, key[name] if stored[name] == name else name_key(stored[name])))
                out.append({"name": stored[name], "token": self._issue(tx, "team", stored[name], now)})
        self.forget()
        return out

    def _stored_form(self, given, key):
        try:
            return stored_form(given, key, self.names)
        except Refused:
            return None

    @staticmethod
    def _fill_keys(tx):
        """The name keys of teams added before the service kept them, or before the rule of looks
        changed (``identity.keys_version``, kept in the settings): all made again, in the order the teams
        were added (a name whose key an earlier team holds keeps none: it was added before the rule)."""
        version = identity.keys_version()
        if tx.value("SELECT value FROM service_settings WHERE key = 'name_keys'") != version:
            rows = tx.all("SELECT name FROM service_teams ORDER BY created_at, name")
            tx.execute("UPDATE service_teams SET name_key = NULL")
            taken = set()
            for (name,) in rows:
                key = name_key(name)
                if key not in taken:
                    taken.add(key)
                    tx.execute("UPDATE service_teams SET name_key = ? WHERE name = ?", (key, name))
            tx.execute("INSERT INTO service_settings (key, value) VALUES ('name_keys', ?) ON CONFLICT (key) "
                       "DO UPDATE SET value = excluded.value", (version,))
            return
        for (name,) in tx.all("SELECT name FROM service_teams WHERE name_key IS NULL"):
            key = name_key(name)
            if tx.value("SELECT 1 FROM service_teams WHERE name_key = ?", (key,)) is None:
                tx.execute("UPDATE service_teams SET name_key = ? WHERE name = ?", (key, name))

    def list_teams(self):
        with self.db.transaction(write=False) as tx:
            rows = tx.all("""SELECT t.name, t.created_at,
                                    (SELECT COUNT(*) FROM service_tokens k WHERE k.kind = 'team' AND k.name = t.name
                                       AND k.revoked_at IS NULL),
                                    (SELECT COUNT(*) FROM service_jobs j WHERE j.team = t.name),
                                    (SELECT MAX(submitted_at) FROM service_jobs j WHERE j.team = t.name)
                             FROM service_teams t ORDER BY t.name""")
        return [{"name": r[0], "created_at": r[1], "active": bool(r[2]), "jobs": r[3], "last_job": r[4]} for r in rows]

    def revoke_team(self, name):
        now = clock.now()
        with self.db.transaction() as tx:
            self._require_team(tx, name)
            self._revoke(tx, "team", name, now)
        self.forget()

    def rotate_team(self, name):
        """A new token for team ``name``; its old ones stop working."""
        now = clock.now()
        with self.db.transaction() as tx:
            self._require_team(tx, name)
            self._revoke(tx, "team", name, now)
            text = self._issue(tx, "team", name, now)
        self.forget()
        return text

    def worker_token(self, name):
        """A new token for the worker ``name`` (its earlier ones are revoked)."""
        name = check_name(name, "worker")
        now = clock.now()
        with self.db.transaction() as tx:
            self._revoke(tx, "worker", name, now)
            text = self._issue(tx, "worker", name, now)
        self.forget()
        return text

    def register(self, kind, name, token):
        """Make ``token`` (from a file or the environment) the one token of ``kind``/``name``;
        ValueError where it is not a well-formed token."""
        parsed = parse_token(token)
        if parsed is None:
            raise ValueError("not a token of this service (ece408_<16 hex>_<43 characters>)")
        now = clock.now()
        with self.db.transaction() as tx:
            row = tx.one("SELECT kind, name, secret_hash, revoked_at FROM service_tokens WHERE id = ?", (parsed[0],))
            if row and row[0] == kind and row[1] == name and row[3] is None and \
                    hmac.compare_digest(row[2], secret_hash(parsed[1])):
                return
            tx.execute("UPDATE service_tokens SET revoked_at = ? WHERE kind = ? AND name = ? AND revoked_at IS NULL",
                       (now, kind, name))
            if row:
                tx.execute("DELETE FROM service_tokens WHERE id = ?", (parsed[0],))
            tx.execute("INSERT INTO service_tokens (id, kind, name, secret_hash, created_at) VALUES (?, ?, ?, ?, ?)",
                       (parsed[0], kind, name, secret_hash(parsed[1]), now))
        self.forget()

    @staticmethod
    def _require_team(tx, name):
        if tx.value("SELECT 1 FROM service_teams WHERE name = ?", (name,)) is None:
            raise Refused(404, f"no team named {printable(name)} (teams list shows them)")


def check_name(name, what):
    if not isinstance(name, str) or not name.strip():
        raise Refused(400, f"a {what} needs a name")
    shown = team_name(name.strip())
    if len(shown) > MAX_TEAM_NAME:
        raise Refused(400, f"the {what} name {shown[:40]}... is longer than {MAX_TEAM_NAME} characters")
    return shown


def given_name(name):
    """A team's name as given, stripped, escaped as records keep names (control and format
    characters, undecodable bytes as visible escapes: ``names.printable``): what its form and look
    are judged on, and what names an existing team in a roster."""
    return check_name(name, "team")


def name_key(stored):
    """The form in which two team names that would store, print, export or look alike coincide
    (``identity.name_key``: the names' own folding, Unicode's confusable skeleton, combining marks
    aside). ``stored`` is the escaped name (``check_name``)."""
    return identity.name_key(stored, csv_cell)


RESERVED = ("instructor",)          # names of the service's own token files in its state folder


@functools.lru_cache(maxsize=None)
def reserved_keys():
    return {name_key(r) for r in RESERVED}


def check_team_name(name, rule="unicode"):
    """A team's name as records keep it: as given (``given_name``: escaped as records escape
    names), in its PRECIS form (``identity.enforce``: full-width letters as usual ones, NFC);
    Refused where it is empty, too long, breaks the rule of names (``rule``: identity.RULES), or
    is (or looks like) a name the service's own files use (a team named ``instructor`` would
    write ``instructor.token`` with ``teams add --token-dir``)."""
    given = given_name(name)
    return stored_form(given, name_key(given), rule)


def stored_form(given, key, rule="unicode"):
    """``check_team_name`` of a name already given (``given_name``) whose key is ``key``."""
    if key in reserved_keys():
        raise Refused(400, f"{given} is (or looks like) the name of the service's own token file; "
                           "choose another team name")
    return identity.enforce(given, rule)


def address_key(address):
    """What failed checks are counted against: an IPv4 address as it is (an IPv4-mapped IPv6 one as
    its IPv4), an IPv6 address by its /64 (one host is given a whole /64: counting each address
    would give a guesser 2^64 of them)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class FailureLimiter:
    """Failed token checks per client address (IPv6 per /64: ``address_key``): past
    ``max_failures`` within ``window`` seconds, that address is refused until its oldest failure is
    ``window`` old; and for the whole service: past ``max_total`` failures within the window from
    all addresses together, every further failure is refused until the oldest is ``window`` old, so
    that a guesser with many addresses gets no more checks than ``max_total`` a window. (A valid
    token passes either way: auth.check_token.)

    What is kept is bounded whatever the callers do: a failure past a limit is not recorded (an
    address keeps at most ``max_failures`` times, the service at most ``max_total``), and the table
    holds at most ``max_addresses`` addresses (default ``max_total``: the service's budget never
    needs more). A new address finding the table full takes the row of one whose window has passed,
    else of the least recently failed address that is under its limit; a limited address is never
    dropped, so spraying addresses frees none. Where every row is a limited address, the new one's
    failure counts toward the service's budget only (``unplaced``), said by a warning."""

    def __init__(self, max_failures=20, window=60.0, max_total=None, max_addresses=None):
        self.max_failures = max_failures
        self.window = window
        self.max_total = max_total if max_total is not None else 10 * max_failures
        self.max_addresses = max(1, max_addresses if max_addresses is not None else self.max_total)
        self._failures = OrderedDict()           # key -> deque of its failures' times, least recently failed first
        self._total = deque()
        self._lock = threading.Lock()
        self.evicted = self.unplaced = 0         # rows given to a new address; failures given no row

    def _recent(self, key, now):
        times = self._failures.get(key)
        if times is None:
            return None
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._failures[key]
            return None
        return times

    def _total_recent(self, now):
        while self._total and self._total[0] <= now - self.window:
            self._total.popleft()
        return self._total

    def wait(self, address):
        """(seconds ``address`` must still wait, or 0; whose limit: "address" or "service")."""
        now = time.monotonic()
        with self._lock:
            times = self._recent(address_key(address), now)
            if times is not None and len(times) >= self.max_failures:
                return max(0.0, times[0] + self.window - now), "address"
            total = self._total_recent(now)
            if len(total) >= self.max_total:
                return max(0.0, total[0] + self.window - now), "service"
            return 0.0, None

    def fail(self, address):
        now = time.monotonic()
        key = address_key(address)
        with self._lock:
            given_up = self.evicted + self.unplaced
            total = self._total_recent(now)
            if len(total) < self.max_total:
                total.append(now)
            times = self._recent(key, now)
            if times is not None:
                self._failures.move_to_end(key)
            elif self._room(now):
                times = self._failures[key] = deque()
            else:
                self.unplaced += 1
            if times is not None and len(times) < self.max_failures:
                times.append(now)
            full = self.evicted + self.unplaced > given_up
        if full:                                 # a spray of addresses: the log's cap keeps this short
            log("auth.failure_table_full", level="warning", addresses=len(self), bound=self.max_addresses,
                rows_given_up=self.evicted, counted_for_service_only=self.unplaced)

    def _room(self, now):
        """Whether a new address can have a row: the table under its bound once the rows whose
        window has passed are dropped, or a row under its limit given up (the least recently
        failed first). Never a limited address's row."""
        if len(self._failures) < self.max_addresses:
            return True
        for key in list(self._failures):
            self._recent(key, now)
        if len(self._failures) < self.max_addresses:
            return True
        for key, times in self._failures.items():
            if len(times) < self.max_failures:
                del self._failures[key]
                self.evicted += 1
                return True
        return False

    def __len__(self):
        """The addresses the table holds now."""
        return len(self._failures)
