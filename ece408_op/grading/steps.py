"""One team command in a sandbox: its whole environment, its output streamed (escaped) into the
transcript, its limits (time, output, memory, CPU) and its end, with everything it started;
SIGTERM/SIGHUP while it runs as ``Stopped``."""
import os
import signal
import subprocess
import sys
import threading
import time
from codecs import getincrementaldecoder
from contextlib import contextmanager
from dataclasses import dataclass

from . import transcript as tx

class Stopped(BaseException):
    """SIGTERM/SIGHUP while a build runs (scancel, a Slurm time limit, a node shutting down)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signal_name = signal.Signals(signum).name


@dataclass
class CommandResult:
    command: str
    output: str = ""
    exit_code: int = None          # None: killed (time limit, output limit, stopped)
    status: str = "ok"             # ok, failed, timeout, output, memory, killed


@contextmanager
def stop_on_signals():
    """SIGTERM and SIGHUP raise Stopped in the main thread for the duration (elsewhere: nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Stopped(signum)
    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _kill_group(proc):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=3)
            return
        except subprocess.TimeoutExpired:
            continue


def execute(sandbox, step, transcript, timeout, label=None, extra_time=None):
    """Run ``step`` in ``sandbox``, its output streamed into ``transcript`` with every control
    character escaped (``transcript.OutputEscaper``: no escape sequence of a team's ever reaches
    a terminal or a record), stopped past the output limit, killed past ``timeout`` seconds
    (plus ``extra_time()``: the time it waited for the timing lease); whatever it started is gone
    when this returns. Returns a CommandResult (Stopped and KeyboardInterrupt propagate, after
    cleanup)."""
    result = CommandResult(label or " ".join(step.argv))
    launch = sandbox.prepare(step)
    limit = sandbox.limits.output
    seen = [0]
    over = threading.Event()
    try:
        proc = subprocess.Popen(launch.argv, env=launch.env, cwd=launch.cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        if launch.cleanup:
            launch.cleanup()
        transcript.line(f"{launch.argv[0]}: {exc.strerror or exc}")
        result.exit_code, result.status = 127, "failed"
        return result
    start = len(transcript.text())

    def pump():
        decoder = getincrementaldecoder("utf-8")("replace")
        escaper = tx.OutputEscaper()
        for chunk in iter(lambda: proc.stdout.read1(65536), b""):
            if over.is_set():
                continue
            seen[0] += len(chunk)
            if seen[0] > limit:
                over.set()
                _kill_group(proc)
                continue
            transcript.write(escaper.escape(decoder.decode(chunk)))
        transcript.write(escaper.escape(decoder.decode(b"", final=True), final=True))
    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                code = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if over.is_set():
                    continue
                if time.monotonic() > deadline + (extra_time() if extra_time else 0.0):
                    _kill_group(proc)
                    code = None
                    result.status = "timeout"
                    break
                group = launch.cgroup
                if group is not None and group.cpu_seconds() > sandbox.limits.cpu_seconds:
                    _kill_group(proc)
                    code = None
                    result.status = "cpu"
                    break
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        if result.status == "ok" and launch.cgroup is not None:
            if launch.cgroup.out_of_memory():
                result.status = "memory"
            elif launch.cgroup.cpu_seconds() >= 0.95 * sandbox.limits.cpu_seconds:
                result.status = "cpu"
        if launch.cleanup:
            launch.cleanup()                       # every process left in its cgroup, the container
        reader.join(timeout=5)
        try:
            proc.stdout.close()
        except OSError:
            pass
    if over.is_set():
        result.status, code = "output", None
    elif result.status == "ok" and code != 0:
        result.status = "failed"
    result.exit_code = code
    result.output = transcript.text()[start:]
    transcript.output_ended()
    line = _ending_line(result, sandbox.limits, timeout)
    if line:
        transcript.line(line)
    return result


def _ending_line(result, limits, timeout):
    if result.status == "timeout":
        return tx.timeout_line(timeout)
    if result.status == "output":
        return f"* The command wrote more than {limits.output >> 20} MiB of output and was stopped; the build stopped."
    if result.status == "cpu":
        return f"* The command used more than {limits.cpu_seconds} s of CPU time and was stopped; the build stopped."
    if result.status == "memory":
        return (f"* The command ran out of memory (the limit is {limits.memory >> 20} MiB) and was stopped; "
                "the build stopped.")
    if result.status == "failed" and result.exit_code is not None and result.exit_code < 0:
        name = signal.Signals(-result.exit_code).name if -result.exit_code in signal.valid_signals() else "a signal"
        why = {"SIGXCPU": f" (its CPU-time limit of {limits.cpu_seconds} s)",
               "SIGXFSZ": f" (a file past the size limit of {limits.file_size >> 20} MiB)"}.get(name, "")
        return f"* The command was killed by {name}{why}; the build stopped."
    if result.status == "failed":
        return tx.failed_line(result.exit_code)
    return None


# ---------------------------------------------------------------------------- options


def sandbox_import_path(sandbox):
    """The grader's import path as a command in ``sandbox`` sees it (bubblewrap: the package bound
    alone, never its checkout: ``sandbox.package_binding``)."""
    from ..team.harness import trusted_path
    if sandbox.engine == "bubblewrap":
        from .sandbox import package_binding
        return package_binding()[0]
    return trusted_path()


def step_environment(sandbox, gpu=False):
    """The whole environment of a team command: nothing of the grader's (no database, no
    password, no paths of the grader's), what Python, CUDA and the harness need."""
    env = {"HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "USER": "team", "PYTHONUNBUFFERED": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "NUMBA_CACHE_DIR": "/tmp/numba", "PYCUDA_CACHE_DIR": "/tmp/pycuda"}
    if sandbox.engine in ("bubblewrap", "host"):
        bins = [os.path.dirname(sys.executable)] + [p for p in ("/usr/local/cuda/bin",) if os.path.isdir(p)]
        env["PATH"] = ":".join(bins + ["/usr/local/bin", "/usr/bin", "/bin"])
        env["PYTHONPATH"] = ":".join(sandbox_import_path(sandbox))
        if sandbox.engine == "host":
            env["HOME"] = env["TMPDIR"] = tempfile_dir()
            env["NUMBA_CACHE_DIR"] = os.path.join(env["TMPDIR"], "numba")
            env["PYCUDA_CACHE_DIR"] = os.path.join(env["TMPDIR"], "pycuda")
    if gpu:
        for key in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
            if os.environ.get(key):
                env[key] = os.environ[key]
    return env


def tempfile_dir():
    import tempfile
    return tempfile.gettempdir()


def _announce(transcript, sandbox):
    if not sandbox.isolated:
        transcript.line(f"* Engine {sandbox.engine}: not isolated (the commands run on this host, as its user)")


# ---------------------------------------------------------------------------- development runs
