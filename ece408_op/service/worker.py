"""``worker``: takes jobs from the server over HTTP and runs them, one at a time per slot.

A slot is one GPU (``--gpus 0,1``: one slot each, the job's processes see only that GPU), or
on a machine without one a CPU slot (m2 and CPU development runs). Each slot:

1. claims the next job (``POST /api/worker/claim``, waiting up to CLAIM_WAIT s for one), which
   gives it a lease;
2. downloads the upload, checks it again (``upload.check``: the worker trusts no byte it did not
   check) and unpacks it into a new folder;
3. runs it in a child process (``jobrun.py``: grading's ranked or development path, each team
   command in its sandbox), streaming the child's transcript to the server as it comes (chunks,
   numbered, retried until acknowledged), and sending a heartbeat every few seconds;
4. stops the child (SIGTERM: the runner ends every process of the run) when the job is
   cancelled, passes its time limit, or the lease is lost;
5. ends the job with its outcome: the record of a ranked run (the runner's, from the child's
   private descriptor), the status of a development run.

The worker holds a worker token, never database credentials. Network trouble and a server that
restarts are waited out (every call retried for ``--patience`` seconds): the job goes on and
nothing it produced is lost. SIGTERM or Ctrl-C: each slot stops its child and gives its job back
to the queue (not counted as an attempt), then the worker exits.
"""
import codecs
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..errors import Ece408Error
from . import upload as uploads
from .jobrun import PARENT_ENV, die_with_parent
from .jobs import MAX_CHUNK, MAX_CHUNKS, Lost
from .logs import log, set_level
from .runs import device_name, gpu_indices

CLAIM_WAIT = 20.0
STOP_GRACE = 30.0                       # seconds a stopped child has to end its run before SIGKILL
KEPT = 1 << 20                          # characters of transcript kept for a record the child never wrote
SECRET_ENV = ("ECE408_TOKEN", "ECE408_TOKEN_FILE", "ECE408_INSTRUCTOR_TOKEN", "ECE408_DB", PARENT_ENV)


class WorkerError(Ece408Error):
    """The worker cannot work: its token refused, no server at the URL, no data for the runs."""

    exit_code = 2


class Unreachable(Exception):
    """The server did not answer within the worker's patience."""


class Refusal(Exception):
    """The server refused a call (4xx other than 401, 403, 409): a bug, logged."""


def python_command():
    """This interpreter, with the same -S (the GPU kit's mxpy runs without site)."""
    return [sys.executable] + (["-S"] if sys.flags.no_site else [])


def error_text(response):
    try:
        return str(response.json().get("error"))[:300]
    except ValueError:
        return response.text[:300]


class Api:
    """The worker's calls to the server; each retried through network errors and 502/503/504
    for ``patience`` seconds."""

    def __init__(self, url, token, patience=600.0):
        import httpx
        self.httpx = httpx
        self.url = url.rstrip("/")
        self.client = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"},
                                   timeout=httpx.Timeout(30.0, connect=10.0))
        self.patience = patience

    def call(self, method, path, lease=None, body=None, timeout=30.0, patience=None):
        deadline = time.monotonic() + (self.patience if patience is None else patience)
        delay, said = 0.25, False
        headers = {"X-Lease": lease} if lease else None
        while True:
            try:
                response = self.client.request(method, path, json=body, headers=headers, timeout=timeout)
            except self.httpx.TransportError as exc:
                why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            else:
                status = response.status_code
                if status == 409:
                    raise Lost(path)
                if status in (401, 403):
                    raise WorkerError(f"the server at {self.url} refused this worker: {error_text(response)}")
                if status not in (502, 503, 504):
                    if status >= 400:
                        raise Refusal(f"{method} {path}: HTTP {status}: {error_text(response)}")
                    if said:
                        log("server.back", path=path)
                    return response
                why = f"HTTP {status}: {error_text(response)}"
            if time.monotonic() + delay > deadline:
                raise Unreachable(why)
            if not said:
                log("server.unreachable", level="warning", path=path, reason=why)
                said = True
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


class ChunkSender(threading.Thread):
    """Streams a job's transcript: text as it comes, numbered from the claim's base, posted in
    order (what accumulates during one post goes in the next), each post retried until it is
    acknowledged. Also reads the answer: whether the job is to be cancelled, or lost."""

    def __init__(self, api, job_id, lease, base):
        super().__init__(name=f"chunks-{job_id[:8]}", daemon=True)
        self.api, self.job_id, self.lease, self.seq = api, job_id, lease, base
        self.pending, self.closed = [], False
        self.cond = threading.Condition()
        self.cancel = self.lost = False

    def add(self, text):
        if text:
            with self.cond:
                self.pending.append(text)
                self.cond.notify()

    def run(self):
        while True:
            with self.cond:
                while not self.pending and not self.closed:
                    self.cond.wait()
                if not self.pending:
                    return
                text, self.pending = "".join(self.pending), []
            if self.lost:
                continue
            pieces = [text[i:i + MAX_CHUNK] for i in range(0, len(text), MAX_CHUNK)]
            for start in range(0, len(pieces), MAX_CHUNKS):
                batch = [[self.seq + i, p] for i, p in enumerate(pieces[start:start + MAX_CHUNKS])]
                try:
                    answer = self.api.call("POST", f"/api/worker/jobs/{self.job_id}/chunks", self.lease,
                                           {"chunks": batch}).json()
                except (Lost, Unreachable, Refusal) as exc:
                    log("job.chunks_lost", level="warning", job=self.job_id, reason=f"{type(exc).__name__}: {exc}")
                    self.lost = True
                    break
                self.seq += len(batch)
                self.cancel = self.cancel or bool(answer.get("cancel"))

    def close(self, timeout=None):
        with self.cond:
            self.closed = True
            self.cond.notify()
        self.join(timeout)


class Heartbeat(threading.Thread):
    def __init__(self, api, job_id, lease, every):
        super().__init__(name=f"heartbeat-{job_id[:8]}", daemon=True)
        self.api, self.job_id, self.lease, self.every = api, job_id, lease, every
        self.done = threading.Event()
        self.cancel = self.lost = False

    def run(self):
        while not self.done.wait(self.every):
            try:
                answer = self.api.call("POST", f"/api/worker/jobs/{self.job_id}/heartbeat", self.lease).json()
                self.cancel = self.cancel or bool(answer.get("cancel"))
            except (Lost, Unreachable, Refusal) as exc:
                log("job.lease_lost", level="warning", job=self.job_id, reason=f"{type(exc).__name__}: {exc}")
                self.lost = True
                return


@dataclass
class WorkerOptions:
    server: str
    token: str
    gpus: str = "auto"                 # auto, none, visible, or a list "0,1"
    slots: int = 1                     # CPU slots where there is no GPU
    slot: str = None                   # one slot of this name (serve's local workers)
    once: bool = False                 # one job, then exit (a Slurm job); no job within once_wait: exit
    once_wait: float = 60.0
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


class Slot:
    def __init__(self, api, name, gpu, options, stop):
        self.api, self.name, self.gpu, self.options, self.stop = api, name, gpu, options, stop
        self.device = device_name(gpu)

    def loop(self):
        idle_since = time.monotonic()
        while not self.stop.is_set():
            try:
                response = self.api.call("POST", "/api/worker/claim", body={
                    "slot": self.name, "gpu": self.gpu is not None, "device": self.device, "wait": CLAIM_WAIT},
                    timeout=CLAIM_WAIT + 30)
            except (Unreachable, Refusal) as exc:
                log("worker.claim_failed", level="warning", slot=self.name, reason=str(exc))
                if self.options.once:
                    return
                continue
            if response.status_code == 204:
                if self.options.once and time.monotonic() - idle_since > self.options.once_wait:
                    log("worker.idle", slot=self.name)
                    return
                continue
            claim = response.json()
            if self.stop.is_set():
                self.give_back(claim["job"]["id"], claim["lease"], "the worker was stopping")
                return
            self.run(claim)
            if self.options.once:
                return
            idle_since = time.monotonic()

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
            data = self.api.call("GET", f"/api/worker/jobs/{job['id']}/upload", lease).content
            try:
                checked = uploads.check(data, job["kind"], job["milestone"], max_upload=len(data))
            except uploads.UploadError as exc:
                sender.add(f"error: {exc}\n")
                outcome = self.without_result(job, "error", f"the upload was refused by the worker: {exc}")
            else:
                with tempfile.TemporaryDirectory(prefix="ece408-job-", dir=self.options.scratch) as tmp:
                    folder = Path(tmp) / "submission"
                    folder.mkdir()
                    uploads.unpack(checked, folder)
                    outcome = self.execute(job, folder, sender, beat)
            sender.close()
            beat.done.set()
            if outcome is None:
                return
            if outcome == "release":
                self.give_back(job["id"], lease, "the worker was stopped")
                return
            if sender.lost:
                raise Lost(job["id"])
            self.api.call("POST", f"/api/worker/jobs/{job['id']}/finish", lease, outcome)
            log("job.finished", job=job["id"], status=outcome["status"], slot=self.name)
        except Lost:
            log("job.lost", level="warning", job=job["id"], slot=self.name)
        except (Unreachable, Refusal) as exc:
            log("job.abandoned", level="error", job=job["id"], slot=self.name, reason=str(exc))
        finally:
            beat.done.set()
            sender.close(5)

    def spec(self, job, folder, result_fd):
        return {"kind": job["kind"], "folder": str(folder), "milestone": job.get("milestone"), "size": job.get("size"),
                "team": job["team"], "record_id": job.get("record_id"), "timeout": job["time_limit"],
                "engine": self.options.engine, "scratch": self.options.scratch,
                "hidden_model": self.options.hidden_model, "result_fd": result_fd}

    def execute(self, job, folder, sender, beat):
        """Run the job in its child; returns what ends it (the finish call's body), "release"
        (the worker is stopping) or None (the lease is lost)."""
        read_fd, write_fd = os.pipe()
        proc = subprocess.Popen(python_command() + ["-m", "ece408_op.service.jobrun"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=child_env(self.gpu), pass_fds=(write_fd,),
                                start_new_session=True, cwd=str(folder.parent))
        os.close(write_fd)
        results, kept = [], []

        def read_results():
            with os.fdopen(read_fd, "rb") as f:
                for line in f:
                    try:
                        results.append(json.loads(line))
                    except ValueError:
                        pass

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
            proc.stdin.write(json.dumps(self.spec(job, folder, write_fd)).encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass                                    # the child is gone already: its outcome says so
        deadline = time.monotonic() + job["time_limit"]
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
        return {"status": status, "exit_code": dev.get("exit_code"), "reason": dev.get("reason"), "record": None}

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
    from .runs import SubmitError, data_dir
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
    threads = [threading.Thread(target=s.loop, name=s.name, daemon=True) for s in slots]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(0.5)
    log("worker.stopped", worker=who.get("name"))
    return 0
