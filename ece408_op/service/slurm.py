"""``serve --slurm``: Slurm runs the workers. One ``sbatch`` per queued job: each Slurm job is a
``worker --once``, which takes the next job from the queue (the queue's fair order, not the job
that caused it), runs it on the node Slurm gave it (``--gres=gpu:1`` for m3, final and GPU
development runs: Slurm gives the GPU to that job alone, so ranked timings are exclusive) and
exits. Why not a standing pool of worker jobs: a pool holds GPUs while the queue is empty, on a
cluster other courses share; its jobs die at their time limit and need restarting; and deciding
where and when work runs is Slurm's job (fair share, priorities, node health), not a scheduler
of ours. The cost is Slurm's start-up per job (seconds), small beside a ranked run.

Every ``poll`` seconds: the queued jobs that need a GPU and those that do not, against this
service's worker jobs pending in Slurm (``squeue`` by job name); ``sbatch`` for the difference,
at most ``max_jobs`` worker jobs in Slurm at once. A worker job that finds the queue empty (a job
cancelled meanwhile) exits after a minute. The jobs' token is a worker token made at each start
of ``serve``, in a mode-600 file in the state folder (a shared file system on a real cluster);
the jobs' environment is a short list of names (``EXPORTED``), never the server's database URL.
"""
import os
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


def queued_counts(db):
    """(queued jobs needing no GPU, queued jobs needing one)."""
    with db.transaction(write=False) as tx:
        rows = dict(tx.all("SELECT gpu, COUNT(*) FROM service_jobs WHERE state = ? GROUP BY gpu", (QUEUED,)))
    return rows.get(0, 0), rows.get(1, 0)


class SlurmDispatcher(threading.Thread):
    def __init__(self, db, service, url, options, state_dir):
        super().__init__(name="slurm", daemon=True)
        self.db, self.service, self.url, self.options = db, service, url, options
        self.folder = Path(state_dir) / "slurm"
        self.stopping = threading.Event()
        self.names = {False: f"ece408-svc-cpu-{os.getpid()}", True: f"ece408-svc-gpu-{os.getpid()}"}
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

    def script(self, gpu):
        from ..base.processes import python_command
        argv = [*python_command(), "-m", "ece408_op", "worker", "--server", self.url, "--token-file",
                str(self.token_file), "--once", "--gpus", "visible" if gpu else "none", *self.options.worker_args]
        path = self.folder / f"worker-{'gpu' if gpu else 'cpu'}.sh"
        path.write_text("#!/bin/bash\n# One worker of the ece408_op service: the next job of the queue, then exit.\n"
                        f"exec {' '.join(shlex.quote(a) for a in argv)}\n")
        path.chmod(0o700)
        return path

    def sbatch_argv(self, gpu):
        o = self.options
        argv = ["sbatch", "--parsable", f"--job-name={self.names[gpu]}", f"--time={o.time}",
                f"--cpus-per-task={o.cpus_per_task}", f"--output={self.folder / 'logs' / '%j.out'}",
                f"--export={','.join(n for n in EXPORTED if n in os.environ) or 'NONE'}"]
        if gpu and o.gres and o.gres != "none":
            argv.append(f"--gres={o.gres}")
        if o.partition:
            argv.append(f"--partition={o.partition}")
        if o.account:
            argv.append(f"--account={o.account}")
        return argv + list(o.extra) + [str(self.script(gpu))]

    def in_slurm(self):
        """{gpu flag: (pending, all)} of this service's worker jobs known to squeue."""
        out = subprocess.run(["squeue", "-h", "-o", "%j %t", "-u", str(os.getuid())], capture_output=True, text=True,
                             timeout=60, env=self.env())
        if out.returncode != 0:
            raise RuntimeError(f"squeue: {(out.stderr.strip().splitlines() or ['no reason given'])[0]}")
        counts = {False: [0, 0], True: [0, 0]}
        for line in out.stdout.splitlines():
            name, _, state = line.partition(" ")
            for gpu, wanted in self.names.items():
                if name == wanted:
                    counts[gpu][1] += 1
                    counts[gpu][0] += state.strip() == "PD"
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
        cpu, gpu = queued_counts(self.db)
        counts = self.in_slurm()
        total = counts[False][1] + counts[True][1]
        for needs_gpu, queued in ((True, gpu), (False, cpu)):
            pending = counts[needs_gpu][0]
            want = min(queued - pending, self.options.max_jobs - total)
            for _ in range(max(0, want)):
                out = subprocess.run(self.sbatch_argv(needs_gpu), capture_output=True, text=True, timeout=60,
                                     env=self.env())
                if out.returncode != 0:
                    log("slurm.refused", level="warning",
                        reason=(out.stderr.strip().splitlines() or ["no reason given"])[-1])
                    return
                total += 1
                log("slurm.submitted", slurm_job=out.stdout.strip().split(";")[0], gpu=needs_gpu)

    def stop(self):
        self.stopping.set()
