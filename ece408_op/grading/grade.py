"""Grading a whole class: one task per team folder, each task the ``--submit`` runner.

``grade(...)`` lists the team folders (one per team, its name the team's), skips teams whose
submission (content hash) already has a record measured with the same options (``options_key``:
milestone, size, models, hidden model, repeats, engine), writes the tasks to
``<workdir>/tasks.json`` and runs them: as ONE Slurm job array (``slurm_array.py``: one GPU, or a
whole node for m2, and a time limit per task) or, with ``--local``, in a pool of local processes
(``run_local``, here).
Each task (``grade --run-task``) stores its own record, under an id chosen here; where the
database does not take it, the record waits in ``<workdir>/spool`` (``$ECE408_SPOOL`` of the
tasks: the work folder is shared with the nodes) and grade stores it. A task that ends with
neither a stored nor a spooled record (killed by a signal it could not catch, out of memory,
node failure) gets a ``killed`` record with its log as transcript, written here under the same
id: a record can be written once only (in the database and in a spool), so none is lost,
doubled or replaced: a measured run never turns into ``error`` or ``killed``.
"""
import json
import os
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

from ..base.processes import python_command
from ..errors import Ece408Error
from ..base.terms import TeamError
from ..base.names import printable, shown, team_name
from .options import hidden_digest, options_key, run_options
from .inputs import hidden_files
from .request import Options, SubmitRequest
from .runner import submit, team_digest
from .transcript import Transcript
from .sandbox import Limits, SandboxError, choose_engine, open_sandbox
from .record import Record, SpooledError, StoreError
from .spool import SPOOL_ENV, move_spool, spool, spool_dir, spooled_files, spooled_record
from .store import DB_ENV, POSTGRES_PREFIXES, warn

TASKS_FILE = "tasks.json"
SPOOL_FOLDER = "spool"             # <workdir>/spool: the tasks' $ECE408_SPOOL
LINK_REASON = "the folder is a symbolic link; put the folder itself in SUBMISSIONS"


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
    engine: str = None               # the engine's name, resolved once here (never auto)
    image: str = None
    timeout: float = None
    limits: dict = None              # Limits' fields
    scratch_parent: str = None
    tasks: list = field(default_factory=list)
    repeats: int = None
    hidden_digest: str = None        # options.hidden_digest of the hidden model's files

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

    def run_options(self):
        """What every task of this plan measures with (grading/options.py)."""
        return run_options(self.milestone, self.size, self.repeats, self.hidden_digest, self.engine)

    def options_key(self):
        return options_key(self.run_options())


@dataclass
class Listing:
    """What planning found besides the tasks: teams skipped (already graded with these options),
    folders refused (not graded, no record: a symbolic link), and teams whose files were refused
    (a ``failed`` record each, with the one-line reason)."""
    skipped: list = field(default_factory=list)      # [(team, content hash)]
    refused: list = field(default_factory=list)      # [(team, reason)]
    failed: list = field(default_factory=list)       # [Record]


def resolve_engine(requested, image=None, limits=None):
    """The engine every task runs in, by name: ``requested`` (or $ECE408_ENGINE), where auto is
    the first that works here (as each ranked run would choose it); host only by name. The name
    goes into each record's options (the skip key), so it must not be left to each task."""
    try:
        engine = choose_engine(requested)
        if engine != "auto":
            return engine
        return open_sandbox("auto", limits or Limits(), image or "ece408_op:latest").engine
    except SandboxError as exc:
        raise GradeError(f"{exc}; name the engine the tasks use with --engine") from exc


def plan_hidden_digest(prefix):
    """The digest of the hidden model ``prefix`` names (its files, as the runs read them), or None."""
    if not prefix:
        return None
    try:
        return hidden_digest(*hidden_files(prefix))
    except OSError as exc:
        raise GradeError(f"hidden model {printable(str(prefix))}: {exc.strerror or exc}") from exc


def team_folders(submissions):
    """(team folders, symbolic links): the sub-folders of ``submissions`` (hidden ones left out),
    sorted by name, and its entries that are symbolic links (never followed: each is reported);
    names of any bytes (paths as os.fsdecode gives them: an undecodable byte survives as a
    surrogate). Other files are not teams and are left alone."""
    root = os.fsencode(os.fspath(submissions))
    if not os.path.isdir(root):
        raise GradeError(f"{printable(os.fsdecode(root))} is not a folder; give the folder holding one "
                         "sub-folder per team")
    folders, links = [], []
    try:
        for entry in sorted(os.scandir(root), key=lambda e: e.name):
            if entry.name.startswith(b"."):
                continue
            if entry.is_symlink():
                links.append(entry.name)
            elif entry.is_dir(follow_symlinks=False):
                folders.append(entry.name)
    except OSError as exc:
        raise GradeError(f"cannot list {printable(os.fsdecode(root))}: {exc.strerror or exc}") from exc
    if not folders and not links:
        raise GradeError(f"{printable(os.fsdecode(root))} has no team sub-folders; put each team's submission "
                         "in its own folder")
    base = os.path.abspath(root)
    return ([Path(os.fsdecode(os.path.join(base, name))) for name in folders],
            [Path(os.fsdecode(os.path.join(base, name))) for name in links])


def plan_tasks(store, submissions, plan, retry_stopped=False, force=False):
    """Fill ``plan.tasks`` with the teams not graded yet with the plan's options; returns the
    Listing of the others. A team whose files are refused (``team_digest``: missing, a link, a
    directory, a device) is not a task: its ``failed`` record, with the reason, is stored here."""
    listing = Listing()
    key = plan.options_key()
    folders, links = team_folders(submissions)
    for link in links:
        listing.refused.append((team_name(link.name), LINK_REASON))
    for folder in folders:
        team = team_name(folder.name)
        try:
            digest = team_digest(folder, plan.milestone)
        except TeamError as exc:
            record = refused_record(plan, team, str(exc))
            store.add(record)
            listing.failed.append(record)
            continue
        if not force and store.graded(team, plan.milestone, plan.size, digest, key, retry_stopped):
            listing.skipped.append((team, digest))
            continue
        plan.tasks.append(Task(len(plan.tasks), team, str(folder), uuid.uuid4().hex, digest))
    return listing


def refused_record(plan, team, reason):
    """The ``failed`` record of a team whose files cannot be taken (``reason``: one line)."""
    reason = printable(reason, limit=500)
    return Record(uuid.uuid4().hex, _now(), team, plan.milestone, plan.size, "failed", host=os.uname().nodename,
                  transcript=f"error: {reason}\n* Not ranked: {reason}\n", options=plan.run_options(),
                  options_key=plan.options_key(), reason=reason)


# ---------------------------------------------------------------------------- one task

class _TaskStore:
    """The store a task writes through: its record carries the team's name as planned (the name the
    skip rule compared) and, where the runner left them unset, the plan's options, which are what
    the task measured with (the engine resolved, the hidden model's digest)."""

    def __init__(self, store, plan, task):
        self.store, self.plan, self.task = store, plan, task

    def __getattr__(self, name):
        return getattr(self.store, name)

    def add(self, record):
        record.team = self.task.team
        if record.options is None:
            record.options, record.options_key = self.plan.run_options(), self.plan.options_key()
        return self.store.add(record)


def run_task(tasks_file, index, store):
    """Grade one team (inside a Slurm task or a local worker): its record is always stored or
    spooled, with status error where the grading itself failed. Returns (Record, the spool file
    where it waits, or None where it is stored). A record spooled by the run is that run's
    outcome: no ``error`` record replaces it."""
    plan = Plan.load(tasks_file)
    if not 0 <= index < len(plan.tasks):
        raise GradeError(f"task index {index} is not in {tasks_file} (0 to {len(plan.tasks) - 1})")
    task = plan.tasks[index]
    store = _TaskStore(store, plan, task)
    request = SubmitRequest(task.folder, plan.milestone, plan.size, Path(task.folder).name, plan.hidden_model,
                            task.record_id, plan.options(), plan.repeats)           # the raw name: escaped once
    transcript = Transcript()
    try:
        return submit(request, store, transcript), None
    except SpooledError as exc:
        return exc.record, exc.path
    except Ece408Error as exc:
        status = "failed" if isinstance(exc, TeamError) else "error"
        for line in str(exc).splitlines():
            transcript.line(f"error: {line}")
        reason = printable((str(exc).splitlines() or ["no reason given"])[0], limit=500)
        record = Record(task.record_id, _now(), task.team, plan.milestone, plan.size, status,
                        content_hash=task.content_hash, host=os.uname().nodename, transcript=transcript.text(),
                        reason=reason)
        try:
            store.add(record)
        except SpooledError as spooled:
            return record, spooled.path
        return record, None


def _now():
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def fallback_record(plan, task, log_path, why):
    """The record of a task that ended without storing or spooling one: status killed, its log as
    transcript."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - (1 << 20)))
            log = f.read().decode("utf-8", "replace")
    except OSError:
        log = ""
    reason = f"the task ended without storing a record ({why})"
    line = f"* The task ended without storing a record ({why}); its log: {log_path}"
    transcript = log + ("" if not log or log.endswith("\n") else "\n") + line + "\n"
    return Record(task.record_id, _now(), task.team, plan.milestone, plan.size, "killed",
                  content_hash=task.content_hash, transcript=transcript, options=plan.run_options(),
                  options_key=plan.options_key(), reason=printable(reason, limit=500))


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


class Watch:
    """The outcomes of a grade's tasks as far as they are known: the database's statuses and,
    for records it does not hold (it does not answer, or a task could not write), the tasks'
    spool's. The database not answering is one warning line and grading goes on (its return,
    one more); a record once seen stored stays known."""

    def __init__(self, store, plan, spool_folder):
        self.store, self.folder = store, Path(spool_folder)
        self.ids = [t.record_id for t in plan.tasks]
        self.stored = {}             # {record id: status} the database gave
        self.spooled = {}            # {record id: status} read from the spool (a spool file never changes)
        self.down = None             # why the database does not answer, or None

    def poll(self):
        """{record id: status} of the tasks that have an outcome, stored or spooled."""
        try:
            if self.down:
                self.store.reconnect()
            self.stored.update(self.store.statuses(self.ids))
            if self.down:
                warn("the database answers again")
            self.down = None
        except StoreError as exc:
            if not self.down:
                warn(f"the database does not answer ({exc}); grading goes on, the tasks' records wait in "
                     f"{self.folder} until it does")
            self.down = str(exc)
        wanted = set(self.ids)
        for record_id, path in spooled_files(self.folder).items():
            if record_id in wanted and record_id not in self.stored and record_id not in self.spooled:
                record = spooled_record(path)
                if record is not None:
                    self.spooled[record_id] = record.status
        return {**self.spooled, **self.stored}


def task_counts(watch, plan, running_ids, ended_ids):
    statuses = watch.poll()
    done = sum(1 for s in statuses.values() if s == "ok")
    failed = len(statuses) - done
    running = sum(1 for t in plan.tasks if t.record_id in running_ids and t.record_id not in statuses)
    waiting = sum(1 for t in plan.tasks if t.record_id not in statuses and t.record_id not in running_ids
                  and t.record_id not in ended_ids)
    return waiting, running, done, failed, statuses


@dataclass
class Settled:
    """Where a grade's records are once its tasks have ended."""
    waiting: list                    # record ids of this grade waiting in a spool (not stored yet)
    folder: Path                     # where they wait
    down: str = None                 # why the database does not answer, or None


def settle(plan, workdir, watch, why_of):
    """After the tasks: store what they spooled (``<workdir>/spool``); write a ``killed`` record
    for each task that has neither a stored nor a spooled record (``why_of(task)``: why it ended,
    one line; None where it ended well, which a task does only once its record is stored or
    spooled: while the database does not answer, such a task gets none); move what still waits
    into this user's spool, where the next command that opens the database stores it. Returns
    Settled."""
    store, task_spool = watch.store, workdir / SPOOL_FOLDER
    watch.poll()                         # reconnects where the database was away
    if not watch.down:
        store.deliver_spool(task_spool)
        watch.poll()
    spooled = spooled_files(task_spool)
    for task in plan.tasks:
        if task.record_id in watch.stored or task.record_id in spooled:
            continue
        why = why_of(task)
        if watch.down and why is None:
            continue                     # stored before the database went away
        record = fallback_record(plan, task, workdir / "logs" / f"{task.index}.out", why or "no reason given")
        if watch.down:                   # no retrying per task: it waits with the others
            spool(record, store.url, task_spool)
            continue
        try:
            store.add(record)
        except SpooledError:
            pass                         # in this user's spool
    left = move_spool(task_spool)
    ids = {t.record_id for t in plan.tasks}
    if left:
        return Settled(left, task_spool, watch.down)
    return Settled(sorted(ids & set(spooled_files())), spool_dir(), watch.down)


# ---------------------------------------------------------------------------- local pool

def task_command(python, tasks_file, index=None):
    argv = [*python, "-m", "ece408_op", "grade", "--run-task", str(tasks_file)]
    return argv + (["--task-index", str(index)] if index is not None else [])


def run_local(plan, workdir, store, jobs, time_limit, python=None, progress=None, poll=0.5):
    """Run every task in a pool of ``jobs`` local processes, each stopped (SIGTERM, then SIGKILL)
    past ``time_limit`` seconds; then ``settle``. Returns Settled."""
    python = [python] if python else python_command()
    logs = workdir / "logs"
    env = {**os.environ, SPOOL_ENV: str(workdir / SPOOL_FOLDER)}
    running, ended, lock = set(), set(), threading.Lock()

    def one(task):
        log_path = logs / f"{task.index}.out"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(task_command(python, workdir / TASKS_FILE, task.index), stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                    env=env)
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
    watch = Watch(store, plan, workdir / SPOOL_FOLDER)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(one, task) for task in plan.tasks]
        while not all(f.done() for f in futures):
            with lock:
                busy, gone = set(running), set(ended)
            progress.show(*task_counts(watch, plan, busy, gone)[:4])
            time.sleep(poll)
        whys = {task.record_id: why for task, why in (f.result() for f in futures)}
    from .sandbox import clean_stale
    clean_stale(plan.scratch_parent)             # what tasks killed past their time limit left (a /build tmpfs)
    settled = settle(plan, workdir, watch, lambda task: whys.get(task.record_id))
    progress.show(*task_counts(watch, plan, set(), {t.record_id for t in plan.tasks})[:4], final=True)
    return settled


# ---------------------------------------------------------------------------- what an instructor is told

def reason_of(record):
    """Why ``record`` is not valid, in one line: its ``reason``; for records stored before reasons
    were kept, the transcript's last ``* Not ranked: ...`` (or ``error: ...``) line, else its status."""
    if record.reason:
        return shown(record.reason, limit=500)
    if record.status == "ok" and not record.correct:
        wrong = [f"{m.get('model')} {m.get('correctness')} (expected {m.get('expected')})"
                 for m in record.models if not m.get("correct")]
        return printable("Correctness differs from the reference run: " + (", ".join(wrong) or "no model measured"),
                         limit=500)
    lines = (record.transcript or "").splitlines()
    for prefix in ("* Not ranked: ", "error: "):
        found = [line[len(prefix):] for line in lines if line.startswith(prefix)]
        if found:
            return printable(found[-1], limit=500)
    return record.status


def not_valid_lines(store, plan, listing, settled=None):
    """(lines, whether any team of the class has a valid run): one line per team whose
    submission, graded with the plan's options, is not valid (this grade's record, or the
    record that made it skipped), or that was refused or whose record waits in the spool."""
    from .ranking import valid
    key = plan.options_key()
    records = [r for r in store.records(milestone=plan.milestone, size=plan.size) if r.options_key == key]
    by_id = {r.id: r for r in records}
    valid_teams = {r.team for r in records if valid(r)}
    waiting = set(settled.waiting) if settled else set()
    outcome = {}                                          # team: (status, reason)
    for team, reason in listing.refused:
        outcome[team] = ("refused", reason)
    for record in listing.failed:
        outcome[record.team] = (record.status, reason_of(record))
    for team, digest in listing.skipped:
        mine = [r for r in records if r.team == team and r.content_hash == digest]
        if mine and not any(valid(r) for r in mine):
            outcome[team] = (mine[-1].status, reason_of(mine[-1]))
    for task in plan.tasks:
        record = by_id.get(task.record_id)
        if record is not None and not valid(record):
            outcome[task.team] = (record.status, reason_of(record))
        elif record is None:
            where = f"its record waits in {settled.folder}" if task.record_id in waiting else "no record"
            outcome[task.team] = ("not stored", where)
    class_teams = {t.team for t in plan.tasks} | {t for t, _ in listing.skipped} | set(outcome)
    lines = [f"  {shown(team)}: {status}: {reason}" for team, (status, reason) in sorted(outcome.items())]
    if lines:
        lines.insert(0, f"Not valid: {len(lines)} team(s)")
    return lines, bool(class_teams & valid_teams)


# ---------------------------------------------------------------------------- the work folder

def new_workdir(submissions, workdir=None):
    """``workdir`` or ``<submissions>/.grade/<UTC time>``, with a logs/ folder."""
    if workdir is None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + f"-{uuid.uuid4().hex[:6]}"
        workdir = Path(submissions) / ".grade" / stamp
    workdir = Path(workdir).resolve()
    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    return workdir


def export_db(url):
    """Tasks read the database from $ECE408_DB (never from a file: a URL may hold a password);
    a SQLite path is made absolute, the tasks' working folder being another."""
    if url:
        os.environ[DB_ENV] = url if url.startswith(POSTGRES_PREFIXES) else str(Path(url).resolve())
