"""One CUDA device: its primary context, lock, memory, loaded modules, plans and profile.

Everything cached here is owned here and freed here (inside the context). Modules are keyed by
their ``build.ModuleSpec`` (source file and #defines), plans by (version, shape, module); compiled
modules are cached on disk (``build.cubin_path``), so a second process loads them without nvcc.
"""
import atexit
import os
import threading
import time
from contextlib import contextmanager

import numpy as np

from ..base.extras import install_hint
from ..errors import GpuError
from . import cudadrv
from .build import build_cubin
from .profile import Profile

DEVICE_ENV = "ECE408_GPU"             # CUDA device index (default 0)


def driver():
    """pycuda.driver, or a one-line GpuError saying how to get it."""
    try:
        import pycuda.driver as cuda
    except ImportError as exc:
        raise GpuError(f"PyCUDA is not installed: {install_hint('gpu')}; it needs an NVIDIA driver and the "
                       "CUDA toolkit") from exc
    return cuda


def cuda_error_line(exc):
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class GpuDevice:
    """Use it as ``with device.active(): ...``: the context is current and the device is held."""

    _instances = {}
    _lock = threading.Lock()

    @classmethod
    def get(cls, index=None):
        index = int(os.environ.get(DEVICE_ENV, "0")) if index is None else int(index)
        with cls._lock:
            if index not in cls._instances:
                cls._instances[index] = cls(index)
            return cls._instances[index]

    def __init__(self, index):
        cuda = self.cuda = driver()
        try:
            cuda.init()
            count = cuda.Device.count()
        except cuda.Error as exc:
            raise GpuError(f"no usable CUDA driver ({cuda_error_line(exc)}); run the CPU path (m2) "
                           "or use a machine with an NVIDIA GPU") from exc
        if count == 0:
            raise GpuError("no CUDA device found; run the CPU path (m2) or use a machine with an NVIDIA GPU")
        if not 0 <= index < count:
            raise GpuError(f"CUDA device {index} does not exist ({count} found); set {DEVICE_ENV}")
        self.index = index
        self.device = cuda.Device(index)
        self.name = self.device.name()
        self.arch = "sm_%d%d" % self.device.compute_capability()
        self.context = self.device.retain_primary_context()
        self.profile = None               # a Profile while profiling() is active
        self._use_lock = threading.RLock()
        self._modules = {}
        self._plans = {}
        self._buffers = {}
        self._captured = set()            # buffers a captured CUDA graph may use: never freed while it may run
        self._retired = []                # such buffers replaced by larger ones (freed in release())
        self._tls = threading.local()     # .capturing: inside no_new_buffers(True) on this thread
        self._pinned = {}
        self._streams = {}
        self._events = {}
        self.generation = 0               # bumped whenever a workspace is (re)allocated or freed
        with self.active():
            self.context_handle = cudadrv.current_context()    # the CUcontext, to check before a lean launch
        atexit.register(self.release)

    @contextmanager
    def active(self):
        """Hold the device and make its primary context current on this thread (push, then pop)."""
        with self._use_lock:
            self.context.push()
            try:
                yield self
            finally:
                self.cuda.Context.pop()

    def synchronize(self):
        self.cuda.Context.synchronize()

    # -- memory (inside active())
    @contextmanager
    def no_new_buffers(self, capturing=True):
        """Inside, on this thread, ``buffer`` allocates nothing (a CUDA graph is being captured: an allocation
        would break the capture) and the buffers it hands out are never freed afterwards (the graph keeps
        their addresses; one grown later is replaced and the old one kept until ``release``)."""
        if not capturing:
            yield
            return
        saved = getattr(self._tls, "capturing", False)
        self._tls.capturing = True
        try:
            yield
        finally:
            self._tls.capturing = saved

    def _drop(self, key, allocation):
        if key in self._captured:
            self._retired.append(allocation)
        else:
            allocation.free()                   # (the driver waits for work still using it)

    def buffer(self, name, nbytes):
        """A device allocation of at least ``nbytes``, reused across calls on the same stream (the
        thread's launch stream, ``cudadrv.current_stream``): work queued on one stream uses its buffers
        in that stream's order, so calls on two streams never share a workspace."""
        nbytes = max(int(nbytes), 4)
        key = (name, cudadrv.current_stream())
        held = self._buffers.get(key)
        capturing = getattr(self._tls, "capturing", False)
        if held is None or held[1] < nbytes:
            if capturing:
                raise GpuError(f"the layer needs a new {name} workspace ({nbytes / 2**20:.1f} MiB) while a CUDA graph "
                               "is being captured on its stream; run the model once on that stream before capturing "
                               "(torch.compile's mode='reduce-overhead' does)")
            with self.active():                 # (a lean call may come here without it)
                self.generation += 1
                if held is not None:
                    self._drop(key, held[0])
                    del self._buffers[key]
                try:
                    self._buffers[key] = (self.cuda.mem_alloc(nbytes), nbytes)
                except self.cuda.MemoryError as exc:
                    raise GpuError(f"out of GPU memory allocating {nbytes / 2**20:.0f} MiB for {name}; "
                                   "run fewer images") from exc
            held = self._buffers[key]
        if capturing:
            self._captured.add(key)
        return held[0]

    def free_buffer(self, name):
        """Free ``name``'s allocation on the current stream, if any (a large scratch buffer)."""
        key = (name, cudadrv.current_stream())
        held = self._buffers.pop(key, None)
        if held is not None:
            with self.active():
                self.generation += 1
                self._drop(key, held[0])

    def pinned(self, name, count):
        """A page-locked float32 host array of ``count`` elements, reused across calls."""
        held = self._pinned.get(name)
        if held is None or held.size < count:
            if held is not None:
                held.base.free()
                del self._pinned[name]
            self._pinned[name] = self.cuda.pagelocked_empty(max(int(count), 1), np.float32)
        return self._pinned[name][:count]

    def stream(self, name, flags=0):
        """A CUDA stream kept for reuse: created and destroyed with this context current (a
        stream collected on a thread without the context is leaked, with PyCUDA's warning).
        ``flags`` 1 (CU_STREAM_NON_BLOCKING): no implicit ordering with the legacy null stream."""
        if name not in self._streams:
            self._streams[name] = self.cuda.Stream(flags)
        return self._streams[name]

    def events(self, name, count):
        """``count`` CUDA events kept for reuse under ``name`` (as ``stream``)."""
        held = self._events.setdefault(name, [])
        while len(held) < count:
            held.append(self.cuda.Event())
        return held[:count]

    def memory_in_use(self):
        with self.active():
            free, total = self.cuda.mem_get_info()
        return total - free

    # -- code (inside active())
    def module(self, spec):
        """The module built from ``spec`` (a build.ModuleSpec), loaded into this context: once per process,
        the cubin cache across."""
        if spec not in self._modules:
            self._modules[spec] = cudadrv.Module(build_cubin(spec, self.arch))
        return self._modules[spec]

    def has_module(self, spec):
        """Whether the module built from ``spec`` is loaded in this process already."""
        return spec in self._modules

    def plan(self, key, make):
        """The plan cached under ``key``, made by ``make()`` on first use."""
        if key not in self._plans:
            self._plans[key] = make()
        return self._plans[key]

    def release(self):
        """Free everything this object holds (memory, plans, modules), inside its context."""
        with self.active():
            self.generation += 1
            for allocation, _ in self._buffers.values():
                allocation.free()
            for allocation in self._retired:
                allocation.free()
            self._retired.clear()
            self._captured.clear()
            for array in self._pinned.values():
                array.base.free()
            self._buffers.clear()
            self._pinned.clear()
            self._streams.clear()
            self._events.clear()
            self._plans.clear()
            for module in self._modules.values():
                module.unload()                 # with the context current
            self._modules.clear()

    # -- profiling
    @contextmanager
    def profiling(self):
        """Record the kernels and copies of the calls inside the block; yields the Profile."""
        saved, self.profile = self.profile, Profile()
        try:
            yield self.profile
        finally:
            self.profile = saved

    @contextmanager
    def timed(self, name):
        """Time the enclosed device work with CUDA events while profiling, else do nothing."""
        if self.profile is None:
            yield
            return
        start, end = self.cuda.Event(), self.cuda.Event()
        start.record()
        yield
        end.record()
        end.synchronize()
        self.profile.add(name, start.time_till(end) / 1e3)

    @contextmanager
    def timed_host(self, name):
        """Time host work with the host clock while profiling."""
        start = time.perf_counter()
        yield
        if self.profile is not None:
            self.profile.add(name, time.perf_counter() - start, host=True)
