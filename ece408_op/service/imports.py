"""A roster's teams in bulk (``teams import``), with tokens the client made.

The client makes each new team's token itself and writes it to the team's token file (mode 600)
before anything is sent; the service checks each token's shape, keeps the SHA-256 of its secret
(as of every token: tokens.py) and creates every team of the call in one transaction, or none.
So no team is ever created whose token the instructor does not hold, and an import whose answer
was lost is completed by running it again: the teams it made are found with the tokens of the
files already written (already there), the others are made then.

Two calls, each of at most MAX_ROWS rows, each row's line in the roster along with it (the
messages name it), the body at most MAX_BODY bytes:

    check   names, lines: each name as stored, and for the teams that exist already the ids of
            their active tokens (the client compares them with its files); Refused, naming the
            line, where a name is refused, holds NUL, is named twice or is alike another
            (``tokens.name_key``) in the roster or in the class
    create  names, lines, tokens: the same checks, each token's shape, its id new and not twice,
            its secret not twice; then every team and token written at once (COPY on
            PostgreSQL, executemany on SQLite). A team that exists with this very token is already
            there; one that exists with another is refused (409, naming the line): nothing is made.
"""
import hmac
import time

from ..base.terms import parse_token
from .http import encodable
from .refused import Refused
from . import clock, identity
from .tokens import Tokens, csv_cell, given_name, name_key, secret_hash, stored_form

MAX_ROWS = 100_000                   # teams of one import (a bigger roster: import it in parts)
MAX_BODY = MAX_ROWS * 1024           # bytes of its JSON body: a row (line, name, token) takes under 1 KiB
MAX_LINE = 2 ** 31 - 1
MIN_SECRET_LETTERS = 16              # distinct characters of a token's secret (a random one has about 31)
MIN_ID_DIGITS = 3                    # distinct hex digits of its id (a random one has about 10)
NOTHING = "nothing was imported"


def rows_of(data, with_tokens):
    """(names, lines, tokens or None) of a call's body; Refused (400, 413) where it is not one."""
    names, lines = data.get("names"), data.get("lines")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise Refused(400, "names is a list of team names")
    if len(names) > MAX_ROWS:
        raise Refused(413, f"the roster has {len(names):,} teams; one import takes at most {MAX_ROWS:,} "
                           "(import it in parts)")
    if not isinstance(lines, list) or len(lines) != len(names) or \
            not all(type(n) is int and 1 <= n <= MAX_LINE for n in lines):
        raise Refused(400, "lines is a list of the names' line numbers in the roster, one a name")
    tokens = data.get("tokens") if with_tokens else None
    if with_tokens and (not isinstance(tokens, list) or len(tokens) != len(names) or
                        not all(isinstance(t, str) for t in tokens)):
        raise Refused(400, "tokens is a list of the new teams' tokens, one a name")
    for name, line in zip(names, lines):
        if "\0" in name:
            raise Refused(400, f"line {line}: the team name holds NUL (U+0000); {NOTHING}")
        if not encodable(name):
            raise Refused(400, f"line {line}: the team name is not valid Unicode (a lone surrogate); {NOTHING}")
    return names, lines, tokens


def normalized(names, lines, rule="unicode"):
    """(each name as stored, its name key); Refused, naming the line, where a name comes twice or two
    are alike (their look judged first, as ``Tokens.add_teams`` does, naming the row it looks like),
    then where a name breaks the rule of names (``rule``: serve --names). Outside any transaction:
    the names' checks take no lock."""
    given, keys, first = [], [], {}
    for i, (name, line) in enumerate(zip(names, lines)):
        try:
            name = given_name(name)
        except Refused as exc:
            raise Refused(exc.status, f"line {line}: {exc}; {NOTHING}") from None
        key = name_key(name)
        j = first.setdefault(key, i)
        if j != i:
            if given[j] == name:
                raise Refused(400, f"line {line}: team {name} is named twice (line {lines[j]} too); {NOTHING}")
            raise Refused(409, f"lines {lines[j]} and {line}: {identity.collision(name, given[j], csv_cell, in_call=True)}"
                               f"; {NOTHING} (choose names that differ in more than case, spacing, Unicode form or "
                               "look)")
        given.append(name)
        keys.append(key)
    stored = []
    for name, key, line in zip(given, keys, lines):
        try:
            stored.append(stored_form(name, key, rule))
        except Refused as exc:
            raise Refused(exc.status, f"line {line}: {exc}; {NOTHING}") from None
    return stored, keys


def class_teams(tx, stored, keys, lines):
    """The class's teams {name: key}, read once (not asked a row each); Refused, naming the line,
    where a new name is alike an existing team's."""
    Tokens._fill_keys(tx)
    teams = dict(tx.all("SELECT name, name_key FROM service_teams"))
    by_key = {key: name for name, key in teams.items() if key is not None}
    for name, key, line in zip(stored, keys, lines):
        other = by_key.get(key)
        if other is not None and name not in teams:
            raise Refused(409, f"line {line}: {identity.collision(name, other, csv_cell)}; {NOTHING} (choose a name "
                               "that differs in more than case, spacing, Unicode form or look)")
    return teams


def active_tokens(tx):
    """{team: [(token id, secret digest)]} of the teams' active tokens."""
    found = {}
    for token_id, name, digest in tx.all("SELECT id, name, secret_hash FROM service_tokens "
                                         "WHERE kind = 'team' AND revoked_at IS NULL"):
        found.setdefault(name, []).append((token_id, digest))
    return found


def check(db, names, lines, rule="unicode"):
    """The ``check`` call: {"names": [as stored], "existing": [[row, [active token ids]]...]}."""
    stored, keys = normalized(names, lines, rule)
    with db.transaction() as tx:                   # a write: _fill_keys may fill in old teams' keys
        teams = class_teams(tx, stored, keys, lines)
        tokens = active_tokens(tx)
    existing = [[i, [token_id for token_id, _ in tokens.get(name, ())]] for i, name in enumerate(stored)
                if name in teams]
    return {"names": stored, "existing": existing}


def parsed_tokens(tokens, lines):
    """[(id, secret digest)] of the rows' tokens; Refused (400) where one is not a token of this
    service's shape, is not random enough to be one the client made, or comes twice."""
    out, ids, secrets_seen = [], {}, {}
    for token, line in zip(tokens, lines):
        parsed = parse_token(token)
        if parsed is None:
            raise Refused(400, f"line {line}: its token is not one of this service (ece408_<16 hex>_<43 "
                               f"characters>); {NOTHING}")
        token_id, secret = parsed
        if len(set(secret)) < MIN_SECRET_LETTERS or len(set(token_id)) < MIN_ID_DIGITS:
            raise Refused(400, f"line {line}: its token is not a random one (teams import makes them); {NOTHING}")
        for seen, value, what in ((ids, token_id, "token id"), (secrets_seen, secret, "token")):
            other = seen.setdefault(value, line)
            if other != line:
                raise Refused(400, f"lines {other} and {line} have the same {what}; {NOTHING}")
        out.append((token_id, secret_hash(secret)))
    return out


def create(db, names, lines, tokens, rule="unicode"):
    """The ``create`` call, all or nothing: {"created": n, "already": n, "seconds": the call's, checks
    and transaction}."""
    started = time.monotonic()
    parsed = parsed_tokens(tokens, lines)
    stored, keys = normalized(names, lines, rule)
    now = clock.now()
    with db.transaction() as tx:
        if tx.postgres:                            # imports (and teams add) one at a time: what is read holds
            tx.execute("LOCK TABLE service_teams IN EXCLUSIVE MODE")
        teams = class_teams(tx, stored, keys, lines)
        active = active_tokens(tx)
        taken = {row[0] for row in tx.all("SELECT id FROM service_tokens")}
        new_teams, new_tokens, already = [], [], 0
        for name, key, line, (token_id, digest) in zip(stored, keys, lines, parsed):
            if name in teams:
                if any(token_id == i and hmac.compare_digest(digest, d) for i, d in active.get(name, ())):
                    already += 1
                    continue
                raise Refused(409, f"line {line}: team {name} exists already with another token; {NOTHING} (run "
                                   "the import again: it leaves that team as it is)")
            if token_id in taken:
                raise Refused(409, f"line {line}: its token's id {token_id} is another token's; {NOTHING} "
                                   "(remove that token file and run the import again)")
            new_teams.append((name, now, key))
            new_tokens.append((token_id, "team", name, digest, now))
        tx.insert_many("service_teams", ("name", "created_at", "name_key"), new_teams)
        tx.insert_many("service_tokens", ("id", "kind", "name", "secret_hash", "created_at"), new_tokens)
    return {"created": len(new_teams), "already": already, "seconds": round(time.monotonic() - started, 3)}
