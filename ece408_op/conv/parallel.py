"""One process-wide thread pool, BLAS kept single-threaded inside it, and slab-parallel copies
(NumPy releases the GIL in BLAS and in copies, so the pool's threads run in parallel).

``$ECE408_CPU_THREADS`` sets the pool's size (default: the CPUs this process may run on).
"""
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

from ..errors import ShapeError

SLAB_BYTES = 64 << 20        # work unit of parallel_copy / parallel_zero
THREADS_ENV = "ECE408_CPU_THREADS"
_pool = None
_pool_lock = threading.Lock()


def pool_size():
    """Threads of the pool: $ECE408_CPU_THREADS, else the CPUs this process may use."""
    text = os.environ.get(THREADS_ENV, "").strip()
    if text.isdigit() and int(text) > 0:
        return int(text)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:                       # not Linux
        return max(1, os.cpu_count() or 1)


def thread_pool():
    """The shared pool, started on first use with BLAS warmed up in each thread."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                workers = pool_size()
                pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ece408-cpu")
                # Start the threads and BLAS now, so that the first timed call does not pay for it.
                with single_threaded_blas():
                    for _ in pool.map(lambda _: np.ones((8, 8), np.float32) @ np.ones((8, 8), np.float32),
                                      range(workers)):
                        pass
                pool.workers = workers
                _pool = pool
    return _pool


def warm_up():
    """Pay the one-time costs (thread pool, BLAS threads) outside any timed region (cheap after)."""
    if _pool is None or _blas["controllers"] is None:
        thread_pool()
        _blas_controllers()


# ---------------------------------------------------------------- BLAS threads inside the pool

_blas = {"controllers": None, "users": 0, "saved": None}
_blas_lock = threading.Lock()


def _blas_controllers():
    """threadpoolctl's controllers of the BLAS libraries NumPy may call, found once (numpy
    imported, so its BLAS is loaded): all BLAS libraries in the process except MXNet's own
    (``mxnet/libopenblas``, which only MXNet calls, and which is OpenMP-threaded); empty where
    threadpoolctl is not installed."""
    if _blas["controllers"] is None:
        try:
            from threadpoolctl import ThreadpoolController
            _blas["controllers"] = [c for c in ThreadpoolController().lib_controllers
                                    if c.user_api == "blas" and f"{os.sep}mxnet{os.sep}" not in c.filepath]
        except Exception:          # noqa: BLE001  not installed, or an unknown BLAS: leave BLAS alone
            _blas["controllers"] = []
    return _blas["controllers"]


@contextmanager
def single_threaded_blas():
    """BLAS runs one thread per call inside the block (the pool supplies the parallelism: a
    multi-threaded BLAS called from every pool thread would start threads of its own in each and
    oversubscribe the cores). Re-entrant and thread-safe: the first caller in sets 1 thread, the
    last one out restores the previous setting."""
    controllers = _blas_controllers()
    if not controllers:
        yield
        return
    with _blas_lock:
        if _blas["users"] == 0:
            _blas["saved"] = [c.get_num_threads() for c in controllers]
            for c in controllers:
                c.set_num_threads(1)
        _blas["users"] += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas["users"] -= 1
            if _blas["users"] == 0:
                for c, n in zip(controllers, _blas["saved"]):
                    c.set_num_threads(n)


def blas_threads():
    """Current thread count of each BLAS library threadpoolctl sees (for tests and reports)."""
    return [c.get_num_threads() for c in _blas_controllers()]


def run_parallel(work, items):
    """work(item) for every item: on the pool with single-threaded BLAS, or inline for one item."""
    items = list(items)
    if len(items) > 1 and pool_size() > 1:
        with single_threaded_blas():
            try:
                results = thread_pool().map(work, items)
            except RuntimeError:       # interpreter shutting down (MXNet runs pending work at exit)
                results = None
            if results is not None:
                for _ in results:
                    pass
                return
    for item in items:
        work(item)


# ---------------------------------------------------------------- slab-parallel copies

def over_slabs(array, work, slab_bytes=SLAB_BYTES):
    """Call work(slice) for slabs of about ``slab_bytes`` along the first axis, on the thread pool.

    A single thread writing freshly allocated memory (say, MXNet's output) spends
    most of its time in page faults; several threads take them in parallel.
    Returns the number of slabs.
    """
    rows = max(1, slab_bytes // max(1, array[:1].nbytes)) if array.ndim else 1
    if array.ndim == 0 or len(array) <= rows:
        work(slice(None))
        return 1
    starts = range(0, len(array), rows)
    for _ in thread_pool().map(lambda start: work(slice(start, start + rows)), starts):
        pass
    return len(starts)


def parallel_copy(dst, src, add=False, slab_bytes=SLAB_BYTES):
    """dst[...] = src (or += src), in parallel slabs."""
    if dst.shape != src.shape:
        raise ShapeError(f"cannot copy {src.shape} into {dst.shape}")

    def work(part):
        np.add(dst[part], src[part], out=dst[part]) if add else np.copyto(dst[part], src[part])
    over_slabs(dst, work, slab_bytes)
    return dst


MADV_POPULATE_WRITE = 23      # Linux >= 5.14
PAGE = 4096
_libc = {}


def _madvise():
    if "madvise" not in _libc:
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            _libc["madvise"] = libc.madvise
        except (OSError, AttributeError):            # not Linux: nothing to do
            _libc["madvise"] = None
    return _libc["madvise"]


def populate(array, slab_bytes=SLAB_BYTES):
    """Fault in the pages of freshly allocated memory (say, MXNet's output) without writing it:
    the kernel maps zeroed pages (MADV_POPULATE_WRITE), in parallel slabs, one system call each;
    cheap where the pages are already there (an executor's reused output). Returns False where
    the system cannot (then the first writes take the page faults). The course zeroed y before
    starting the clock; this gives the same pages without a second pass over y."""
    madvise = _madvise()
    if madvise is None or array.size == 0 or not array.flags.c_contiguous:
        return False
    start = array.ctypes.data
    first, last = (start + PAGE - 1) // PAGE * PAGE, (start + array.nbytes) // PAGE * PAGE
    if last <= first:
        return True
    # At least one piece per thread: an output below one slab (a network layer's) is faulted in by
    # every thread too (VGG's first layer at B=4, 51 MB: 26 ms on one thread of this machine).
    pages = (last - first) // PAGE
    parts = max(min(pool_size(), pages), -(-(last - first) // max(PAGE, slab_bytes)))
    bounds = [first + pages * i // parts * PAGE for i in range(parts)] + [last]
    ok = [True]

    def work(i):
        if bounds[i + 1] > bounds[i] and madvise(bounds[i], bounds[i + 1] - bounds[i], MADV_POPULATE_WRITE) != 0:
            ok[0] = False
    if parts == 1:
        work(0)
    else:
        for _ in thread_pool().map(work, range(parts)):
            pass
    return ok[0]


def parallel_zero(dst, slab_bytes=SLAB_BYTES):
    """dst[...] = 0 in parallel slabs."""
    over_slabs(dst, lambda part: dst[part].fill(0), slab_bytes)
    return dst
