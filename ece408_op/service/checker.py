"""Uploads checked in processes of their own, so that the server's event loop never waits for them.

Checking an upload inflates it (up to the service's cap), parses its tar archive and hashes each
file: CPU work, much of it in Python holding the interpreter's lock. In the server's process, two
checks at once took that lock from the event loop often enough that, under a storm of uploads, a
bystander's ``GET /api/jobs`` waited hundreds of milliseconds inside the server. Here each check
runs in one of ``processes`` worker processes (``spawn``: nothing of the server's threads or
sockets is inherited), started when the first upload is checked, niced by NICE so that the event
loop's process wins a busy machine's cores, and killed with the server (``PR_SET_PDEATHSIG``) where
it dies without stopping them. What crosses between the processes is small: the upload's path and
the check's answer (its file list and what its rai_build.yml asks), or its one-line refusal.

A check whose process dies (killed for memory) answers 503 with ``Retry-After``; the next check
starts a fresh pool."""
import asyncio
import ctypes
import functools
import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from . import upload as uploads
from .grading_door import ConfigError, GPU_MILESTONES, check_build_config, value_line
from .logs import log
from .refused import Refused

NICE = 5                          # the checkers' niceness above the server's
PR_SET_PDEATHSIG = 1


def _started(parent):
    """A checking process's start: dies with the server, and yields the CPU to it."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):             # not Linux: the pool's own shutdown stops it
        pass
    if os.getppid() != parent:                    # the server died before the line above
        os._exit(0)
    try:
        os.nice(NICE)
    except OSError:
        pass


def check_upload(path, kind, milestone, max_upload):
    """(whether the job needs a GPU, its files [{name, size, sha256}], for a development run that asks
    for a GPU (its rai_build.yml's line asking, the GPUs asked), else None) of the upload kept at
    ``path`` that passes the archive check (and, for a development run, whose rai_build.yml passes
    grading's reader); Refused or UploadError (400) otherwise. Runs in a checking process."""
    checked = uploads.check_file(path, kind, milestone, max_upload)
    if kind == "ranked":
        return milestone in GPU_MILESTONES, checked.files(), None
    text = uploads.config_text(checked)
    try:
        config = check_build_config(text)
    except ConfigError as exc:
        raise Refused(400, "; ".join(f"rai_build.yml: {p}" for p in exc.problems)) from None
    gpu = config.gpu_count > 0
    return gpu, checked.files(), (value_line(text, "resources.gpu.count"), config.gpu_count) if gpu else None


class Checker:
    """The server's checking processes (at most ``processes``): ``await checker.run(fn, *args)``."""

    def __init__(self, processes):
        self.processes = max(1, processes)
        self._pool = None

    def _pool_now(self):
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_started, initargs=(os.getpid(),))
        return self._pool

    async def run(self, fn, *args):
        pool = self._pool_now()
        try:
            try:                                  # submit starts a process where the pool lacks one
                future = asyncio.get_running_loop().run_in_executor(pool, functools.partial(fn, *args))
            except OSError as exc:                # none could start (descriptors, memory)
                log("upload.checker_unstarted", level="warning", reason=str(exc))
                raise Refused(503, "the upload could not be checked now (no checking process could start); "
                                   "try again in a few seconds", retry_after=5) from None
            return await future
        except BrokenProcessPool:
            if self._pool is pool:
                self._pool = None                 # the next check starts a fresh pool
                pool.shutdown(wait=False, cancel_futures=True)
            log("upload.checker_lost", level="warning")
            raise Refused(503, "the upload could not be checked (its checking process ended); try again in a "
                               "few seconds", retry_after=5) from None

    def close(self):
        """Stop the processes (the server's end); a check under way is let go."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
