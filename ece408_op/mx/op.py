"""The ``ece408_conv`` MXNet custom operator: forward convolution, inference only.

    y = mx.sym.Custom(data, weight, op_type="ece408_conv", num_filter=50, kernel=(5, 5))

Attributes (strings, as MXNet passes them):
  num_filter  M, the number of output feature maps (required)
  kernel      K or (K, K); square kernels only (required)
  device      auto | cpu | gpu   (default auto: ``$ECE408_DEVICE`` if set, else
              the device the arrays live on)
  gpu_kernel  auto | 1..7 | v3 | a version name (default auto: ``$ECE408_KERNEL``
              if set, else the fastest version for the shape); see ece408_op.kernels

GPU path, two MXNet builds:
  * MXNet CPU build (the only one for Hopper GPUs): the arrays live in host memory;
    x and k are copied to the GPU, y comes back through a reused page-locked
    buffer straight into MXNet's output memory (no extra NumPy copies).
  * mxnet-cu build with arrays on mx.gpu(): zero-copy through the arrays' device
    pointers; MXNet is synchronised before the kernels and the device after them.
The weight's shape (M, C, K, K) is inferred from the data, so a symbol binds
with only the data shape. Stride 1, no padding, no bias, float32.

Op Time: every forward appends (seconds, path) to ``op_times``; the harness
turns on printing of ``Op Time: %f`` lines (``$ECE408_PRINT_OP_TIME=1`` does it
for any program).
"""
import ctypes
import functools
import os
import sys
import threading
import time
from contextlib import contextmanager

import numpy as np

from .. import OP_TYPE
from ..conv import (conv2d_forward_cpu, output_shape, parallel_copy, parallel_zero, parse_kernel,
                    parse_num_filter, warm_up)
from ..errors import Ece408Error, ShapeError
from .compat import import_mxnet

mx = import_mxnet()

DEVICES = ("auto", "cpu", "gpu")


class OpTimeLog:
    """Thread-safe record of operator timings (MXNet runs forward on its own thread)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.records = []
        self.echo = os.environ.get("ECE408_PRINT_OP_TIME", "") not in ("", "0")

    def add(self, seconds, path):
        with self._lock:
            self.records.append((seconds, path))
            if self.echo:
                sys.stdout.write("Op Time: %f\n" % seconds)
                sys.stdout.flush()

    @contextmanager
    def capture(self, echo=True):
        """Print (or not) the timings of the forwards run inside the block; yields the index
        of the first record they add, for ``since``."""
        with self._lock:
            saved, self.echo = self.echo, echo
            start = len(self.records)
        try:
            yield start
        finally:
            with self._lock:
                self.echo = saved

    def since(self, start):
        with self._lock:
            return list(self.records[start:])


op_times = OpTimeLog()

# MXNet runs a custom operator's callbacks behind its C API: an exception there
# is printed (full traceback, on stdout) and replaced by a generic MXNetError.
# We keep the original exception so that callers can report it in one line.
_last_error = [None]


def _remember_errors(method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except Exception as exc:
            _last_error[0] = exc
            raise
    return wrapper


def take_last_error():
    """The last exception raised inside an ece408_conv callback (any thread), then forget it."""
    exc, _last_error[0] = _last_error[0], None
    return exc


@contextmanager
def quiet_callback_tracebacks():
    """Inside the block, MXNet's 'Error in CustomOp...' traceback dumps are not printed.

    The harness uses it so that a failure prints one line (via take_last_error)
    instead of a traceback in the middle of the milestone transcript.
    """
    import mxnet.operator as mx_operator

    def _print(*args, **kwargs):
        if not (args and str(args[0]).startswith("Error in ")):
            print(*args, **kwargs)

    mx_operator.print = _print
    try:
        yield
    finally:
        del mx_operator.print


def resolve_device(attr, array_device):
    """Which path runs: the attribute, else $ECE408_DEVICE, else where the data lives."""
    choice = (attr or "auto").lower()
    if choice == "auto":
        choice = os.environ.get("ECE408_DEVICE", "auto").lower() or "auto"
    if choice not in DEVICES:
        raise Ece408Error(f"device={choice!r} is not one of {', '.join(DEVICES)}")
    if choice == "auto":
        choice = "gpu" if array_device == "gpu" else "cpu"
    return choice


class InferenceOnlyError(Ece408Error):
    pass


def ndarray_pointer(array):
    """Address of an NDArray's data (MXNet C API ``MXNDArrayGetData``): host or device memory."""
    address = ctypes.c_void_p()
    mx.base.check_call(mx.base._LIB.MXNDArrayGetData(array.handle, ctypes.byref(address)))
    return address.value


def host_view(array):
    """A NumPy view of a CPU NDArray's memory, without copying.

    Safe inside a CustomOp's forward: MXNet hands the operator arrays whose
    dependencies are already met and waits for the callback to return.
    """
    if array.context.device_type != "cpu" or array.dtype != np.float32:
        raise Ece408Error("host_view needs a float32 CPU NDArray")
    buffer = (ctypes.c_float * array.size).from_address(ndarray_pointer(array))
    return np.ctypeslib.as_array(buffer).reshape(array.shape)


class Conv2dForward(mx.operator.CustomOp):
    """Computes y = conv(x, k) on the chosen path and writes it into the output per ``req``."""

    def __init__(self, device, kernel):
        super().__init__()
        self.device = device
        self.kernel = kernel

    @_remember_errors
    def forward(self, is_train, req, in_data, out_data, aux):
        if req[0] == "null":
            return
        x_nd, k_nd, y_nd = in_data[0], in_data[1], out_data[0]
        path = resolve_device(self.device, x_nd.context.device_type)
        accumulate = req[0] == "add"
        if path == "gpu" and x_nd.context.device_type == "gpu":
            self._forward_gpu_arrays(x_nd, k_nd, y_nd, accumulate)
            return
        on_host = all(a.context.device_type == "cpu" for a in (x_nd, k_nd, y_nd))
        x = host_view(x_nd) if on_host else x_nd.asnumpy()
        k = host_view(k_nd) if on_host else k_nd.asnumpy()
        out = host_view(y_nd) if on_host else None
        if path == "gpu" and out is not None and not accumulate:
            from ..kernels.hostcopy import forward_into     # x in, y straight into MXNet's memory
            seconds = forward_into(out, x, k, version=self.kernel)
        elif path == "gpu":
            from .. import kernels
            y, seconds = kernels.conv2d_forward_gpu(x, k, out=out, version=self.kernel, accumulate=accumulate)
        else:
            # As the course did: zero the output before the clock starts (this also takes
            # the page faults of MXNet's fresh output memory out of the timed region).
            warm_up()
            direct = out is not None and not accumulate      # write straight into MXNet's memory
            if direct:
                parallel_zero(out)
            start = time.perf_counter()
            y = conv2d_forward_cpu(x, k, out=out if direct else None)
            seconds = time.perf_counter() - start
            if out is not None and accumulate:
                parallel_copy(out, y, add=True)
        op_times.add(seconds, path)
        if out is None:
            self.assign(y_nd, req[0], mx.nd.array(y, ctx=y_nd.context, dtype=np.float32))

    def _forward_gpu_arrays(self, x_nd, k_nd, y_nd, accumulate):
        """mxnet-cu builds: the arrays already live on the GPU; pass their device pointers."""
        from .. import kernels
        # MXNet calls forward once the inputs are ready; the plan's context-wide
        # synchronize before the kernels also waits for MXNet's streams, and the one
        # after them finishes our work before MXNet reads y. (No mx.nd.waitall()
        # here: it would wait for this very operator.)
        seconds = kernels.conv2d_forward_device(
            ndarray_pointer(y_nd), ndarray_pointer(x_nd), ndarray_pointer(k_nd), x_nd.shape, k_nd.shape,
            version=self.kernel, accumulate=accumulate, device=x_nd.context.device_id)
        op_times.add(seconds, "gpu")

    @_remember_errors
    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        raise InferenceOnlyError(f"{OP_TYPE} is inference-only: it has no backward pass; "
                                 "train with mx.sym.Convolution and swap it in for inference")


@mx.operator.register(OP_TYPE)
class Conv2dForwardProp(mx.operator.CustomOpProp):
    """Parses the attributes once and infers shapes and types."""

    @_remember_errors
    def __init__(self, num_filter, kernel, device="auto", gpu_kernel="auto"):
        super().__init__(need_top_grad=False)
        self.num_filter = parse_num_filter(num_filter)
        self.kernel = parse_kernel(kernel)
        self.device = str(device).lower()
        if self.device not in DEVICES:
            raise Ece408Error(f"device={device!r} is not one of {', '.join(DEVICES)}")
        self.gpu_kernel = str(gpu_kernel)
        if self.gpu_kernel.lower() != "auto":
            from ..kernels import parse_version
            parse_version(self.gpu_kernel)          # reject unknown versions at bind time

    def list_arguments(self):
        return ["data", "weight"]

    def list_outputs(self):
        return ["output"]

    @_remember_errors
    def infer_shape(self, in_shape):
        data_shape = tuple(in_shape[0])
        if len(data_shape) != 4:
            raise ShapeError(f"{OP_TYPE}: data must be 4-D (B, C, H, W), got {data_shape}")
        weight_shape = (self.num_filter, data_shape[1], self.kernel, self.kernel)
        given = tuple(in_shape[1])
        if given and any(given) and given != weight_shape:
            raise ShapeError(f"{OP_TYPE}: weight shape {given} does not match {weight_shape} "
                             "implied by num_filter, kernel and the data's channels")
        return [data_shape, weight_shape], [output_shape(data_shape, weight_shape)], []

    @_remember_errors
    def infer_type(self, in_type):
        for dtype in in_type:
            if dtype is not None and np.dtype(dtype) != np.float32:
                raise ShapeError(f"{OP_TYPE} works on float32 only, got {np.dtype(dtype).name}")
        return [np.float32, np.float32], [np.float32], []

    def create_operator(self, ctx, shapes, dtypes):
        return Conv2dForward(self.device, self.gpu_kernel)
