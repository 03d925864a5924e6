"""Building a module: one CUDA file (a version's, or the fused kernel's) with its #defines, by NVRTC where
libnvrtc loads (the toolkit's, or PyTorch's nvidia wheels'), else nvcc, cached on disk. Needs no GPU and no
PyCUDA.

A module is a ``ModuleSpec``: the source file and its sorted ``#define``s (``plans.module_spec`` makes
them from a version and a layer). Its cubin is cached under a name hashed from exactly the sources it
includes (the file and the local headers it pulls in, ``source_files``), the defines, the architecture
and the flags, so that a second process loads it without nvcc and a change to a header rebuilds only
the modules that include it.
"""
import gzip
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..base.files import atomic_write, user_cache_dir
from ..errors import GpuError

CACHE_ENV = "ECE408_CUBIN_CACHE"     # folder of compiled modules (default: the GPU cache folder's cubin/)
GPU_CACHE_ENV = "ECE408_GPU_CACHE"   # the GPU cache folder: cubin/ (modules) and autotune/ (tunings); default
                                     # the user's cache ($XDG_CACHE_HOME/ece408_op); copy it to another machine
                                     # of the same GPU to start there compiled and tuned
NVCC_FLAGS = ("-cubin",)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


@dataclass(frozen=True)
class ModuleSpec:
    """What a module is built from: a CUDA file and its #defines (sorted (name, value) pairs)."""
    source: Path
    defines: tuple

    def define_dict(self):
        return dict(self.defines)


def require_nvcc():
    if shutil.which("nvcc") is None:
        raise GpuError("nvcc not found on PATH; install the CUDA toolkit or add its bin folder "
                       "(e.g. /usr/local/cuda/bin) to PATH")


def compile_error_line(log):
    """The first line of an nvcc log that names an error (else its first line)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["nvcc failed"])[0]


_texts = {}
_texts_lock = threading.Lock()


def _text(path):
    """A source file's text, read once per process."""
    with _texts_lock:
        if path not in _texts:
            _texts[path] = Path(path).read_text()
        return _texts[path]


def source_files(path):
    """``path`` and every local header it includes (``#include "name"``, beside the including file),
    recursively, each once, in the order first included."""
    seen = []

    def visit(file):
        if file in seen:
            return
        seen.append(file)
        for name in INCLUDE.findall(_text(file)):
            visit(file.parent / name)
    visit(Path(path))
    return seen


def sources_digest(paths):
    """A SHA-256 (hex) of the files that ``paths`` are built from: their names and texts."""
    digest = hashlib.sha256()
    for file in dict.fromkeys(f for path in paths for f in source_files(path)):
        digest.update(f"{file.name}\n{_text(file)}\n".encode())
    return digest.hexdigest()


def gpu_cache_dir(*parts):
    """$ECE408_GPU_CACHE / parts, else the user's cache folder's (``user_cache_dir``)."""
    folder = os.environ.get(GPU_CACHE_ENV, "").strip()
    return Path(folder).joinpath(*parts) if folder else user_cache_dir(*parts)


def cubin_cache_dir():
    return Path(os.environ[CACHE_ENV]) if os.environ.get(CACHE_ENV) else gpu_cache_dir("cubin")


def cubin_path(spec, arch):
    """Where the module ``spec`` built for ``arch`` is cached: named by a hash of its sources, defines,
    architecture and flags (not nvcc's version: a cubin built by another CUDA 12/13 nvcc loads the same;
    ``bench gpu --precompile`` fills it ahead)."""
    key = "\n".join([sources_digest([spec.source]), arch, " ".join(NVCC_FLAGS), *(f"{k}={v}" for k, v in spec.defines)])
    return cubin_cache_dir() / f"{hashlib.sha256(key.encode()).hexdigest()[:40]}.cubin.gz"


def feature_arch(defines, arch):
    """``arch``, or its architecture-specific target where the defines ask for it (ARCH_FEATURES: v20's
    wgmma exists only on sm_90a)."""
    return arch + "a" if dict(defines).get("ARCH_FEATURES") and arch == "sm_90" else arch


NVRTC_ENV = "ECE408_NVRTC"             # 0: build with nvcc only
_nvrtc = []


def nvrtc():
    """libnvrtc through ctypes (its builtins library loaded beside it first), or None where none loads or
    $ECE408_NVRTC is 0. NVRTC builds a module in about half nvcc's time (no nvcc process, no host headers
    to parse: 0.45-0.5 s against 1.1-1.2 s for v9 and v20 on a 2-core machine) and in threads of this process."""
    if os.environ.get(NVRTC_ENV, "1").strip() == "0":
        return None
    with _texts_lock:
        if not _nvrtc:
            _nvrtc.append(_load_nvrtc())
    return _nvrtc[0]


def _load_nvrtc():
    import ctypes
    from .libraries import declare, search_paths
    for path in search_paths("libnvrtc"):
        try:
            for helper in sorted(Path(path).parent.glob("libnvrtc-builtins.so*")):
                if ".alt." not in helper.name:
                    ctypes.CDLL(str(helper), mode=ctypes.RTLD_GLOBAL)
                    break
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        p, size = ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)
        char_pp = ctypes.POINTER(ctypes.c_char_p)
        return declare(lib, {
            "nvrtcCreateProgram": (ctypes.POINTER(p), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, char_pp, char_pp),
            "nvrtcCompileProgram": (p, ctypes.c_int, char_pp),
            "nvrtcGetProgramLogSize": (p, size), "nvrtcGetProgramLog": (p, ctypes.c_char_p),
            "nvrtcGetCUBINSize": (p, size), "nvrtcGetCUBIN": (p, ctypes.c_char_p),
            "nvrtcDestroyProgram": (ctypes.POINTER(p),)})
    return None


def _build_nvrtc(lib, spec, arch):
    """The cubin of ``spec`` by NVRTC, or None where NVRTC refuses it (nvcc then tries, and reports)."""
    import ctypes
    program = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(program), _text(spec.source).encode(), spec.source.name.encode(),
                              0, None, None):
        return None
    try:
        options = [f"-arch={arch}", f"-I{spec.source.parent}", *(f"-D{k}={v}" for k, v in spec.defines)]
        array = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        if lib.nvrtcCompileProgram(program, len(options), array):
            return None
        size = ctypes.c_size_t()
        if lib.nvrtcGetCUBINSize(program, ctypes.byref(size)) or not size.value:
            return None
        image = ctypes.create_string_buffer(size.value)
        return None if lib.nvrtcGetCUBIN(program, image) else image.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


def build_cubin(spec, arch):
    """The cubin of ``spec`` for ``arch``: from the cache, else NVRTC (``nvrtc``), else nvcc (then cached)."""
    arch = feature_arch(spec.defines, arch)
    path = cubin_path(spec, arch)
    try:
        return gzip.decompress(path.read_bytes())
    except (OSError, EOFError, gzip.BadGzipFile):
        pass
    lib = nvrtc()
    image = _build_nvrtc(lib, spec, arch) if lib is not None else None
    if image is not None:
        _store(path, image)
        return image
    require_nvcc()
    with tempfile.TemporaryDirectory(prefix="ece408-nvcc-") as tmp:
        out = Path(tmp, "module.cubin")
        result = subprocess.run(["nvcc", *NVCC_FLAGS, f"-arch={arch}", *(f"-D{k}={v}" for k, v in spec.defines),
                                 "-o", str(out), str(spec.source)], capture_output=True, text=True)
        if result.returncode != 0:
            raise GpuError(f"kernel compile failed for {spec.source.name} {dict(spec.defines)}: "
                           f"{compile_error_line(result.stderr)}")
        image = out.read_bytes()
    _store(path, image)
    return image


def _store(path, image):
    try:
        atomic_write(path, gzip.compress(image, 6))
    except OSError:
        pass                            # a read-only cache: build again next time


def precompile(specs, arch, workers=None):
    """Build every module of ``specs`` (ModuleSpecs) into the cache, nvcc on all cores (those cached
    already are left as they are); returns how many distinct modules there are."""
    unique = sorted(set(specs), key=lambda spec: (str(spec.source), spec.defines))
    todo = [spec for spec in unique if not cubin_path(spec, feature_arch(spec.defines, arch)).exists()]
    if todo:
        with ThreadPoolExecutor(max_workers=min(len(todo), workers or os.cpu_count() or 1)) as pool:
            list(pool.map(lambda spec: build_cubin(spec, arch), todo))
    return len(unique)
