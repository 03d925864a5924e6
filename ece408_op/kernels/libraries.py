"""CUDA's libraries through ctypes (no Python binding needed): their C prototypes declared in one way
(``declare``, also for the driver's in cudadrv.py), and cuBLAS and cuFFT for v18 and v19, found where
CUDA's own loaders look: the toolkit's lib64 (``$CUDA_HOME``, ``$CUDA_PATH``, /usr/local/cuda), the NVIDIA
wheels' ``nvidia/*/lib`` folders under site-packages (PyTorch's cuBLAS and cuFFT), then ``ldconfig``.

Both libraries run on the CUDA runtime, which uses the context current on the calling thread: the
launcher calls them inside ``GpuDevice.active()``, where PyCUDA has pushed the device's primary
context, so their kernels and memory live beside ours. Their handles keep the default (legacy
null) stream, the one our kernels are launched on, so a GEMM or a transform is ordered after the
kernel that fills its input and before the one that reads its output, with no synchronisation.
A library that cannot be loaded is a one-line ``GpuError`` naming where it was looked for.
"""
import ctypes
import ctypes.util
import glob
import os
import site
import sys
import threading

from ..errors import GpuError

_lock = threading.RLock()
_loaded = {}


def declare(lib, prototypes, restype=ctypes.c_int):
    """Give ``lib``'s functions their argument types ({name: (ctypes type, ...)}) and result type."""
    for name, args in prototypes.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = list(args), restype
    return lib


def search_paths(stem):
    """Candidate files for ``stem`` (e.g. 'libcublas'), in the order they are tried."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    paths = []
    for root in dict.fromkeys(r for r in roots if r):
        for folder in ("lib64", "targets/x86_64-linux/lib"):
            paths += sorted(glob.glob(os.path.join(root, folder, f"{stem}.so*")))
    sites = [*getattr(site, "getsitepackages", lambda: [])(), site.getusersitepackages(), *sys.path]
    for folder in dict.fromkeys(s for s in sites if s and os.path.isdir(s)):
        paths += sorted(glob.glob(os.path.join(folder, "nvidia", "*", "lib", f"{stem}.so*")))
    found = ctypes.util.find_library(stem[3:])       # ldconfig's cache
    if found:
        paths.append(found)
    return list(dict.fromkeys(paths))


def _load(stem, what):
    """The first of ``search_paths(stem)`` that loads (its libcublasLt etc. beside it loaded first)."""
    with _lock:
        if stem in _loaded:
            return _loaded[stem]
        failures = []
        for path in search_paths(stem):
            try:
                for helper in sorted(glob.glob(os.path.join(os.path.dirname(path), f"{stem}Lt.so*")))[:1]:
                    ctypes.CDLL(helper, mode=ctypes.RTLD_GLOBAL)
                lib = ctypes.CDLL(path)
            except OSError as exc:
                failures.append(f"{path}: {str(exc).splitlines()[0]}")
                continue
            _loaded[stem] = (lib, path)
            return _loaded[stem]
        tried = "; ".join(failures) if failures else "no file found"
        _loaded[stem] = (None, f"{stem}.so not found ({tried}; looked in $CUDA_HOME/lib64, /usr/local/cuda/lib64, "
                               f"site-packages/nvidia/*/lib and ldconfig's cache); install {what}")
        return _loaded[stem]


def missing(stem):
    """None if ``stem`` loads here, else why not (one line)."""
    lib, where = _load(stem, _INSTALL[stem])
    return None if lib is not None else where


_INSTALL = {"libcublas": "the CUDA toolkit or the nvidia-cublas wheel", "libcufft": "the CUDA toolkit or the nvidia-cufft wheel"}


def _require(stem, label):
    lib, where = _load(stem, _INSTALL[stem])
    if lib is None:
        raise GpuError(f"kernel {label} cannot run here: {where}")
    return lib


def _check(status, what):
    if status != 0:
        raise GpuError(f"{what} failed with status {status}")


class Cublas:
    """One cuBLAS handle per device, created on first use inside that device's context."""

    OP_N = 0
    DEFAULT_MATH = 0          # CUBLAS_DEFAULT_MATH: FP32 SGEMM, no TF32 tensor-core rounding

    def __init__(self, label):
        p, i, n, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.POINTER(ctypes.c_float)
        self.lib = declare(_require("libcublas", label), {
            "cublasCreate_v2": (ctypes.POINTER(p),),
            "cublasSetMathMode": (p, i),
            "cublasSgemmStridedBatched": (p, i, i, i, i, i, f, p, i, n, p, i, n, f, p, i, n, i),
        })
        self.handles = {}
        self.one, self.zero = ctypes.c_float(1.0), ctypes.c_float(0.0)

    def handle(self, device_index):
        if device_index not in self.handles:
            handle = ctypes.c_void_p()
            _check(self.lib.cublasCreate_v2(ctypes.byref(handle)), "cublasCreate")
            _check(self.lib.cublasSetMathMode(handle, self.DEFAULT_MATH), "cublasSetMathMode")
            self.handles[device_index] = handle
        return self.handles[device_index]

    def gemm_strided_batched(self, device_index, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c, batch):
        """C_i = A_i B_i (column-major, no transposes), i < batch; pointers are device addresses (ints)."""
        _check(self.lib.cublasSgemmStridedBatched(
            self.handle(device_index), self.OP_N, self.OP_N, m, n, k, ctypes.byref(self.one), a, lda, stride_a,
            b, ldb, stride_b, ctypes.byref(self.zero), c, ldc, stride_c, batch), "cublasSgemmStridedBatched")


class Cufft:
    """Batched 2-D real transforms (R2C forward, C2R backward, unnormalised), plans cached per
    (device, size, direction, batch); the oldest plans are destroyed beyond PLANS."""

    R2C, C2R = 0x2A, 0x2C
    PLANS = 16

    def __init__(self, label):
        p, i = ctypes.c_void_p, ctypes.c_int
        self.lib = declare(_require("libcufft", label), {
            "cufftPlanMany": (ctypes.POINTER(i), i, ctypes.POINTER(i), p, i, i, p, i, i, i, i),
            "cufftExecR2C": (i, p, p),
            "cufftExecC2R": (i, p, p),
            "cufftDestroy": (i,),
        })
        self.plans = {}

    def plan(self, key, size, kind, batch):
        """key identifies the device; each plan is made inside its context (so is every use)."""
        full = (key, size, kind, batch)
        if full not in self.plans:
            if len(self.plans) >= self.PLANS:
                oldest = next(iter(self.plans))
                self.lib.cufftDestroy(self.plans.pop(oldest))
            plan, dims = ctypes.c_int(), (ctypes.c_int * 2)(size, size)
            _check(self.lib.cufftPlanMany(ctypes.byref(plan), 2, dims, None, 1, 0, None, 1, 0, kind, batch),
                   f"cufftPlanMany ({size}x{size}, batch {batch})")
            self.plans[full] = plan.value
        return self.plans[full]

    def r2c(self, plan, real, spectra):
        _check(self.lib.cufftExecR2C(plan, real, spectra), "cufftExecR2C")

    def c2r(self, plan, spectra, real):
        _check(self.lib.cufftExecC2R(plan, spectra, real), "cufftExecC2R")


_instances = {}


def cublas(label="v18 cublas"):
    """The process's cuBLAS wrapper, or a one-line GpuError 'kernel <label> cannot run here: ...'."""
    with _lock:
        if "cublas" not in _instances:
            _instances["cublas"] = Cublas(label)
        return _instances["cublas"]


def cufft(label="v19 fft"):
    with _lock:
        if "cufft" not in _instances:
            _instances["cufft"] = Cufft(label)
        return _instances["cufft"]
