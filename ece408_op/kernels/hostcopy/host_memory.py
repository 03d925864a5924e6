"""Host memory for the copy path, no CUDA: the thread pools, page arithmetic, faulting pages in ahead
(``MADV_POPULATE_WRITE``, transparent huge pages asked for) and parallel host copies.
"""
import ctypes
import errno
import mmap
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

PAGE = mmap.PAGESIZE
HUGE_PAGE = 2 << 20
SLOT_BYTES = 16 << 20          # one piece over the link (about 0.3 ms at 50 GB/s)
HOST_PIECE = 2 << 20           # one host copy task (8 per slot, so every pool thread has work)
MADV_HUGEPAGE = 14
MADV_POPULATE_WRITE = 23

_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.madvise.restype = ctypes.c_int
populate_supported = [True]
_pools = {}
_pool_lock = threading.Lock()


def pool(kind="copy"):
    """The thread pools (page faults, memmove and ctypes calls release the GIL): ``copy`` (one
    thread per core, at most 32) for the pipeline's own work, ``fault`` (half as many) for the
    head start on the output's pages, so that the two never queue behind each other."""
    with _pool_lock:
        if kind not in _pools:
            cores = max(2, min(32, os.cpu_count() or 2))
            _pools[kind] = ThreadPoolExecutor(max_workers=cores if kind == "copy" else max(1, cores // 2),
                                              thread_name_prefix=f"ece408-{kind}")
        return _pools[kind]


def address(array):
    """Address of a NumPy array's first byte."""
    return array.__array_interface__["data"][0]


def byte_view(addr, nbytes):
    """A writable uint8 NumPy array over ``nbytes`` of memory at ``addr`` (no copy)."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(addr))


def inner_pages(addr, nbytes, align=PAGE):
    """(start, end) of the whole ``align``-sized pages inside [addr, addr + nbytes); start == end
    where there is none."""
    start = -(-addr // align) * align
    end = max(start, (addr + nbytes) // align * align)
    return start, end


def pieces(start, end, size):
    """(address, nbytes) of consecutive pieces of [start, end), each ``size`` bytes but the last."""
    return [(a, min(size, end - a)) for a in range(start, end, size)]


def advise_huge(addr, nbytes):
    """Ask for transparent huge pages on the 2 MB-aligned inside of a range; True if accepted
    (a no-op where THP is disabled; refused where the kernel has none)."""
    start, end = inner_pages(addr, nbytes, HUGE_PAGE)
    return end > start and _libc.madvise(start, end - start, MADV_HUGEPAGE) == 0


def populate(addr, nbytes):
    """Fault in the whole pages of a range for writing, keeping their contents: one
    ``MADV_POPULATE_WRITE`` call, or (older kernels) reading and writing back one byte per page."""
    start, end = inner_pages(addr, nbytes)
    if end <= start:
        return
    if populate_supported[0]:
        if _libc.madvise(start, end - start, MADV_POPULATE_WRITE) == 0:
            return
        if ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS):
            populate_supported[0] = False        # kernel before 5.14: touch instead
    one_per_page = byte_view(start, end - start)[::PAGE]
    np.bitwise_or(one_per_page, 0, out=one_per_page)


def copy_bytes(dst, src, nbytes, fault_first=False):
    """memmove on the copy pool, in HOST_PIECE pieces (each faulting its destination in first
    where ``fault_first``); returns their futures."""
    def task(off, n):
        if fault_first:
            populate(dst + off, n)
        ctypes.memmove(dst + off, src + off, n)
    return [pool().submit(task, off, min(HOST_PIECE, nbytes - off)) for off in range(0, nbytes, HOST_PIECE)]


def wait_all(futures):
    for future in futures:
        future.result()


def fresh_area(nbytes):
    """A new private anonymous mapping (what malloc gives MXNet for a large output; a shared one
    is shmem, where the kernel's huge-page rules differ): released with ``.close()``."""
    return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0x20))
