"""Whether a worker able to take a job is there, asked when the job is submitted: a job no worker
can take never waits in silence.

A worker slot (a row of ``service_workers``) can take a job as the claim decides (jobs.RUNNABLE):
a GPU where the job needs one, and the device kind the job asked for (``submit --gpu``) where it
asked for one. It counts where it was seen in the last ``jobs.WORKER_SEEN`` seconds (2 min): it
asked for work, or reported on a job it holds (a busy slot heartbeats every 10 s); ``serve
--workers N`` registers its own slots as seen when it starts (``register``), before they ask.

At submission (api/jobs.py), where no worker seen can take the job, ``check`` gives one line:
what is missing, what in the submission asks for it (the line of rai_build.yml that asks for a
GPU, the milestone that runs on one, ``--gpu``'s kind) and what to change. The job is refused
(409, that line) unless

- the instructor accepts such jobs (``choices.unserved_jobs``: ``accepted``), or the kind it asks
  for is one no worker has reported and the instructor accepts those (``unknown_gpus``): it is
  queued, the line given back as a warning (the client prints it, the transcript keeps it);
- no worker at all has asked for work in the window (the class's workers away: a server or
  worker restart, the night, a class whose instructor starts the workers later): then the job
  is judged against the workers seen in the last ``jobs.KINDS_SEEN`` seconds (7 days, the
  class's workers), and queued with a warning where one of them could take it, or where none
  was seen at all (a new class); refused as above where none of them could (a class of CPU
  workers asked for a GPU).

``serve --slurm``: Slurm starts a worker for each queued job, so none is seen beforehand; there
the check is whether Slurm's request can serve the job: a job that needs a GPU is refused where
GPU jobs are sent without one (``--gres none``). Device kinds are not mapped to Slurm's requests
yet: a job asking for a kind is accepted as before. The instructor's page marks every queued job
that no worker seen can take (``missing``).
"""
from dataclasses import dataclass

from . import choices, clock, devices
from .jobs import KINDS_SEEN, WORKER_SEEN, Refused, seen as seen_worker, when
from .grading_door import kind_of, printable

WINDOW = f"{WORKER_SEEN / 60:g} min"


@dataclass(frozen=True)
class Need:
    """What a job needs of its worker, and what in the submission asks for it."""
    gpu: bool
    gpu_kind: str = None          # the device kind asked for (--gpu), as the job keeps it
    asked: str = None             # --gpu's name as typed
    milestone: str = None         # a ranked run's
    gpu_line: int = None          # a development run's: the line of rai_build.yml's resources.gpu.count
    gpu_count: int = 0


def register(db, slots, now=None):
    """Mark this server's own worker slots [(name, has a GPU, device name)] as seen (at its start)."""
    now = clock.now() if now is None else now
    with db.transaction() as tx:
        for name, gpu, device in slots:
            seen_worker(tx, name, gpu, device, now)


def seen(db, now=None):
    """The workers as the check needs them: {workers: [(has a GPU, kind)] seen in the window,
    week: those seen in the last ``jobs.KINDS_SEEN`` seconds (the class's workers), last: when the
    last one was seen (None: never)}."""
    now = clock.now() if now is None else now
    with db.transaction(write=False) as tx:
        rows = tx.all("SELECT gpu, device, last_seen FROM service_workers WHERE last_seen > ?", (now - KINDS_SEEN,))
        last = tx.value("SELECT MAX(last_seen) FROM service_workers")
    return {"workers": [(bool(g), kind_of(d)) for g, d, at in rows if at > now - WORKER_SEEN],
            "week": [(bool(g), kind_of(d)) for g, d, _ in rows], "last": last}


def can_take(worker, gpu, gpu_kind):
    """Whether ``worker`` (has a GPU, kind) can take a job needing ``gpu`` and ``gpu_kind`` (jobs.RUNNABLE)."""
    has_gpu, kind = worker
    return (has_gpu or not gpu) and (gpu_kind is None or gpu_kind == kind)


def seen_text(workers):
    """``2 CPU workers, 1 GPU worker on NVIDIA H100 80GB HBM3``; ``none``."""
    def counted(n, what):
        return f"{n} {what}{'s' if n != 1 else ''}"
    cpu = sum(1 for g, _ in workers if not g)
    gpus = {}
    for g, kind in workers:
        if g:
            gpus[kind or "an unreported device"] = gpus.get(kind or "an unreported device", 0) + 1
    parts = ([counted(cpu, "CPU worker")] if cpu else []) + \
        [f"{counted(n, 'GPU worker')} on {kind}" for kind, n in sorted(gpus.items())]
    return ", ".join(parts) or "none"


def missing(gpu, gpu_kind, workers, slurm_gpus=None, window=WINDOW):
    """Why none of ``workers`` (seen in the last ``window``) can take a job needing ``gpu`` and
    ``gpu_kind``, one phrase; None where one can (``slurm_gpus``: serve --slurm, whether its GPU
    jobs get a GPU; None: not Slurm)."""
    if slurm_gpus is not None:
        return "this class's workers are Slurm jobs without a GPU (serve --slurm --gres none)" \
            if gpu and not slurm_gpus else None
    if any(can_take(w, gpu, gpu_kind) for w in workers):
        return None
    if not workers:
        return f"no worker of this class has asked for work in the last {window}"
    listed = f"seen in the last {window}: {seen_text(workers)}"
    if gpu_kind is not None and not any(kind == gpu_kind for _, kind in workers):
        return f"no worker on {gpu_kind} has asked for work in the last {window} ({listed})"
    if gpu_kind is not None:
        return f"no worker on {gpu_kind} has a GPU ({listed})"
    return f"no worker of this class has a GPU ({listed})"


def refusal_line(need, why, workers):
    """The one line for a job ``why`` says none of ``workers`` can take: what asks for it and what to change."""
    if need.gpu_kind is not None and not any(kind == need.gpu_kind for _, kind in workers):
        kinds = sorted({kind for has_gpu, kind in workers if kind and (has_gpu or not need.gpu)})
        served = "; ".join(kinds) or "none"
        asked = printable(need.asked or need.gpu_kind, 100)
        return (f"{why}; --gpu {asked} asks for {need.gpu_kind}: leave --gpu out, or ask your instructor (the kinds "
                f"served now: {served})")
    if need.milestone is not None and need.gpu:
        return f"{need.milestone} runs on a GPU: {why}; ask your instructor when one will be up"
    if need.gpu and need.gpu_line is not None:
        gpus = "a GPU" if need.gpu_count == 1 else f"{need.gpu_count} GPUs"
        return (f"{why}; rai_build.yml line {need.gpu_line} asks for {gpus} (resources.gpu.count: {need.gpu_count}): "
                "set it to 0 for a CPU-only run, or ask your instructor")
    if need.gpu:
        return f"{why}; this job needs a GPU: ask your instructor"
    return f"{why}; ask your instructor"


def check(db, need, slurm_gpus=None, now=None):
    """None where a worker seen lately (or Slurm) can take the job ``need`` describes; else the
    line saying why not, as a warning where the job is queued anyway (the module docstring says
    when), Refused (409) otherwise."""
    state = seen(db, now)
    workers, window = state["workers"], WINDOW
    why = missing(need.gpu, need.gpu_kind, workers, slurm_gpus)
    if why is None:
        return None
    if slurm_gpus is None and not workers:                   # none is there now: judge by the class's workers
        if not state["week"]:
            since = "in the last 7 days" if state["last"] else "yet"
            return f"no worker has asked this service for work {since}: the job waits for the first one your " \
                "instructor starts"
        workers, window = state["week"], "7 days"
        why = missing(need.gpu, need.gpu_kind, workers, window=window)
        if why is None:
            return (f"no worker has asked for work in the last {WINDOW} (the last was seen {when(state['last'])}): "
                    "the job waits for one")
    line = refusal_line(need, why, workers)
    if need.gpu_kind is not None and need.gpu_kind not in devices.worker_kinds(db, now=now):
        return f"{line} (queued anyway: your instructor accepts GPU kinds no worker has reported)"
    if choices.unserved_jobs(db) == "accepted":
        return f"{line} (queued anyway: your instructor accepts jobs no worker can take now)"
    raise Refused(409, line)
