"""``serve --slurm``: Slurm runs the workers. One ``sbatch`` per queued job: each Slurm job is a
``worker --once``, which takes the next job from the queue (the queue's fair order, not the job
that caused it), runs it on the node Slurm gave it (``--gres=gpu:1`` for m3, final and GPU
development runs: Slurm gives the GPU to that job alone, so ranked timings are exclusive) and
exits. Why not a standing pool of worker jobs: a pool holds GPUs while the queue is empty, on a
cluster other courses share; its jobs die at their time limit and need restarting; and deciding
where and when work runs is Slurm's job (fair share, priorities, node health), not a scheduler
of ours. The cost is Slurm's start-up per job (seconds), small beside a ranked run.

Every ``poll`` seconds: the queued jobs of each request (needing a GPU or not, and the device kind
asked for: below), against this service's worker jobs of that request pending in Slurm
(``squeue`` by job name, one name a request); ``sbatch`` for the difference,
at most ``max_jobs`` worker jobs in Slurm at once. A worker job that finds the queue empty (a job
cancelled meanwhile) exits after a minute. The jobs' token is a worker token made at each start
of ``serve``, in a mode-600 file in the state folder (a shared file system on a real cluster);
the jobs' environment is a short list of names (``EXPORTED``), never the server's database URL.

Device kinds (``--slurm-kind KIND=partition:P,gres:G,constraint:C``, ``SlurmKind``): the queued
jobs are counted by GPU need and by the kind they asked for (``submit --gpu``). A job asking for
no kind gets the default request (``--partition``, ``--gres``); one asking for a mapped kind gets
that kind's partition, gres (its GPU jobs; else ``--gres``) and constraint, and its worker runs
with ``--kind KIND``: it reports KIND as its device, so it takes only jobs of that kind or of none.
A job asking for a kind no mapping names is never sent to Slurm (a worker on a node of another
kind could not take it, and would idle a minute for nothing, again and again): it waits for a
worker of its kind started elsewhere, and ``slurm.unmapped`` says so once in the log.
capacity.py refuses such jobs at submission unless such a worker asks for work, or the
instructor accepts them.
"""
import os
import re
import shlex
import shutil
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ServeError
from .jobs import QUEUED
from .logs import log
from .tokens import new_token

EXPORTED = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "CUDA_HOME",
            "ECE408_DATA_DIR", "ECE408_MODEL_DIR", "ECE408_ENGINE", "ECE408_CUBIN_CACHE", "XDG_CACHE_HOME",
            "XDG_DATA_HOME", "NUMBA_CACHE_DIR", "PYCUDA_CACHE_DIR", "CONTAINERS_CONF")
SECRETS = ("ECE408_DB", "ECE408_TOKEN", "ECE408_TOKEN_FILE", "ECE408_INSTRUCTOR_TOKEN", "PGPASSWORD")


KIND_KEYS = ("partition", "gres", "constraint")
VALUE = re.compile(r"[A-Za-z0-9_.:@+/-]+")         # Slurm's names: partitions, gres
FEATURES = re.compile(r"[A-Za-z0-9_.:@+/=&|!*\[\]()-]+")        # a constraint: features, & | [ ] ( ) *


@dataclass(frozen=True)
class SlurmKind:
    """Where Slurm sends the jobs asking for one device kind: ``kind`` as its workers report it
    (grading/kinds.py: nvidia-smi's name, the name the runs' records and the ranking carry)."""
    kind: str
    partition: str = None
    gres: str = None                  # for its jobs that need a GPU (None: --gres; "none": no GPU)
    constraint: str = None

    def shown(self):
        """``partition gpu-h100, gres gpu:h100:1``: the request as ``kinds list`` shows it."""
        return ", ".join(f"{k} {getattr(self, k)}" for k in KIND_KEYS if getattr(self, k))


def parse_kind(text):
    """A ``--slurm-kind`` value, ``KIND=partition:P,gres:G,constraint:C`` (at least one of the
    three, each at most once), as a SlurmKind; ValueError with one line saying what is wrong."""
    from .grading_door import kind_of
    from ..base.names import printable
    name, sep, request = str(text).partition("=")
    kind = kind_of(name)
    form = "KIND=partition:P,gres:G,constraint:C (at least one of the three)"
    if not sep or kind is None or not request.strip():
        raise ValueError(f"{printable(text, 80)!r} is not {form}")
    if printable(kind, 100) != kind:
        raise ValueError(f"the kind {printable(kind, 100)!r} has unprintable characters or is over 100 characters")
    found = {}
    for item in request.split(","):
        key, colon, value = item.strip().partition(":")
        if key not in KIND_KEYS or not colon:
            raise ValueError(f"{printable(item.strip(), 60)!r} in --slurm-kind {printable(kind, 60)} is not "
                             "partition:P, gres:G or constraint:C")
        if key in found:
            raise ValueError(f"--slurm-kind {printable(kind, 60)} gives {key} twice")
        if not (FEATURES if key == "constraint" else VALUE).fullmatch(value):
            raise ValueError(f"--slurm-kind {printable(kind, 60)}: {key} {printable(value, 60)!r} is not a Slurm "
                             f"{key} name")
        found[key] = value
    return SlurmKind(kind, **found)


def check_kinds(kinds):
    """``kinds`` (SlurmKinds), each kind once (its name in any case); ValueError naming a repeated one."""
    seen = set()
    for k in kinds:
        if k.kind.casefold() in seen:
            raise ValueError(f"--slurm-kind maps {k.kind} twice: give each kind once")
        seen.add(k.kind.casefold())
    return list(kinds)


def gets_gpu(gres):
    return bool(gres) and gres != "none"


@dataclass
class SlurmOptions:
    partition: str = None
    account: str = None
    gres: str = "gpu:1"               # for jobs that need a GPU ("none": a cluster without GPUs)
    time: str = "01:00:00"
    cpus_per_task: int = 2
    max_jobs: int = 8                 # worker jobs of this service in Slurm at once
    extra: list = field(default_factory=list)
    poll: float = 5.0
    worker_args: list = field(default_factory=list)
    kinds: list = field(default_factory=list)     # SlurmKinds (serve --slurm-kind)

    def kind(self, name):
        """The SlurmKind of device kind ``name``; None for no kind (the default request) or an unmapped one."""
        return next((k for k in self.kinds if k.kind == name), None)

    def gres_of(self, name):
        """The gres the GPU jobs asking for kind ``name`` (None: none asked) are sent with."""
        mapped = self.kind(name)
        return mapped.gres if mapped is not None and mapped.gres else self.gres

    def serves(self):
        """{device kind mapped: whether its GPU jobs get a GPU} (capacity.Slurm's)."""
        return {k.kind: gets_gpu(self.gres_of(k.kind)) for k in self.kinds}


def queued_counts(db):
    """{(needs a GPU, the device kind asked for or None): queued jobs}."""
    with db.transaction(write=False) as tx:
        rows = tx.all("SELECT gpu, gpu_kind, COUNT(*) FROM service_jobs WHERE state = ? GROUP BY gpu, gpu_kind",
                      (QUEUED,))
    return {(bool(gpu), kind): n for gpu, kind, n in rows}


class SlurmDispatcher(threading.Thread):
    def __init__(self, db, service, url, options, state_dir):
        super().__init__(name="slurm", daemon=True)
        self.db, self.service, self.url, self.options = db, service, url, options
        self.folder = Path(state_dir) / "slurm"
        self.stopping = threading.Event()
        self.kinds = [None] + [k.kind for k in options.kinds]          # the requests: the default, then each kind's
        self.names = {(gpu, kind): f"ece408-svc-{'gpu' if gpu else 'cpu'}-{os.getpid()}" + (f"-k{i}" if i else "")
                      for gpu in (False, True) for i, kind in enumerate(self.kinds)}
        self.unmapped = set()                                             # kinds whose jobs were logged as unsent
        host = socket.gethostname()
        token = new_token()[2]
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.folder / "logs").mkdir(exist_ok=True)
        self.token_file = self.folder / "worker.token"
        tmp = self.folder / f".worker.token.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        os.replace(tmp, self.token_file)
        service.tokens.register("worker", f"{host}/slurm", token)
        if shutil.which("sbatch") is None or shutil.which("squeue") is None:
            raise ServeError("--slurm needs Slurm's sbatch and squeue on PATH")

    def script(self, gpu, kind=None):
        from ..base.processes import python_command
        argv = [*python_command(), "-m", "ece408_op", "worker", "--server", self.url, "--token-file",
                str(self.token_file), "--once", "--gpus", "visible" if gpu else "none", *self.options.worker_args]
        if kind is not None:
            argv += ["--kind", kind]
        index = self.kinds.index(kind)
        path = self.folder / f"worker-{'gpu' if gpu else 'cpu'}{f'-k{index}' if index else ''}.sh"
        path.write_text("#!/bin/bash\n# One worker of the ece408_op service: the next job of the queue, then exit.\n"
                        f"exec {' '.join(shlex.quote(a) for a in argv)}\n")
        path.chmod(0o700)
        return path

    def sbatch_argv(self, gpu, kind=None):
        """sbatch's command line for a worker of the jobs needing ``gpu`` and asking for ``kind`` (a mapped one, or None)."""
        o = self.options
        mapped = o.kind(kind)
        argv = ["sbatch", "--parsable", f"--job-name={self.names[gpu, kind]}", f"--time={o.time}",
                f"--cpus-per-task={o.cpus_per_task}", f"--output={self.folder / 'logs' / '%j.out'}",
                f"--export={','.join(n for n in EXPORTED if n in os.environ) or 'NONE'}"]
        if gpu and gets_gpu(o.gres_of(kind)):
            argv.append(f"--gres={o.gres_of(kind)}")
        partition = mapped.partition if mapped is not None and mapped.partition else o.partition
        if partition:
            argv.append(f"--partition={partition}")
        if mapped is not None and mapped.constraint:
            argv.append(f"--constraint={mapped.constraint}")
        if o.account:
            argv.append(f"--account={o.account}")
        return argv + list(o.extra) + [str(self.script(gpu, kind))]

    def in_slurm(self):
        """{(gpu flag, kind): [pending, all]} of this service's worker jobs known to squeue."""
        out = subprocess.run(["squeue", "-h", "-o", "%j %t", "-u", str(os.getuid())], capture_output=True, text=True,
                             timeout=60, env=self.env())
        if out.returncode != 0:
            raise RuntimeError(f"squeue: {(out.stderr.strip().splitlines() or ['no reason given'])[0]}")
        counts = {request: [0, 0] for request in self.names}
        by_name = {name: request for request, name in self.names.items()}
        for line in out.stdout.splitlines():
            name, _, state = line.partition(" ")
            if name in by_name:
                counts[by_name[name]][1] += 1
                counts[by_name[name]][0] += state.strip() == "PD"
        return counts

    def env(self):
        return {k: v for k, v in os.environ.items() if k not in SECRETS}

    def run(self):
        while not self.stopping.wait(self.options.poll):
            try:
                self.dispatch()
            except Exception as exc:                      # noqa: BLE001  Slurm or the database down: try again
                log("slurm.error", level="warning", reason=f"{type(exc).__name__}: {exc}")

    def dispatch(self):
        queued = queued_counts(self.db)
        for (_, kind), n in sorted(queued.items(), key=str):
            if kind not in self.kinds and kind not in self.unmapped:
                self.unmapped.add(kind)
                log("slurm.unmapped", level="warning", kind=kind, jobs=n,
                    reason="no --slurm-kind maps this kind: its jobs wait for a worker of that kind started elsewhere")
        counts = self.in_slurm()
        total = sum(every for _, every in counts.values())
        for request in sorted(self.names, key=lambda r: (not r[0], self.kinds.index(r[1]))):
            want = min(queued.get(request, 0) - counts[request][0], self.options.max_jobs - total)
            for _ in range(max(0, want)):
                out = subprocess.run(self.sbatch_argv(*request), capture_output=True, text=True, timeout=60,
                                     env=self.env())
                if out.returncode != 0:
                    log("slurm.refused", level="warning",
                        reason=(out.stderr.strip().splitlines() or ["no reason given"])[-1])
                    return
                total += 1
                log("slurm.submitted", slurm_job=out.stdout.strip().split(";")[0], gpu=request[0], kind=request[1])

    def stop(self):
        self.stopping.set()
