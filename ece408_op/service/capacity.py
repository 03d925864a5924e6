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

``serve --slurm`` (``Slurm``): Slurm starts a worker for each queued job, so none is seen
beforehand; there the check is whether Slurm's request can serve the job. A job asking for no
kind gets the default request: one that needs a GPU is refused where GPU jobs are sent without
one (``--gres none``). A job asking for a kind is served by that kind's mapping (``--slurm-kind``;
its GPU jobs get a GPU unless its gres and ``--gres`` are none), else only by a worker of that
kind seen in the window that is not one of Slurm's own (those come and go with the queue, and
the dispatcher sends none for a kind no mapping names): otherwise refused, naming the kinds
served (the mapped ones and those of the workers seen), or queued as above where the instructor
accepts it (it then waits for a worker of its kind started elsewhere). The instructor's page
marks every queued job that no worker seen can take (``missing``).
"""
from dataclasses import dataclass, field

from . import choices, clock, devices
from .jobs import KINDS_SEEN, WORKER_SEEN, seen as seen_worker, when
from .refused import Refused
from .grading_door import kind_of
from ..base.names import printable

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


@dataclass(frozen=True)
class Slurm:
    """What ``serve --slurm``'s own requests serve (slurm.py): ``gpus``, whether the jobs that need
    a GPU and ask for no kind get one (``--gres``); ``kinds``, {device kind a ``--slurm-kind``
    maps: whether its GPU jobs get one}; ``requests``, {that kind: its request as shown, e.g.
    ``partition gpu-h100``}; ``workers``, the name its worker jobs' slots begin with."""
    gpus: bool
    kinds: dict = field(default_factory=dict)
    requests: dict = field(default_factory=dict)
    workers: str = None

    def served(self, gpu):
        """The mapped kinds that serve a job needing ``gpu``."""
        return [k for k, gets_gpu in self.kinds.items() if gets_gpu or not gpu]


def register(db, slots, now=None):
    """Mark this server's own worker slots [(name, has a GPU, device name)] as seen (at its start)."""
    now = clock.now() if now is None else now
    with db.transaction() as tx:
        for name, gpu, device in slots:
            seen_worker(tx, name, gpu, device, now)


def seen(db, now=None, slurm=None):
    """The workers as the check needs them: {workers: [(has a GPU, kind)] seen in the window,
    week: those seen in the last ``jobs.KINDS_SEEN`` seconds (the class's workers), last: when the
    last one was seen (None: never)}; with ``slurm`` (a Slurm), its own workers left out."""
    now = clock.now() if now is None else now
    with db.transaction(write=False) as tx:
        rows = tx.all("SELECT name, gpu, device, last_seen FROM service_workers WHERE last_seen > ?",
                      (now - KINDS_SEEN,))
        last = tx.value("SELECT MAX(last_seen) FROM service_workers")
    if slurm is not None and slurm.workers:
        rows = [r for r in rows if not r[0].startswith(slurm.workers)]
    return {"workers": [(bool(g), kind_of(d)) for _, g, d, at in rows if at > now - WORKER_SEEN],
            "week": [(bool(g), kind_of(d)) for _, g, d, _ in rows], "last": last}


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


def missing(gpu, gpu_kind, workers, slurm=None, window=WINDOW):
    """Why none of ``workers`` (seen in the last ``window``) can take a job needing ``gpu`` and
    ``gpu_kind``, one phrase; None where one can (``slurm``: serve --slurm's Slurm, whose requests
    are judged instead, ``slurm_missing``; None: not Slurm)."""
    if slurm is not None:
        return slurm_missing(gpu, gpu_kind, workers, slurm, window)
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


def slurm_missing(gpu, gpu_kind, workers, slurm, window=WINDOW):
    """``missing`` for serve --slurm (the module docstring): ``workers`` are those seen that are not
    Slurm's own."""
    if gpu_kind is None:
        return "this class's workers are Slurm jobs without a GPU (serve --slurm --gres none)" \
            if gpu and not slurm.gpus else None
    if gpu_kind in slurm.kinds:
        return None if slurm.kinds[gpu_kind] or not gpu else (
            f"this class's Slurm jobs on {gpu_kind} get no GPU (its --slurm-kind gives no gres, and --gres is none)")
    if any(can_take(w, gpu, gpu_kind) for w in workers):
        return None
    return (f"no Slurm partition or gres is mapped to {gpu_kind} (serve --slurm-kind) and no worker on it has asked "
            f"for work in the last {window}")


def refusal_line(need, why, workers, also=()):
    """The one line for a job ``why`` says none of ``workers`` can take: what asks for it and what to
    change (``also``: more kinds served, Slurm's mapped ones)."""
    if need.gpu_kind is not None and not any(kind == need.gpu_kind for _, kind in workers):
        kinds = sorted({kind for has_gpu, kind in workers if kind and (has_gpu or not need.gpu)} | set(also))
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


def check(db, need, slurm=None, now=None):
    """None where a worker seen lately (or Slurm: ``slurm``, a Slurm) can take the job ``need``
    describes; else the line saying why not, as a warning where the job is queued anyway (the
    module docstring says when), Refused (409) otherwise."""
    state = seen(db, now, slurm)
    workers, window = state["workers"], WINDOW
    why = missing(need.gpu, need.gpu_kind, workers, slurm)
    if why is None:
        return None
    if slurm is None and not workers:                   # none is there now: judge by the class's workers
        if not state["week"]:
            since = "in the last 7 days" if state["last"] else "yet"
            return f"no worker has asked this service for work {since}: the job waits for the first one your " \
                "instructor starts"
        workers, window = state["week"], "7 days"
        why = missing(need.gpu, need.gpu_kind, workers, window=window)
        if why is None:
            return (f"no worker has asked for work in the last {WINDOW} (the last was seen {when(state['last'])}): "
                    "the job waits for one")
    line = refusal_line(need, why, workers, slurm.served(need.gpu) if slurm is not None else ())
    if need.gpu_kind is not None and need.gpu_kind not in devices.worker_kinds(db, now=now):
        return f"{line} (queued anyway: your instructor accepts GPU kinds no worker has reported)"
    if choices.unserved_jobs(db) == "accepted":
        return f"{line} (queued anyway: your instructor accepts jobs no worker can take now)"
    raise Refused(409, line)
