"""Running a layer: the entry points conv2d_forward_gpu / conv2d_forward_device (the convolution, the
course's Op Time), conv2d_forward_async / layer_call (network use: the caller's stream, no
synchronisation) and fused_forward_gpu / fused_forward_device (convolution + bias + tanh + 2x2
max-pool, the course models' block). The plans they run are ``plans.py``'s."""
import atexit
import os
import queue
import threading

import numpy as np

from ..conv.fused import pooled_shape
from ..conv.parallel import parallel_copy
from ..conv.spec import ConvSpec
from ..errors import GpuError, ShapeError
from . import autotune, cudadrv
from .choice import KERNEL_ENV, PRECISION_ENV, parse_precision, resolve_version
from .device import GpuDevice
from .build import build_cubin, cubin_path, feature_arch
from .plans import fused_plan_for, module_spec, plan_for
from .shape import ConvShape


def conv2d_forward_gpu(x, k, bias=None, spec=None, out=None, version=None, accumulate=False, device=None,
                       precision=None):
    """Host arrays in, host array out: (y, op_seconds). ``spec`` (a ConvSpec) gives stride,
    padding, dilation, groups and whether ``bias`` is used; None is the course's layer.

    x is copied in, y copied back through the device's page-locked buffer (full-speed
    transfers), then into ``out`` (which may be another library's memory, e.g. MXNet's
    output), all while the device is held, so concurrent callers never share the buffer.
    ``accumulate`` adds to ``out`` instead (req='add'). Op Time covers the layer's kernels
    (and, for the constant-memory versions v3, v4 and v7, the copy of the weights into the bank).
    ``precision``: 'fp32' (plain float32 versions only) or the default (choice.parse_precision).
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    k = np.ascontiguousarray(k, dtype=np.float32)
    spec = spec_with_bias(spec, k, bias)
    call = layer_call(x.shape, k.shape, spec, bias is not None, version, device, precision)
    batch = x.shape[0]
    y_shape = (batch, call.shape.M, call.shape.HO, call.shape.WO)
    if out is None:
        out = np.zeros(y_shape, np.float32) if accumulate else np.empty(y_shape, np.float32)
    if batch == 0:
        return out, 0.0
    dev = call.device
    with dev.active():
        return _host_call(dev, call.plan, x, k, bias, out, accumulate)


def _host_call(dev, plan, x, k, bias, out, accumulate=False):
    """Copy x, k (and bias) in, run ``plan.forward``, copy y out into ``out``; returns (out, seconds)."""
    cuda = dev.cuda
    shape, batch = plan.shape, len(x)
    xd, kd = dev.buffer("x", x.nbytes), dev.buffer("k", k.nbytes)
    yd = dev.buffer("y", out.nbytes)
    bd = 0
    with dev.timed("[CUDA memcpy HtoD] x, k"):
        cuda.memcpy_htod(xd, x)
        cuda.memcpy_htod(kd, k)
        if shape.BIAS:
            bias = np.ascontiguousarray(bias, dtype=np.float32)
            bd = dev.buffer("bias", bias.nbytes)
            cuda.memcpy_htod(bd, bias)
    seconds = plan.forward(int(yd), int(xd), int(kd), int(bd), batch)
    staging = dev.pinned("y", out.size).reshape(out.shape)
    with dev.timed("[CUDA memcpy DtoH] y"):
        cuda.memcpy_dtoh(staging, yd)
    with dev.timed_host("[host copy] y -> caller"):
        parallel_copy(out, staging, add=accumulate)
    return out, seconds


ALIGN = 16                     # bytes: the kernels move x, k and y in 16-byte loads, stores and cp.async


def _require_aligned(**pointers):
    """ShapeError unless every device pointer is 16-byte aligned: a misaligned 16-byte access is a
    CUDA error that poisons the whole context, so refuse before launching (a view that starts
    inside an array, e.g. ``flat[1:]``, must be copied first)."""
    for name, pointer in pointers.items():
        if int(pointer) % ALIGN:
            raise ShapeError(f"{name} at {int(pointer):#x} is not {ALIGN}-byte aligned; the kernels read and "
                             f"write {ALIGN} bytes at a time: pass a copy that starts on its own allocation")


def conv2d_forward_device(y_ptr, x_ptr, k_ptr, x_shape, k_shape, bias_ptr=None, spec=None, version=None,
                          accumulate=False, device=None, precision=None):
    """Device pointers in and out, with the course's Op Time (``_TimedPlan.forward``: y zeroed, the
    device synchronised before and after): returns op_seconds. The milestones' path (MXNet's arrays,
    ``hostcopy.engine.forward_into``); for network use see ``conv2d_forward_async``.

    The caller synchronises its own framework before the call; this returns after
    the device is idle again.
    """
    _require_aligned(y=y_ptr, x=x_ptr, k=k_ptr)
    call = layer_call(x_shape, k_shape, spec, bool(bias_ptr), version, device, precision)
    batch = int(x_shape[0])
    if batch == 0:
        return 0.0
    plan, dev, bias = call.plan, call.device, int(bias_ptr or 0)
    with dev.active():
        if not accumulate:
            return plan.forward(int(y_ptr), int(x_ptr), int(k_ptr), bias, batch)
        tmp = dev.buffer("y-add", plan.shape.outputs(batch) * 4)
        seconds = plan.forward(int(tmp), int(x_ptr), int(k_ptr), bias, batch)
        plan.accumulate(int(y_ptr), int(tmp), batch)
        return seconds


class LayerCall:
    """One layer (shape, batch, bias, requested version) resolved on one device: its plan. ``queue`` is
    the network hot path: no shape parsing, version choice, #define building or file read (all done
    once, in ``layer_call``), no zeroing of y and no synchronisation; the kernels go to the caller's
    stream, in order with the framework's own work. The first call on a stream records what the plan
    queues (``cudadrv.Recording``); later calls replay it with their own pointers, re-recording only
    after the device's workspaces changed (``GpuDevice.generation``)."""

    __slots__ = ("device", "plan", "shape", "batch", "sizes", "recordings", "needs_bias", "context_current", "upgrade")

    def __init__(self, device, plan, batch):
        self.device, self.plan, self.shape, self.batch = device, plan, plan.shape, batch
        s, e = plan.shape, plan.shape.element_bytes
        self.sizes = (e * s.outputs(batch), e * batch * s.C * s.H * s.W, e * s.M * s.CKK, e * s.M)
        self.recordings = {}                 # (accumulate, stream) -> (Recording, device generation)
        self.needs_bias = bool(s.BIAS)
        self.context_current = True          # the device's context was current at the last call (see queue)
        self.upgrade = None                  # set by the background build: the specialised plan's module is ready

    def queue(self, y, x, k, bias=0, stream=0, accumulate=False):
        """Queue the layer on ``stream`` (a CUstream handle as an int; 0: the legacy default stream) for
        device pointers (ints) y, x, k and bias (0: none) and return at once."""
        if self.upgrade is not None:
            self._specialise()
        if (y | x | k) % ALIGN:
            _require_aligned(y=y, x=x, k=k)
        if self.needs_bias and not bias:
            raise ShapeError("this layer has a bias but no bias pointer was given")
        dev = self.device
        held = self.recordings.get((accumulate, stream))
        try:
            if held is not None and held[1] == dev.generation:
                recording, addresses = held[0], (y, x, k, bias)
                if recording.launch_first and self.context_current:
                    # replay first, and ask the driver for the current context only if that fails: with another
                    # context current (or none) its first launch fails, nothing queued. cuCtxGetCurrent costs
                    # 0.6-1 us of a network call's host time; after a failure, the next calls ask first.
                    try:
                        recording.replay(addresses, stream)
                        return
                    except cudadrv.DriverError as exc:
                        if exc.code not in cudadrv.WRONG_CONTEXT or cudadrv.current_context() == dev.context_handle:
                            raise
                    self.context_current = False
                elif cudadrv.current_context() == dev.context_handle:
                    self.context_current = True
                    recording.replay(addresses, stream)
                    return
                with dev.active():                      # another context current on this thread
                    recording.replay(addresses, stream)
                return
            previous = cudadrv.set_stream(stream)
            try:
                with dev.active():
                    capturing = bool(stream) and cudadrv.stream_capturing(stream)
                    with dev.no_new_buffers(capturing), \
                            cudadrv.Recording(tuple(zip((y, x, k, bias), self.sizes))) as recording:
                        self._queue(y, x, k, bias, accumulate)
                    self.recordings[(accumulate, stream)] = (recording, dev.generation)
            finally:
                cudadrv.set_stream(previous)
        except cudadrv.DriverError as exc:
            raise GpuError(f"kernel {self.plan.label} failed: {exc}") from exc

    def _specialise(self):
        """Run the layer's specialised plan from now on (its module was built in the background; ``specialise``):
        the next call records its launches."""
        self.upgrade = None
        plan = self.plan
        with self.device.active():
            self.plan = plan_for(self.device, plan.shape, plan.version.number, plan.tuning_overrides or None,
                                 static=True)
        self.recordings = {}

    def _queue(self, y, x, k, bias, accumulate):
        plan, batch = self.plan, self.batch
        if not accumulate:
            plan.launch(y, x, k, bias, batch)
            return
        tmp = int(self.device.buffer("y-add", self.shape.outputs(batch) * 4))
        plan.launch(tmp, x, k, bias, batch)
        plan.accumulate(y, tmp, batch, synchronize=False)


_calls = {}


def layer_call(x_shape, k_shape, spec=None, bias=False, version=None, device=None, precision=None,
               dtype="float32", layouts=(0, 0)):
    """The LayerCall of this layer, found by a cheap key (the shapes, the spec, whether there is a bias,
    the requested version, precision and device, the data's element type and layouts (x, weights; 1:
    channels-last), $ECE408_KERNEL, $ECE408_PRECISION); resolved on first use: shape checks, the version
    (explicit, else defaults.json, else the autotuner, else the fallback order, under the precision) and
    its plan. The host-array entry points here are float32 NCHW; other data goes through this one."""
    environ = os.environ
    key = (tuple(x_shape), tuple(k_shape), spec, bool(bias), version, device, environ.get(KERNEL_ENV), precision,
           environ.get(PRECISION_ENV), dtype, layouts)
    call = _calls.get(key)
    if call is None:
        dev = GpuDevice.get(device)
        with dev.active():           # one thread tunes and builds a layer; the others wait for it (the
            call = _calls.get(key)   # device's lock: a caller already holding it, hostcopy, re-enters)
            if call is None:
                call = _calls[key] = _resolve(dev, x_shape, k_shape, spec, bias, version, precision, dtype,
                                              layouts)
    return call


def forget_layer_calls():
    """Resolve every layer again on its next call (after a change of the defaults or the tuning)."""
    _calls.clear()


def _resolve(dev, x_shape, k_shape, spec, bias, version, precision=None, dtype="float32", layouts=(0, 0)):
    if spec is None and bias:
        spec = ConvSpec.course(k_shape).with_(no_bias=False)
    shape = ConvShape.of(x_shape, k_shape, spec, dtype, *layouts)
    batch = int(x_shape[0])
    precision = parse_precision(precision)
    tune = (lambda s: autotune.choose(dev, s, batch, precision=precision)) if batch else None
    number, overrides = resolve_version(version, shape, dev.name, tune=tune, precision=precision)
    plan = plan_for(dev, shape, number, overrides)
    if not plan.dims or not plan.version.specialise or os.environ.get(SPECIALISE_ENV, "1").strip() == "0":
        return LayerCall(dev, plan, batch)
    static = module_spec(number, plan.inner, overrides, static=True)
    if cubin_path(static, feature_arch(static.defines, dev.arch)).exists():      # built before: at once
        return LayerCall(dev, plan_for(dev, shape, number, overrides, static=True), batch)
    call = LayerCall(dev, plan, batch)
    specialise(call, static, dev.arch)
    return call


# The specialised modules. A layer's first plan takes its sizes at run time (v8, v9, v20: one module per
# tile, built in seconds for a whole network), which measured 4-32% slower than a module built for the
# layer's shape (bench/sizes.py, H200: v20 median 1.08x, v9 and v8 1.18x); so once a layer is resolved,
# the module of its chosen version and tile with the sizes as #defines is built in the background (daemon
# threads: NVRTC or nvcc, while the GPU runs the network), and the layer's next call switches to it (a
# check of one attribute per call until then). A module already in the cache folder is used at once.
SPECIALISE_ENV = "ECE408_SPECIALISE"          # 0: keep the run-time-size modules
_jobs = queue.Queue()
_workers = []
_pending = [0]
_pending_lock = threading.Condition()


def _builder():
    while True:
        call, spec, arch = _jobs.get()
        try:
            build_cubin(spec, arch)
            call.upgrade = True
        except Exception:                       # (the run-time-size module keeps running the layer)
            pass
        finally:
            with _pending_lock:
                _pending[0] -= 1
                _pending_lock.notify_all()


def specialise(call, spec, arch):
    """Build ``spec`` (the layer's module with its sizes as #defines) in the background, then upgrade ``call``."""
    with _pending_lock:
        if not _workers:
            atexit.register(_stop_builds)
        _pending[0] += 1
        if len(_workers) < max(1, (os.cpu_count() or 2) - 2):
            worker = threading.Thread(target=_builder, name="ece408-specialise", daemon=True)
            worker.start()
            _workers.append(worker)
    _jobs.put((call, spec, arch))


def _stop_builds():
    """At exit: drop the builds not started and wait for those running (a daemon thread inside NVRTC while
    the interpreter shuts down corrupted the heap: 'double free or corruption' at the end of short runs)."""
    while True:
        try:
            _jobs.get_nowait()
        except queue.Empty:
            break
        with _pending_lock:
            _pending[0] -= 1
    wait_for_specialised(60)


def wait_for_specialised(timeout=None):
    """Wait until every background build asked for so far has ended (True), or ``timeout`` seconds (False)."""
    with _pending_lock:
        return _pending_lock.wait_for(lambda: _pending[0] == 0, timeout)


def conv2d_forward_async(y_ptr, x_ptr, k_ptr, x_shape, k_shape, bias_ptr=None, spec=None, version=None,
                         stream=0, accumulate=False, device=None, precision=None):
    """Network use: queue the layer's kernels on ``stream`` (a CUstream handle as an int, e.g. PyTorch's
    ``torch.cuda.current_stream().cuda_stream``; 0: the legacy default stream) and return at once, with
    no zeroing of y and no synchronisation (the course's Op Time semantics stay with
    ``conv2d_forward_device``). Device pointers as ints; the first call of a layer resolves it
    (``layer_call``: may autotune), every later one costs a dictionary look-up and the launches."""
    if not x_shape[0]:
        return
    layer_call(x_shape, k_shape, spec, bool(bias_ptr), version, device, precision).queue(
        int(y_ptr), int(x_ptr), int(k_ptr), int(bias_ptr or 0), int(stream or 0), accumulate)


def spec_with_bias(spec, k, bias):
    """The spec to run: ``spec``, or the course's layer (with a bias if one is given); a bias
    must be given exactly when the spec has one."""
    if spec is None:
        return ConvSpec.course(k.shape).with_(no_bias=bias is None)
    if spec.no_bias != (bias is None):
        raise ShapeError(f"the spec says no_bias={spec.no_bias} but a bias was {'given' if bias is not None else 'not given'}")
    return spec


def fused_forward_gpu(x, k, bias=None, spec=None, out=None, version=None, device=None, precision=None):
    """tanh(max_pool_2x2(conv(x, k) + bias)): host arrays in, host array out: (y, op_seconds).

    The course models' convolution -> tanh -> 2x2 max-pool (stride 2; an odd last row/column of
    the convolution is dropped) in one kernel where the layer allows (kernels.FUSED.reason),
    else the convolution followed by a tanh_pool kernel; ``version``: None/'auto', 'fused', or a
    convolution version for the two-pass path. y is B x M x HO/2 x WO/2 (``pooled_shape``).
    Arguments and copies as conv2d_forward_gpu; Op Time covers every kernel of the layer.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    k = np.ascontiguousarray(k, dtype=np.float32)
    spec = spec_with_bias(spec, k, bias)
    shape = ConvShape.of(x.shape, k.shape, spec)
    y_shape = pooled_shape(x.shape, k.shape, spec)
    if out is None:
        out = np.empty(y_shape, np.float32)
    elif tuple(out.shape) != y_shape:
        raise ShapeError(f"out has shape {tuple(out.shape)}, the fused layer's output is {y_shape}")
    dev = GpuDevice.get(device)
    with dev.active():
        plan = fused_plan_for(dev, shape, version, precision=precision)
        if len(x) == 0:
            return out, 0.0
        return _host_call(dev, plan, x, k, bias, out)


def fused_forward_device(y_ptr, x_ptr, k_ptr, x_shape, k_shape, bias_ptr=None, spec=None, version=None,
                         device=None, precision=None):
    """The fused layer on device pointers (y: ``pooled_shape`` floats): returns op_seconds.
    The caller synchronises its own framework before the call; this returns with the device idle."""
    _require_aligned(y=y_ptr, x=x_ptr, k=k_ptr)
    if spec is None and bias_ptr:
        spec = ConvSpec.course(k_shape).with_(no_bias=False)
    shape = ConvShape.of(x_shape, k_shape, spec)
    dev = GpuDevice.get(device)
    with dev.active():
        plan = fused_plan_for(dev, shape, version, precision=precision)
        if int(x_shape[0]) == 0:
            return 0.0
        return plan.forward(int(y_ptr), int(x_ptr), int(k_ptr), int(bias_ptr or 0), int(x_shape[0]))
