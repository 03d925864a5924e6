"""The copy engine: a layer's host arrays in and out of the GPU at the host link's speed, straight
from and into the caller's memory (MXNet's, with its CPU build): ``forward_into``.

Why (the arithmetic behind it). The course layer at 10,000 images reads x (31 MB) and writes
y (1,152 MB); its kernel takes about 0.5 ms, a copy of y over a PCIe 5 x16 link about 23 ms.
MXNet's output memory is ordinary pageable memory, freshly allocated for the run, so every
4 KB page of it faults on its first touch (about 280,000 faults for y). The launcher's own
host path (``conv2d_forward_gpu``) copies y into a page-locked buffer as large as y (itself a
fresh allocation, pinned on first use), then, on the host, into MXNet's memory, taking the
faults on the way: three passes over 1.15 GB and two sets of faults. Here:

* the page faults of the output are taken in parallel, by the thread pool, from the moment
  the call starts (hidden behind x's copy and the kernel), in one system call per piece
  (``madvise(MADV_POPULATE_WRITE)``, Linux 5.14+; else one write per page), with
  ``MADV_HUGEPAGE`` asked first, so that where transparent huge pages are enabled a fault
  maps 2 MB instead of 4 KB;
* mode ``ring`` (the default): y leaves the GPU in pieces through a ring of small page-locked
  buffers (SLOTS x SLOT_BYTES, reused for the life of the process); while the link fills
  one, the pool copies the previous ones into MXNet's memory. x goes in the same way. One
  copy over the link at full speed, one host copy overlapped with it, no large pinned
  allocation;
* mode ``registered``: the page-aligned inside of MXNet's arrays is page-locked in place
  (``cuMemHostRegister``, in pieces, on the pool, as soon as each piece is faulted in) and
  the GPU copies straight into it (the few bytes of a partial first or last page go
  through an ordinary copy); unregistered before returning. No host copy at all, but the
  driver pins and maps every page on every call.
* mode ``direct``: the launcher's own host path, for comparison.

``ECE408_HOST_COPY`` picks the mode (default ``ring``); ``ECE408_HUGEPAGES=0`` leaves the output's
pages at the system's default size; ``ECE408_STREAMS=N`` takes the streams path instead (streams.py);
every call leaves a ``Record`` (records.py), which ``--profile`` turns into the layer's breakdown.
The link's own speed, the yardstick (a whole layer call within 2x the time its x and y take over the
link), is measured by ``ece408_op.bench.memory.measure_link``.
"""
import os
import threading
import time
from collections import deque

import numpy as np

from ...errors import GpuError
from .. import cudadrv
from ..device import GpuDevice, cuda_error_line
from ..launch import conv2d_forward_device, conv2d_forward_gpu, fused_forward_device, fused_forward_gpu
from . import host_memory
from .host_memory import SLOT_BYTES, address, advise_huge, byte_view, copy_bytes, inner_pages, pieces, pool, populate, wait_all
from .records import Record, keep
from .streams import STREAMS_ENV, stream_chunks, streamed

MODE_ENV = "ECE408_HOST_COPY"
HUGEPAGES_ENV = "ECE408_HUGEPAGES"     # 0: do not ask for transparent huge pages on the output
MODES = ("ring", "registered", "direct")
SLOTS = 4                      # ring depth: pieces in flight between the link and the host copies (64 MB pinned)
REGISTER_BYTES = 64 << 20      # one cuMemHostRegister call


def host_copy_mode():
    mode = os.environ.get(MODE_ENV, "ring").strip().lower() or "ring"
    if mode not in MODES:
        raise GpuError(f"{MODE_ENV}={mode!r} is not one of {', '.join(MODES)}")
    return mode


class _Registered:
    """Pieces of host memory page-locked in place by pool tasks (each pushes the context)."""

    def __init__(self, dev):
        self.dev = dev
        self.done = []                      # addresses registered (to unregister)
        self._lock = threading.Lock()

    def _in_context(self, call, *args):
        self.dev.context.push()
        try:
            call(*args)
        finally:
            self.dev.cuda.Context.pop()

    def submit(self, addr, nbytes, kind, fault_first=False):
        def task():
            if fault_first:
                populate(addr, nbytes)
            self._in_context(cudadrv.host_register, addr, nbytes)
            with self._lock:
                self.done.append(addr)
        return pool(kind).submit(task)

    def release(self):
        """Unregister every piece (in parallel); the first failure is raised after all ran."""
        with self._lock:
            addrs, self.done = self.done, []
        wait_all([pool().submit(self._in_context, cudadrv.host_unregister, addr) for addr in addrs])


class _Transfer:
    """One call's copies between host arrays and device buffers (inside ``dev.active()``).
    Every pool task it starts is in ``self.tasks``; ``finish`` ends them all before the call
    returns, so nothing of ours touches the caller's memory afterwards."""

    def __init__(self, dev, mode):
        self.dev, self.cuda, self.mode = dev, dev.cuda, mode
        self.stream = dev.stream("hostcopy")
        self.registered = _Registered(dev) if mode == "registered" else None
        self.ahead = {}                     # y piece address -> future of its head-start work
        self.tasks = []

    def _track(self, futures):
        self.tasks.extend(futures)
        return futures

    # -- faulting y ahead of its copy
    def head_start(self, y_addr, nbytes):
        """Queue the faulting of y's pages on the fault pool (registered mode: faulting, then
        registering, each piece) so that it runs behind x's copy and the kernel."""
        if os.environ.get(HUGEPAGES_ENV, "1").strip() != "0":
            advise_huge(y_addr, nbytes)
        if self.registered is not None:
            start, end = inner_pages(y_addr, nbytes)
            for a, n in pieces(start, end, REGISTER_BYTES):
                self.ahead[a] = self.registered.submit(a, n, "fault", fault_first=True)
        else:
            for off, n in pieces(0, nbytes, SLOT_BYTES):
                self.ahead[y_addr + off] = pool("fault").submit(populate, y_addr + off, n)
        self._track(list(self.ahead.values()))

    # -- the ring
    def _slots(self):
        slots = [self.dev.pinned(f"hostcopy-ring-{i}", SLOT_BYTES // 4).view(np.uint8) for i in range(SLOTS)]
        return slots, self.dev.events("hostcopy-ring", SLOTS)

    def ring_in(self, dst, x_addr, nbytes):
        """x -> device: the pool copies piece i into a slot while the link carries piece i - 1."""
        slots, events = self._slots()
        used = [False] * SLOTS
        for i, (off, n) in enumerate(pieces(0, nbytes, SLOT_BYTES)):
            s = i % SLOTS
            if used[s]:
                events[s].synchronize()     # the slot's previous piece has left
            wait_all(self._track(copy_bytes(address(slots[s]), x_addr + off, n)))
            self.cuda.memcpy_htod_async(dst + off, slots[s][:n], self.stream)
            events[s].record(self.stream)
            used[s] = True
        self.stream.synchronize()

    def ring_out(self, y_addr, src, nbytes):
        """device -> y: the link fills slot i while the pool empties the slots before it into y.
        Head-start faulting not yet begun is cancelled (the copies fault their own pages in
        first); a piece whose faulting began is copied once it has ended."""
        not_started = {a for a, future in self.ahead.items() if future.cancel()}
        slots, events = self._slots()
        busy = [[] for _ in range(SLOTS)]
        queued = deque()

        def drain_oldest():
            s, off, n = queued.popleft()
            events[s].synchronize()
            if y_addr + off not in not_started:
                self.ahead[y_addr + off].result()
            busy[s] = self._track(copy_bytes(y_addr + off, address(slots[s]), n,
                                             fault_first=y_addr + off in not_started))

        for i, (off, n) in enumerate(pieces(0, nbytes, SLOT_BYTES)):
            s = i % SLOTS
            if len(queued) == SLOTS - 1:
                drain_oldest()
            wait_all(busy[s])               # the slot's previous piece is in y
            self.cuda.memcpy_dtoh_async(slots[s][:n], src + off, self.stream)
            events[s].record(self.stream)
            queued.append((s, off, n))
        while queued:
            drain_oldest()
        for futures in busy:
            wait_all(futures)

    # -- registered in place
    def registered_in(self, dst, x_addr, nbytes):
        start, end = inner_pages(x_addr, nbytes)
        parts = [(a, n, self._track([self.registered.submit(a, n, "copy")])[0])
                 for a, n in pieces(start, end, REGISTER_BYTES)]
        self._edges(x_addr, nbytes, start, end,
                    lambda a, n: self.cuda.memcpy_htod(dst + (a - x_addr), byte_view(a, n)))
        for a, n, future in parts:
            future.result()
            self.cuda.memcpy_htod_async(dst + (a - x_addr), byte_view(a, n), self.stream)
        self.stream.synchronize()

    def registered_out(self, y_addr, src, nbytes):
        start, end = inner_pages(y_addr, nbytes)
        self._edges(y_addr, nbytes, start, end,
                    lambda a, n: self.cuda.memcpy_dtoh(byte_view(a, n), src + (a - y_addr)))
        for a, n in pieces(start, end, REGISTER_BYTES):
            self.ahead[a].result()
            self.cuda.memcpy_dtoh_async(byte_view(a, n), src + (a - y_addr), self.stream)
        self.stream.synchronize()

    @staticmethod
    def _edges(addr, nbytes, start, end, copy):
        """The bytes before the first whole page and after the last one (ordinary copies)."""
        if end <= start:
            copy(addr, nbytes)
            return
        if start > addr:
            copy(addr, start - addr)
        if addr + nbytes > end:
            copy(end, addr + nbytes - end)

    def copy_in(self, dst, array):
        (self.registered_in if self.registered else self.ring_in)(int(dst), address(array), array.nbytes)

    def copy_out(self, array, src):
        (self.registered_out if self.registered else self.ring_out)(address(array), int(src), array.nbytes)

    def finish(self):
        """End every task we started (cancel those not begun, wait for the others), then
        unregister what was registered; the first failure is raised after that."""
        try:
            for future in self.tasks:
                if not future.cancel():
                    future.exception()
        finally:
            self.tasks.clear()
            if self.registered is not None:
                self.registered.release()


def forward_into(out, x, k, bias=None, spec=None, version=None, fused=False, device=None, entry=None, precision=None):
    """Run the layer (the conv, or conv + tanh + 2x2 max-pool where ``fused``) on host arrays,
    writing ``out`` (the caller's C-contiguous float32 memory, e.g. MXNet's output, which is
    overwritten); returns Op Time. The copies go as ``ECE408_HOST_COPY`` says (module doc).
    ``entry``: another device-pointer forward with ``conv2d_forward_device``'s signature (a
    team's, ``team/runtime.py``); the ``direct`` mode then copies as ``ring`` does. ``precision``: as
    ``conv2d_forward_gpu``'s (None: the default)."""
    chosen = {} if precision is None else {"precision": precision}
    start = time.perf_counter()
    mode = host_copy_mode()
    if entry is not None and mode == "direct":
        mode = "ring"
    x = np.ascontiguousarray(x, dtype=np.float32)
    k = np.ascontiguousarray(k, dtype=np.float32)
    bias = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
    chunks = stream_chunks()
    record = Record("fused" if fused else "conv", mode, x.nbytes, out.nbytes)
    if not (out.dtype == np.float32 and out.flags.c_contiguous):
        raise GpuError("forward_into writes C-contiguous float32 memory only")
    if chunks is not None and entry is not None:
        record.notes.append(f"{STREAMS_ENV} ignored: a team's forward copies as {mode} does")
    if chunks is not None and entry is None:
        record.mode, record.streams = f"streams ({chunks})", chunks
        if x.shape[0] > 0:
            record.op_time = streamed(record, out, x, k, bias, spec, version, fused, device, precision)
    elif mode == "direct":
        record.op_time = _direct(out, x, k, bias, spec, version, fused, device, chosen)
    elif x.shape[0] > 0:
        record.op_time = _piped(record, out, x, k, bias, spec, version, fused, device, entry, chosen)
    record.wall = time.perf_counter() - start
    keep(record)
    return record.op_time


def _direct(out, x, k, bias, spec, version, fused, device, chosen=None):
    entry = fused_forward_gpu if fused else conv2d_forward_gpu
    return entry(x, k, bias=bias, spec=spec, out=out, version=version, device=device, **(chosen or {}))[1]


def _piped(record, out, x, k, bias, spec, version, fused, device, entry=None, chosen=None):
    if entry is not None:
        chosen = {}                               # (a team's forward: its own kernels)
    entry = entry or (fused_forward_device if fused else conv2d_forward_device)
    dev = GpuDevice.get(device)
    cuda = dev.cuda
    with dev.active():
        transfer = _Transfer(dev, record.mode)
        try:
            transfer.head_start(address(out), out.nbytes)
            xd, yd = dev.buffer("hostcopy-x", x.nbytes), dev.buffer("hostcopy-y", out.nbytes)
            kd = dev.buffer("hostcopy-k", k.nbytes)
            bd = dev.buffer("hostcopy-bias", bias.nbytes) if bias is not None else None
            t = time.perf_counter()
            with dev.timed(f"[CUDA memcpy HtoD] x, k ({record.mode})"):
                cuda.memcpy_htod(kd, k)
                if bd is not None:
                    cuda.memcpy_htod(bd, bias)
                transfer.copy_in(xd, x)
            record.copy_in = time.perf_counter() - t
            t = time.perf_counter()
            record.op_time = entry(int(yd), int(xd), int(kd), x.shape, k.shape,
                                   bias_ptr=None if bd is None else int(bd), spec=spec, version=version,
                                   device=dev.index, **(chosen or {}))
            record.kernel_call = time.perf_counter() - t
            t = time.perf_counter()
            with dev.timed(f"[CUDA memcpy DtoH] y ({record.mode}: into the caller's memory)"):
                transfer.copy_out(out, yd)
            record.copy_out = time.perf_counter() - t
        except cuda.Error as exc:
            raise GpuError(f"host copy ({record.mode}) failed: {cuda_error_line(exc)}") from exc
        finally:
            transfer.finish()
    if not host_memory.populate_supported[0]:
        record.notes.append("no MADV_POPULATE_WRITE: pages touched one by one")
    if os.environ.get(HUGEPAGES_ENV, "1").strip() == "0":
        record.notes.append(f"{HUGEPAGES_ENV}=0")
    return record.op_time
