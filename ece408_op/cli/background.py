"""``serve --detach`` and ``serve --stop``: the service in the background, as a script or a README
block starts and stops it. ``--detach`` starts the same ``serve`` command line again as a process of
its own session (its output in STATE_DIR/serve-PORT.log, its process id in STATE_DIR/serve-PORT.pid)
and returns once the service answers ``/ready``, or says in one line why it did not start (the
last line of its log) and stops what it started. ``--stop`` sends that process SIGTERM (the
service drains: its workers give their jobs back) and waits until it has exited, so that the port
is free again when it returns."""
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..base.files import atomic_write
from ..base.processes import pid_alive
from ..errors import Ece408Error

READY_WITHIN = 120.0          # seconds a detached service has to answer /ready (a database to migrate)
STOP_WITHIN = 90.0            # seconds a stopped service has to exit (it drains its workers first)
SECOND_SIGNAL_AFTER = 60.0    # then a second SIGTERM: the service stops at once


class BackgroundError(Ece408Error):
    """A detached service that did not start, or one that cannot be stopped: one line."""


def files(state_dir, port):
    """(pid file, log file) of the detached service on ``port``."""
    folder = Path(state_dir)
    return folder / f"serve-{port}.pid", folder / f"serve-{port}.log"


def local_url(host, port):
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def stop_command(port, state_dir, default_port, state_given):
    return "python -m ece408_op serve --stop" + (f" --port {port}" if port != default_port else "") + \
        (f" --state-dir {state_dir}" if state_given else "")


def detach(argv, host, port, state_dir, stop_hint, bind):
    """Start ``serve argv`` (without --detach) in the background; returns 0 once it answers, with one
    line saying where it is and how to stop it. ``bind(host, port)`` is the server's own bind,
    tried first: a port in use is said before anything starts."""
    pid_file, log_file = files(state_dir, port)
    running = read_pid(pid_file)
    if running is not None and pid_alive(running):
        raise BackgroundError(f"a service started with --detach already runs on port {port} (pid {running}); "
                              f"stop it first: {stop_hint}")
    try:
        bind(host, port).close()
    except OSError as exc:
        raise BackgroundError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another --port") from None
    log_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    child_argv = [sys.executable, *(["-S"] if sys.flags.no_site else []), "-m", "ece408_op", "serve",
                  *(a for a in argv if a != "--detach")]
    start = log_file.stat().st_size if log_file.exists() else 0
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(child_argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                **_own_session())
    atomic_write(pid_file, f"{proc.pid}\n".encode())
    url = local_url(host, port)
    deadline = time.monotonic() + READY_WITHIN
    while True:
        if proc.poll() is not None:
            _forget(pid_file)
            raise BackgroundError(f"serve did not start: {last_line(log_file, start)} (its log: {log_file})")
        if ready(url):
            print(f"Serving {url} (pid {proc.pid}; its log: {log_file}); stop it with: {stop_hint}")
            return 0
        if time.monotonic() > deadline:
            _end(proc)
            _forget(pid_file)
            raise BackgroundError(f"serve did not answer on {url} within {READY_WITHIN:g} s and was stopped; "
                                  f"its log: {log_file}")
        time.sleep(0.2)


def stop(port, state_dir):
    """Stop the service ``detach`` started on ``port``; returns 0 once its process has exited."""
    pid_file, _ = files(state_dir, port)
    pid = read_pid(pid_file)
    if pid is None:
        raise BackgroundError(f"no service started with --detach on port {port} (no {pid_file})")
    if not pid_alive(pid) or not ours(pid):
        _forget(pid_file)
        print(f"The service on port {port} (pid {pid}) had already stopped")
        return 0
    os.kill(pid, signal.SIGTERM)
    start, second = time.monotonic(), False
    while pid_alive(pid):
        waited = time.monotonic() - start
        if waited > SECOND_SIGNAL_AFTER and not second:
            os.kill(pid, signal.SIGTERM)
            second = True
        if waited > STOP_WITHIN:
            raise BackgroundError(f"the service (pid {pid}) is still running {STOP_WITHIN:g} s after SIGTERM; "
                                  f"end it with: kill -9 {pid}")
        time.sleep(0.2)
    _forget(pid_file)
    print(f"Stopped the service on port {port} (pid {pid})")
    return 0


def _own_session():
    """Popen's arguments for a process that outlives this one and the terminal's Ctrl-C."""
    if os.name == "nt":
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP | getattr(subprocess, "DETACHED_PROCESS", 0)}
    return {"start_new_session": True}


def ready(url):
    try:
        with urllib.request.urlopen(url + "/ready", timeout=2) as answer:
            return answer.status == 200
    except (OSError, urllib.error.URLError):
        return False


def read_pid(path):
    try:
        text = Path(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def ours(pid):
    """Whether ``pid`` is a ``serve`` of ours (not another process that took a stale file's number);
    True where the system cannot tell (no /proc)."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return not Path("/proc/self").exists()
    return b"ece408_op" in words and b"serve" in words


def last_line(log_file, start=0):
    """The last line the detached process wrote (from byte ``start`` of its log), for the one-line error."""
    try:
        with open(log_file, "rb") as log:
            log.seek(start)
            lines = [line.strip() for line in log.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    if not lines:
        return "it wrote nothing"
    return lines[-1][len("error: "):] if lines[-1].startswith("error: ") else lines[-1]


def _end(proc):
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _forget(pid_file):
    try:
        os.unlink(pid_file)
    except FileNotFoundError:
        pass
