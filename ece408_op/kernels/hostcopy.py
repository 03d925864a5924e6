"""A layer's host arrays in and out of the GPU at the host link's speed, straight from and into
the caller's memory (MXNet's, with its CPU build): ``forward_into``.

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

* ``ECE408_STREAMS=N`` (unset by default): the course's streams (m3's copy path in its later
  terms): x and y through page-locked staging buffers, the batch in N chunks of whole images, chunk
  i's copy in on one stream while chunk i - 1's kernels run and chunk i - 2's y leaves on another,
  then the host copies each chunk into the caller's memory as it lands (``_streamed``). N = 1 is the
  same path with nothing overlapped, the baseline the overlap is measured against. Team kernels
  (``entry``) keep the other modes.

``ECE408_HOST_COPY`` picks the mode (default ``ring``); ``ECE408_HUGEPAGES=0`` leaves the
output's pages at the system's default size; ``records`` keeps the timings of every
call (wall time, copies in and out, the kernel call and its Op Time, bytes), which
``--profile`` turns into the layer's breakdown; ``measure_link`` measures the host link with
page-locked copies, the yardstick: the target is a whole layer call within 2x the time its
x and y take over the link at that bandwidth.
"""
import ctypes
import errno
import mmap
import os
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..errors import GpuError
from .device import GpuDevice, cuda_error_line

MODE_ENV = "ECE408_HOST_COPY"
STREAMS_ENV = "ECE408_STREAMS"         # N: the streams path in N chunks of the batch (unset: MODE_ENV's copy)
MAX_STREAM_CHUNKS = 64
NON_BLOCKING = 1                       # CU_STREAM_NON_BLOCKING: no implicit ordering with the null stream
HUGEPAGES_ENV = "ECE408_HUGEPAGES"     # 0: do not ask for transparent huge pages on the output
MODES = ("ring", "registered", "direct")
PAGE = mmap.PAGESIZE
HUGE_PAGE = 2 << 20
SLOT_BYTES = 16 << 20          # one piece over the link (about 0.3 ms at 50 GB/s)
SLOTS = 4                      # ring depth: pieces in flight between the link and the host copies (64 MB pinned)
HOST_PIECE = 2 << 20           # one host copy task (8 per slot, so every pool thread has work)
REGISTER_BYTES = 64 << 20      # one cuMemHostRegister call
MADV_HUGEPAGE = 14
MADV_POPULATE_WRITE = 23

_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.madvise.restype = ctypes.c_int
_populate_supported = [True]
_pools = {}
_pool_lock = threading.Lock()


# ------------------------------------------------------------------ host memory, no CUDA

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
    if _populate_supported[0]:
        if _libc.madvise(start, end - start, MADV_POPULATE_WRITE) == 0:
            return
        if ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS):
            _populate_supported[0] = False        # kernel before 5.14: touch instead
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


# ------------------------------------------------------------------ timings

@dataclass
class Record:
    """One call of ``forward_into`` (seconds, host clock)."""
    op: str
    mode: str
    x_bytes: int
    y_bytes: int
    wall: float = 0.0            # the whole call
    copy_in: float = 0.0         # x (and k, bias) to the GPU
    kernel_call: float = 0.0     # the kernel entry point: Op Time plus its zeroing, syncs, first compile
    op_time: float = 0.0         # the course's Op Time
    copy_out: float = 0.0        # y back into the caller's memory
    notes: list = field(default_factory=list)
    streams: int = 0             # ECE408_STREAMS's chunks (0: not the streams path); then, on the GPU's clock:
    kernels: float = 0.0         # the chunks' kernels, added up (what Op Time is without copies in between)
    gpu_pipeline: float = 0.0    # from the first copy in starting to the last copy out ending


records = deque(maxlen=4096)
_records_lock = threading.Lock()


def _keep(record):
    with _records_lock:
        records.append(record)


def records_since(start):
    """The records added after ``len(records)`` was ``start`` (see ``record_count``)."""
    with _records_lock:
        return list(records)[start:] if start <= len(records) else list(records)


def record_count():
    with _records_lock:
        return len(records)


def stream_chunks():
    """None (``ECE408_STREAMS`` unset: the copy mode's path), else its number of chunks."""
    text = os.environ.get(STREAMS_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or not 1 <= int(text) <= MAX_STREAM_CHUNKS:
        raise GpuError(f"{STREAMS_ENV}={text!r}: give a number of chunks from 1 to {MAX_STREAM_CHUNKS} "
                       "(1: the streams path with nothing overlapped), or unset it")
    return int(text)


def host_copy_mode():
    mode = os.environ.get(MODE_ENV, "ring").strip().lower() or "ring"
    if mode not in MODES:
        raise GpuError(f"{MODE_ENV}={mode!r} is not one of {', '.join(MODES)}")
    return mode


# ------------------------------------------------------------------ CUDA

class _Driver:
    """The few driver calls PyCUDA has no address-based form of (ctypes releases the GIL)."""

    def __init__(self):
        lib = ctypes.CDLL("libcuda.so.1")
        self.register = getattr(lib, "cuMemHostRegister_v2", None) or lib.cuMemHostRegister
        self.register.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
        self.unregister = lib.cuMemHostUnregister
        self.unregister.argtypes = [ctypes.c_void_p]
        self._name = lib.cuGetErrorName
        self._name.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]

    def check(self, status, what):
        if status != 0:
            name = ctypes.c_char_p()
            self._name(status, ctypes.byref(name))
            raise GpuError(f"{what} failed: {(name.value or b'CUDA error %d' % status).decode()}")


_driver = []


def driver_calls():
    if not _driver:
        _driver.append(_Driver())
    return _driver[0]


class _Registered:
    """Pieces of host memory page-locked in place by pool tasks (each pushes the context)."""

    def __init__(self, dev):
        self.dev, self.calls = dev, driver_calls()
        self.done = []                      # addresses registered (to unregister)
        self._lock = threading.Lock()

    def _in_context(self, call, *args):
        self.dev.context.push()
        try:
            self.calls.check(call(*args), call.__name__)
        finally:
            self.dev.cuda.Context.pop()

    def submit(self, addr, nbytes, kind, fault_first=False):
        def task():
            if fault_first:
                populate(addr, nbytes)
            self._in_context(self.calls.register, addr, nbytes, 0)
            with self._lock:
                self.done.append(addr)
        return pool(kind).submit(task)

    def release(self):
        """Unregister every piece (in parallel); the first failure is raised after all ran."""
        with self._lock:
            addrs, self.done = self.done, []
        wait_all([pool().submit(self._in_context, self.calls.unregister, addr) for addr in addrs])


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


def _entry(fused):
    """The device-pointer entry point of the conv or of the fused layer."""
    from .. import kernels
    if not fused:
        return kernels.conv2d_forward_device
    entry = getattr(kernels, "fused_forward_device", None)
    if entry is None:
        raise GpuError("this build has no fused GPU kernel (kernels.fused_forward_device); "
                       "run the unfused graph (fuse=False) or the CPU path")
    return entry


def forward_into(out, x, k, bias=None, spec=None, version=None, fused=False, device=None, entry=None):
    """Run the layer (the conv, or conv + tanh + 2x2 max-pool where ``fused``) on host arrays,
    writing ``out`` (the caller's C-contiguous float32 memory, e.g. MXNet's output, which is
    overwritten); returns Op Time. The copies go as ``ECE408_HOST_COPY`` says (module doc).
    ``entry``: another device-pointer forward with ``conv2d_forward_device``'s signature (a
    team's, ``team/runtime.py``); the ``direct`` mode then copies as ``ring`` does."""
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
            record.op_time = _streamed(record, out, x, k, bias, spec, version, fused, device)
    elif mode == "direct":
        record.op_time = _direct(out, x, k, bias, spec, version, fused, device)
    elif x.shape[0] > 0:
        record.op_time = _piped(record, out, x, k, bias, spec, version, fused, device, entry)
    record.wall = time.perf_counter() - start
    _keep(record)
    return record.op_time


def _direct(out, x, k, bias, spec, version, fused, device):
    from .. import kernels
    name = "fused_forward_gpu" if fused else "conv2d_forward_gpu"
    entry = getattr(kernels, name, None)
    if entry is None:
        raise GpuError(f"this build has no {name}; unset {MODE_ENV} or run the unfused graph")
    return entry(x, k, bias=bias, spec=spec, out=out, version=version, device=device)[1]


def _piped(record, out, x, k, bias, spec, version, fused, device, entry=None):
    entry = entry or _entry(fused)
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
                                   device=dev.index)
            record.kernel_call = time.perf_counter() - t
            t = time.perf_counter()
            with dev.timed(f"[CUDA memcpy DtoH] y ({record.mode}: into the caller's memory)"):
                transfer.copy_out(out, yd)
            record.copy_out = time.perf_counter() - t
        except cuda.Error as exc:
            raise GpuError(f"host copy ({record.mode}) failed: {cuda_error_line(exc)}") from exc
        finally:
            transfer.finish()
    if not _populate_supported[0]:
        record.notes.append("no MADV_POPULATE_WRITE: pages touched one by one")
    if os.environ.get(HUGEPAGES_ENV, "1").strip() == "0":
        record.notes.append(f"{HUGEPAGES_ENV}=0")
    return record.op_time


def _layer_plan(dev, x, k, bias, spec, version, fused):
    """The plan the device-pointer entry points would run for this layer (inside ``dev.active()``)."""
    from .launch import _with_bias, fused_plan_for, plan_for
    from .shape import ConvShape
    from .versions import choose_version
    spec = _with_bias(spec, k, bias)
    shape = ConvShape.of(x.shape, k.shape, spec)
    if fused:
        return fused_plan_for(dev, shape, version)
    return plan_for(dev, shape, choose_version(version, shape, dev.name))


def _streamed(record, out, x, k, bias, spec, version, fused, device):
    """The streams path (module doc): chunks of whole images, so that chunk i's pointers are the whole
    batch's at image b0 and every kernel sees the addresses (and alignment) it sees in one launch.
    Kernels run on the null stream (one after another, sharing the plan's workspaces); the copies on
    two non-blocking streams, ordered with them by events: chunk i's kernels are launched once its copy
    in has landed (the host waits on that event while the GPU runs chunk i - 1), its copy out waits on
    the event after its kernels. Op Time, on the GPU's clock: from the start of the first chunk's
    kernels to the end of the last chunk's, the course's "from the last copy before the first kernel
    to the first copy after the last" where copies run between kernels (with N = 1, the kernels
    alone); ``record.kernels`` is the kernels' own time added up, ``record.gpu_pipeline`` the whole
    pipeline's."""
    dev, batch, chunks = GpuDevice.get(device), len(x), record.streams
    cuda = dev.cuda
    edges = sorted({round(i * batch / chunks) for i in range(chunks + 1)})
    parts = list(zip(edges[:-1], edges[1:]))
    x_image, y_image = x.nbytes // batch, out.nbytes // batch
    with dev.active():
        tasks = []
        try:
            plan = _layer_plan(dev, x, k, bias, spec, version, fused)
            xd, yd = int(dev.buffer("hostcopy-x", x.nbytes)), int(dev.buffer("hostcopy-y", out.nbytes))
            kd = dev.buffer("hostcopy-k", k.nbytes)
            cuda.memcpy_htod(kd, k)
            bd = 0
            if bias is not None:
                bd = dev.buffer("hostcopy-bias", bias.nbytes)
                cuda.memcpy_htod(bd, bias)
            xs = dev.pinned("streams-x", x.size).view(np.uint8)
            ys = dev.pinned("streams-y", out.size).view(np.uint8)
            t = time.perf_counter()
            staged = [copy_bytes(address(xs) + b0 * x_image, address(x) + b0 * x_image, (b1 - b0) * x_image)
                      for b0, b1 in parts]
            tasks += [f for chunk in staged for f in chunk]
            if not plan.warm:                   # first-launch costs out of the timing (as plan.forward does)
                plan.launch(yd, xd, int(kd), int(bd), parts[0][1] - parts[0][0])
                dev.synchronize()
                plan.warm = True
            s_in, s_out = dev.stream("streams-in", NON_BLOCKING), dev.stream("streams-out", NON_BLOCKING)
            n = len(parts)
            events = dev.events("streams", 4 * n + 1)
            first, landed, began, ended, left = events[0], events[1:n + 1], events[n + 1:2 * n + 1], \
                events[2 * n + 1:3 * n + 1], events[3 * n + 1:]
            first.record(s_in)
            for i in range(n + 1):
                if i < n:                       # chunk i in (staged by the pool) ...
                    b0, b1 = parts[i]
                    wait_all(staged[i])
                    cuda.memcpy_htod_async(xd + b0 * x_image, xs[b0 * x_image:b1 * x_image], s_in)
                    landed[i].record(s_in)
                if i > 0:                       # ... while chunk i - 1's kernels wait for theirs, then run
                    b0, b1 = parts[i - 1]
                    landed[i - 1].synchronize()
                    began[i - 1].record()
                    plan.launch(yd + b0 * y_image, xd + b0 * x_image, int(kd), int(bd), b1 - b0)
                    ended[i - 1].record()
                    s_out.wait_for_event(ended[i - 1])
                    cuda.memcpy_dtoh_async(ys[b0 * y_image:b1 * y_image], yd + b0 * y_image, s_out)
                    left[i - 1].record(s_out)
            record.kernel_call = time.perf_counter() - t     # (x's staging and copies in are inside it)
            t = time.perf_counter()
            for i, (b0, b1) in enumerate(parts):
                left[i].synchronize()
                tasks += copy_bytes(address(out) + b0 * y_image, address(ys) + b0 * y_image, (b1 - b0) * y_image,
                                    fault_first=True)
            wait_all(tasks)
            record.copy_out = time.perf_counter() - t
            record.kernels = sum(began[i].time_till(ended[i]) for i in range(n)) / 1e3
            record.gpu_pipeline = first.time_till(left[-1]) / 1e3
            record.notes.append(f"streams: {n} chunks, kernels {record.kernels * 1e3:.3f} ms, GPU pipeline "
                                f"{record.gpu_pipeline * 1e3:.2f} ms")
            return began[0].time_till(ended[-1]) / 1e3
        except cuda.Error as exc:
            raise GpuError(f"streams ({chunks}) failed: {cuda_error_line(exc)}") from exc
        finally:
            for future in tasks:
                if not future.cancel():
                    future.exception()


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


def fresh_area(nbytes):
    """A new private anonymous mapping (what malloc gives MXNet for a large output; a shared one
    is shmem, where the kernel's huge-page rules differ): released with ``.close()``."""
    return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0x20))


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
