"""Running a layer: plans (a version compiled for a shape class) and the entry points:
conv2d_forward_gpu / conv2d_forward_device (the convolution) and fused_forward_gpu /
fused_forward_device (convolution + bias + tanh + 2x2 max-pool, the course models' block)."""
import math
import time

import numpy as np

from ..conv.fused import pooled_shape
from ..conv.parallel import parallel_copy
from ..conv.spec import ConvSpec
from ..errors import GpuError, ShapeError
from .device import GpuDevice, cuda_error_line
from .shape import ConvShape
from .versions import FUSED, VERSIONS, choose_version, plan_defines

SHARED_DEFAULT_LIMIT = 48 * 1024     # dynamic shared memory beyond this needs the function's opt-in


class _TimedPlan:
    """What a plan shares: the course's Op Time around its ``launch`` (see ``forward``)."""

    label = ""

    def outputs(self, batch):
        raise NotImplementedError

    def launch(self, y, x, k, bias, batch):
        raise NotImplementedError

    def forward(self, y, x, k, bias, batch):
        """The course's Op Time: zero y, synchronise, clock, kernels, synchronise, clock.

        The first call of a plan launches its kernels once before that, untimed, so that
        first-launch costs (module and constant-bank set-up, idle clocks) stay out of Op Time.
        """
        cuda, dev = self.device.cuda, self.device
        try:
            if not self.warm:
                self.launch(y, x, k, bias, batch)
                dev.synchronize()
                self.warm = True
            with dev.timed("[memset] y"):
                cuda.memset_d32(y, 0, self.outputs(batch))
            dev.synchronize()
            start = time.perf_counter()
            with dev.timed(self.label):
                self.launch(y, x, k, bias, batch)
            dev.synchronize()
        except cuda.Error as exc:
            raise GpuError(f"kernel {self.label} failed: {cuda_error_line(exc)}") from exc
        return time.perf_counter() - start


class ConvPlan(_TimedPlan):
    """One version compiled for one shape class on one device: its kernels and their launch.

    ``shape`` is the caller's layer; ``inner`` the one the version's kernels compute (the same,
    or for a course-style version the unpadded, bias-free layer: the plan pads x into a
    workspace before and adds the bias after, both inside the timed launch)."""

    def __init__(self, device, shape, version, tuning_overrides=None):
        self.device, self.shape, self.version = device, shape, VERSIONS[version]
        self.tuning_overrides = dict(tuning_overrides or {})
        self.inner = self.version.inner(shape)
        self.defines = plan_defines(version, self.inner, tuning_overrides)   # the launch sizes its grid from them
        module = device.module(self.defines)
        self.kernels = [module.get_function(name) for name in self.version.kernels]
        self.pad_input = module.get_function("pad_input") if self.inner.H != shape.H or self.inner.W != shape.W else None
        self.add_bias = module.get_function("add_bias") if shape.BIAS and not self.inner.BIAS else None
        self.add_into = module.get_function("add_into")
        self.weights_symbol = module.get_global("c_weights")[0] if self.version.constant_weights else None
        self.shared_bytes = self.version.shared_bytes(self.defines)
        if self.shared_bytes > SHARED_DEFAULT_LIMIT:
            for kernel in self.kernels:
                kernel.set_attribute(device.cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, self.shared_bytes)
        self.label = f"conv_forward {self.version.label}"
        self.warm = False

    def outputs(self, batch):
        return self.shape.outputs(batch)

    def launch(self, y, x, k, bias, batch):
        """Queue the layer's kernels (device pointers as ints, bias 0 for none); no synchronisation."""
        s = self.shape
        x = _prepare(self, x, k, batch)
        self.version.launch(self, y, x, k, bias if self.inner.BIAS else 0, batch)
        if self.add_bias is not None:
            count = s.outputs(batch)
            self.add_bias(np.uintp(y), np.uintp(bias), np.int64(count), np.int32(s.M), np.int32(s.HO * s.WO),
                          block=(256, 1, 1), grid=(min(math.ceil(count / 256), 1 << 20), 1))

    def accumulate(self, y, tmp, batch):
        """y += tmp over the layer's outputs (req='add' on device arrays)."""
        count = self.shape.outputs(batch)
        self.add_into(np.uintp(y), np.uintp(tmp), np.int64(count), block=(256, 1, 1),
                      grid=(min(math.ceil(count / 256), 1 << 16), 1))
        self.device.synchronize()


def _prepare(plan, x, k, batch):
    """Before a course-style kernel: pad x into a workspace (returns the x to read) and copy the
    weights into the constant bank (part of the forward, as in the course)."""
    s, inner = plan.shape, plan.inner
    if plan.pad_input is not None:
        planes = batch * s.C
        padded = int(plan.device.buffer("x-padded", planes * inner.H * inner.W * 4))
        plan.pad_input(np.uintp(padded), np.uintp(x), np.int64(planes), *map(np.int32, (s.H, s.W, s.PH, s.PW)),
                       block=(256, 1, 1), grid=(min(math.ceil(planes * inner.H * inner.W / 256), 1 << 20), 1))
        x = padded
    if plan.weights_symbol is not None:
        plan.device.cuda.memcpy_dtod(plan.weights_symbol, k, s.M * s.CKK * 4)
    return x


class FusedPlan(_TimedPlan):
    """Convolution (+ bias) + tanh + 2x2/2 max-pool of one shape class on one device.

    ``conv`` None: the fused kernel (one pass; x padded first where the layer has padding).
    Else ``conv`` is a convolution plan: it writes the convolution into a workspace and the
    tanh_pool kernel pools it (any layer; also the baseline the fused kernel is measured against)."""

    def __init__(self, device, shape, conv=None, tuning_overrides=None):
        self.device, self.shape, self.conv = device, shape, conv
        self.inner = shape.unpadded()
        self.defines = conv.defines if conv else plan_defines(FUSED, self.inner, tuning_overrides)
        module = device.module(self.defines)
        self.kernel = None if conv else module.get_function(FUSED.kernel)
        self.tanh_pool = module.get_function("tanh_pool")
        self.pad_input = None if conv or self.inner.H == shape.H and self.inner.W == shape.W \
            else module.get_function("pad_input")
        self.weights_symbol = None if conv else module.get_global("c_weights")[0]
        self.label = f"fused_forward ({conv.version.label} + tanh_pool)" if conv else "fused_forward"
        self.warm = False

    def outputs(self, batch):
        s = self.shape
        return batch * s.M * (s.HO // 2) * (s.WO // 2)

    def launch(self, y, x, k, bias, batch):
        s = self.shape
        if self.conv is not None:
            conv = int(self.device.buffer("fused-conv", s.outputs(batch) * 4))
            self.conv.launch(conv, x, k, bias, batch)
            count = self.outputs(batch)
            self.tanh_pool(np.uintp(y), np.uintp(conv), np.int64(batch * s.M), np.int32(s.HO), np.int32(s.WO),
                           block=(256, 1, 1), grid=(min(math.ceil(count / 256), 1 << 20), 1))
            return
        x = _prepare(self, x, k, batch)
        d = self.defines
        strips = math.ceil((s.WO // 2) / d["FUSE_PV"])
        total = batch * (s.HO // 2) * strips
        self.kernel(np.uintp(y), np.uintp(x), np.uintp(bias), np.int32(batch), block=(d["FUSE_THREADS"], 1, 1),
                    grid=(math.ceil(total / d["FUSE_THREADS"]), 1))


def plan_for(device, shape, version, tuning_overrides=None):
    """The device's plan for ``version`` on ``shape`` (call inside ``device.active()``)."""
    key = (version, shape, tuple(sorted(plan_defines(version, VERSIONS[version].inner(shape), tuning_overrides).items())))
    return device.plan(key, lambda: ConvPlan(device, shape, version, tuning_overrides))


def fused_plan_for(device, shape, version=None, tuning_overrides=None):
    """The device's fused plan for ``shape``: ``version`` None/'auto' is the fused kernel where it
    runs the layer, else the default convolution + tanh_pool; 'fused' the fused kernel (ShapeError
    where it cannot run the layer); a convolution version, that version + tanh_pool."""
    text = None if version is None else str(version).strip().lower()
    reason = FUSED.reason(shape, tuning_overrides)
    if text in (None, "", "auto") and reason is None or text == FUSED.name:
        if reason:
            raise ShapeError(f"the fused kernel cannot run this layer: {reason}; use version=auto")
        key = ("fused", shape, tuple(sorted(plan_defines(FUSED, shape.unpadded(), tuning_overrides).items())))
        return device.plan(key, lambda: FusedPlan(device, shape, None, tuning_overrides))
    if shape.HO < 2 or shape.WO < 2:
        raise ShapeError(f"the {shape.HO}x{shape.WO} convolution output has no 2x2 window to pool")
    number = choose_version(version, shape, device.name)
    conv = plan_for(device, shape, number, tuning_overrides)
    return device.plan(("fused+conv", conv), lambda: FusedPlan(device, shape, conv))


def conv2d_forward_gpu(x, k, bias=None, spec=None, out=None, version=None, accumulate=False, device=None):
    """Host arrays in, host array out: (y, op_seconds). ``spec`` (a ConvSpec) gives stride,
    padding, dilation, groups and whether ``bias`` is used; None is the course's layer.

    x is copied in, y copied back through the device's page-locked buffer (full-speed
    transfers), then into ``out`` (which may be another library's memory, e.g. MXNet's
    output), all while the device is held, so concurrent callers never share the buffer.
    ``accumulate`` adds to ``out`` instead (req='add'). Op Time covers the layer's kernels
    (and, for the constant-memory versions v3, v4 and v7, the copy of the weights into the bank).
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    k = np.ascontiguousarray(k, dtype=np.float32)
    spec = _with_bias(spec, k, bias)
    shape = ConvShape.of(x.shape, k.shape, spec)
    dev = GpuDevice.get(device)
    version = choose_version(version, shape, dev.name)
    batch = x.shape[0]
    y_shape = (batch, shape.M, shape.HO, shape.WO)
    if out is None:
        out = np.zeros(y_shape, np.float32) if accumulate else np.empty(y_shape, np.float32)
    if batch == 0:
        return out, 0.0
    with dev.active():
        plan = plan_for(dev, shape, version)
        return _host_call(dev, plan, x, k, bias, out, accumulate)


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
                          accumulate=False, device=None):
    """Device pointers in and out (zero-copy, e.g. MXNet GPU arrays): returns op_seconds.

    The caller synchronises its own framework before the call; this returns after
    the device is idle again.
    """
    _require_aligned(y=y_ptr, x=x_ptr, k=k_ptr)
    if spec is None and bias_ptr:
        spec = ConvSpec.course(k_shape).with_(no_bias=False)
    shape = ConvShape.of(x_shape, k_shape, spec)
    dev = GpuDevice.get(device)
    version = choose_version(version, shape, dev.name)
    batch = int(x_shape[0])
    if batch == 0:
        return 0.0
    bias = int(bias_ptr or 0)
    with dev.active():
        plan = plan_for(dev, shape, version)
        if not accumulate:
            return plan.forward(int(y_ptr), int(x_ptr), int(k_ptr), bias, batch)
        tmp = dev.buffer("y-add", shape.outputs(batch) * 4)
        seconds = plan.forward(int(tmp), int(x_ptr), int(k_ptr), bias, batch)
        plan.accumulate(int(y_ptr), int(tmp), batch)
        return seconds


def _with_bias(spec, k, bias):
    """The spec to run: ``spec``, or the course's layer (with a bias if one is given); a bias
    must be given exactly when the spec has one."""
    if spec is None:
        return ConvSpec.course(k.shape).with_(no_bias=bias is None)
    if spec.no_bias != (bias is None):
        raise ShapeError(f"the spec says no_bias={spec.no_bias} but a bias was {'given' if bias is not None else 'not given'}")
    return spec


def fused_forward_gpu(x, k, bias=None, spec=None, out=None, version=None, device=None):
    """tanh(max_pool_2x2(conv(x, k) + bias)): host arrays in, host array out: (y, op_seconds).

    The course models' convolution -> tanh -> 2x2 max-pool (stride 2; an odd last row/column of
    the convolution is dropped) in one kernel where the layer allows (kernels.FUSED.reason),
    else the convolution followed by a tanh_pool kernel; ``version``: None/'auto', 'fused', or a
    convolution version for the two-pass path. y is B x M x HO/2 x WO/2 (``pooled_shape``).
    Arguments and copies as conv2d_forward_gpu; Op Time covers every kernel of the layer.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    k = np.ascontiguousarray(k, dtype=np.float32)
    spec = _with_bias(spec, k, bias)
    shape = ConvShape.of(x.shape, k.shape, spec)
    y_shape = pooled_shape(x.shape, k.shape, spec)
    if out is None:
        out = np.empty(y_shape, np.float32)
    elif tuple(out.shape) != y_shape:
        raise ShapeError(f"out has shape {tuple(out.shape)}, the fused layer's output is {y_shape}")
    dev = GpuDevice.get(device)
    with dev.active():
        plan = fused_plan_for(dev, shape, version)
        if len(x) == 0:
            return out, 0.0
        return _host_call(dev, plan, x, k, bias, out)


def fused_forward_device(y_ptr, x_ptr, k_ptr, x_shape, k_shape, bias_ptr=None, spec=None, version=None,
                         device=None):
    """The fused layer on device pointers (y: ``pooled_shape`` floats): returns op_seconds.
    The caller synchronises its own framework before the call; this returns with the device idle."""
    _require_aligned(y=y_ptr, x=x_ptr, k=k_ptr)
    if spec is None and bias_ptr:
        spec = ConvSpec.course(k_shape).with_(no_bias=False)
    shape = ConvShape.of(x_shape, k_shape, spec)
    dev = GpuDevice.get(device)
    with dev.active():
        plan = fused_plan_for(dev, shape, version)
        if int(x_shape[0]) == 0:
            return 0.0
        return plan.forward(int(y_ptr), int(x_ptr), int(k_ptr), int(bias_ptr or 0), int(x_shape[0]))
