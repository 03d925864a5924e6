"""The queue: jobs in the database, each change one transaction.

States: ``queued`` -> ``running`` (a worker holds its lease) -> ``done`` (the run ended, any
outcome: its ``status`` and ``valid`` say how), ``failed`` (the service could not run it: its
worker was lost on every attempt, or it passed its time limit), ``cancelled``.

Rules, checked in the submitting transaction (so that two requests at once cannot both pass):
a ranked milestone past its deadline is refused; a team may have ``max_waiting`` jobs queued;
``ranked_per_hour`` and ``development_per_hour`` jobs started per hour (a refusal says how long
to wait). A team has at most one job running.

Fair claim: among the teams with a job this worker can run and none running, the team served
longest ago (never served first, then by its oldest job) gets its oldest job: round robin, so
that a team with ten jobs waiting holds back a team with one by one job at most. A worker can run
a job that needs no GPU or, having one, one that does; and a job that asked for a device kind
(``gpu_kind``: submit --gpu) only where the worker's own kind (its device's reported name,
grading/kinds.py) is that one: another worker never takes it, however idle. PostgreSQL
locks the chosen team's row (``FOR UPDATE SKIP LOCKED``: two workers never take one team's
jobs at once) and checks again that the team has none running; SQLite's ``BEGIN IMMEDIATE``
makes the whole claim one writer.

Leases: a claim gives the worker a random lease; every chunk, heartbeat and the end must carry
it. A job whose worker is silent for ``lease`` seconds goes back to the queue once (the next
claim is attempt 2), then fails with the reason; a job past its time limit fails. A worker
that stops cleanly releases its job (not counted as an attempt).

Time: every time here (submitted, started, heard, the per-hour windows, the time limits) is the
service's clock (``clock.now``: the wall clock read at the start of the process, moved by the
monotonic clock), so that a step of the system's clock neither takes a job from a worker that
reports nor unlocks or locks a team.

Transcript chunks are rows (job, seq, text): the worker numbers them from the base its claim
gave, the server inserts them ``ON CONFLICT DO NOTHING`` (a retried post never doubles a line)
and the service's own lines take the next numbers while no worker holds the job.
"""
import json
import math
import secrets
import time
from dataclasses import asdict, dataclass

from . import clock
from .grading_door import insert_statement, kind_of, record_summary
from .refused import Refused

QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
ENDED = (DONE, FAILED, CANCELLED)
JOB_COLUMNS = ("id", "team", "kind", "milestone", "size", "gpu", "state", "submitted_at", "started_at",
               "finished_at", "heartbeat_at", "time_limit", "attempts", "lease", "worker", "cancel_requested",
               "status", "exit_code", "valid", "reason", "summary", "record_id", "next_seq", "upload_bytes",
               "upload_sha256", "files", "idem_key", "gpu_kind")
PUBLIC = ("id", "team", "kind", "milestone", "size", "gpu", "state", "submitted_at", "started_at", "finished_at",
          "attempts", "worker", "status", "exit_code", "valid", "reason", "summary", "record_id", "files",
          "cancel_requested", "time_limit", "gpu_kind")
MAX_CHUNK = 64 << 10                       # characters of one transcript chunk
MAX_CHUNKS = 1000                          # chunks in one post
MAX_SEQ = 2 ** 31 - 1                      # chunk numbers fit PostgreSQL's INTEGER column
WORKER_SEEN = 120.0                        # a worker that asked for work this recently counts as present
KINDS_SEEN = 7 * 86400.0                   # the device kinds a team may ask for: those of workers seen this recently


class Lost(Exception):
    """The worker's lease on a job is no longer valid (requeued, ended, or another lease)."""


@dataclass
class Rules:
    ranked_per_hour: int = 12
    development_per_hour: int = 30
    max_waiting: int = 10
    job_timeout: float = 1800.0           # seconds a job may run (each attempt)
    max_attempts: int = 2                 # a job whose worker is lost goes back to the queue once
    lease: float = 60.0                   # seconds of worker silence before its job is taken back


def when(seconds):
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def duration(seconds):
    """``1 h 5 min``, ``12 min 5 s``, ``40 s``: a wait, rounded up to the second."""
    seconds = max(1, math.ceil(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{secs} s"


def job_dict(row):
    job = dict(zip(JOB_COLUMNS, row))
    job["gpu"] = bool(job["gpu"])
    job["cancel_requested"] = bool(job["cancel_requested"])
    job["valid"] = None if job["valid"] is None else bool(job["valid"])
    job["files"] = json.loads(job["files"]) if job["files"] else []
    return job


def public(job):
    return {k: job[k] for k in PUBLIC}


def summary(job):
    """The job as a listing shows it: its files counted, not listed (a development upload may hold
    10,000 of them, and a listing holds many jobs)."""
    view = {k: job[k] for k in PUBLIC if k != "files"}
    view["file_count"] = len(job["files"])
    return view


def _select(where, lock=""):
    return f"SELECT {', '.join(JOB_COLUMNS)} FROM service_jobs WHERE {where}{lock}"


def _append(tx, job_id, seq, text, now):
    tx.execute("INSERT INTO service_chunks (job_id, seq, text, at) VALUES (?, ?, ?, ?) ON CONFLICT (job_id, seq) "
               "DO NOTHING", (job_id, seq, text, now))


def _say(tx, job, text, now):
    """Append the service's own line ``text`` to ``job``'s transcript (no worker holds it);
    returns the next free chunk number."""
    seq = job["next_seq"]
    _append(tx, job["id"], seq, text.rstrip("\n") + "\n", now)
    return seq + 1


# ---------------------------------------------------------------------------- submitting

# a team's waiting jobs, and its jobs of one kind submitted in the last hour with the oldest's time:
# one statement (a round trip to PostgreSQL, not two), over the team's queued and recent jobs only
RULE_COUNTS = ("SELECT COUNT(CASE WHEN state = ? THEN 1 END), "
               "COUNT(CASE WHEN kind = ? AND submitted_at > ? THEN 1 END), "
               "MIN(CASE WHEN kind = ? AND submitted_at > ? THEN submitted_at END) "
               "FROM service_jobs WHERE team = ? AND (state = ? OR submitted_at > ?)")


def _rules(tx, rules, team, kind, milestone, now):
    """Refused where a rule says no to one more ``kind`` job of ``team`` now (see the module
    docstring); the rules read only, so that they can be asked before an upload is read."""
    if kind == "ranked":
        row = tx.one("SELECT deadline, shown FROM service_deadlines WHERE milestone = ?", (milestone,))
        if row is not None and now > row[0]:
            raise Refused(403, f"the {milestone} deadline was {row[1]}; ranked {milestone} runs are closed "
                               "(development runs are still accepted)")
    hour = now - 3600
    waiting, count, oldest = tx.one(RULE_COUNTS, (QUEUED, kind, hour, kind, hour, team, QUEUED, hour))
    if waiting >= rules.max_waiting:
        raise Refused(429, f"team {team} has {waiting} jobs waiting, the most a team may have; wait for one "
                           "to start, or cancel one (jobs list, jobs cancel ID)", retry_after=30)
    limit = rules.ranked_per_hour if kind == "ranked" else rules.development_per_hour
    if count >= limit:
        wait = oldest + 3600 - now
        raise Refused(429, f"team {team} has submitted {count} {kind} runs in the last hour, the limit; "
                           f"the next is accepted in {duration(wait)}", retry_after=math.ceil(wait), holds=wait)


def _keyed(tx, team, key, asked):
    """The job ``team`` submitted with the idempotency ``key`` (marked ``repeated``), else None;
    Refused (409) where that job is another submission than ``asked`` ({column: value} of this
    request: its kind, milestone, size, device kind, and once read its upload's SHA-256)."""
    if key is None:
        return None
    row = tx.one(_select("team = ? AND idem_key = ?"), (team, key))
    if row is None:
        return None
    job = job_dict(row)
    if any(job.get(column) != value for column, value in asked.items()):
        raise Refused(409, f"this Idempotency-Key was sent with another submission (job {job['id']}); a new "
                           "submission needs a key of its own")
    job["repeated"] = True
    return job


def admit(db, rules, team, kind, milestone, key=None, asked=None, now=None):
    """Before an upload is read: the job an earlier request with ``key`` made (a retry of the
    submission ``asked`` describes), else None where the rules would accept one more job now;
    Refused otherwise. ``submit`` checks again in its own transaction (a job may have been queued
    in between)."""
    now = clock.now() if now is None else now
    with db.transaction(write=False) as tx:
        if tx.one("SELECT name FROM service_teams WHERE name = ?", (team,)) is None:
            raise Refused(403, f"team {team} is not in the class any more")
        return _keyed(tx, team, key, asked or {}) or _rules(tx, rules, team, kind, milestone, now)


def submit(db, rules, team, kind, milestone, size, gpu, upload, files, key=None, now=None, gpu_kind=None, notes=(),
           quota=None, place=None):
    """Queue a job for ``team``; returns it (a dict). Refused where a rule says no. ``upload``:
    its (bytes, SHA-256), the file kept by uploadstore.py; ``quota(tx, team, kind, bytes)`` refuses
    where the upload quotas would pass, and ``place()`` puts the file in place, both inside this
    transaction. A ``key`` that the team used before returns that job, marked ``repeated``, and
    queues nothing. ``gpu_kind``: the device kind it runs on (None: any); ``notes``: the service's
    lines after the first."""
    upload_bytes, upload_sha256 = upload
    now = clock.now() if now is None else now
    job_id = secrets.token_hex(16)
    with db.transaction() as tx:
        if tx.one("SELECT name FROM service_teams WHERE name = ?" + tx.lock_suffix(), (team,)) is None:
            raise Refused(403, f"team {team} is not in the class any more")
        earlier = _keyed(tx, team, key, {"kind": kind, "milestone": milestone, "size": size, "gpu_kind": gpu_kind,
                                         "upload_sha256": upload_sha256})
        if earlier is not None:
            return earlier
        _rules(tx, rules, team, kind, milestone, now)
        if quota is not None:
            quota(tx, team, kind, upload_bytes)
        what = f"ranked {milestone}, {size} images" if kind == "ranked" else "development run of rai_build.yml"
        what += f", on {gpu_kind}" if gpu_kind else ""
        lines = [f"* Job {job_id} queued at {when(now)}: {what}, team {team}", *notes]
        # the row as inserted is the job returned (its next chunk number counted beforehand): no
        # UPDATE and SELECT after it, two round trips to PostgreSQL fewer a submission
        row = (job_id, team, kind, milestone, size, int(gpu), QUEUED, float(now), None, None, None,
               float(rules.job_timeout),
               0, None, None, 0, None, None, None, None, None, job_id if kind == "ranked" else None, len(lines),
               upload_bytes, upload_sha256, json.dumps(files), key, gpu_kind)
        tx.execute(f"INSERT INTO service_jobs ({', '.join(JOB_COLUMNS)}, upload_held) "
                   f"VALUES ({', '.join('?' * len(JOB_COLUMNS))}, 1)", row)
        if place is not None:
            place()                          # the upload's file, in place inside this transaction
        for seq, line in enumerate(lines):
            _say(tx, {"id": job_id, "next_seq": seq}, line, now)
        return job_dict(row)


# ---------------------------------------------------------------------------- reading

def get(db, job_id, team=None):
    """The job (a dict), or None where there is none (or it is another team's)."""
    with db.transaction(write=False) as tx:
        if team is None:
            row = tx.one(_select("id = ?"), (job_id,))
        else:
            row = tx.one(_select("id = ? AND team = ?"), (job_id, team))
    return job_dict(row) if row else None


def listing(db, team=None, limit=50):
    with db.transaction(write=False) as tx:
        if team is None:
            rows = tx.all(_select("1 = 1") + " ORDER BY submitted_at DESC, id LIMIT ?", (limit,))
        else:
            rows = tx.all(_select("team = ?") + " ORDER BY submitted_at DESC, id LIMIT ?", (team, limit))
    return [job_dict(r) for r in rows]


def follow(db, job_id, after, limit=500):
    """(state, the job if it ended else None, [(seq, text)] after ``after``) in one read: the
    state is read first, so that chunks read after an end include every chunk of the job."""
    with db.transaction(write=False) as tx:
        row = tx.one(_select("id = ?"), (job_id,))
        chunks = tx.all("SELECT seq, text FROM service_chunks WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                        (job_id, after, limit))
    job = job_dict(row) if row else None
    return job, [(int(s), t) for s, t in chunks]


def transcript(db, job_id):
    with db.transaction(write=False) as tx:
        rows = tx.all("SELECT text FROM service_chunks WHERE job_id = ? ORDER BY seq", (job_id,))
    return "".join(r[0] for r in rows)


def upload(db, job_id, lease):
    """The upload of the job the worker holds: its BLOB (a database from before uploads were files,
    uploadstore.py) or None, and its SHA-256; Lost where the lease is not held."""
    with db.transaction(write=False) as tx:
        state = tx.one("SELECT state, lease, upload_sha256 FROM service_jobs WHERE id = ?", (job_id,))
        if state is None or state[0] != RUNNING or state[1] != lease:
            raise Lost(job_id)
        data = tx.value("SELECT data FROM service_uploads WHERE job_id = ?", (job_id,))
    return (None if data is None else bytes(data)), state[2]


def snapshot(db, now=None):
    """What queue places are computed from: queued jobs (id, team, submitted_at, gpu, gpu_kind),
    each team's last start, the teams running a job, and the workers seen lately (how many with a
    GPU, without, their device kinds, and each as (has a GPU, kind))."""
    now = clock.now() if now is None else now
    with db.transaction(write=False) as tx:
        queued = tx.all("SELECT id, team, submitted_at, gpu, gpu_kind FROM service_jobs WHERE state = ? "
                        "ORDER BY submitted_at, id", (QUEUED,))
        teams = dict(tx.all("SELECT t.name, t.last_started FROM service_teams t WHERE EXISTS "
                            "(SELECT 1 FROM service_jobs j WHERE j.team = t.name AND j.state = ?)", (QUEUED,)))
        running = tx.value("SELECT COUNT(*) FROM service_jobs WHERE state = ?", (RUNNING,))
        workers = tx.all("SELECT gpu, device FROM service_workers WHERE last_seen > ?", (now - WORKER_SEEN,))
    return {"queued": queued, "last_started": teams, "running": running,
            "gpu_workers": sum(1 for g, _ in workers if g), "cpu_workers": sum(1 for g, _ in workers if not g),
            "kinds": {kind_of(d) for _, d in workers}, "workers": [(bool(g), kind_of(d)) for g, d in workers]}


def places(snap):
    """{job id: jobs ahead of it} as the fair claim would order the queue now (round robin:
    each team's k-th waiting job goes in round k; in a round, teams by their last start, then
    by their oldest job). Ahead of a job that asked for a device kind are only those a worker of
    that kind could take instead (asking for none, or for that kind)."""
    by_team = {}
    for job_id, team, submitted, _gpu, gpu_kind in snap["queued"]:
        by_team.setdefault(team, []).append((submitted, job_id, gpu_kind))
    order = sorted(by_team, key=lambda t: (snap["last_started"].get(t) or 0, by_team[t][0]))
    rounds = max((len(v) for v in by_team.values()), default=0)
    ahead, n, anywhere, per_kind = {}, 0, 0, {}
    for k in range(rounds):
        for team in order:
            jobs = by_team[team]
            if k < len(jobs):
                _, job_id, gpu_kind = jobs[k]
                ahead[job_id] = n if gpu_kind is None else anywhere + per_kind.get(gpu_kind, 0)
                n += 1
                if gpu_kind is None:
                    anywhere += 1
                else:
                    per_kind[gpu_kind] = per_kind.get(gpu_kind, 0) + 1
    return ahead


# ---------------------------------------------------------------------------- workers

# a job that a worker can run (its parameters: whether the worker has a GPU, its device kind)
RUNNABLE = "({a}gpu = 0 OR ? = 1) AND ({a}gpu_kind IS NULL OR {a}gpu_kind = ?)"
TEAM_PICK = f"""SELECT t.name FROM service_teams t
    WHERE EXISTS (SELECT 1 FROM service_jobs j WHERE j.team = t.name AND j.state = 'queued'
                  AND {RUNNABLE.format(a="j.")})
      AND NOT EXISTS (SELECT 1 FROM service_jobs r WHERE r.team = t.name AND r.state = 'running')
    ORDER BY COALESCE(t.last_started, 0),
             (SELECT MIN(j.submitted_at) FROM service_jobs j WHERE j.team = t.name AND j.state = 'queued'
                AND {RUNNABLE.format(a="j.")}),
             t.name
    LIMIT 1"""


def seen(tx, worker, gpu, device, now):
    tx.execute("INSERT INTO service_workers (name, gpu, device, last_seen) VALUES (?, ?, ?, ?) ON CONFLICT (name) "
               "DO UPDATE SET gpu = excluded.gpu, device = excluded.device, last_seen = excluded.last_seen",
               (worker, int(gpu), device, now))


def claim(db, rules, worker, gpu, device, now=None):
    """The next job for a worker (``gpu``: it has one; ``device``: its device's name, whose kind a
    job may have asked for), fairly (see the module docstring), with a fresh lease and the chunk
    number its transcript starts at; None when there is none."""
    now = clock.now() if now is None else now
    runnable = (int(gpu), kind_of(device))
    with db.transaction() as tx:
        seen(tx, worker, gpu, device, now)
        row = tx.one(TEAM_PICK + tx.lock_suffix(skip=True), runnable * 2)
        if row is None:
            return None
        team = row[0]
        if tx.postgres and tx.value("SELECT 1 FROM service_jobs WHERE team = ? AND state = ?", (team, RUNNING)):
            return None                            # claimed by another worker since: the next call looks again
        row = tx.one(_select(f"team = ? AND state = ? AND {RUNNABLE.format(a='')}") +
                     " ORDER BY submitted_at, id LIMIT 1" + tx.lock_suffix(), (team, QUEUED, *runnable))
        if row is None:
            return None
        job = job_dict(row)
        attempt = job["attempts"] + 1
        lease = secrets.token_hex(16)
        note = f" (attempt {attempt} of {rules.max_attempts})" if attempt > 1 else ""
        base = _say(tx, job, f"* Worker {worker} ({device}) took the job{note}", now)
        tx.execute("UPDATE service_jobs SET state = ?, lease = ?, worker = ?, started_at = ?, heartbeat_at = ?, "
                   "attempts = ?, next_seq = ?, time_limit = ? WHERE id = ?",
                   (RUNNING, lease, worker, now, now, attempt, base, rules.job_timeout, job["id"]))
        tx.execute("UPDATE service_teams SET last_started = ? WHERE name = ?", (now, team))
    job.update(state=RUNNING, lease=lease, worker=worker, started_at=now, attempts=attempt, next_seq=base,
               time_limit=rules.job_timeout)
    return job


def _held(tx, job_id, lease):
    row = tx.one(_select("id = ?", tx.lock_suffix()), (job_id,))
    if row is None:
        raise Lost(job_id)
    job = job_dict(row)
    if job["lease"] != lease or job["state"] != RUNNING:
        raise Lost(job_id)
    return job


def add_chunks(db, job_id, lease, chunks, now=None):
    """Store the worker's transcript ``chunks`` [(seq, text)] (a retried post stores nothing
    twice); counts as a heartbeat. Returns whether the job is to be cancelled. Lost otherwise."""
    now = clock.now() if now is None else now
    with db.transaction() as tx:
        job = _held(tx, job_id, lease)
        top = job["next_seq"]
        numbers = sorted(seq for seq, _ in chunks)
        if numbers and (numbers[0] > top or numbers != list(range(numbers[0], numbers[0] + len(numbers)))):
            raise Refused(400, f"chunk numbers follow on from {top} without a gap (a follower reads each after "
                               "the last it has)")
        for seq, text in chunks:
            _append(tx, job_id, seq, text, now)
            top = max(top, seq + 1)
        tx.execute("UPDATE service_jobs SET heartbeat_at = ?, next_seq = ? WHERE id = ?", (now, top, job_id))
        return job["cancel_requested"]


def heartbeat(db, job_id, lease, now=None):
    now = clock.now() if now is None else now
    with db.transaction() as tx:
        job = _held(tx, job_id, lease)
        tx.execute("UPDATE service_jobs SET heartbeat_at = ? WHERE id = ?", (now, job_id))
        tx.execute("UPDATE service_workers SET last_seen = ? WHERE name = ?", (now, job["worker"]))   # busy, present
        return job["cancel_requested"]


def _uncounted(tx, job, lease, record, why, now):
    """Keep the record of a run that does not count (``why``: one line) for the instructor."""
    tx.execute("INSERT INTO service_uncounted (job_id, lease, team, record_id, received_at, why, record) "
               "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, lease) DO NOTHING",
               (job["id"], lease, job["team"], record.id, now, why, json.dumps(asdict(record))))


def counts(record):
    """Whether a ranked run's record is valid for the ranking (measured, correct, ok)."""
    return record.status == "ok" and bool(record.correct) and record.op_time is not None


def finish(db, job_id, lease, status, exit_code=None, reason=None, record=None, lines=(), now=None):
    """End the job the worker holds, in one transaction with its record: the run's ``status`` (ok,
    failed, timeout, killed, error), the ranked run's ``record`` (a grading Record), the service's
    closing ``lines`` (a development run's). Whichever commits first wins: a job whose cancel was
    asked before ends ``cancelled`` and its record is kept as not counted; otherwise it ends
    ``done`` and the record is stored in the ranking's table in the same transaction. A worker
    that no longer holds the lease (the job was taken back, failed or ended) gets Lost, and its
    record is kept as not counted. A second call with the same lease after the end returns the
    job and changes nothing. Returns the job."""
    now = clock.now() if now is None else now
    lost = False
    with db.transaction() as tx:
        row = tx.one(_select("id = ?", tx.lock_suffix()), (job_id,))
        if row is None:
            raise Lost(job_id)
        job = job_dict(row)
        if job["lease"] == lease and job["state"] in ENDED:
            return job
        if job["lease"] != lease or job["state"] != RUNNING:
            if record is not None:
                _uncounted(tx, job, lease, record, f"late: the job had been taken from this worker "
                                                   f"(it was {job['state']} when the worker's end arrived)", now)
            lost = True
        else:
            valid = None
            if job["cancel_requested"]:
                state = CANCELLED
                lines = ["* Cancelled while it ran" + ("; its record is not counted" if record is not None else "")]
                if record is not None:
                    _uncounted(tx, job, lease, record, "cancelled while it ran", now)
            else:
                state = DONE
                if record is not None:
                    tx.execute(*insert_statement(record))
                    valid = counts(record)
                    status, reason = record.status, record.reason
                    lines = [record_summary(record)]
            for line in lines:
                job["next_seq"] = _say(tx, job, line, now)
            summary = lines[0] if lines else None
            tx.execute("UPDATE service_jobs SET state = ?, status = ?, exit_code = ?, reason = ?, valid = ?, "
                       "summary = ?, finished_at = ?, next_seq = ? WHERE id = ?",
                       (state, status, exit_code, reason, None if valid is None else int(valid), summary, now,
                        job["next_seq"], job_id))
            if job["kind"] == "development":         # its upload let go (its file: uploadstore's sweep)
                tx.execute("UPDATE service_jobs SET upload_held = 0 WHERE id = ?", (job_id,))
                tx.execute("DELETE FROM service_uploads WHERE job_id = ?", (job_id,))
            job.update(state=state, status=status, exit_code=exit_code, reason=reason, valid=valid, summary=summary,
                       finished_at=now)
    if lost:
        raise Lost(job_id)
    return job


def uncounted(db, limit=200):
    """The records kept as not counted, newest first: [{job_id, team, record_id, received_at, why}]."""
    with db.transaction(write=False) as tx:
        rows = tx.all("SELECT job_id, team, record_id, received_at, why FROM service_uncounted "
                      "ORDER BY received_at DESC LIMIT ?", (limit,))
    return [dict(zip(("job_id", "team", "record_id", "received_at", "why"), r)) for r in rows]


def release(db, job_id, lease, why, now=None):
    """The worker stops cleanly: the job goes back to the queue, the attempt not counted."""
    now = clock.now() if now is None else now
    with db.transaction() as tx:
        job = _held(tx, job_id, lease)
        if job["cancel_requested"]:
            base = _say(tx, job, f"* The worker stopped ({why}); the job was being cancelled and ends here", now)
            tx.execute("UPDATE service_jobs SET state = ?, status = 'killed', finished_at = ?, next_seq = ?, "
                       "reason = ?, lease = NULL WHERE id = ?", (CANCELLED, now, base, "cancelled", job_id))
            return
        base = _say(tx, job, f"* The worker stopped ({why}); the job goes back to the queue and runs again "
                             "from the start", now)
        tx.execute("UPDATE service_jobs SET state = ?, lease = NULL, worker = NULL, heartbeat_at = NULL, "
                   "attempts = ?, next_seq = ? WHERE id = ?", (QUEUED, max(0, job["attempts"] - 1), base, job_id))


def cancel(db, job_id, team=None, now=None):
    """Cancel a job (``team``: only its own). A queued job ends at once; a running one is
    stopped by its worker at its next report. Returns the job. Refused where it has ended."""
    now = clock.now() if now is None else now
    with db.transaction() as tx:
        where = "id = ?" + (" AND team = ?" if team is not None else "")
        row = tx.one(_select(where, tx.lock_suffix()), (job_id,) + ((team,) if team is not None else ()))
        if row is None:
            return None
        job = job_dict(row)
        if job["state"] in ENDED:
            raise Refused(409, f"job {job_id} has already ended ({job['state']})")
        if job["state"] == QUEUED:
            base = _say(tx, job, "* Cancelled before it started", now)
            tx.execute("UPDATE service_jobs SET state = ?, status = 'killed', reason = 'cancelled', finished_at = ?, "
                       "next_seq = ? WHERE id = ?", (CANCELLED, now, base, job_id))
            if job["kind"] == "development":
                tx.execute("UPDATE service_jobs SET upload_held = 0 WHERE id = ?", (job_id,))
                tx.execute("DELETE FROM service_uploads WHERE job_id = ?", (job_id,))
            job.update(state=CANCELLED, status="killed", reason="cancelled")
        else:
            tx.execute("UPDATE service_jobs SET cancel_requested = 1 WHERE id = ?", (job_id,))
            job["cancel_requested"] = True
        return job


def reap(db, rules, now=None, grace=60.0):
    """Take back the jobs whose worker went silent (back to the queue once, then failed) and fail
    those past their time limit (plus ``grace``: the worker's own stop comes first). Returns
    [(job id, new state)]."""
    now = clock.now() if now is None else now
    changed = []
    with db.transaction() as tx:
        rows = tx.all(_select("state = ? AND (heartbeat_at < ? OR started_at + time_limit + ? < ?)",
                              tx.lock_suffix(skip=True)), (RUNNING, now - rules.lease, grace, now))
        for row in rows:
            job = job_dict(row)
            heard = when(job["heartbeat_at"] or job["started_at"])
            if job["started_at"] + job["time_limit"] + grace < now:
                state, status = FAILED, "timeout"
                reason = f"the job ran past its time limit of {job['time_limit']:g} s and its worker did not stop it"
            elif job["cancel_requested"]:
                state, status, reason = CANCELLED, "killed", "cancelled"
            elif job["attempts"] < rules.max_attempts:
                state = QUEUED
                base = _say(tx, job, f"* The worker {job['worker']} stopped answering (last heard {heard}); the "
                                     f"job goes back to the queue (attempt {job['attempts']} of "
                                     f"{rules.max_attempts} ended without a result)", now)
                tx.execute("UPDATE service_jobs SET state = ?, lease = NULL, worker = NULL, heartbeat_at = NULL, "
                           "next_seq = ? WHERE id = ?", (QUEUED, base, job["id"]))
                changed.append((job["id"], state))
                continue
            else:
                state, status = FAILED, "error"
                reason = (f"its worker stopped answering on each of its {job['attempts']} attempts (the last: "
                          f"{job['worker']}, last heard {heard}); it is not run again")
            line = "* Cancelled (its worker stopped answering)" if state == CANCELLED else f"* Failed: {reason}"
            base = _say(tx, job, line, now)
            tx.execute("UPDATE service_jobs SET state = ?, status = ?, reason = ?, valid = 0, finished_at = ?, "
                       "next_seq = ?, lease = NULL WHERE id = ?", (state, status, reason, now, base, job["id"]))
            changed.append((job["id"], state))
    return changed


def restarted(db, local_workers=None, now=None):
    """At server start: every running job's worker gets a full lease to report again (a restart
    is not its silence); the jobs of this server's own local workers, which died with the last
    server process, are marked silent at once (``reap`` takes them back)."""
    now = clock.now() if now is None else now
    with db.transaction() as tx:
        tx.execute("UPDATE service_jobs SET heartbeat_at = ? WHERE state = ?", (now, RUNNING))
        for name in local_workers or ():
            tx.execute("UPDATE service_jobs SET heartbeat_at = 0 WHERE state = ? AND worker = ?", (RUNNING, name))


# ---------------------------------------------------------------------------- deadlines

def set_deadline(db, milestone, deadline, shown):
    with db.transaction() as tx:
        if deadline is None:
            tx.execute("DELETE FROM service_deadlines WHERE milestone = ?", (milestone,))
        else:
            tx.execute("INSERT INTO service_deadlines (milestone, deadline, shown) VALUES (?, ?, ?) ON CONFLICT "
                       "(milestone) DO UPDATE SET deadline = excluded.deadline, shown = excluded.shown",
                       (milestone, deadline, shown))


def deadlines(db):
    with db.transaction(write=False) as tx:
        return [{"milestone": m, "deadline": d, "shown": s}
                for m, d, s in tx.all("SELECT milestone, deadline, shown FROM service_deadlines ORDER BY deadline")]
