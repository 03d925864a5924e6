"""``worker``: takes jobs from the server over HTTP and runs them, one at a time per slot.

A slot is one GPU (``--gpus 0,1``: one slot each, the job's processes see only that GPU), or
on a machine without one a CPU slot (m2 and CPU development runs). Each slot:

1. claims the next job (``POST /api/worker/claim``, waiting up to CLAIM_WAIT s for one), which
   gives it a lease;
2. downloads the upload, checks that its bytes are those the server took (SHA-256) and checks
   it again (``upload.check``: the worker trusts no byte it did not check), then unpacks it
   into a new folder (``upload.unpack``: exactly the entries the check took);
3. runs it in a child process (``jobrun.py``: grading's ranked or development path, each team
   command in its sandbox), streaming the child's transcript to the server as it comes (chunks,
   numbered, retried until acknowledged) and the run's step as the child reports it (``build
   command 2 of 3``, a model's fresh run), and sending a heartbeat every few seconds;
4. stops the child (SIGTERM: the runner ends every process of the run) when the job is
   cancelled, passes its time limit, or the lease is lost;
5. ends the job with its outcome: the record of a ranked run (the runner's, from the child's
   private descriptor), the status of a development run, after sending the development run's
   build folder, which the child packed when its commands ended (``send_build``).

``--kind KIND`` (serve --slurm gives it to the worker jobs it sends for a mapped device kind:
their partition or gres put them on a node of that kind): every slot reports KIND as its device,
so it takes only the jobs asking for that kind or for none (jobs.RUNNABLE); where the machine's
own name is of another kind, ``worker.kind_differs`` says so (the records keep the name their
runs measured on).

The worker holds a worker token, never database credentials. Network trouble and a server that
restarts are waited out (every call retried for ``--patience`` seconds): the job goes on and
nothing it produced is lost. SIGTERM or Ctrl-C: each slot stops its child and gives its job back
to the queue (not counted as an attempt), then the worker exits 0.

A worker never dies on a job: whatever fails while a slot handles one (the download, the check,
the scratch folder, the unpack, the child, the server refusing the end, a bug) ends that job with
status error and a one-line reason naming what failed, and the slot takes the next job. A slot
thread that ends anyway is logged and started again (``supervise``). The server refusing the
worker's token stops every slot: the worker exits 2 with the server's line.
"""
import codecs
import hashlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..base.processes import python_command
from . import upload as uploads
from .calls import Api, ChunkSender, Heartbeat, Refusal, Unreachable, WorkerError
from .jobrun import PARENT_ENV, die_with_parent, one_line
from .jobs import Lost
from .logs import log, set_level
from .progress import STEP_LIMIT
from .grading_door import device_name, gpu_indices, kind_of

CLAIM_WAIT = 20.0
STOP_GRACE = 30.0                       # seconds a stopped child has to end its run before SIGKILL
KEPT = 1 << 20                          # characters of transcript kept for a record the child never wrote
NO_BUILD = "the run's process gave none"  # where the child gave no build folder and no reason
BUILD_TIMEOUT = 300.0                   # seconds a build folder's post may take (sent, checked, stored)
SECRET_ENV = ("ECE408_TOKEN", "ECE408_TOKEN_FILE", "ECE408_INSTRUCTOR_TOKEN", "ECE408_DB", PARENT_ENV)


@dataclass
class WorkerOptions:
    server: str
    token: str
    gpus: str = "auto"                 # auto, none, visible, or a list "0,1"
    slots: int = 1                     # CPU slots where there is no GPU
    slot: str = None                   # one slot of this name (serve's local workers)
    once: bool = False                 # one job, then exit (a Slurm job); no job within once_wait: exit
    once_wait: float = 60.0
    kind: str = None                   # the device kind every slot reports (serve --slurm's mapped kinds)
    engine: str = None
    scratch: str = None
    hidden_model: str = None
    patience: float = 600.0
    log_level: str = "info"


def plan_slots(options):
    """[(slot name, GPU index / "visible" / None)]."""
    gpus = options.gpus or "auto"
    if gpus == "auto":
        found = gpu_indices()
        chosen = [(f"gpu{g}", g) for g in found] or [(f"cpu{i}", None) for i in range(options.slots)]
    elif gpus == "none":
        chosen = [(f"cpu{i}", None) for i in range(options.slots)]
    elif gpus == "visible":
        chosen = [("gpu", "visible")]
    else:
        chosen = [(f"gpu{g.strip()}", g.strip()) for g in gpus.split(",") if g.strip()]
    if options.slot is not None:
        chosen = [(options.slot, chosen[0][1])]
    if os.environ.get("SLURM_JOB_ID"):
        chosen = [(f"{name}-job{os.environ['SLURM_JOB_ID']}", gpu) for name, gpu in chosen]
    return chosen


def child_env(gpu):
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    env["PYTHONIOENCODING"] = "utf-8"
    env[PARENT_ENV] = str(os.getpid())
    if gpu not in (None, "visible"):
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    return env


def failure(exc):
    """An unexpected exception as one line: its type, its message, where it was raised."""
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {Path(frame.filename).name}:{frame.lineno}" if frame else ""
    return one_line(f"{type(exc).__name__}: {exc}{where}")


class Slot:
    """One slot's loop: claim a job, run it, end it; every failure of one job ends that job (status
    error, with a reason saying what failed), never the slot. ``fatal``: the server refused this
    worker's token (the worker stops); ``crash``: what ended the loop's thread otherwise (the
    worker starts it again)."""

    def __init__(self, api, name, gpu, options, stop):
        self.api, self.name, self.gpu, self.options, self.stop = api, name, gpu, options, stop
        self.device = device_name(gpu)
        if options.kind is not None:
            if kind_of(self.device) != options.kind:
                log("worker.kind_differs", level="warning", slot=name, kind=options.kind, device=self.device)
            self.device = options.kind
        self.fatal = self.crash = None
        self.finished = False

    def guarded_loop(self):
        """The thread's target: the loop, its end recorded for ``supervise``."""
        try:
            self.loop()
        except WorkerError as exc:
            self.fatal = exc
            self.stop.set()
        except BaseException as exc:                       # noqa: BLE001  recorded; supervise starts it again
            self.crash = failure(exc)
            return
        self.finished = self.stop.is_set() or self.options.once or self.fatal is not None

    def loop(self):
        idle_since = time.monotonic()
        failures = 0
        while not self.stop.is_set():
            try:
                done = self.turn(idle_since)
            except WorkerError:
                raise
            except Exception as exc:                       # noqa: BLE001  a bug between jobs: logged, go on
                failures += 1
                log("worker.slot_error", level="error", slot=self.name, reason=failure(exc))
                self.stop.wait(min(60.0, 2.0 ** failures))
                continue
            failures = 0
            if done is None:
                continue
            if done == "idle" or self.options.once:
                return
            idle_since = time.monotonic()

    def turn(self, idle_since):
        """One claim, and its job: "ran", "idle" (``once`` and nothing came), None (try again)."""
        try:
            response = self.api.call("POST", "/api/worker/claim", body={
                "slot": self.name, "gpu": self.gpu is not None, "device": self.device, "wait": CLAIM_WAIT},
                timeout=CLAIM_WAIT + 30)
        except (Unreachable, Refusal) as exc:
            log("worker.claim_failed", level="warning", slot=self.name, reason=str(exc))
            if self.options.once:
                return "idle"
            self.stop.wait(5.0)
            return None
        if response.status_code == 204:
            if self.options.once and time.monotonic() - idle_since > self.options.once_wait:
                log("worker.idle", slot=self.name)
                return "idle"
            return None
        claim = response.json()
        if self.stop.is_set():
            self.give_back(claim["job"]["id"], claim["lease"], "the worker was stopping")
            return "idle"
        self.run(claim)
        return "ran"

    def give_back(self, job_id, lease, why):
        try:
            self.api.call("POST", f"/api/worker/jobs/{job_id}/release", lease, {"why": why}, patience=10)
            log("job.released", job=job_id, slot=self.name)
        except (Lost, Unreachable, Refusal) as exc:
            log("job.release_failed", level="warning", job=job_id, reason=f"{type(exc).__name__}: {exc}")

    def run(self, claim):
        job, lease = claim["job"], claim["lease"]
        log("job.started", job=job["id"], team=job["team"], kind=job["kind"], milestone=job.get("milestone"),
            slot=self.name, attempt=job["attempts"])
        sender = ChunkSender(self.api, job["id"], lease, job["next_seq"])
        sender.start()
        beat = Heartbeat(self.api, job["id"], lease, min(10.0, claim.get("lease_seconds", 60.0) / 4))
        beat.start()
        try:
            try:
                outcome = self.attempt(job, lease, sender, beat)
            except (Lost, Unreachable, WorkerError):
                raise
            except Exception as exc:                       # noqa: BLE001  a bug on this job: the job ends, not the slot
                log("job.worker_error", level="error", job=job["id"], slot=self.name, reason=failure(exc))
                outcome = self.failed(job, sender, f"the worker failed while handling the job ({failure(exc)})")
            sender.close()
            beat.done.set()
            if outcome is None:
                return
            if outcome == "release":
                self.give_back(job["id"], lease, "the worker was stopped")
                return
            if sender.lost:
                raise Lost(job["id"])
            self.finish(job, lease, outcome)
        except Lost:
            log("job.lost", level="warning", job=job["id"], slot=self.name)
        except (Unreachable, Refusal) as exc:
            log("job.abandoned", level="error", job=job["id"], slot=self.name, reason=str(exc))
        finally:
            beat.done.set()
            sender.close(5)

    def attempt(self, job, lease, sender, beat):
        """Download, check, unpack and run the job; what ends it (``execute``'s answer). A step that
        fails ends the job with status error and a reason naming the step."""
        try:
            data = self.api.call("GET", f"/api/worker/jobs/{job['id']}/upload", lease).content
        except Refusal as exc:
            return self.failed(job, sender, f"the worker could not download the upload ({exc.answer})")
        if job.get("upload_sha256") and hashlib.sha256(data).hexdigest() != job["upload_sha256"]:
            return self.failed(job, sender, "the upload the worker downloaded is not the one the server accepted "
                                            "(its SHA-256 differs)")
        try:
            checked = uploads.check(data, job["kind"], job.get("milestone"), max_upload=len(data))
        except uploads.UploadError as exc:
            return self.failed(job, sender, f"the upload was refused by the worker: {exc}")
        try:
            scratch = tempfile.TemporaryDirectory(prefix="ece408-job-", dir=self.options.scratch,
                                                  ignore_cleanup_errors=True)
        except OSError as exc:
            return self.failed(job, sender, f"the worker could not make a folder in {self.options.scratch or 'TMPDIR'} "
                                            f"({exc.strerror or exc})")
        with scratch as tmp:
            folder = Path(tmp) / "submission"
            try:
                folder.mkdir()
                uploads.unpack(checked, folder)
            except OSError as exc:
                return self.failed(job, sender, f"the worker could not unpack the upload into {tmp} "
                                                f"({exc.strerror or exc})")
            archive = Path(tmp) / "build.tar.gz" if job["kind"] == "development" else None
            outcome = self.execute(job, folder, sender, beat, archive)
            if isinstance(outcome, dict):
                self.send_build(job, lease, sender, outcome, archive)
            return outcome

    def send_build(self, job, lease, sender, outcome, archive):
        """A development run's build folder (the child packed it into ``archive``) sent to the
        server before the job ends, and the transcript's line saying how to download it, or why
        there is none."""
        summary, note = outcome.pop("build", None), outcome.pop("build_note", None)
        if job["kind"] != "development":
            return
        if summary is None:
            sender.add(f"* No build folder is kept: {note or NO_BUILD}\n")
            return
        if not summary["files"] and not summary["folders"]:
            sender.add("* The build folder is empty: nothing is kept\n")
            return
        try:
            kept = self.api.call("POST", f"/api/worker/jobs/{job['id']}/build", lease, content=archive.read_bytes(),
                                 timeout=BUILD_TIMEOUT).json()
        except OSError as exc:
            sender.add(f"* The build folder is not kept: the worker could not read its archive "
                       f"({exc.strerror or exc})\n")
            return
        except (Refusal, Unreachable) as exc:
            sender.add(f"* The build folder is not kept: {one_line(getattr(exc, 'answer', None) or exc)}\n")
            return
        sender.add(f"* The build folder ({kept['files']} files, {kept['data_bytes'] / 2**20:.1f} MiB) is kept until "
                   f"{kept['expires']}: python -m ece408_op jobs download {job['id']}\n")

    def failed(self, job, sender, reason):
        """The end of a job that failed before or around its run: ``reason`` in its transcript."""
        reason = one_line(reason)
        sender.add(f"error: {reason}\n")
        return self.without_result(job, "error", reason)

    def finish(self, job, lease, outcome):
        """Post the job's end; where the server refuses it, end the job with that refusal as its reason."""
        try:
            self.api.call("POST", f"/api/worker/jobs/{job['id']}/finish", lease, outcome)
        except Refusal as exc:
            reason = one_line(f"the server refused the end the worker posted ({exc.answer})")
            log("job.end_refused", level="error", job=job["id"], slot=self.name, reason=exc.answer)
            self.api.call("POST", f"/api/worker/jobs/{job['id']}/finish", lease, self.without_result(job, "error", reason))
            outcome = {"status": "error"}
        log("job.finished", job=job["id"], status=outcome["status"], slot=self.name)

    def spec(self, job, folder, result_fd, archive=None):
        return {"kind": job["kind"], "folder": str(folder), "milestone": job.get("milestone"), "size": job.get("size"),
                "team": job["team"], "record_id": job.get("record_id"), "timeout": job["time_limit"],
                "engine": self.options.engine, "scratch": self.options.scratch,
                "hidden_model": self.options.hidden_model, "result_fd": result_fd,
                "build_archive": str(archive) if archive else None}

    def execute(self, job, folder, sender, beat, archive=None):
        """Run the job in its child (a development run packs its build folder into ``archive``);
        returns what ends it (the finish call's body, with the build's summary), "release" (the
        worker is stopping) or None (the lease is lost). Whatever happens here, the child does not
        outlive it."""
        limit = float(job["time_limit"])
        spec = self.spec(job, folder, None, archive)
        read_fd, write_fd = os.pipe()
        spec["result_fd"] = write_fd
        try:
            proc = subprocess.Popen(python_command() + ["-m", "ece408_op.service.jobrun"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, env=child_env(self.gpu), pass_fds=(write_fd,),
                                    start_new_session=True, cwd=str(folder.parent))
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            return self.failed(job, sender, f"the worker could not start the run's process ({exc.strerror or exc})")
        os.close(write_fd)
        try:
            return self.watch(job, proc, read_fd, spec, sender, beat, limit)
        finally:
            if proc.poll() is None:                 # the watch itself failed: the run is stopped
                log("job.stopping", job=job["id"], why="the worker failed")
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(STOP_GRACE)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def watch(self, job, proc, read_fd, spec, sender, beat, limit):
        """Feed the child its ``spec``, stream its output, stop it when it must stop; its outcome."""
        results, kept = [], []

        def read_results():
            with os.fdopen(read_fd, "rb") as f:
                for line in f:
                    try:
                        result = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(result, dict) and list(result) == ["progress"]:
                        sender.progress(one_line(result["progress"], STEP_LIMIT))    # the run's step, live
                    else:
                        results.append(result)

        def pump():
            decoder = codecs.getincrementaldecoder("utf-8")("replace")
            size = 0
            for chunk in iter(lambda: proc.stdout.read1(65536), b""):
                text = decoder.decode(chunk)
                sender.add(text)
                if size < KEPT:
                    kept.append(text)
                    size += len(text)
            sender.add(decoder.decode(b"", final=True))
        threads = [threading.Thread(target=read_results, daemon=True), threading.Thread(target=pump, daemon=True)]
        for t in threads:
            t.start()
        try:
            proc.stdin.write(json.dumps(spec).encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass                                    # the child is gone already: its outcome says so
        deadline = time.monotonic() + limit
        why, stopped_at = None, None
        while proc.poll() is None:
            time.sleep(0.2)
            if why is None:
                if sender.lost or beat.lost:
                    why = "lost"
                elif self.stop.is_set():
                    why = "release"
                elif sender.cancel or beat.cancel:
                    why = "cancelled"
                elif time.monotonic() > deadline:
                    why = "timeout"
                if why is not None:
                    log("job.stopping", job=job["id"], why=why)
                    proc.send_signal(signal.SIGTERM)
                    stopped_at = time.monotonic()
            elif time.monotonic() - stopped_at > STOP_GRACE:
                proc.kill()
        for t in threads:
            t.join(30)
        if why == "lost":
            return None
        if why == "release":
            return "release"
        return self.outcome(job, results, why, proc.returncode, "".join(kept), sender)

    def outcome(self, job, results, why, code, kept, sender):
        limit = job["time_limit"]
        late = f"* The job ran past its time limit of {limit:g} s and was stopped" if why == "timeout" else None
        if late:
            sender.add(late + "\n")
        record = next((r["record"] for r in results if "record" in r), None)
        dev = next((r["development"] for r in results if "development" in r), None)
        ended = f"exit code {code}" if code is not None and code >= 0 else \
            f"killed by {signal.Signals(-code).name}" if code is not None else "no exit status"
        if job["kind"] == "ranked":
            if record is None:
                return self.without_result(job, "error", f"the run's process ended without a record ({ended})",
                                           kept + (late + "\n" if late else ""))
            if late:
                record.update(status="timeout", reason=f"the job ran past its time limit of {limit:g} s",
                              transcript=record["transcript"] + late + "\n")
            return {"status": record["status"], "exit_code": None, "reason": record.get("reason"), "record": record}
        if dev is None:
            return self.without_result(job, "error", f"the run's process ended without a result ({ended})")
        status = "timeout" if late else dev["status"]
        return {"status": status, "exit_code": dev.get("exit_code"), "reason": dev.get("reason"), "record": None,
                "build": dev.get("build"), "build_note": dev.get("build_note")}

    def without_result(self, job, status, reason, transcript=""):
        """The end of a job whose child gave no result (crashed, or never started)."""
        if job["kind"] != "ranked":
            return {"status": status, "exit_code": None, "reason": reason, "record": None}
        record = {"id": job["record_id"], "created_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                  "team": job["team"], "milestone": job["milestone"], "size": job["size"], "status": status,
                  "host": socket.gethostname(), "transcript": transcript + f"* Not ranked: {reason}\n",
                  "reason": reason}
        return {"status": status, "exit_code": None, "reason": reason, "record": record}


def run_worker(options):
    """Serve jobs until SIGTERM/SIGINT (or, with ``once``, one job); returns the exit status."""
    from .grading_door import SubmitError, data_dir
    set_level(options.log_level)
    die_with_parent()
    try:
        data_dir()
    except SubmitError as exc:
        raise WorkerError(f"{exc} (the worker runs the milestones)") from None
    api = Api(options.server, options.token, options.patience)
    try:
        who = api.call("GET", "/api/whoami", patience=min(options.patience, 60)).json()
    except Unreachable as exc:
        raise WorkerError(f"no answer from the service at {api.url}: {exc}") from None
    if who.get("kind") != "worker":
        raise WorkerError(f"this token is a {who.get('kind')}'s, not a worker's (teams worker NAME makes one)")
    stop = threading.Event()

    def on_signal(signum, frame):
        if stop.is_set():
            return
        log("worker.stopping", signal=signal.Signals(signum).name)
        stop.set()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    slots = [Slot(api, name, gpu, options, stop) for name, gpu in plan_slots(options)]
    log("worker.ready", server=api.url, worker=who.get("name"), slots=",".join(s.name for s in slots),
        devices=",".join(sorted({s.device for s in slots})))
    supervise(slots, stop)
    fatal = next((s.fatal for s in slots if s.fatal is not None), None)
    log("worker.stopped", worker=who.get("name"), reason=str(fatal) if fatal else None)
    if fatal is not None:
        raise fatal
    return 0


def supervise(slots, stop, poll=0.5):
    """Run each slot's loop in a thread until every slot has finished (a signal, ``once``, or
    the server refusing the worker); a thread that ends otherwise is logged and started again,
    after a wait that doubles while it keeps ending within a minute (up to 5 minutes)."""
    threads, due, failures = {}, {}, {}
    for slot in slots:
        threads[slot.name] = threading.Thread(target=slot.guarded_loop, name=slot.name, daemon=True)
        threads[slot.name].start()
    started = {slot.name: time.monotonic() for slot in slots}
    while True:
        running = False
        for slot in slots:
            thread = threads[slot.name]
            if thread.is_alive():
                running = True
                continue
            if slot.finished or stop.is_set():
                continue
            running = True
            now = time.monotonic()
            if slot.name not in due:
                failures[slot.name] = failures.get(slot.name, 0) + 1 if now - started[slot.name] < 60 else 1
                due[slot.name] = now + min(300.0, 2.0 ** (failures[slot.name] - 1))
                log("worker.slot_died", level="error", slot=slot.name, reason=slot.crash or "its loop returned",
                    restart_in=round(due[slot.name] - now))
            if now >= due[slot.name]:
                del due[slot.name]
                slot.crash = None
                threads[slot.name] = threading.Thread(target=slot.guarded_loop, name=slot.name, daemon=True)
                threads[slot.name].start()
                started[slot.name] = now
                log("worker.slot_restarted", slot=slot.name)
        if not running:
            return
        time.sleep(poll)
