"""What the instructor's page shows, read in one transaction each: the queue (waiting jobs in the
fair claim's order, each marked where no worker seen lately can take it; running jobs and their
workers), the workers (alive, GPU, current job, last heartbeat), the teams (jobs, last
submission, where they stand against the rate limits)."""

from . import capacity, clock
from .capacity import missing
from .jobs import ENDED, QUEUED, RUNNING, WORKER_SEEN, _select, job_dict, places

RECENT = 30                           # ended jobs shown on the instructor's page


def queue(db, snap, slurm=None):
    """{queued: [job] in claim order (each with ``place``, and ``unserved``: why no worker seen
    lately can take it, or None), running: [job], recent: [job]} (``slurm``: capacity.missing's;
    Slurm's own workers are then left out of those seen, as capacity.seen leaves them)."""
    ahead = places(snap)
    with db.transaction(write=False) as tx:
        queued = [job_dict(r) for r in tx.all(_select("state = ?"), (QUEUED,))]
        running = [job_dict(r) for r in tx.all(_select("state = ?") + " ORDER BY started_at, id", (RUNNING,))]
        marks = ", ".join("?" * len(ENDED))
        recent = [job_dict(r) for r in tx.all(_select(f"state IN ({marks})") +
                                              " ORDER BY finished_at DESC, id LIMIT ?", (*ENDED, RECENT))]
    seen_now = snap["workers"] if slurm is None or not queued else capacity.seen(db, slurm=slurm)["workers"]
    for job in queued:
        job["place"] = ahead.get(job["id"])
        job["unserved"] = missing(job["gpu"], job["gpu_kind"], seen_now, slurm)
    queued.sort(key=lambda j: (j["place"] if j["place"] is not None else 1 << 30, j["submitted_at"]))
    return {"queued": queued, "running": running, "recent": recent}


def workers(db, now=None):
    """[{name, gpu, device, last_seen, alive, job}] (``job``: the job it runs, or None), newest first."""
    now = clock.now() if now is None else now
    with db.transaction(write=False) as tx:
        rows = tx.all("SELECT name, gpu, device, last_seen FROM service_workers ORDER BY last_seen DESC, name")
        busy = {w: (j, t, h) for j, t, w, h in tx.all("SELECT id, team, worker, heartbeat_at FROM service_jobs "
                                                      "WHERE state = ?", (RUNNING,))}
    out = []
    for name, gpu, device, seen in rows:
        job = busy.get(name)
        heard = max(seen, job[2] or 0) if job else seen
        out.append({"name": name, "gpu": bool(gpu), "device": device, "last_seen": heard,
                    "alive": now - heard < WORKER_SEEN,
                    "job": {"id": job[0], "team": job[1]} if job else None})
    return out


def teams(db, rules, now=None):
    """[{name, active, jobs, last_job, queued, running, ranked_hour, development_hour, limited,
    next_at}] of every team: ``limited`` names what a new submission would be refused for now
    (the rules of jobs.submit), ``next_at`` when that ends."""
    now = clock.now() if now is None else now
    hour = now - 3600
    with db.transaction(write=False) as tx:
        rows = tx.all("SELECT t.name, (SELECT COUNT(*) FROM service_tokens k WHERE k.kind = 'team' AND "
                      "k.name = t.name AND k.revoked_at IS NULL) FROM service_teams t ORDER BY t.name")
        totals = {t: (n, last) for t, n, last in tx.all(
            "SELECT team, COUNT(*), MAX(submitted_at) FROM service_jobs GROUP BY team")}
        states = {}
        for t, state, n in tx.all("SELECT team, state, COUNT(*) FROM service_jobs WHERE state IN (?, ?) "
                                  "GROUP BY team, state", (QUEUED, RUNNING)):
            states[(t, state)] = n
        window = {}
        for t, kind, n, oldest in tx.all("SELECT team, kind, COUNT(*), MIN(submitted_at) FROM service_jobs "
                                         "WHERE submitted_at > ? GROUP BY team, kind", (hour,)):
            window[(t, kind)] = (n, oldest)
    out = []
    for name, active in rows:
        jobs_, last = totals.get(name, (0, None))
        queued, running = states.get((name, QUEUED), 0), states.get((name, RUNNING), 0)
        ranked, ranked_oldest = window.get((name, "ranked"), (0, None))
        development, development_oldest = window.get((name, "development"), (0, None))
        limited, next_at = [], None
        if queued >= rules.max_waiting:
            limited.append(f"{queued} waiting, the most")
        for kind, n, oldest, limit in (("ranked", ranked, ranked_oldest, rules.ranked_per_hour),
                                       ("development", development, development_oldest, rules.development_per_hour)):
            if n >= limit:
                limited.append(f"{kind} {n}/{limit} this hour")
                next_at = max(next_at or 0, oldest + 3600)
        out.append({"name": name, "active": bool(active), "jobs": jobs_, "last_job": last, "queued": queued,
                    "running": running, "ranked_hour": ranked, "development_hour": development,
                    "limited": "; ".join(limited), "next_at": next_at})
    return out


def team_names(db):
    with db.transaction(write=False) as tx:
        return [r[0] for r in tx.all("SELECT name FROM service_teams ORDER BY name")]


def team_exists(db, name):
    with db.transaction(write=False) as tx:
        return tx.value("SELECT 1 FROM service_teams WHERE name = ?", (name,)) is not None


def chunks(db, job_id):
    """[(seq, text)] of a job's whole transcript."""
    with db.transaction(write=False) as tx:
        return [(int(s), t) for s, t in tx.all("SELECT seq, text FROM service_chunks WHERE job_id = ? ORDER BY seq",
                                               (job_id,))]


def team_jobs(db, team, limit):
    """(the team's newest ``limit`` jobs, how many it has in all)."""
    with db.transaction(write=False) as tx:
        rows = tx.all(_select("team = ?") + " ORDER BY submitted_at DESC, id LIMIT ?", (team, limit))
        total = tx.value("SELECT COUNT(*) FROM service_jobs WHERE team = ?", (team,))
    return [job_dict(r) for r in rows], int(total or 0)
