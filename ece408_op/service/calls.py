"""The worker's side of the HTTP conversation: its calls (``Api``: each retried through network
errors and 502/503/504 for the worker's patience), the job's transcript as it comes
(``ChunkSender``, which also carries the run's latest step) and its heartbeat (``Heartbeat``), both
under the job's lease."""
import threading
import time

from ..errors import Ece408Error
from .jobs import MAX_CHUNK, MAX_CHUNKS, Lost
from .logs import log
from .progress import STEP_LIMIT


class WorkerError(Ece408Error):
    """The worker cannot work: its token refused, no server at the URL, no data for the runs."""

    exit_code = 2


class Unreachable(Exception):
    """The server did not answer within the worker's patience."""


class Refusal(Exception):
    """The server refused a call (4xx other than 401, 403, 409): a bug, logged. ``answer`` is
    the status and the server's one line."""

    def __init__(self, message, answer):
        super().__init__(message)
        self.answer = answer


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

    def call(self, method, path, lease=None, body=None, timeout=30.0, patience=None, content=None):
        """``body``: JSON; ``content``: bytes (a build folder's tar.gz), sent again as they are on a retry."""
        deadline = time.monotonic() + (self.patience if patience is None else patience)
        delay, said = 0.25, False
        headers = {"X-Lease": lease} if lease else {}
        if content is not None:
            headers["Content-Type"] = "application/gzip"
        while True:
            try:
                response = self.client.request(method, path, json=body, content=content, headers=headers or None,
                                               timeout=timeout)
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
                        answer = f"HTTP {status}: {error_text(response)}"
                        raise Refusal(f"{method} {path}: {answer}", answer)
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
    acknowledged. The run's step (``progress``) goes with the next post, alone where no text
    waits; only the latest is sent. Also reads the answer: whether the job is to be cancelled, or
    lost."""

    def __init__(self, api, job_id, lease, base):
        super().__init__(name=f"chunks-{job_id[:8]}", daemon=True)
        self.api, self.job_id, self.lease, self.seq = api, job_id, lease, base
        self.pending, self.closed = [], False
        self.step = self.step_sent = None
        self.cond = threading.Condition()
        self.cancel = self.lost = False

    def add(self, text):
        if text:
            with self.cond:
                self.pending.append(text)
                self.cond.notify()

    def progress(self, step):
        """The run's step now (one line, at most STEP_LIMIT characters), sent with the next post."""
        step = str(step)[:STEP_LIMIT]
        with self.cond:
            if step != self.step:
                self.step = step
                self.cond.notify()

    def run(self):
        while True:
            with self.cond:
                while not self.pending and self.step == self.step_sent and not self.closed:
                    self.cond.wait()
                if not self.pending and (self.closed or self.step == self.step_sent):
                    return
                text, self.pending, step = "".join(self.pending), [], self.step
            if self.lost:
                self.step_sent = step                  # nothing more is sent
                continue
            pieces = [text[i:i + MAX_CHUNK] for i in range(0, len(text), MAX_CHUNK)]
            for start in range(0, max(1, len(pieces)), MAX_CHUNKS):
                batch = [[self.seq + i, p] for i, p in enumerate(pieces[start:start + MAX_CHUNKS])]
                body = {"chunks": batch}
                if step != self.step_sent:
                    body["progress"] = step
                try:
                    answer = self.api.call("POST", f"/api/worker/jobs/{self.job_id}/chunks", self.lease,
                                           body).json()
                except (Lost, Unreachable, Refusal, WorkerError) as exc:
                    log("job.chunks_lost", level="warning", job=self.job_id, reason=f"{type(exc).__name__}: {exc}")
                    self.lost = True
                    break
                self.seq += len(batch)
                self.step_sent = step
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
            except (Lost, Unreachable, Refusal, WorkerError) as exc:
                log("job.lease_lost", level="warning", job=self.job_id, reason=f"{type(exc).__name__}: {exc}")
                self.lost = True
                return
