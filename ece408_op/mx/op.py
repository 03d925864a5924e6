"""The ``ece408_conv`` MXNet custom operator: forward 2-D convolution, inference only.

    y = mx.sym.Custom(data, weight, op_type="ece408_conv", num_filter=50, kernel=(5, 5))
    y = mx.sym.Custom(data, weight, bias, op_type="ece408_conv", num_filter=64, kernel=(3, 3),
                      stride=(2, 2), pad=(1, 1), no_bias=False)

Attributes (strings, as MXNet passes them) are ``Convolution``'s, with its names and formats,
so that a swapped node keeps its own:
  num_filter, kernel        required; kernel K or (KH, KW)
  stride, pad, dilate       (1, 1), (0, 0), (1, 1) by default
  num_group                 1 (C and num_filter multiples of it; C groups = depthwise)
  no_bias                   True (the course's layer); False takes the bias as a third input
  layout                    NCHW (or None); workspace, cudnn_tune, cudnn_off are accepted and ignored
and ours:
  device      auto | cpu | gpu   (auto: ``$ECE408_DEVICE`` if set, else where the arrays live)
  gpu_kernel  auto | 1..7 | v3 | a version name (auto: ``$ECE408_KERNEL`` if set, else the
              fastest version that runs the layer); see ece408_op.kernels
  cpu_kernel  auto | fast | blas (auto: ``$ECE408_CPU_KERNEL`` if set, else the direct kernels compiled
              by Numba; fast: Winograd on 3x3 stride-1 layers, else auto); see ece408_op.conv.cpu
  precision   auto | tf32x3 | fp32 (the GPU path's; auto: ``$ECE408_PRECISION`` if set, else tf32x3, where
              the error-compensated TF32 tensor-core versions may run; fp32: plain float32 arithmetic
              only); the CPU path is plain float32 either way; see ece408_op.kernels.choice

Never a crash: ``Conv2dForwardProp.__init__`` only stores the strings (MXNet's creator callback
turns an exception there into a segmentation fault); they are parsed in ``infer_shape`` and
``infer_type``, where MXNet turns an exception into an MXNetError, whose first line is then the
reason (``failures.py``). Unknown dimensions (0 or -1: Gluon's deferred initialisation,
``__shape__`` hints) are filled from the data.

Registration: ``lean.register`` rather than ``mx.operator.register``: one set of ctypes
callbacks for the process and one property object per set of attribute strings, with shape and
type inference remembered per input shapes and types, where MXNet's creator builds all of
that again on every imperative call (``mx/lean.py``; docs/benchmarks.md, "Fixed cost of one call").

MKLDNN: MXNet hands a CustomOp inputs that an MKLDNN operator left in a blocked layout as a
temporary default-layout copy that it frees before the (asynchronous) Python forward reads it;
see docs/mkldnn.md. ``guard_inputs`` puts a small copy in front of the operator's inputs that
prevents it; ``swap_convolutions`` and ``ece408_op.gluon.Conv2D`` use it.

GPU path, two MXNet builds:
  * MXNet CPU build (the only one for Hopper GPUs): the arrays live in host memory;
    x and k are copied to the GPU, y comes back through a reused page-locked
    buffer straight into MXNet's output memory (no extra NumPy copies).
  * mxnet-cu build with arrays on mx.gpu(): zero-copy through the arrays' device
    pointers; MXNet is synchronised before the kernels and the device after them.

Op Time: every forward appends (seconds, path) to ``op_times``; the harness turns on printing
of ``Op Time: %f`` lines (``$ECE408_PRINT_OP_TIME=1`` does it for any program). On the CPU it
is the computation alone: the pages of MXNet's fresh output memory are faulted in before the
clock starts (``conv.parallel.populate``: the kernel's zeroed pages, as the course zeroed y
first, without a pass of our own over y).
"""
import atexit
import ctypes
import functools
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ..console import Console
from ..course import OP_TYPE
from ..conv import ConvSpec, conv2d_forward_cpu, warm_up
from ..conv.cpu import parse_cpu_kernel, prepare_cpu
from ..conv.parallel import populate
from ..conv.spec import IGNORED_ATTRS, infer_shapes
from ..errors import Ece408Error, ShapeError
from . import failures, lean
from .compat import import_mxnet
from .failures import recording

mx = import_mxnet()

DEVICES = ("auto", "cpu", "gpu")
POPULATE_BYTES = 1 << 20         # outputs this large get their pages faulted in before the clock
SPEC_ATTRS = ("num_filter", "kernel", "stride", "pad", "dilate", "num_group", "no_bias", "layout")
OWN_ATTRS = ("device", "gpu_kernel", "cpu_kernel", "team", "precision")


class OpTimeLog:
    """Thread-safe record of operator timings (MXNet runs forward on its own thread)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.records = []
        self.console = Console() if os.environ.get("ECE408_PRINT_OP_TIME", "") not in ("", "0") else None

    def add(self, seconds, path):
        with self._lock:
            self.records.append((seconds, path))
            if self.console is not None:
                self.console.op_time(seconds)

    @contextmanager
    def capture(self, console=None):
        """The forwards run inside the block print their Op Time lines through ``console`` (None:
        not at all); yields the index of the first record they add, for ``since``."""
        with self._lock:
            saved, self.console = self.console, console
            start = len(self.records)
        try:
            yield start
        finally:
            with self._lock:
                self.console = saved

    def since(self, start):
        with self._lock:
            return list(self.records[start:])


op_times = OpTimeLog()


def take_last_error():
    """The last exception raised inside an ece408_conv callback (any thread), then forget it."""
    return failures.take()


def _remember_errors(method):
    """For operators that do not say which thread runs a callback (mx/fused_op.py): remember what
    it raises for an error of this thread and for a forward's."""
    def remembered(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except Exception as exc:
            failures.record(exc, sync=True)
            failures.record(exc, sync=False)
            raise
    return functools.wraps(method)(remembered)


class InferenceOnlyError(Ece408Error):
    pass


@dataclass(frozen=True)
class OpConfig:
    """The operator's parsed attributes."""
    spec: ConvSpec
    device: str            # auto | cpu | gpu (as given; auto resolved per forward)
    gpu_kernel: str        # as given ('auto' or a version)
    cpu_kernel: str = "auto"   # auto | fast | blas (auto: $ECE408_CPU_KERNEL, else the Numba kernels)
    team: bool = False     # run the active team's forward (team/runtime.py) instead of ours
    precision: str = "auto"    # auto | tf32x3 | fp32 (the GPU path's versions; kernels.choice)


def parse_device(text):
    choice = str(text).strip().lower() or "auto"
    if choice not in DEVICES:
        raise ShapeError(f"device={text!r} is not one of {', '.join(DEVICES)}")
    return choice


def parse_gpu_kernel(text):
    text = str(text).strip()
    if text.lower() not in ("", "auto"):
        from ..kernels import parse_version          # no PyCUDA needed to parse
        try:
            parse_version(text)
        except Ece408Error as exc:
            raise ShapeError(f"gpu_kernel={text!r}: {exc}") from exc
    return text or "auto"


def parse_precision_attr(text):
    """'auto', 'tf32x3' or 'fp32' as given (auto is resolved per forward, so $ECE408_PRECISION applies)."""
    choice = str(text).strip().lower() or "auto"
    if choice != "auto":
        from ..kernels import parse_precision            # no PyCUDA needed to parse
        try:
            choice = parse_precision(choice)
        except Ece408Error as exc:
            raise ShapeError(f"precision={text!r}: {exc}") from exc
    return choice


def parse_attrs(attrs):
    """OpConfig from the node's attributes (strings); ShapeError naming the first bad one.
    Attributes named like MXNet's hidden ones (``__profiler_scope__``...) are ignored."""
    unknown = [k for k in attrs if k not in SPEC_ATTRS + OWN_ATTRS + IGNORED_ATTRS and not k.startswith("__")]
    if unknown:
        raise ShapeError(f"unknown attribute {unknown[0]}={attrs[unknown[0]]!r}; known: "
                         f"{', '.join(SPEC_ATTRS + OWN_ATTRS)}")
    if "num_filter" not in attrs:
        raise ShapeError("num_filter is required, e.g. num_filter=64")
    if "kernel" not in attrs:
        raise ShapeError("kernel is required, e.g. kernel=(3, 3)")
    spec = ConvSpec.from_attrs(**{k: attrs[k] for k in SPEC_ATTRS if k in attrs})
    return OpConfig(spec, parse_device(attrs.get("device", "auto")), parse_gpu_kernel(attrs.get("gpu_kernel", "auto")),
                    parse_cpu_kernel_attr(attrs.get("cpu_kernel", "auto")), parse_team(attrs.get("team", "0")),
                    parse_precision_attr(attrs.get("precision", "auto")))


def parse_cpu_kernel_attr(text):
    """'auto', 'fast' or 'blas' as given (auto is resolved per forward, so $ECE408_CPU_KERNEL applies)."""
    choice = str(text).strip().lower() or "auto"
    if choice != "auto":
        parse_cpu_kernel(choice)
    return choice


def parse_team(text):
    choice = str(text).strip().lower()
    if choice not in ("0", "1", "false", "true", ""):
        raise ShapeError(f"team={text!r} is not 0 or 1")
    return choice in ("1", "true")


_PARSED = {}                   # attribute strings -> OpConfig (a parse costs 0.04 ms; lean.register shares
_PARSED_MAX = 4096             # one property per attribute set, and this serves the properties it forgot
                               # and rebuilt)


def _parsed(attrs):
    """parse_attrs, remembered per set of attribute strings (only what parsed: errors are raised again)."""
    key = tuple(sorted(attrs.items()))
    config = _PARSED.get(key)
    if config is None:
        config = parse_attrs(attrs)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = config
    return config


def _has_bias(attrs):
    """Whether the node takes a bias input; lenient (a bad no_bias is reported by infer_shape)."""
    return str(attrs.get("no_bias", "True")).strip().lower() in ("false", "0")


def resolve_device(attr, array_device):
    """Which path runs: the attribute, else $ECE408_DEVICE, else where the data lives."""
    choice = parse_device(attr)
    if choice == "auto":
        choice = parse_device(os.environ.get("ECE408_DEVICE", "auto") or "auto")
    if choice == "auto":
        choice = "gpu" if array_device == "gpu" else "cpu"
    return choice


_get_data = mx.base._LIB.MXNDArrayGetData
_address = threading.local()


def ndarray_pointer(array):
    """Address of an NDArray's data (MXNet C API ``MXNDArrayGetData``): host or device memory."""
    address = _address.__dict__.get("value")
    if address is None:
        address = _address.value = ctypes.c_void_p()
    if _get_data(array.handle, ctypes.byref(address)) != 0:
        mx.base.check_call(-1)
    return address.value


def fault_in_output(out):
    """Map the pages of MXNet's fresh output ``out`` (a host view) before the clock, where it is
    POPULATE_BYTES or more (``conv.parallel.populate``)."""
    if out.nbytes >= POPULATE_BYTES:
        populate(out)


class _Memory:
    """Exposes raw float32 memory to NumPy through the array interface (no copy, no ctypes type)."""
    __slots__ = ("__array_interface__",)

    def __init__(self, address, shape):
        self.__array_interface__ = {"data": (address, False), "shape": tuple(shape), "typestr": "<f4",
                                    "version": 3}


def host_view(array, shape=None):
    """A NumPy view of a float32 CPU NDArray's memory, without copying.

    Safe inside a CustomOp's forward: MXNet hands the operator arrays whose
    dependencies are already met and waits for the callback to return.
    """
    if shape is None:
        if array.context.device_type != "cpu" or array.dtype != np.float32:
            raise Ece408Error("host_view needs a float32 CPU NDArray")
        shape = array.shape
    return np.asarray(_Memory(ndarray_pointer(array), shape))


class Conv2dForward(mx.operator.CustomOp):
    """Computes y = conv(x, k) (+ bias) on the chosen path and writes it into the output per ``req``."""

    def __init__(self, config, shapes=None, context="cpu"):
        super().__init__()
        self.config = config
        self.spec = config.spec
        self.device = config.device
        self.version = config.gpu_kernel         # the version asked for (auto: the default choice)
        self.precision = None if config.precision == "auto" else config.precision
        self.context = context                      # where MXNet runs the operator: 'cpu' or 'gpu'
        self.path = resolve_device(config.device, context)
        # [x, weight, (bias), y] shapes when create_operator knew them all: views of MXNet's memory
        # are then made without asking MXNet for shapes, and kept while the memory stays the same
        # (an executor reuses its arrays from one forward to the next)
        self.shapes = None if shapes is None else list(shapes) + [self.spec.output_shape(shapes[0])]
        self._views = {}

    def _host_views(self, arrays):
        views = []
        for i, (array, shape) in enumerate(zip(arrays, self.shapes)):
            address = ndarray_pointer(array)
            cached = self._views.get(i)
            if cached is None or cached[0] != address:
                cached = self._views[i] = (address, np.asarray(_Memory(address, shape)))
            views.append(cached[1])
        return views

    @recording(sync=False)
    def forward(self, is_train, req, in_data, out_data, aux):
        request = req[0]
        if request == "null":
            return
        accumulate = request == "add"
        if self.path == "gpu" and self.context == "gpu":
            self._forward_gpu_arrays(in_data, out_data[0], accumulate)
            return
        if self.context == "cpu" and self.shapes is not None:
            views = self._host_views(list(in_data) + [out_data[0]])
            out = views.pop()
        else:                                       # arrays on a GPU, run on the host (device='cpu')
            views, out = [a.asnumpy() for a in in_data], None
        x, k = views[0], views[1]
        bias = views[2] if len(views) > 2 else None
        if self.config.team:
            seconds = self._forward_team(x, k, bias, out, accumulate)
        elif self.path == "gpu" and out is not None and not accumulate:
            from ..kernels.hostcopy.engine import forward_into     # x in, y straight into MXNet's memory
            seconds = forward_into(out, x, k, bias=bias, spec=self.spec, version=self.version,
                                   precision=self.precision)
        elif self.path == "gpu":
            from ..kernels.launch import conv2d_forward_gpu
            y, seconds = conv2d_forward_gpu(x, k, bias=bias, spec=self.spec, out=out, version=self.version,
                                            accumulate=accumulate, precision=self.precision)
        else:
            warm_up()
            prepare_cpu(x, k, bias, self.spec, out=out, accumulate=accumulate, kernel=self.config.cpu_kernel)
            if out is not None and not accumulate:
                fault_in_output(out)                # MXNet's fresh memory: page faults out of Op Time
            start = time.perf_counter()
            y = conv2d_forward_cpu(x, k, bias, self.spec, out=out, accumulate=accumulate,
                                   kernel=self.config.cpu_kernel)
            seconds = time.perf_counter() - start
        op_times.add(seconds, self.path)
        if out is None:
            self.assign(out_data[0], request, mx.nd.array(y, ctx=out_data[0].context, dtype=np.float32))

    def _forward_team(self, x, k, bias, out, accumulate):
        """The active team's forward (``team/runtime.py``): its Op Time, its output in ``out``."""
        from ..team.runtime import current
        if out is None or accumulate or bias is not None:
            raise ShapeError(f"{OP_TYPE} team=1 computes the course's layer into MXNet's CPU output "
                             "(no bias, req='write')")
        runtime = current()
        if self.path == "gpu":
            return runtime.forward_gpu(out, x, k, self.spec)
        return runtime.forward_cpu(out, x, k, self.spec)

    def _forward_gpu_arrays(self, in_data, y_nd, accumulate):
        """mxnet-cu builds: the arrays already live on the GPU; pass their device pointers."""
        from ..kernels.launch import conv2d_forward_device
        # MXNet calls forward once the inputs are ready; the plan's context-wide
        # synchronize before the kernels also waits for MXNet's streams, and the one
        # after them finishes our work before MXNet reads y. (No mx.nd.waitall()
        # here: it would wait for this very operator.)
        x_nd, k_nd = in_data[0], in_data[1]
        bias_ptr = ndarray_pointer(in_data[2]) if len(in_data) > 2 else None
        seconds = conv2d_forward_device(
            ndarray_pointer(y_nd), ndarray_pointer(x_nd), ndarray_pointer(k_nd), x_nd.shape, k_nd.shape,
            bias_ptr=bias_ptr, spec=self.spec, version=self.version, accumulate=accumulate,
            device=x_nd.context.device_id, precision=self.precision)
        op_times.add(seconds, "gpu")

    @recording(sync=False)
    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        """The data, weight and bias gradients (conv/backward.py, on the host in float32), each
        written or added per its ``req`` (``null``: not computed). A team's forward has none."""
        if self.config.team:
            raise InferenceOnlyError(f"{OP_TYPE} team=1 is inference-only: the team's forward has no backward")
        wanted = [r != "null" for r in req] + [False] * (3 - len(req))
        if not any(wanted):
            return
        from ..conv.backward import conv2d_backward_cpu
        x, w = in_data[0].asnumpy(), in_data[1].asnumpy()
        grads = conv2d_backward_cpu(out_grad[0].asnumpy(), x, w, self.spec, tuple(wanted))
        for array, request, value in zip(in_grad, req, grads):
            if request != "null" and value is not None:
                self.assign(array, request, mx.nd.array(value, ctx=array.context, dtype=np.float32))


@lean.register(OP_TYPE)
class Conv2dForwardProp(mx.operator.CustomOpProp):
    """Keeps the attribute strings; parses them and infers shapes and types where MXNet can
    report a failure (``infer_shape``, ``infer_type``)."""

    def __init__(self, **attrs):                    # never raises (see the module docstring)
        super().__init__(need_top_grad=True)         # backward: the output's gradient
        self.attrs = {str(k): str(v) for k, v in attrs.items()}
        self._config = None

    @property
    def config(self):
        if self._config is None:
            self._config = _parsed(self.attrs)
        return self._config

    def list_arguments(self):
        return ["data", "weight", "bias"] if _has_bias(self.attrs) else ["data", "weight"]

    def list_outputs(self):
        return ["output"]

    @recording(sync=True)
    def infer_shape(self, in_shape):
        spec = self.config.spec
        try:
            x, w, b, y = infer_shapes(spec, in_shape[0], in_shape[1], in_shape[2] if len(in_shape) > 2 else ())
        except ShapeError as exc:
            raise ShapeError(f"{OP_TYPE}: {exc}") from exc
        return [list(x), list(w)] + ([list(b)] if b is not None else []), [list(y)], []

    @recording(sync=True)
    def infer_type(self, in_type):
        self.config                                 # attribute errors surface here too
        for name, dtype in zip(self.list_arguments(), in_type):
            if dtype is not None and dtype != -1 and np.dtype(dtype) != np.float32:
                raise ShapeError(f"{OP_TYPE} works on float32 only, got {name} of type {np.dtype(dtype).name}; "
                                 f"cast it with .astype('float32')")
        n = len(self.list_arguments())
        return [np.float32] * n, [np.float32], []

    @recording(sync=True)
    def create_operator(self, ctx, shapes, dtypes):
        known = all(len(s) for s in shapes) and all(d > 0 for s in shapes for d in s)
        return Conv2dForward(self.config, [tuple(s) for s in shapes] if known else None, ctx.device_type)


def guard_inputs(F, data, *params):
    """The inputs, each through an ordinary (non-MKLDNN) operator whose output is in MXNet's
    default layout, so that MXNet never hands our operator a temporary copy (docs/mkldnn.md).
    The data goes through ``broadcast_to`` with every dimension kept, a copy that never works in
    place (an in-place one would keep an MKLDNN layout); the weight and bias through ``* 1``,
    whose shape inference also runs backwards (Gluon's deferred initialisation infers the
    weight's shape from our operator's) and which never writes into a parameter."""
    return [F.broadcast_to(data, shape=(0, 0, 0, 0))] + [p * 1.0 for p in params]


def _finish_pending_work():
    """At exit, let MXNet finish queued forwards while Python still runs: MXNet's own shutdown
    (registered earlier, so run later) would otherwise call our forward in a finalising interpreter
    (an abort: 'terminate called without an active exception')."""
    try:
        mx.nd.waitall()
    except Exception:              # noqa: BLE001  errors of that work were the program's to see
        pass


failures.install()
atexit.register(_finish_pending_work)
