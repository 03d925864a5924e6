"""GPU forward convolution: the CUDA kernel ladder and its PyCUDA launchers. No MXNet here.

    from ece408_op.kernels import conv2d_forward_gpu
    y, op_seconds = conv2d_forward_gpu(x, k, version=7)      # NumPy in, NumPy out

Versions live side by side in ``conv_forward.cu`` (its header says how each
differs from the previous one). ``VERSIONS`` lists them; ``parse_version``
takes a number, ``v3`` or a name; ``default_version`` picks the fastest one that
supports a shape. Each shape class (C, H, W, M, K) is compiled once per process
with its sizes as ``#define``s (the same values size the grids below) and kept
in PyCUDA's on-disk cache across processes.

CUDA is used through the device's primary context, pushed and popped around
every use, so that the calls may come from any thread (MXNet calls an
operator's forward on its own worker thread); device and page-locked memory is
cached per device, reused while large enough, and freed inside that context.
"""
import atexit
import math
import os
import shutil
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..cpu import parallel_copy
from ..errors import GpuError, ShapeError

SOURCE = Path(__file__).with_name("conv_forward.cu")
KERNEL_ENV = "ECE408_KERNEL"
DEVICE_ENV = "ECE408_GPU"             # CUDA device index (default 0)

TILE = 16                 # v2-v4 output tile edge
MB = 4                    # v4 filters per thread
GEMM_TILE = 16            # v5, v6
V1_THREADS = 256
CONST_WEIGHTS = 16384     # floats of __constant__ memory (64 KB)
V7_MAX_REGS = 128         # v7 keeps C*K*(VEC+K-1) inputs in registers (K*(VEC+K-1) at least)
# v7's tuning, from a sweep on the H100 (docs/kernel-notes.md): 4 outputs per thread, the filter
# loop fully unrolled where that stays under V7_MAX_UNROLLED_FMAS FMAs (else unrolled by 5),
# streaming stores, 256 threads per block.
V7_TUNING = {"VEC": 4, "UNROLL_M": None, "STREAM": 1, "THREADS": 256}
V7_MAX_UNROLLED_FMAS = 20000
IM2COL_BYTES = 256 << 20  # v5 workspace: im2col of as many images as fit


@dataclass(frozen=True)
class Version:
    number: int
    name: str
    summary: str


VERSIONS = {v.number: v for v in (
    Version(1, "naive", "one thread per output, all operands from global memory"),
    Version(2, "shared", "TILE x TILE output tile per block from a shared-memory input tile"),
    Version(3, "constant", "v2 with the weights in constant memory"),
    Version(4, "register", "v3 with compile-time sizes and MB filters per thread"),
    Version(5, "im2col", "im2col matrix in global memory + tiled shared-memory GEMM"),
    Version(6, "implicit", "v5's GEMM gathering x directly: no im2col matrix"),
    Version(7, "strip", "register input strips, VEC outputs x all filters per thread, weights as FMA constants"),
)}
PREFERENCE = (7, 4, 6, 5, 3, 2, 1)        # fastest first, from the H100 benchmark (README)


def parse_version(text):
    """'auto' / None -> None; '3', 'v3', 'constant' -> 3. Raises GpuError for anything else."""
    if text is None or str(text).strip().lower() in ("", "auto"):
        return None
    key = str(text).strip().lower()
    for version in VERSIONS.values():
        if key in (str(version.number), f"v{version.number}", version.name):
            return version.number
    names = ", ".join(f"{v.number}/{v.name}" for v in VERSIONS.values())
    raise GpuError(f"unknown kernel {text!r}; choose auto or one of {names}")


# ---------------------------------------------------------------- shapes

@dataclass(frozen=True)
class ConvShape:
    """A shape class: everything but the batch size, which stays a run-time argument."""
    C: int
    H: int
    W: int
    M: int
    K: int

    @classmethod
    def of(cls, x_shape, k_shape):
        if len(x_shape) != 4 or len(k_shape) != 4:
            raise ShapeError(f"need 4-D data and weight, got {tuple(x_shape)} and {tuple(k_shape)}")
        _, c, h, w = x_shape
        m, kc, kh, kw = k_shape
        if kc != c or kh != kw or not 1 <= kh <= min(h, w):
            raise ShapeError(f"weight {tuple(k_shape)} does not fit data {tuple(x_shape)} "
                             "(square kernel, same channels, no larger than the image)")
        return cls(int(c), int(h), int(w), int(m), int(kh))

    @property
    def HO(self):
        return self.H - self.K + 1

    @property
    def WO(self):
        return self.W - self.K + 1

    @property
    def CKK(self):
        return self.C * self.K * self.K

    @property
    def vec(self):
        """v7's outputs per thread: the tuned width where a channel's strip fits in registers, else 1."""
        wide = V7_TUNING["VEC"]
        return wide if self.WO >= wide and self.K * (self.K + wide - 1) <= V7_MAX_REGS else 1

    @property
    def v7_all_channels(self):
        """Whether v7 can hold every channel's strip in registers at once."""
        return self.C * self.K * (self.vec + self.K - 1) <= V7_MAX_REGS

    def v7_unroll(self):
        if V7_TUNING["UNROLL_M"] is not None:
            return min(V7_TUNING["UNROLL_M"], self.M)
        body = (self.CKK if self.v7_all_channels else self.K * self.K) * self.vec   # FMAs per filter
        return self.M if self.M * body <= V7_MAX_UNROLLED_FMAS else min(5, self.M)

    def defines(self):
        return {"CONV_C": self.C, "CONV_H": self.H, "CONV_W": self.W, "CONV_M": self.M,
                "CONV_K": self.K, "TILE": TILE, "MB": MB, "GEMM_TILE": GEMM_TILE, "VEC": self.vec,
                "V7_THREADS": V7_TUNING["THREADS"], "V7_UNROLL_M": self.v7_unroll(),
                "V7_STREAM": V7_TUNING["STREAM"], "CONST_WEIGHTS": CONST_WEIGHTS,
                "V7_ENABLED": int(unsupported_reason(7, self) is None),
                "V7_ALL_CHANNELS": int(self.v7_all_channels)}


def unsupported_reason(version, shape):
    """None if ``version`` handles ``shape``, else a short reason."""
    if version in (3, 7) and shape.M * shape.CKK > CONST_WEIGHTS:
        return f"weights ({shape.M * shape.CKK} floats) exceed constant memory ({CONST_WEIGHTS})"
    if version == 4 and math.ceil(shape.M / MB) * MB * shape.CKK > CONST_WEIGHTS:
        return f"weights padded to {MB} filters exceed constant memory ({CONST_WEIGHTS} floats)"
    if version == 7 and shape.K * (shape.vec + shape.K - 1) > V7_MAX_REGS:
        return f"a K*(VEC+K-1) = {shape.K * (shape.vec + shape.K - 1)} register strip is too large"
    return None


def default_version(shape):
    """The fastest version that supports ``shape`` (v1, v2, v5 and v6 support every shape)."""
    return next(n for n in PREFERENCE if unsupported_reason(n, shape) is None)


def choose_version(requested, shape):
    """Resolve 'auto'/None (or $ECE408_KERNEL) and check support; returns a version number."""
    if requested is None or str(requested).strip().lower() in ("", "auto"):
        requested = os.environ.get(KERNEL_ENV)
    version = parse_version(requested)
    if version is None:
        return default_version(shape)
    reason = unsupported_reason(version, shape)
    if reason:
        raise ShapeError(f"kernel v{version} ({VERSIONS[version].name}) cannot run this layer: {reason}; "
                         "use kernel=auto")
    return version


# ---------------------------------------------------------------- CUDA access

def _driver():
    try:
        import pycuda.driver as cuda
    except ImportError as exc:
        raise GpuError("PyCUDA is not installed; run: pip install 'ece408_op[gpu]' "
                       "(needs an NVIDIA driver and the CUDA toolkit)") from exc
    return cuda


def cuda_error_line(exc):
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class GpuDevice:
    """One CUDA device's primary context, compiled modules and reusable memory."""

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
        cuda = self.cuda = _driver()
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
        self._use_lock = threading.RLock()
        self._modules = {}
        self._buffers = {}
        self._pinned = {}
        atexit.register(self.release)

    @contextmanager
    def active(self):
        """Make the primary context current on this thread for the block (push, then pop)."""
        with self._use_lock:
            self.context.push()
            try:
                yield self
            finally:
                self.cuda.Context.pop()

    def synchronize(self):
        self.cuda.Context.synchronize()

    # -- memory (call inside active())
    def buffer(self, name, nbytes):
        """A device allocation of at least ``nbytes``, reused across calls."""
        nbytes = max(int(nbytes), 4)
        held = self._buffers.get(name)
        if held is None or held[1] < nbytes:
            if held is not None:
                held[0].free()
            try:
                self._buffers[name] = (self.cuda.mem_alloc(nbytes), nbytes)
            except self.cuda.MemoryError as exc:
                raise GpuError(f"out of GPU memory allocating {nbytes / 2**20:.0f} MiB for {name}; "
                               "run fewer images") from exc
        return self._buffers[name][0]

    def pinned(self, name, count):
        """A page-locked float32 host array of ``count`` elements, reused across calls."""
        held = self._pinned.get(name)
        if held is None or held.size < count:
            if held is not None:
                held.base.free()
            self._pinned[name] = self.cuda.pagelocked_empty(max(int(count), 1), np.float32)
        return self._pinned[name][:count]

    def release(self):
        """Free everything this object holds (memory, modules), inside its context."""
        with self.active():
            for allocation, _ in self._buffers.values():
                allocation.free()
            for array in self._pinned.values():
                array.base.free()
            self._buffers.clear()
            self._pinned.clear()
            for key in [key for key in _plans if key[0] == self.index]:
                del _plans[key]
            self._modules.clear()               # module unloads run with the context current

    def memory_in_use(self):
        with self.active():
            free, total = self.cuda.mem_get_info()
        return total - free

    # -- code
    def module(self, shape):
        """The compiled module for a shape class (compile once per process; disk cache across)."""
        if shape not in self._modules:
            self._modules[shape] = compile_module(shape, self.arch)
        return self._modules[shape]


def require_nvcc():
    if shutil.which("nvcc") is None:
        raise GpuError("nvcc not found on PATH; install the CUDA toolkit or add its bin folder "
                       "(e.g. /usr/local/cuda/bin) to PATH")


def compile_module(shape, arch):
    require_nvcc()
    from pycuda.compiler import SourceModule
    import pycuda.driver as cuda
    options = [f"-D{key}={value}" for key, value in sorted(shape.defines().items())]
    try:
        return SourceModule(SOURCE.read_text(), options=options, no_extern_c=True, arch=arch)
    except cuda.CompileError as exc:
        raise GpuError(f"kernel compile failed for {shape}: {compile_error_line(str(exc))}") from exc


def compile_error_line(log):
    """The first line of an nvcc log that names an error (else its first line)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["nvcc failed"])[0]


# ---------------------------------------------------------------- profiling

class Profile:
    """CUDA-event timings of the kernels and copies of a run, printed like nvprof's summary."""

    def __init__(self):
        self.samples = {}

    def add(self, name, seconds):
        self.samples.setdefault(name, []).append(seconds)

    def table(self):
        total = sum(sum(v) for v in self.samples.values()) or 1.0
        rows = [f"{'Time(%)':>8}  {'Time':>10}  {'Calls':>5}  {'Avg':>10}  {'Min':>10}  {'Max':>10}  Name"]
        for name, values in sorted(self.samples.items(), key=lambda kv: -sum(kv[1])):
            rows.append(f"{100 * sum(values) / total:7.2f}%  {_fmt(sum(values))}  {len(values):5d}  "
                        f"{_fmt(sum(values) / len(values))}  {_fmt(min(values))}  {_fmt(max(values))}  {name}")
        return "\n".join(rows)


def _fmt(seconds):
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale or unit == "us":
            return f"{seconds / scale:8.3f}{unit:>2}"


profile = None      # set to a Profile() to record the next runs (the scripts' --profile)


@contextmanager
def _timed(device, name):
    """Time the enclosed device work with CUDA events when profiling, else do nothing."""
    if profile is None:
        yield
        return
    start, end = device.cuda.Event(), device.cuda.Event()
    start.record()
    yield
    end.record()
    end.synchronize()
    profile.add(name, start.time_till(end) / 1e3)


# ---------------------------------------------------------------- launching

class ConvPlan:
    """Grid sizes and launch sequence of one version for one shape class on one device."""

    def __init__(self, device, shape, version):
        self.device, self.shape, self.version = device, shape, version
        module = device.module(shape)
        self.kernel_names = {5: ("im2col_v5", "gemm_v5")}.get(version, (f"conv_forward_v{version}",))
        self.kernels = [module.get_function(name) for name in self.kernel_names]
        self.weights_symbol = module.get_global("c_weights")[0] if version in (3, 4, 7) else None
        self.v7_threads = shape.defines()["V7_THREADS"]        # as compiled into the module
        self.warm = False

    def launch(self, y, x, k, batch):
        """Queue the layer's kernels (device pointers as ints); no synchronisation."""
        s, v = self.shape, self.version
        ptr = np.uintp
        if self.weights_symbol is not None:        # part of the forward, as in the course
            self.device.cuda.memcpy_dtod(self.weights_symbol, k, s.M * s.CKK * 4)
        z = min(batch, 65535)
        if v == 1:
            total = batch * s.M * s.HO * s.WO
            self.kernels[0](ptr(y), ptr(x), ptr(k), *map(np.int32, (batch, s.C, s.H, s.W, s.M, s.K)),
                            block=(V1_THREADS, 1, 1), grid=(math.ceil(total / V1_THREADS), 1))
        elif v in (2, 3):
            tiles = math.ceil(s.HO / TILE) * math.ceil(s.WO / TILE)
            self.kernels[0](ptr(y), ptr(x), ptr(k), *map(np.int32, (batch, s.C, s.H, s.W, s.M, s.K)),
                            block=(TILE, TILE, 1), grid=(tiles, s.M, z),
                            shared=(TILE + s.K - 1) ** 2 * 4)
        elif v == 4:
            tiles = math.ceil(s.HO / TILE) * math.ceil(s.WO / TILE)
            self.kernels[0](ptr(y), ptr(x), np.int32(batch), block=(TILE, TILE, 1),
                            grid=(tiles, math.ceil(s.M / MB), z))
        elif v == 5:
            per_image = s.CKK * s.HO * s.WO * 4
            chunk = max(1, min(batch, IM2COL_BYTES // per_image))
            cols = self.device.buffer("im2col", chunk * per_image)
            im2col, gemm = self.kernels
            gemm_grid = (math.ceil(s.HO * s.WO / GEMM_TILE), math.ceil(s.M / GEMM_TILE))
            for b0 in range(0, batch, chunk):
                n = min(chunk, batch - b0)
                im2col(ptr(int(cols)), ptr(x), np.int64(b0), np.int32(n), block=(256, 1, 1),
                       grid=(min(math.ceil(n * per_image / 4 / 256), 1 << 20), 1))
                gemm(ptr(y), ptr(int(cols)), ptr(k), np.int64(b0), np.int32(n),
                     block=(GEMM_TILE, GEMM_TILE, 1), grid=gemm_grid + (min(n, 65535),))
        elif v == 6:
            self.kernels[0](ptr(y), ptr(x), ptr(k), np.int64(0), np.int32(batch),
                            block=(GEMM_TILE, GEMM_TILE, 1),
                            grid=(math.ceil(s.HO * s.WO / GEMM_TILE), math.ceil(s.M / GEMM_TILE), z))
        elif v == 7:
            threads = batch * s.HO * math.ceil(s.WO / s.vec)
            self.kernels[0](ptr(y), ptr(x), np.int32(batch), block=(self.v7_threads, 1, 1),
                            grid=(math.ceil(threads / self.v7_threads), 1))

    def forward(self, y, x, k, batch):
        """The course's Op Time: zero y, synchronise, clock, kernels, synchronise, clock.

        The first call of a plan launches its kernels once before that, untimed, so that
        first-launch costs (module and constant-bank set-up, idle clocks) stay out of Op Time.
        """
        cuda = self.device.cuda
        try:
            if not self.warm:
                self.launch(y, x, k, batch)
                self.device.synchronize()
                self.warm = True
            with _timed(self.device, "[memset] y"):
                cuda.memset_d32(y, 0, batch * self.shape.M * self.shape.HO * self.shape.WO)
            self.device.synchronize()
            start = time.perf_counter()
            with _timed(self.device, f"conv_forward v{self.version} ({VERSIONS[self.version].name})"):
                self.launch(y, x, k, batch)
            self.device.synchronize()
        except cuda.Error as exc:
            raise GpuError(f"kernel v{self.version} failed: {cuda_error_line(exc)}") from exc
        return time.perf_counter() - start


_plans = {}


def plan_for(device, shape, version):
    key = (device.index, shape, version)
    if key not in _plans:
        _plans[key] = ConvPlan(device, shape, version)
    return _plans[key]


def conv2d_forward_gpu(x, k, out=None, version=None, accumulate=False, device=None):
    """Host arrays in, host array out: (y, op_seconds).

    x is copied in, y copied back through a reused page-locked buffer (full-speed
    transfers), then into ``out`` (which may be another library's memory, e.g.
    MXNet's output). ``accumulate`` adds to ``out`` instead (req='add').
    Op Time covers the kernels only.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    k = np.ascontiguousarray(k, dtype=np.float32)
    shape = ConvShape.of(x.shape, k.shape)
    version = choose_version(version, shape)
    batch = x.shape[0]
    y_shape = (batch, shape.M, shape.HO, shape.WO)
    if out is None:
        out = np.zeros(y_shape, np.float32) if accumulate else np.empty(y_shape, np.float32)
    if batch == 0:
        return out, 0.0
    dev = GpuDevice.get(device)
    cuda = dev.cuda
    with dev.active():
        plan = plan_for(dev, shape, version)
        xd, kd = dev.buffer("x", x.nbytes), dev.buffer("k", k.nbytes)
        yd = dev.buffer("y", out.nbytes)
        with _timed(dev, "[CUDA memcpy HtoD] x, k"):
            cuda.memcpy_htod(xd, x)
            cuda.memcpy_htod(kd, k)
        seconds = plan.forward(int(yd), int(xd), int(kd), batch)
        staging = dev.pinned("y", out.size).reshape(y_shape)
        with _timed(dev, "[CUDA memcpy DtoH] y"):
            cuda.memcpy_dtoh(staging, yd)
    start = time.perf_counter()
    parallel_copy(out, staging, add=accumulate)
    if profile is not None:
        profile.add("[host copy] y -> caller", time.perf_counter() - start)
    return out, seconds


def conv2d_forward_device(y_ptr, x_ptr, k_ptr, x_shape, k_shape, version=None, accumulate=False,
                          device=None):
    """Device pointers in and out (zero-copy, e.g. MXNet GPU arrays): returns op_seconds.

    The caller synchronises its own framework before the call; this returns after
    the device is idle again.
    """
    shape = ConvShape.of(x_shape, k_shape)
    version = choose_version(version, shape)
    batch = int(x_shape[0])
    if batch == 0:
        return 0.0
    dev = GpuDevice.get(device)
    with dev.active():
        plan = plan_for(dev, shape, version)
        if not accumulate:
            return plan.forward(int(y_ptr), int(x_ptr), int(k_ptr), batch)
        count = batch * shape.M * shape.HO * shape.WO
        tmp = dev.buffer("y-add", count * 4)
        seconds = plan.forward(int(tmp), int(x_ptr), int(k_ptr), batch)
        add_into = dev.module(shape).get_function("add_into")
        add_into(np.uintp(int(y_ptr)), np.uintp(int(tmp)), np.int64(count), block=(256, 1, 1),
                 grid=(min(math.ceil(count / 256), 1 << 16), 1))
        dev.synchronize()
        return seconds
