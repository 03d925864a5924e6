"""What the GPU path's wall time cannot go below on this machine: the host link's speed (``measure_link``,
page-locked copies: a whole layer call should stay within 2x the time its x and y take over the link)
and how fast fresh host memory is mapped and copied into (``measure_fresh_memory``: MXNet's new output
pays it), and ``bench memory``'s table of the latter (``fault_in_table``). ``--profile`` prints both
beside a milestone run's breakdown.
"""
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..kernels.device import GpuDevice
from ..kernels.hostcopy.engine import HUGEPAGES_ENV
from ..kernels.hostcopy.host_memory import SLOT_BYTES, address, advise_huge, copy_bytes, fresh_area, pieces, pool, populate, wait_all


def measure_link(device=None, nbytes=256 << 20, repeats=5):
    """(host-to-device GB/s, device-to-host GB/s): median of ``repeats`` page-locked copies of
    ``nbytes``, timed with CUDA events, after one untimed copy each way."""
    dev = GpuDevice.get(device)
    cuda = dev.cuda
    with dev.active():
        host = dev.pinned("hostcopy-link", nbytes // 4)
        buf = dev.buffer("hostcopy-link", nbytes)
        rates = []
        for copy in (lambda: cuda.memcpy_htod(buf, host), lambda: cuda.memcpy_dtoh(host, buf)):
            copy()
            times = []
            for _ in range(repeats):
                start, end = cuda.Event(), cuda.Event()
                start.record()
                copy()
                end.record()
                end.synchronize()
                times.append(start.time_till(end) / 1e3)
            rates.append(host.nbytes / float(np.median(times)) / 1e9)
    return tuple(rates)


def _anon_huge_kb():
    """AnonHugePages of this process in kB (/proc/self/smaps_rollup: transparent huge pages it maps
    now; other processes cannot move it), or None where the kernel does not say."""
    try:
        with open("/proc/self/smaps_rollup") as handle:
            return next((int(line.split()[1]) for line in handle if line.startswith("AnonHugePages:")), None)
    except OSError:
        return None


def fault_in(nbytes, executor, huge=True):
    """(seconds, huge-page MB gained) to fault in a new anonymous mapping of ``nbytes`` for
    writing, in SLOT_BYTES pieces on ``executor`` (``populate``), transparent huge pages asked for
    first where ``huge``; the mapping is released after."""
    area = fresh_area(nbytes)
    try:
        start = address(np.frombuffer(area, np.uint8))
        if huge:
            advise_huge(start, nbytes)
        before = _anon_huge_kb()
        t = time.perf_counter()
        wait_all([executor.submit(populate, start + off, n) for off, n in pieces(0, nbytes, SLOT_BYTES)])
        seconds = time.perf_counter() - t
        after = _anon_huge_kb()
        return seconds, (after - before) / 1024 if before is not None and after is not None else None
    finally:
        area.close()


def measure_fresh_memory(nbytes=512 << 20, repeats=3):
    """(fault-in GB/s, host copy GB/s): how fast this machine maps fresh memory (a new anonymous
    mapping, as MXNet's output is; faulted in by every thread of the copy pool in SLOT_BYTES
    pieces, transparent huge pages asked for as ``forward_into`` does) and then copies into it
    once mapped (memmove on the pool); medians of ``repeats``. A layer call that writes y into
    MXNet's fresh memory can take no less than y's bytes at the first rate: the yardstick for
    what is left of its wall time after the link."""
    huge = os.environ.get(HUGEPAGES_ENV, "1").strip() != "0"
    faults = [fault_in(nbytes, pool(), huge)[0] for _ in range(repeats)]
    copies = []
    src, dst = fresh_area(nbytes), fresh_area(nbytes)
    try:
        s, d = address(np.frombuffer(src, np.uint8)), address(np.frombuffer(dst, np.uint8))
        wait_all([pool().submit(populate, a + off, n) for a in (s, d) for off, n in pieces(0, nbytes, SLOT_BYTES)])
        for _ in range(repeats):
            t = time.perf_counter()
            wait_all(copy_bytes(d, s, nbytes))
            copies.append(time.perf_counter() - t)
    finally:
        src.close()
        dst.close()
    return nbytes / float(np.median(faults)) / 1e9, nbytes / float(np.median(copies)) / 1e9


def fault_in_table(nbytes=1 << 30, threads=None, repeats=3):
    """Rows {threads, huge, GB_per_s, first_GB_per_s, huge_pages_MB} for ``bench memory``: fresh
    memory faulted in by 1, 4 and all-core threads, with and without transparent huge pages asked
    for; ``repeats`` mappings each, one after the other. ``first_GB_per_s`` is the first mapping
    (memory this process has not used yet), ``GB_per_s`` the median of the others (memory it has
    just released: what a second call of a layer gets); ``huge_pages_MB`` the largest gain seen."""
    cores = os.cpu_count() or 1
    rows = []
    for count in threads or sorted({1, min(4, cores), cores}):
        with ThreadPoolExecutor(max_workers=count) as executor:
            for huge in (False, True):
                runs = [fault_in(nbytes, executor, huge) for _ in range(max(1, repeats))]
                gains = [gained for _, gained in runs if gained is not None]
                rows.append({"threads": count, "huge": huge, "first_GB_per_s": nbytes / runs[0][0] / 1e9,
                             "GB_per_s": nbytes / float(np.median([s for s, _ in runs[1:] or runs])) / 1e9,
                             "huge_pages_MB": max(gains) if gains else None})
    return rows
