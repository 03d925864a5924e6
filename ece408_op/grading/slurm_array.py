"""Grading a class as ONE Slurm job array (``sbatch --array``): one task per team of the plan
(``grade.py`` plans them), each ``grade --run-task`` on a node with one GPU (or a whole node for
m2, ``--exclusive``) and a time limit; its record is stored by the task, or spooled into the work
folder shared with the nodes. The login node watches ``squeue`` with a progress bar, then settles
the records as the local pool does (``grade.settle``)."""
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

from ..base.processes import python_command
from .grade import SPOOL_FOLDER, TASKS_FILE, GradeError, Progress, Watch, settle, task_command, task_counts
from .spool import SPOOL_ENV


@dataclass
class SlurmOptions:
    partition: str = None
    account: str = None
    gres: str = "gpu:1"              # None: no gres (a CPU cluster)
    time: str = "00:30:00"
    cpus_per_task: int = 1
    max_parallel: int = None         # --array=0-N%max_parallel
    extra: list = field(default_factory=list)
    exclusive: bool = False          # --exclusive: one task per node (m2: a CPU timing shares no core)


def slurm_seconds(text):
    """Slurm's time format ([days-]hours:minutes:seconds, minutes:seconds, minutes) in seconds."""
    days, _, rest = text.rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    if not parts or len(parts) > 3:
        raise ValueError(text)
    if len(parts) == 1:
        seconds = parts[0] * 60
    else:
        seconds = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    return seconds + (float(days) * 86400 if days else 0)


def has_slurm():
    return shutil.which("sbatch") is not None and shutil.which("squeue") is not None


def _slurm(argv, what, timeout=60):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as exc:
        raise GradeError(f"{argv[0]} not found: {what} needs Slurm's commands on PATH (or use --local)") from exc
    except subprocess.TimeoutExpired as exc:
        raise GradeError(f"{argv[0]} did not answer in {timeout} s; is slurmctld running?") from exc
    return out


def sbatch_command(plan, workdir, slurm, python):
    """The sbatch command line of the job array (one task per team)."""
    n = len(plan.tasks)
    array = f"0-{n - 1}" + (f"%{slurm.max_parallel}" if slurm.max_parallel else "")
    argv = ["sbatch", "--parsable", "--job-name=ece408-grade", f"--array={array}",
            f"--output={workdir / 'logs' / '%a.out'}", f"--time={slurm.time}",
            f"--cpus-per-task={slurm.cpus_per_task}", "--export=ALL", f"--chdir={workdir}"]
    if slurm.exclusive:
        argv.append("--exclusive")
    if slurm.gres:
        argv.append(f"--gres={slurm.gres}")
    if slurm.partition:
        argv.append(f"--partition={slurm.partition}")
    if slurm.account:
        argv.append(f"--account={slurm.account}")
    return argv + list(slurm.extra) + [str(workdir / "job.sh")]


def write_job_script(workdir, python):
    """job.sh: each array task grades the team of index $SLURM_ARRAY_TASK_ID, its record spooled
    into the work folder (shared with the login node) where the database does not take it."""
    path = workdir / "job.sh"
    command = " ".join(shlex.quote(a) for a in task_command(python, workdir / TASKS_FILE))
    path.write_text("#!/bin/bash\n# One task of an ece408_op grading job array: the team of index "
                    "$SLURM_ARRAY_TASK_ID in tasks.json.\n"
                    f"export {SPOOL_ENV}={shlex.quote(str(workdir / SPOOL_FOLDER))}\n"
                    f"exec {command} --task-index \"$SLURM_ARRAY_TASK_ID\"\n")
    path.chmod(0o755)
    return path


def squeue_states(job_id):
    """{array index: Slurm state code} of the job's tasks still known to squeue (PD, R, CG...)."""
    out = _slurm(["squeue", "-h", "-r", "-j", str(job_id), "-o", "%K %t"], "grade")
    if out.returncode != 0:
        if "Invalid job id" in out.stderr:
            return {}
        raise GradeError(f"squeue failed: {(out.stderr.strip().splitlines() or ['no reason given'])[0]}")
    states = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            states[int(parts[0])] = parts[1]
    return states


def run_slurm(plan, workdir, store, slurm, python=None, progress=None, poll=2.0, on_submit=None):
    """Submit ONE job array and wait for it with a progress bar; then ``settle``. Returns
    (job id, Settled)."""
    python = [python] if python else python_command()
    write_job_script(workdir, python)
    out = _slurm(sbatch_command(plan, workdir, slurm, python), "grade")
    if out.returncode != 0:
        reason = (out.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise GradeError(f"sbatch refused the job array: {reason}")
    job_id = out.stdout.strip().split(";")[0]
    print(f"Submitted job array {job_id} ({len(plan.tasks)} tasks); logs in {workdir / 'logs'}", file=sys.stderr)
    if on_submit is not None:
        on_submit(job_id)
    progress = progress or Progress(len(plan.tasks))
    watch = Watch(store, plan, workdir / SPOOL_FOLDER)
    by_index = {t.index: t for t in plan.tasks}
    failures = 0
    while True:
        try:
            states = squeue_states(job_id)
            failures = 0
        except GradeError:
            failures += 1
            if failures >= 5:
                raise
            time.sleep(poll)
            continue
        running_ids = {by_index[i].record_id for i, s in states.items() if s != "PD" and i in by_index}
        pending_ids = {by_index[i].record_id for i, s in states.items() if s == "PD" and i in by_index}
        ended = {t.record_id for t in plan.tasks} - running_ids - pending_ids
        waiting, running, done, failed, _ = task_counts(watch, plan, running_ids, ended)
        progress.show(len(pending_ids), running, done, failed)
        if not states:
            break
        time.sleep(poll)

    def why(task):
        return (f"Slurm job {job_id}_{task.index} ended without one: cancelled, time limit, out of memory or "
                "node failure")
    settled = settle(plan, workdir, watch, why)
    progress.show(*task_counts(watch, plan, set(), {t.record_id for t in plan.tasks})[:4], final=True)
    return job_id, settled
