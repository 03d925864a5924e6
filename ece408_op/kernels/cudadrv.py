"""The CUDA driver calls the launcher makes itself (ctypes on libcuda): modules loaded from cubins,
kernel launches on any stream, asynchronous device copies, host memory page-locked in place (the copy
path's ``registered`` mode). PyCUDA keeps the rest (context, memory, events, host buffers).

Why not PyCUDA's ``Function``: its launch accepts only a PyCUDA ``Stream``, so it cannot queue work
on another framework's stream (PyTorch's current stream, given as a raw ``CUstream`` handle), and it
exposes no function or module handle that another launcher could use. Here a kernel is called as
a PyCUDA ``Function`` is (``kernel(*args, block=, grid=, shared=)``, arguments as NumPy scalars or device
pointers) and goes to the thread's current stream (``on_stream``; 0, the legacy default stream,
unless set), so the versions' launch code is the same for both uses.
"""
import ctypes
import struct
import threading

import numpy as np

from ..errors import GpuError
from .libraries import declare

FUNC_ATTRIBUTE_NUM_REGS = 4
FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_PARAM_END, _PARAM_BUFFER_POINTER, _PARAM_BUFFER_SIZE = 0, 1, 2

_lib = None
_raw_launch = None                  # cuLaunchKernel without argtypes: a replay passes ready-made ctypes values
_raw_launch_ex = None               # cuLaunchKernelEx likewise (None: a driver before CUDA 11.8)
_lib_lock = threading.Lock()
_state = threading.local()          # .stream: the CUstream this thread's launches go to


class DriverError(GpuError):
    """A CUDA driver call failed (the message names the call and the CUDA error; ``code``: the CUresult)."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


WRONG_CONTEXT = (201, 400)          # CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_HANDLE: a launch of a kernel
                                    # of one context while another is current (H100, CUDA 13: 400, nothing queued)


def lib():
    """libcuda with the prototypes used here (loaded on first use)."""
    global _lib, _raw_launch, _raw_launch_ex
    with _lib_lock:
        if _lib is None:
            try:
                cu = ctypes.CDLL("libcuda.so.1")
            except OSError as exc:
                raise GpuError(f"the CUDA driver library (libcuda.so.1) cannot be loaded: {exc}") from exc
            p, u, s = ctypes.c_void_p, ctypes.c_uint, ctypes.c_size_t
            protos = {
                "cuGetErrorName": (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)),
                "cuCtxGetCurrent": (ctypes.POINTER(p),),
                "cuModuleLoadData": (ctypes.POINTER(p), ctypes.c_char_p),
                "cuModuleUnload": (p,),
                "cuModuleGetFunction": (ctypes.POINTER(p), p, ctypes.c_char_p),
                "cuModuleGetGlobal_v2": (ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(s), p, ctypes.c_char_p),
                "cuFuncGetAttribute": (ctypes.POINTER(ctypes.c_int), ctypes.c_int, p),
                "cuFuncSetAttribute": (p, ctypes.c_int, ctypes.c_int),
                "cuLaunchKernel": (p, u, u, u, u, u, u, u, p, p, ctypes.POINTER(p)),
                "cuMemcpyDtoDAsync_v2": (ctypes.c_uint64, ctypes.c_uint64, s, p),
                "cuMemsetD32Async": (ctypes.c_uint64, ctypes.c_uint, s, p),
                "cuMemHostRegister_v2": (p, s, u),
                "cuMemHostUnregister": (p,),
                "cuStreamIsCapturing": (p, ctypes.POINTER(ctypes.c_int)),
                "cuDriverGetVersion": (ctypes.POINTER(ctypes.c_int),),
            }
            declare(cu, protos)
            _raw_launch = cu["cuLaunchKernel"]            # a second function object, left without argtypes
            _raw_launch.restype = ctypes.c_int
            try:
                _raw_launch_ex = cu["cuLaunchKernelEx"]
                _raw_launch_ex.restype = ctypes.c_int
            except AttributeError:
                _raw_launch_ex = None
            _lib = cu
    return _lib


def check(result, call):
    """Raise DriverError unless ``result`` (a CUresult) is CUDA_SUCCESS."""
    if result:
        name = ctypes.c_char_p()
        lib().cuGetErrorName(result, ctypes.byref(name))
        raise DriverError(f"{call} failed: {(name.value or b'CUDA error %d' % result).decode()}", result)


def driver_version():
    """The CUDA driver's version as 'major.minor' (what it supports: 13.0 for 13000)."""
    value = ctypes.c_int()
    check(lib().cuDriverGetVersion(ctypes.byref(value)), "cuDriverGetVersion")
    return f"{value.value // 1000}.{value.value % 1000 // 10}"


def current_context():
    """The thread's current CUcontext as an int (0: none)."""
    held = getattr(_state, "context", None)
    if held is None:
        handle = ctypes.c_void_p()
        held = _state.context = (handle, ctypes.byref(handle))
    result = (_lib or lib()).cuCtxGetCurrent(held[1])
    if result:
        check(result, "cuCtxGetCurrent")
    return held[0].value or 0


def current_stream():
    """The stream this thread's launches go to (a CUstream handle as an int; 0: the legacy default)."""
    return getattr(_state, "stream", 0)


def set_stream(handle):
    """Make ``handle`` this thread's launch stream; returns the previous one (to restore)."""
    previous = getattr(_state, "stream", 0)
    _state.stream = int(handle or 0)
    return previous


def stream_capturing(stream):
    """Whether ``stream`` (a CUstream handle as an int) is capturing a CUDA graph (or was, and failed)."""
    status = ctypes.c_int()
    check(lib().cuStreamIsCapturing(int(stream), ctypes.byref(status)), "cuStreamIsCapturing")
    return status.value != 0


def memcpy_dtod_async(dst, src, nbytes, stream=None):
    check((_lib or lib()).cuMemcpyDtoDAsync_v2(int(dst), int(src), int(nbytes),
                                               current_stream() if stream is None else stream), "cuMemcpyDtoDAsync")
    recording = getattr(_state, "recording", None)
    if recording is not None:
        recording.append(_Copy(int(dst), int(src), int(nbytes)))


def memset_d32_async(dst, value, count, stream=None):
    check(lib().cuMemsetD32Async(int(dst), int(value), int(count), current_stream() if stream is None else stream),
          "cuMemsetD32Async")


def host_register(address, nbytes):
    """Page-lock ``nbytes`` of host memory at ``address`` in place, for the current context."""
    check(lib().cuMemHostRegister_v2(address, nbytes, 0), "cuMemHostRegister_v2")


def host_unregister(address):
    """Undo ``host_register`` (with the same context current)."""
    check(lib().cuMemHostUnregister(address), "cuMemHostUnregister")


_CHARS = {np.uintp: "L", np.uint64: "L", np.int64: "l", np.int32: "i", np.uint32: "I", np.float32: "f"}
_structs = {}
PARAM_BYTES = 4096                  # the most parameter bytes a launch may pass (CUDA's limit before 12.1)


def _struct(args):
    """The Struct packing ``args``: NumPy scalars as their C type, anything else (an int, a PyCUDA
    allocation) as a pointer, laid out with C alignment (struct's native mode), as PyCUDA packs them."""
    fmt = "".join([_CHARS.get(type(arg)) or (arg.dtype.char if isinstance(arg, np.generic) else "P") for arg in args])
    packer = _structs.get(fmt)
    if packer is None:
        packer = _structs[fmt] = struct.Struct(fmt)
    return packer


def _pack(args):
    """``args`` as the bytes of a kernel's parameter buffer (see ``_struct``)."""
    return _struct(args).pack(*[a if isinstance(a, np.generic) else int(a) for a in args])


class _LaunchBuffers:
    """Per thread: the parameter buffer, its size and the ``extra`` array of cuLaunchKernel, made once
    (the driver copies the parameters during the call, so they are reused at once)."""

    def __init__(self):
        self.params = (ctypes.c_char * PARAM_BYTES)()
        self.size = ctypes.c_size_t(0)
        self.extra = (ctypes.c_void_p * 5)(_PARAM_BUFFER_POINTER, ctypes.addressof(self.params),
                                           _PARAM_BUFFER_SIZE, ctypes.addressof(self.size), _PARAM_END)


def _buffers():
    held = getattr(_state, "buffers", None)
    if held is None:
        held = _state.buffers = _LaunchBuffers()
    return held


class Kernel:
    """One ``__global__`` function of a loaded module, called like a PyCUDA Function."""

    __slots__ = ("name", "handle", "module", "shared_limit")

    def __init__(self, module, name, handle):
        self.module, self.name, self.handle = module, name, handle
        self.shared_limit = 48 * 1024       # the dynamic shared memory a launch may ask for (raise_shared_limit)

    def __call__(self, *args, block, grid, shared=0):
        held = _buffers()
        packer = _struct(args)
        values = [a if isinstance(a, np.generic) else int(a) for a in args]
        packer.pack_into(held.params, 0, *values)
        held.size.value = packer.size
        dims = (tuple(grid) + (1, 1))[:3] + (tuple(block) + (1, 1))[:3]
        result = _lib.cuLaunchKernel(self.handle, *dims, shared, getattr(_state, "stream", 0), None, held.extra)
        if result:
            check(result, f"launching {self.name}")
        recording = getattr(_state, "recording", None)
        if recording is not None:
            recording.append(_Launch(self, packer, [v.item() if isinstance(v, np.generic) else v for v in values],
                                     dims, int(shared)))

    def get_attribute(self, attribute):
        value = ctypes.c_int()
        check(lib().cuFuncGetAttribute(ctypes.byref(value), int(attribute), self.handle), "cuFuncGetAttribute")
        return value.value

    def raise_shared_limit(self, nbytes):
        """Let launches ask for ``nbytes`` of dynamic shared memory (never lowered: a module serves several
        layers, each asking for its own)."""
        if nbytes > self.shared_limit:
            self.set_attribute(FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes)
            self.shared_limit = nbytes

    def set_attribute(self, attribute, value):
        check(lib().cuFuncSetAttribute(self.handle, int(attribute), int(value)), "cuFuncSetAttribute")

    @property
    def num_regs(self):
        return self.get_attribute(FUNC_ATTRIBUTE_NUM_REGS)


# -- recorded launches: what a layer queues, replayed with the next call's pointers

POINTER_CHARS = frozenset("LPQ")     # the parameter types that hold device pointers (np.uintp, allocations)


def _offsets(chars):
    """The byte offset of each parameter of a struct format's ``chars`` (C alignment, as struct lays it out)."""
    return [struct.calcsize("".join(chars[:i + 1])) - struct.calcsize(chars[i]) for i in range(len(chars))]


def _slot(index, value, bases):
    """(index, base, offset) for the first of ``bases`` ((address, bytes)) that holds ``value``, or None."""
    for b, (address, size) in enumerate(bases):
        if address and address <= value < address + size:
            return index, b, value - address
    return None


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig: cuLaunchKernelEx's grid, block, shared memory and stream in one struct."""
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]


class _Launch:
    """One recorded launch. Once bound, it owns its parameter buffer: a replay with the addresses of
    the one before (a framework's allocator hands a layer the same blocks call after call) launches
    without packing anything; a replay with new addresses rewrites only their slots. It launches with
    cuLaunchKernelEx (a struct made once, four arguments: about 1 us less host time per launch than
    cuLaunchKernel's eleven through ctypes, docs/gpu-dropin.md)."""
    __slots__ = ("kernel", "packer", "values", "dims", "shared", "slots", "params", "size", "extra", "packed_for",
                 "head", "stream", "stream_arg", "config", "config_ref", "function", "pointers", "words")

    def __init__(self, kernel, packer, values, dims, shared):
        self.kernel, self.packer, self.values, self.dims, self.shared = kernel, packer, values, dims, shared
        self.slots, self.packed_for, self.stream, self.stream_arg = (), None, None, None

    def bind(self, bases):
        """Mark each pointer parameter that lies inside one of ``bases`` ((address, bytes) of the call's
        arrays) as (index, base, offset): replaced by the next call's address + offset."""
        chars = [c for c in self.packer.format if c.isalpha()]
        self.slots = tuple(slot for slot in (_slot(i, self.values[i], bases) for i, c in enumerate(chars)
                                             if c in POINTER_CHARS) if slot)
        self.params = (ctypes.c_char * max(8, self.packer.size))()
        self.size = ctypes.c_size_t(self.packer.size)
        self.extra = (ctypes.c_void_p * 5)(_PARAM_BUFFER_POINTER, ctypes.addressof(self.params),
                                           _PARAM_BUFFER_SIZE, ctypes.addressof(self.size), _PARAM_END)
        self.packer.pack_into(self.params, 0, *self.values)
        self.packed_for = None
        # the launch's arguments as ctypes values, made once: converting ten Python ints through argtypes
        # was about half of a replay's host time
        self.head = (ctypes.c_void_p(self.kernel.handle), *[ctypes.c_uint(d) for d in self.dims],
                     ctypes.c_uint(self.shared))
        self.function = self.head[0]
        self.config = _LaunchConfig(self.dims[:3], self.dims[3:], self.shared, None, None, 0)
        self.config_ref = ctypes.byref(self.config)
        # each pointer slot as (8-byte word of the buffer, base, offset): a new address is one store
        offsets = _offsets(chars)
        self.words = (ctypes.c_uint64 * (len(self.params) // 8)).from_buffer(self.params)
        assert all(offsets[i] % 8 == 0 for i, _, _ in self.slots), self.packer.format    # 8-byte types, C alignment
        self.pointers = tuple((offsets[i] // 8, b, offset) for i, b, offset in self.slots)

    def replay(self, addresses, stream):
        if addresses != self.packed_for:
            words = self.words
            for word, b, offset in self.pointers:
                words[word] = addresses[b] + offset
            self.packed_for = addresses
        if stream != self.stream:
            self.stream, self.stream_arg = stream, ctypes.c_void_p(stream)
            self.config.stream = stream
        if _raw_launch_ex is not None:
            result = _raw_launch_ex(self.config_ref, self.function, None, self.extra)
        else:
            result = _raw_launch(*self.head, self.stream_arg, None, self.extra)
        if result:
            check(result, f"launching {self.kernel.name}")


class _Copy:
    __slots__ = ("values", "slots")

    def __init__(self, dst, src, nbytes):
        self.values, self.slots = [dst, src, nbytes], ()

    def bind(self, bases):
        self.slots = tuple(slot for slot in (_slot(i, self.values[i], bases) for i in (0, 1)) if slot)

    def replay(self, addresses, stream):
        dst, src, nbytes = self.values
        for i, b, offset in self.slots:
            if i:
                src = addresses[b] + offset
            else:
                dst = addresses[b] + offset
        check(_lib.cuMemcpyDtoDAsync_v2(dst, src, nbytes, stream), "cuMemcpyDtoDAsync")


class Recording:
    """The launches and copies queued inside ``with Recording(bases) as r:`` on this thread, bound to
    ``bases`` ((address, bytes) per array of the call) so that ``r.replay(addresses, stream)`` queues
    the same work for other arrays of the same sizes, with no Python packing of arguments: the
    network hot path of a layer seen before (``launch.LayerCall``)."""

    def __init__(self, bases):
        self.bases, self.ops, self.launch_first = bases, [], False
        self.lock = threading.Lock()      # a launch's buffer is packed, then read by the driver: one thread at a time

    def __enter__(self):
        self._saved = getattr(_state, "recording", None)
        _state.recording = self.ops
        return self

    def __exit__(self, *exc):
        _state.recording = self._saved
        for op in self.ops:
            op.bind(self.bases)
        # a replay that starts with a launch queues nothing when another context is current: that launch
        # fails (WRONG_CONTEXT), so a caller may replay first and check the context only then
        self.launch_first = bool(self.ops) and isinstance(self.ops[0], _Launch)
        return False

    def replay(self, addresses, stream):
        with self.lock:
            for op in self.ops:
                op.replay(addresses, stream)


class Module:
    """A cubin loaded into the current context (load and unload with that context current)."""

    def __init__(self, image):
        self.image = bytes(image)
        handle = ctypes.c_void_p()
        check(lib().cuModuleLoadData(ctypes.byref(handle), self.image), "cuModuleLoadData")
        self.handle = handle.value
        self._functions = {}

    def get_function(self, name):
        if name not in self._functions:
            handle = ctypes.c_void_p()
            check(lib().cuModuleGetFunction(ctypes.byref(handle), self.handle, name.encode()),
                  f"cuModuleGetFunction({name})")
            self._functions[name] = Kernel(self, name, handle.value)
        return self._functions[name]

    def get_global(self, name):
        """(device address, bytes) of a ``__device__``/``__constant__`` variable."""
        pointer, size = ctypes.c_uint64(), ctypes.c_size_t()
        check(lib().cuModuleGetGlobal_v2(ctypes.byref(pointer), ctypes.byref(size), self.handle, name.encode()),
              f"cuModuleGetGlobal({name})")
        return pointer.value, size.value

    def unload(self):
        if self.handle:
            handle, self.handle = self.handle, None
            self._functions.clear()
            check(lib().cuModuleUnload(handle), "cuModuleUnload")
