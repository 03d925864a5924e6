"""Grading a whole class: one task per team folder, each task the ``--submit`` runner.

``grade(...)`` lists the team folders (one per team, its name the team's), skips teams whose
submission (content hash) already has a record, writes the tasks to ``<workdir>/tasks.json``
and runs them: as ONE Slurm job array (``sbatch --array``; one GPU and a time limit per task)
or, with ``--local``, in a pool of local processes. Each task (``grade --run-task``) stores its
own record, under an id chosen here. A task that ends without one (killed by a signal it could
not catch, out of memory, node failure) gets a ``killed`` record with its log as transcript,
written here under the same id: a record can be written once only, so none is lost or doubled.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..errors import Ece408Error
from ..team.project import TeamError
from .names import printable, team_name
from .runner import Options, SubmitRequest, Transcript, submit, team_digest
from .sandbox import Limits
from .store import DB_ENV, Record

TASKS_FILE = "tasks.json"


class GradeError(Ece408Error):
    """No teams, sbatch refused the job, squeue unreachable..."""


@dataclass
class Task:
    index: int
    team: str
    folder: str
    record_id: str
    content_hash: str


@dataclass
class Plan:
    """What every task shares, and the tasks (written to tasks.json)."""
    milestone: str
    size: int
    hidden_model: str = None
    engine: str = None
    image: str = None
    timeout: float = None
    limits: dict = None              # Limits' fields
    scratch_parent: str = None
    tasks: list = field(default_factory=list)
    repeats: int = None

    def save(self, path):
        path.write_text(json.dumps({**asdict(self), "tasks": [asdict(t) for t in self.tasks]}, indent=1))

    @classmethod
    def load(cls, path):
        data = json.loads(Path(path).read_text())
        tasks = [Task(**t) for t in data.pop("tasks")]
        return cls(**data, tasks=tasks)

    def options(self):
        limits = Limits(**self.limits) if self.limits else Limits()
        return Options(self.engine, self.image, self.timeout or Options.timeout, self.scratch_parent, limits=limits)


@dataclass
class SlurmOptions:
    partition: str = None
    account: str = None
    gres: str = "gpu:1"              # None: no gres (a CPU cluster)
    time: str = "00:30:00"
    cpus_per_task: int = 1
    max_parallel: int = None         # --array=0-N%max_parallel
    extra: list = field(default_factory=list)


def team_folders(submissions):
    """Sub-folders of ``submissions`` (hidden ones left out), sorted by name; names of any bytes
    (paths as os.fsdecode gives them: an undecodable byte survives as a surrogate)."""
    root = os.fsencode(os.fspath(submissions))
    if not os.path.isdir(root):
        raise GradeError(f"{printable(os.fsdecode(root))} is not a folder; give the folder holding one "
                         "sub-folder per team")
    try:
        entries = sorted(e.name for e in os.scandir(root)
                         if e.is_dir(follow_symlinks=False) and not e.name.startswith(b"."))
    except OSError as exc:
        raise GradeError(f"cannot list {printable(os.fsdecode(root))}: {exc.strerror or exc}") from exc
    if not entries:
        raise GradeError(f"{printable(os.fsdecode(root))} has no team sub-folders; put each team's submission "
                         "in its own folder")
    return [Path(os.fsdecode(os.path.join(os.path.abspath(root), name))) for name in entries]


def plan_tasks(store, submissions, plan, retry_stopped=False, force=False):
    """Fill ``plan.tasks`` with the teams not graded yet; returns the names of those skipped."""
    skipped = []
    for folder in team_folders(submissions):
        team = team_name(folder.name)
        digest = team_digest(folder, plan.milestone)
        if not force and digest is not None and store.graded(team, plan.milestone, plan.size, digest, retry_stopped):
            skipped.append(team)
            continue
        plan.tasks.append(Task(len(plan.tasks), team, str(folder), uuid.uuid4().hex, digest))
    return skipped


# ---------------------------------------------------------------------------- one task

def run_task(tasks_file, index, store):
    """Grade one team (inside a Slurm task or a local worker): its record is always stored,
    with status error where the grading itself failed. Returns the Record."""
    plan = Plan.load(tasks_file)
    if not 0 <= index < len(plan.tasks):
        raise GradeError(f"task index {index} is not in {tasks_file} (0 to {len(plan.tasks) - 1})")
    task = plan.tasks[index]
    request = SubmitRequest(task.folder, plan.milestone, plan.size, task.team, plan.hidden_model,
                            task.record_id, plan.options(), plan.repeats)
    transcript = Transcript()
    try:
        return submit(request, store, transcript)
    except Ece408Error as exc:
        status = "failed" if isinstance(exc, TeamError) else "error"
        for line in str(exc).splitlines():
            transcript.line(f"error: {line}")
        record = Record(task.record_id, _now(), task.team, plan.milestone, plan.size, status,
                        content_hash=task.content_hash, host=os.uname().nodename, transcript=transcript.text())
        store.add(record)
        return record


def _now():
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def fallback_record(plan, task, log_path, why):
    """The record of a task that ended without storing one: status killed, its log as transcript."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - (1 << 20)))
            log = f.read().decode("utf-8", "replace")
    except OSError:
        log = ""
    line = f"* The task ended without storing a record ({why}); its log: {log_path}"
    transcript = log + ("" if not log or log.endswith("\n") else "\n") + line + "\n"
    return Record(task.record_id, _now(), task.team, plan.milestone, plan.size, "killed",
                  content_hash=task.content_hash, transcript=transcript)


# ---------------------------------------------------------------------------- progress

class Progress:
    """pending / running / done / failed, as a bar on a terminal, else one line per change."""

    def __init__(self, total, stream=None):
        self.total = total
        self.stream = stream or sys.stderr
        self.last = None
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def show(self, pending, running, done, failed, final=False):
        state = (pending, running, done, failed)
        if state == self.last and not final:
            return
        self.last = state
        finished = done + failed
        width = 30
        filled = int(width * finished / self.total) if self.total else width
        text = (f"[{'#' * filled}{'.' * (width - filled)}] {finished}/{self.total}  "
                f"pending {pending}  running {running}  done {done}  failed {failed}")
        if self.tty:
            self.stream.write("\r" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def _counts(store, plan, running_ids, ended_ids):
    statuses = store.statuses(t.record_id for t in plan.tasks)
    done = sum(1 for s in statuses.values() if s == "ok")
    failed = len(statuses) - done
    running = sum(1 for t in plan.tasks if t.record_id in running_ids and t.record_id not in statuses)
    waiting = sum(1 for t in plan.tasks if t.record_id not in statuses and t.record_id not in running_ids
                  and t.record_id not in ended_ids)
    return waiting, running, done, failed, statuses


# ---------------------------------------------------------------------------- local pool

def task_command(python, tasks_file, index=None):
    argv = [python, "-m", "ece408_op", "grade", "--run-task", str(tasks_file)]
    return argv + (["--task-index", str(index)] if index is not None else [])


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


def run_local(plan, workdir, store, jobs, time_limit, python=None, progress=None, poll=0.5):
    """Run every task in a pool of ``jobs`` local processes, each stopped (SIGTERM, then SIGKILL)
    past ``time_limit`` seconds; fall-back records for those that stored none."""
    python = python or sys.executable
    logs = workdir / "logs"
    running, ended, lock = set(), set(), threading.Lock()

    def one(task):
        log_path = logs / f"{task.index}.out"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(task_command(python, workdir / TASKS_FILE, task.index), stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            with lock:
                running.add(task.record_id)
            why = None
            try:
                code = proc.wait(timeout=time_limit)
                if code != 0:
                    why = f"exit code {code}" if code > 0 else f"killed by {signal.Signals(-code).name}"
            except subprocess.TimeoutExpired:
                why = f"time limit of {time_limit:g} s"
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        with lock:
            running.discard(task.record_id)
            ended.add(task.record_id)
        return task, why

    progress = progress or Progress(len(plan.tasks))
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(one, task) for task in plan.tasks]
        while not all(f.done() for f in futures):
            with lock:
                busy, gone = set(running), set(ended)
            progress.show(*_counts(store, plan, busy, gone)[:4])
            time.sleep(poll)
        outcomes = [f.result() for f in futures]
    store.deliver_spool()                         # records a task could not store (database down)
    statuses = store.statuses(t.record_id for t in plan.tasks)
    for task, why in outcomes:
        if task.record_id not in statuses:
            store.add(fallback_record(plan, task, logs / f"{task.index}.out", why or "no reason given"))
    progress.show(*_counts(store, plan, set(), {t.record_id for t in plan.tasks})[:4], final=True)


# ---------------------------------------------------------------------------- Slurm

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
    if slurm.gres:
        argv.append(f"--gres={slurm.gres}")
    if slurm.partition:
        argv.append(f"--partition={slurm.partition}")
    if slurm.account:
        argv.append(f"--account={slurm.account}")
    return argv + list(slurm.extra) + [str(workdir / "job.sh")]


def write_job_script(workdir, python):
    """job.sh: each array task grades the team of index $SLURM_ARRAY_TASK_ID."""
    path = workdir / "job.sh"
    command = " ".join(_shell_quote(a) for a in task_command(python, workdir / TASKS_FILE))
    path.write_text("#!/bin/bash\n# One task of an ece408_op grading job array: the team of index "
                    "$SLURM_ARRAY_TASK_ID in tasks.json.\n"
                    f"exec {command} --task-index \"$SLURM_ARRAY_TASK_ID\"\n")
    path.chmod(0o755)
    return path


def _shell_quote(text):
    import shlex
    return shlex.quote(text)


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
    """Submit ONE job array and wait for it with a progress bar; fall-back records at the end.
    Returns the job id."""
    python = python or sys.executable
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
        waiting, running, done, failed, _ = _counts(store, plan, running_ids, ended)
        progress.show(len(pending_ids), running, done, failed)
        if not states:
            break
        time.sleep(poll)
    store.deliver_spool()
    statuses = store.statuses(t.record_id for t in plan.tasks)
    for task in plan.tasks:
        if task.record_id not in statuses:
            why = f"Slurm job {job_id}_{task.index} ended without one: cancelled, time limit, out of memory or node failure"
            store.add(fallback_record(plan, task, workdir / "logs" / f"{task.index}.out", why))
    progress.show(*_counts(store, plan, set(), {t.record_id for t in plan.tasks})[:4], final=True)
    return job_id


def new_workdir(submissions, workdir=None):
    """``workdir`` or ``<submissions>/.grade/<UTC time>``, with a logs/ folder."""
    if workdir is None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + f"-{uuid.uuid4().hex[:6]}"
        workdir = Path(submissions) / ".grade" / stamp
    workdir = Path(workdir).resolve()
    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    return workdir


def has_slurm():
    return shutil.which("sbatch") is not None and shutil.which("squeue") is not None


def export_db(url):
    """Tasks read the database from $ECE408_DB (never from a file: a URL may hold a password);
    a SQLite path is made absolute, the tasks' working folder being another."""
    from .store import POSTGRES_PREFIXES
    if url:
        os.environ[DB_ENV] = url if url.startswith(POSTGRES_PREFIXES) else str(Path(url).resolve())
