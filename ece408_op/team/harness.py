"""The harness's side of the team process (``process.py``): start it, ask, time, bound.

The team process is a child of the harness, locked down by its own first act (seccomp: no fork,
exec or ptrace), and STOPPED (SIGSTOP) at every moment except while it answers a request:
nothing of the team's runs while the harness copies inputs in or outputs out, or while it
times anything else. Replies are bounded (1 MiB) and checked before use.

A CPU forward (m2) goes through shared memory (a memfd both map): the harness copies x and k
in and zeroes y while the team process is stopped, then starts the clock, continues the team process, sends
the request, stops the clock at the reply, stops the team process, and only then copies y out. The
clock is the harness's; the team's code never touches it.
"""
import contextlib
import json
import mmap
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from ..errors import Ece408Error
from .plan import parse_plan
from .process import recv, send

PACKAGE_HOME = Path(__file__).resolve().parents[2]     # the folder holding the ece408_op package
REPLY_LIMIT = 1 << 20
HELLO_TIMEOUT = 300.0           # import of the team's file (and NumPy, Numba)
PLAN_TIMEOUT = 60.0
DEFAULT_TIME_LIMIT = 600.0      # seconds one forward of the team's may take (--time-limit)
TIME_LIMIT_ENV = "ECE408_TIME_LIMIT"
ALIGN = 4096


class TeamError(Ece408Error):
    """The team's code failed, or misbehaved (one line, naming the team's file)."""


class Interrupted(Ece408Error):
    """Ctrl-C (SIGINT) or SIGTERM while the team's code ran: the team process was killed."""
    exit_code = 130


def time_limit_from_env(default=DEFAULT_TIME_LIMIT):
    """$ECE408_TIME_LIMIT seconds (a finite number above 0), else ``default``."""
    import math
    text = os.environ.get(TIME_LIMIT_ENV, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value > 0):
        raise Ece408Error(f"${TIME_LIMIT_ENV}={text!r}: give the seconds a team's forward may take, a number above 0")
    return value


class _Interrupts:
    """Signals seen while the main thread is inside MXNet: the operator's thread waits on the team
    process and on ``fd`` (Python's wakeup fd, written by the C-level handler from any thread)."""
    fd = None
    handled = 0


@contextlib.contextmanager
def watch_interrupts():
    """For the duration (main thread only): Ctrl-C and SIGTERM while a team process is answering
    kill it and end the request with Interrupted (one line, exit 130); elsewhere they act as usual
    (KeyboardInterrupt; SIGTERM's own handler)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    previous_int = signal.getsignal(signal.SIGINT)

    def on_int(signum, frame):
        if _Interrupts.handled:
            _Interrupts.handled -= 1               # the operator's thread already stopped the team
            return
        raise KeyboardInterrupt
    previous_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    signal.signal(signal.SIGINT, on_int)
    _Interrupts.fd = r
    try:
        yield
    finally:
        _Interrupts.fd = None
        signal.signal(signal.SIGINT, previous_int)
        signal.set_wakeup_fd(previous_fd)
        os.close(r)
        os.close(w)


def trusted_path():
    """This process's import path (the grader's packages), without the current folder, and with
    the folder holding this package first: what an isolated child gets, whatever its cwd."""
    here = str(PACKAGE_HOME)
    cwd = os.getcwd()
    paths = [here] + [p for p in sys.path if p and os.path.abspath(p) != cwd and p != here]
    return paths


BOOT = ("import sys, json, runpy; sys.path[:0] = json.loads(sys.argv.pop(1)); "
        "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)")


def isolated_python(module, *args, python=None, paths=None):
    """argv that runs ``python -m module args`` isolated (-I: no PYTHON* variables, no user site,
    not the current folder) with the grader's import path: a team's files, sitecustomize.py,
    .pth or package of the same name never come first."""
    flags = ["-I"] + (["-S"] if sys.flags.no_site else [])      # an interpreter started without site stays so
    return [python or sys.executable, *flags, "-c", BOOT, json.dumps(paths or trusted_path()), module, *map(str, args)]


def numba_cache_dir():
    """Where a student's own runs keep Numba's compiled team code: beside the CPU path's cache,
    under the same key (SLP setting, Numba, LLVM, CPU: what Numba's own index does not key on);
    None where Numba is missing (the team process then compiles into a folder of the run)."""
    from ..conv import numba_env
    key = numba_env.cache_key()
    return None if key is None else numba_env.cache_base() / "team" / key


def worker_environment(home, numba_cache=None, threads=None):
    """The team process's whole environment: nothing of the harness's (no database URL, no
    password, no grader path), only what Python and Numba need."""
    threads = threads or len(os.sched_getaffinity(0))
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(home),
            "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
            "NUMBA_SLP_VECTORIZE": "1", "NUMBA_CACHE_DIR": str(numba_cache or Path(home) / "numba"),
            "NUMBA_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}


def _aligned(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


class TeamProcess:
    """One team process for one part (``cpu``: new-forward.py, ``gpu``: launch.py)."""

    def __init__(self, team_dir, part, numba_cache=None, stdout=None, time_limit=DEFAULT_TIME_LIMIT):
        self.team_dir = str(Path(team_dir).resolve())
        self.time_limit = float(time_limit)
        self.part = part
        self._tmp = tempfile.TemporaryDirectory(prefix="ece408-team-")
        self.home = self._tmp.name
        self.numba_cache = numba_cache
        self.stdout = stdout
        self.proc = None
        self.shm_fd = None
        self.shm = None
        self.shm_size = 0
        self.stopped = False
        self.held = None
        self.plans = {}

    # ---------------------------------------------------------------- life cycle
    def start(self):
        control_r, self.control = os.pipe()
        self.reply, reply_w = os.pipe()
        fds = [control_r, reply_w]
        args = ["--part", self.part, "--dir", self.team_dir, "--control", control_r, "--reply", reply_w]
        if self.part == "cpu":
            self.shm_fd = os.memfd_create("ece408-team", os.MFD_CLOEXEC)
            fds.append(self.shm_fd)
            args += ["--shm", self.shm_fd]
        try:
            self.proc = subprocess.Popen(isolated_python("ece408_op.team.process", *args), pass_fds=fds,
                                         stdin=subprocess.DEVNULL, stdout=self.stdout, stderr=self.stdout,
                                         env=worker_environment(self.home, self.numba_cache), cwd=self.home)
        finally:
            os.close(control_r)
            os.close(reply_w)
        self.request({"op": "hello"}, HELLO_TIMEOUT)
        return self

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()                      # a stopped process dies of SIGKILL too
            self.proc.wait()
        for fd in (getattr(self, "control", None), getattr(self, "reply", None)):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.control = self.reply = None
        if self.shm is not None:
            self.shm.close()
            self.shm = None
        if self.shm_fd is not None:
            os.close(self.shm_fd)
            self.shm_fd = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    # ---------------------------------------------------------------- stop and go
    def _resume(self):
        if self.stopped:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.stopped = False

    def _pause(self):
        """SIGSTOP, and wait until the whole process (every thread) has stopped; then note what it
        has run so far (``_cpu_state``) and check that it holds no GPU."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        while True:
            pid, status = os.waitpid(self.proc.pid, os.WUNTRACED)
            if os.WIFSTOPPED(status):
                self.stopped = True
                self.held = self._cpu_state()
                self._check_no_gpu()
                return
            if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                raise TeamError(f"the team process ended ({self._ended()})")

    def _cpu_state(self):
        """What the team process has run: (utime + stime in clock ticks, its exited threads
        included; {tid: nanoseconds on a CPU} of its live threads), or None where /proc is unreadable."""
        base = f"/proc/{self.proc.pid}"
        try:
            with open(f"{base}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            threads = {}
            for tid in os.listdir(f"{base}/task"):
                with open(f"{base}/task/{tid}/schedstat") as f:
                    threads[tid] = int(f.read().split()[0])
            return int(fields[11]) + int(fields[12]), threads
        except (OSError, ValueError, IndexError):
            return None

    def _check_held(self):
        """Refuse a team process that ran while the harness held it stopped (woken by some signal
        source the lock-down missed, to work before or after its timed window): since it was
        stopped, no live thread may have gained more than a millisecond on a CPU, no thread may
        have come or gone, and no clock tick may have been charged to it."""
        before, now = self.held, self._cpu_state()
        if before is None or now is None:
            return
        (ticks, threads), (ticks_now, threads_now) = before, now
        gained = sum(threads_now[t] - threads[t] for t in threads if t in threads_now)
        if ticks_now != ticks or set(threads_now) != set(threads) or gained > 1_000_000:
            self.proc.kill()
            self.proc.wait()
            raise TeamError(f"the team process ran while the harness held it stopped ({gained / 1e6:.1f} ms on a "
                            f"CPU, {len(threads)} -> {len(threads_now)} threads): a team's code runs only while it "
                            "answers a request; the team process was killed")

    def _check_no_gpu(self):
        """A team's Python plans and computes on the CPU: a team process holding a GPU device (it
        could leave work running there, beyond its timed window) is refused."""
        base = f"/proc/{self.proc.pid}/fd"
        try:
            targets = [os.readlink(f"{base}/{fd}") for fd in os.listdir(base)]
        except OSError:
            return
        held = sorted({t for t in targets if t.startswith(("/dev/nvidia", "/dev/dri"))})
        if held:
            self.proc.kill()
            self.proc.wait()
            raise TeamError(f"the team's {self._file()} opened the GPU ({', '.join(held)}): a team's Python "
                            "plans or computes on the CPU; its kernels reach the GPU through new-forward.cu")

    def _ended(self):
        code = self.proc.returncode
        if code is None:
            return "no reason given"
        return f"exit code {code}" if code >= 0 else f"killed by {signal.Signals(-code).name}"

    def _wait_reply(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            watch = [self.reply] + ([_Interrupts.fd] if _Interrupts.fd is not None else [])
            ready, _, _ = select.select(watch, [], [], max(0.0, min(1.0, deadline - time.monotonic())))
            if self.reply in ready:
                return
            if ready:
                self._interrupted()
            if self.proc.poll() is not None:
                raise TeamError(f"the team process ended ({self._ended()}) before it answered")
            if time.monotonic() >= deadline:
                self.proc.kill()
                self.proc.wait()
                raise TeamError(f"the team's {self._file()} did not answer within {timeout:g} s (the time limit: "
                                f"--time-limit or ${TIME_LIMIT_ENV}); the team process was killed")

    def _interrupted(self):
        """A signal reached the wakeup fd: Ctrl-C or SIGTERM stop the team process; others are ignored."""
        try:
            seen = os.read(_Interrupts.fd, 64)
        except (BlockingIOError, OSError):
            return
        stops = [n for n in seen if n in (signal.SIGINT, signal.SIGTERM)]
        if not stops:
            return
        self.proc.kill()
        self.proc.wait()
        if signal.SIGINT in stops:
            _Interrupts.handled += 1
        name = "Ctrl-C (SIGINT)" if signal.SIGINT in stops else "SIGTERM"
        raise Interrupted(f"stopped by {name} while the team's {self._file()} ran; the team process was killed")

    def _file(self):
        from .process import CPU_FILE, GPU_FILE
        return CPU_FILE if self.part == "cpu" else GPU_FILE

    def request(self, message, timeout):
        """Send ``message``, wait for the reply, stop the team process; returns (reply, seconds from just
        before the team process was continued to the reply's arrival)."""
        if self.stopped:
            self._check_held()                    # before the clock: it did nothing while held
        start = time.perf_counter()
        try:
            self._resume()
            send(self.control, message)
            self._wait_reply(timeout)
            reply = recv(self.reply, REPLY_LIMIT)
            seconds = time.perf_counter() - start
        except (EOFError, BrokenPipeError) as exc:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            raise TeamError(f"the team process ended ({self._ended()}) before it answered") from exc
        except (ValueError, UnicodeDecodeError) as exc:
            self.proc.kill()
            raise TeamError(f"the team process sent a malformed reply ({exc})") from exc
        finally:
            if self.proc.poll() is None and not self.stopped:
                self._pause()
        if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
            raise TeamError("the team process sent a malformed reply")
        if not reply["ok"]:
            raise TeamError(str(reply.get("error", "failed"))[:400])
        return reply, seconds

    # ---------------------------------------------------------------- requests
    def plan(self, layer):
        """The checked LaunchPlan of ``launch(B, M, C, H, W, K)`` (cached per layer)."""
        key = tuple(int(layer[k]) for k in ("B", "M", "C", "H", "W", "K"))
        if key not in self.plans:
            reply, _ = self.request({"op": "plan", "layer": dict(zip("BMCHWK", key))}, PLAN_TIMEOUT)
            self.plans[key] = parse_plan(reply.get("plan"))
        return self.plans[key]

    def _shared(self, x_shape, k_shape, y_shape):
        sizes = [int(np.prod(s)) * 4 for s in (x_shape, k_shape, y_shape)]
        offsets = [0, _aligned(sizes[0]), _aligned(sizes[0]) + _aligned(sizes[1])]
        total = offsets[2] + _aligned(sizes[2])
        if total > self.shm_size:
            if self.shm is not None:
                self.shm.close()
            os.ftruncate(self.shm_fd, total)
            self.shm = mmap.mmap(self.shm_fd, total)
            self.shm_size = total
        views = [np.ndarray(s, np.float32, buffer=self.shm, offset=o) for s, o in
                 zip((x_shape, k_shape, y_shape), offsets)]
        layout = {"size": total, **{n: [o, list(s)] for n, o, s in zip("xky", offsets, (x_shape, k_shape, y_shape))}}
        return views, layout

    def forward(self, out, x, k, fill_x=None):
        """The team's CPU forward of x (B, C, H, W) with k (M, C, K, K) into ``out`` (B, M, H-K+1,
        W-K+1); returns the seconds it took (the harness's clock around the request). ``fill_x``,
        where given, writes the input straight into shared memory (fresh inputs) instead of ``x``."""
        shape_x = tuple(x.shape) if x is not None else fill_x[0]
        (xs, ks, ys), layout = self._shared(shape_x, tuple(k.shape), tuple(out.shape))
        if x is not None:
            np.copyto(xs, x)
        else:
            fill_x[1](xs)
        np.copyto(ks, k)
        ys.fill(0.0)                              # the course zeroed y before the clock
        _, seconds = self.request({"op": "forward", **layout}, self.time_limit)
        np.copyto(out, ys)
        return seconds
