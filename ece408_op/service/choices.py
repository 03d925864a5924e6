"""The instructor's choices for the class, kept in the database (``service_settings``):
whether the ranking shows other teams' names or pseudonyms, and the secret key the pseudonyms
are made with; which device kind counts for each milestone's grade (``grading_kinds``),
whether a team may ask for a GPU kind no worker has reported (``unknown_gpus``), and whether a job
that no worker seen lately can take is queued (``unserved_jobs``: capacity.py).

A pseudonym is ``Team`` and the first hex digits of HMAC-SHA256(key, name): the same team keeps
the same pseudonym for the whole course (a team can follow a rival's progress without learning
its name), and without the key, which never leaves the server, a name cannot be tried against it.
Two teams whose digits agree get more of them, so that no two rows of one ranking look alike.
"""
import hashlib
import hmac
import secrets

NAMES = ("shown", "anonymised")
DEFAULT_NAMES = "shown"              # as `ranking` has always printed them; the instructor chooses
DIGITS = 6


def get(db, key, default=None):
    with db.transaction(write=False) as tx:
        value = tx.value("SELECT value FROM service_settings WHERE key = ?", (key,))
    return default if value is None else value


def put(db, key, value):
    with db.transaction() as tx:
        tx.execute("INSERT INTO service_settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET "
                   "value = excluded.value", (key, value))


def names(db):
    """``shown`` or ``anonymised``: how the ranking names the other teams."""
    value = get(db, "names", DEFAULT_NAMES)
    return value if value in NAMES else DEFAULT_NAMES


def set_names(db, value):
    if value not in NAMES:
        raise ValueError(f"names are {' or '.join(NAMES)}")
    put(db, "names", value)


UNKNOWN_GPUS = ("refused", "accepted")


def grading_kinds(db):
    """{milestone: the device kind that counts for its grade} of the milestones given one."""
    with db.transaction(write=False) as tx:
        rows = tx.all("SELECT key, value FROM service_settings WHERE key LIKE ?", ("grading_kind:%",))
    return {key.split(":", 1)[1]: value for key, value in rows}


def set_grading_kind(db, milestone, kind):
    """Count ``kind`` for ``milestone``'s grade (None: no kind chosen)."""
    if kind is None:
        with db.transaction() as tx:
            tx.execute("DELETE FROM service_settings WHERE key = ?", (f"grading_kind:{milestone}",))
        return
    put(db, f"grading_kind:{milestone}", kind)


UNSERVED_JOBS = ("refused", "accepted")


def _either(db, key, allowed):
    """The stored choice ``key`` of ``allowed`` (its first where unset or not one of them)."""
    value = get(db, key, allowed[0])
    return value if value in allowed else allowed[0]


def _choose(db, key, allowed, value, what):
    if value not in allowed:
        raise ValueError(f"{what} are {' or '.join(allowed)}")
    put(db, key, value)


def unknown_gpus(db):
    """``refused`` (a job asking for a GPU kind no worker reported is refused) or ``accepted``."""
    return _either(db, "unknown_gpus", UNKNOWN_GPUS)


def set_unknown_gpus(db, value):
    _choose(db, "unknown_gpus", UNKNOWN_GPUS, value, "unknown GPU kinds")


def unserved_jobs(db):
    """``refused`` (a job no worker seen lately can take is refused at submission, in one line
    saying what to change) or ``accepted`` (it is queued, the line shown as a warning)."""
    return _either(db, "unserved_jobs", UNSERVED_JOBS)


def set_unserved_jobs(db, value):
    _choose(db, "unserved_jobs", UNSERVED_JOBS, value, "jobs no worker can take now")


def pseudonym_key(db):
    """The class's pseudonym key, made on first use (two servers starting at once agree: the
    first insert wins)."""
    with db.transaction() as tx:
        tx.execute("INSERT INTO service_settings (key, value) VALUES ('pseudonym_key', ?) ON CONFLICT (key) "
                   "DO NOTHING", (secrets.token_hex(32),))
        return tx.value("SELECT value FROM service_settings WHERE key = 'pseudonym_key'")


def pseudonyms(key, names_):
    """{name: pseudonym} of ``names_``, no two alike."""
    digests = {n: hmac.new(key.encode(), n.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
               for n in set(names_)}
    out, digits = {}, DIGITS
    pending = set(digests)
    while pending:
        counts = {}
        for n in pending:
            counts[digests[n][:digits]] = counts.get(digests[n][:digits], 0) + 1
        for n in list(pending):
            if counts[digests[n][:digits]] == 1 or digits >= 64:
                out[n] = f"Team {digests[n][:digits]}"
                pending.discard(n)
        digits += 2
    return out
