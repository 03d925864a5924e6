"""The measuring process's report to the runner: a Unix socket only its sandbox can see.

The runner listens on ``<scratch>/channel/channel.sock``, bound into the measuring sandbox only,
and accepts ONE connection, which the measuring process (the grader's code) makes as its first
act, before it starts the team's process; the runner then stops listening. The job (milestone,
models, the hidden model's bytes, the secret seed of fresh inputs) goes in, the results (Op
Times, Correctness, the device) come back. Printed text is for people: the record never parses it.

Messages: a 4-byte big-endian length, then JSON. Sizes are bounded on both sides.

The timing lease: while the team's code runs (its import, plan, warm-up, timed runs and their
checks), the measuring process holds the machine's timing lock through this channel
(``{"lease": "acquire"}`` -> ``{"lease": "granted"}``, then ``{"lease": "release"}``): the runner
takes an exclusive ``flock`` on a lock file at a fixed machine-wide path (``TimingLock``: per GPU
for GPU milestones, one for the CPU), shared by every runner on the machine whatever its user,
TMPDIR or scratch folder, so that no two teams' code runs at once there, warm-ups included. The
time spent waiting for it is added to the measuring command's time limit.

Progress: the measuring process says where it is (``{"progress": "model ece408-high (1 of 2):
layer 1 ..., fresh run 2 of 5"}``, no answer); the runner hands the text, cut to PROGRESS_LIMIT
characters, to its ``on_progress`` (the service's worker shows it live). Never part of the record.
"""
import contextlib
import os
import socket
import stat
import threading
import time

from ..errors import Ece408Error
from ..team import wire

SOCKET = "channel.sock"
TARGET = "/run/ece408"                 # where the measuring sandbox sees the socket's folder
JOB_LIMIT = 512 << 20
RESULT_LIMIT = 4 << 20
PROGRESS_LIMIT = 500                   # characters of a progress message the runner passes on
LOCK_DIR_ENV = "ECE408_LOCK_DIR"
LOCK_DIRS = ("/run/lock", "/var/lock", "/tmp")   # machine-wide, never a runner's TMPDIR


class ChannelError(Ece408Error):
    pass


def send(sock, message):
    sock.sendall(wire.encode(message))


def recv(sock, limit):
    try:
        return wire.decode(lambda k: sock.recv(min(k, 1 << 20)), limit)
    except EOFError as exc:
        raise ChannelError("the measuring process closed its channel before it reported") from exc
    except ValueError as exc:
        raise ChannelError(f"a malformed report ({exc})") from exc


def lock_dir():
    """The machine's folder for timing locks: $ECE408_LOCK_DIR where set (give every runner the
    same), else the first of LOCK_DIRS that is a folder every user may write in (mode 1777) and
    is not a link, the same answer for every runner of the machine whatever its TMPDIR or
    --scratch; /tmp where none is."""
    chosen = os.environ.get(LOCK_DIR_ENV)
    if chosen:
        return chosen
    for folder in LOCK_DIRS:
        try:
            info = os.stat(folder)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) & 0o1777 == 0o1777:
            return folder
    return "/tmp"


class TimingLock:
    """The machine's timing lock for ``key`` (``cpu``, or ``gpu-<uuid>``): an exclusive flock on
    ``<lock_dir()>/ece408-timing-<key>.lock``, which every runner on the machine takes while a
    team's code runs: serve's and remote workers, grade --local and submit, as any user. The
    file is made readable by all (mode 644: a flock needs only a descriptor open for reading),
    never followed as a link, and opened without O_CREAT where it exists (a sticky folder
    refuses O_CREAT on another user's file). Released when its holder's descriptor closes, so a
    killed runner never leaves it held; a file left behind is harmless."""

    def __init__(self, key):
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
        self.path = os.path.join(lock_dir(), f"ece408-timing-{safe}.lock")
        self.fd = None

    def _open(self):
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        for _ in range(10):
            try:
                fd = os.open(self.path, flags)
            except FileNotFoundError:
                try:
                    fd = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    continue                     # made by another runner meanwhile: open it
                os.fchmod(fd, 0o644)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise OSError(f"{self.path} is not a regular file")
            return fd
        raise OSError(f"{self.path} keeps appearing and vanishing")

    def acquire(self):
        import fcntl                             # POSIX only: here, so that the client imports on Windows
        if self.fd is None:
            try:
                fd = self._open()
            except OSError as exc:
                raise ChannelError(f"cannot open the machine's timing lock {self.path}: {exc.strerror or exc}") \
                    from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
            self.fd = fd

    def release(self):
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)                         # closing the descriptor drops the flock


class Listener:
    """The runner's end: ``start(job)`` serves one connection in a thread; ``result()`` is the
    report, or None with ``error`` saying why there is none. ``lock``: the TimingLock lent to
    the measuring process on request (None: granted at once); ``waited()`` is the time spent
    waiting for it so far, a wait still going on included. ``on_progress(text)``: where the
    measuring process's progress messages go (None: dropped)."""

    def __init__(self, folder, lock=None, on_progress=None):
        self.lock = lock
        self.on_progress = on_progress
        self._waited = 0.0
        self._waiting_since = None
        self.path = os.path.join(str(folder), SOCKET)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # bound through a descriptor of its folder: a socket's path may hold 107 bytes, a scratch
        # folder's (--scratch) may be longer
        folder_fd = os.open(str(folder), os.O_PATH | os.O_DIRECTORY)
        try:
            self.sock.bind(f"/proc/self/fd/{folder_fd}/{SOCKET}")
        finally:
            os.close(folder_fd)
        os.chmod(self.path, 0o777)           # the sandbox's user connects; only its sandbox sees the folder
        self.sock.listen(1)
        self.report = None
        self.error = "the measuring process never connected"
        self.thread = None
        self._closed = threading.Event()

    def start(self, job):
        """Serve ``job`` to the measuring process about to start; a job with a ``time_limit`` is sent
        with ``time_left``: that limit less the seconds since this call (the command's limit counts
        from its start, just after), for the repeats to end inside it (``team/repeats.budget``)."""
        self._started = time.monotonic()
        self.thread = threading.Thread(target=self._serve, args=(job,), daemon=True)
        self.thread.start()
        return self

    def _serve(self, job):
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        finally:
            self.close_listener()
        with conn:
            try:
                self.error = "the measuring process ended before it reported"
                if isinstance(job.get("time_limit"), (int, float)):
                    job = {**job, "time_left": job["time_limit"] - (time.monotonic() - self._started)}
                send(conn, job)
                while True:
                    message = recv(conn, RESULT_LIMIT)
                    lease = message.get("lease") if isinstance(message, dict) else None
                    if lease == "acquire":
                        self._waiting_since = time.monotonic()
                        try:
                            if self.lock is not None:
                                self.lock.acquire()
                        finally:
                            self._waited += time.monotonic() - self._waiting_since
                            self._waiting_since = None
                        send(conn, {"lease": "granted"})
                    elif lease == "release":
                        if self.lock is not None:
                            self.lock.release()
                    elif isinstance(message, dict) and list(message) == ["progress"]:
                        if self.on_progress is not None:
                            self.on_progress(str(message["progress"])[:PROGRESS_LIMIT])
                    else:
                        self.report = message
                        self.error = None
                        return
            except (OSError, ChannelError, ValueError) as exc:
                self.error = f"its report could not be read ({exc})"
            finally:
                if self.lock is not None:
                    self.lock.release()

    def waited(self):
        """Seconds spent waiting for the timing lock, the wait going on now included: the
        measuring command's time limit is extended by it while it waits, not only after."""
        since = self._waiting_since
        return self._waited + (time.monotonic() - since if since is not None else 0.0)

    def close_listener(self):
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def result(self, wait=5.0):
        """The report once the measuring process has ended (waits ``wait`` s for the thread)."""
        self.close_listener()
        if self.thread is not None:
            self.thread.join(wait)
        return self.report


def connect(path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    return sock


class Lease:
    """The measuring process's end of the timing lease: ``lease()`` is a context manager (nested
    uses hold it once) that asks the runner for the machine's timing lock and gives it back;
    ``progress(text)`` tells the runner where the run is (one message, no answer)."""

    def __init__(self, sock):
        self.sock = sock
        self.depth = 0
        self.lock = threading.RLock()
        self.waited = 0.0                          # seconds spent waiting for the grant (the limit's extension)

    @contextlib.contextmanager
    def __call__(self):
        with self.lock:
            if self.depth == 0:
                asked = time.monotonic()
                send(self.sock, {"lease": "acquire"})
                answer = recv(self.sock, RESULT_LIMIT)
                self.waited += time.monotonic() - asked
                if not (isinstance(answer, dict) and answer.get("lease") == "granted"):
                    raise ChannelError("the runner did not grant the timing lease")
            self.depth += 1
            try:
                yield
            finally:
                self.depth -= 1
                if self.depth == 0:
                    send(self.sock, {"lease": "release"})

    def progress(self, text):
        with self.lock:                            # one message at a time on the socket
            send(self.sock, {"progress": str(text)[:PROGRESS_LIMIT]})
