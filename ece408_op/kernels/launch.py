"""Running a layer: plans (a version compiled for a shape class) and the two entry points."""
import math
import time

import numpy as np

from ..conv.parallel import parallel_copy
from ..conv.spec import ConvSpec
from ..errors import GpuError, ShapeError
from .device import GpuDevice, cuda_error_line
from .shape import ConvShape
from .versions import VERSIONS, choose_version, module_defines


class ConvPlan:
    """One version compiled for one shape class on one device: its kernels and their launch.

    ``shape`` is the caller's layer; ``inner`` the one the version's kernels compute (the same,
    or for a course-style version the unpadded, bias-free layer: the plan pads x into a
    workspace before and adds the bias after, both inside the timed launch)."""

    def __init__(self, device, shape, version, tuning_overrides=None):
        self.device, self.shape, self.version = device, shape, VERSIONS[version]
        self.inner = self.version.inner(shape)
        self.defines = module_defines(self.inner, tuning_overrides)   # the launch sizes its grid from them
        module = device.module(self.defines)
        self.kernels = [module.get_function(name) for name in self.version.kernels]
        self.pad_input = module.get_function("pad_input") if self.inner.H != shape.H or self.inner.W != shape.W else None
        self.add_bias = module.get_function("add_bias") if shape.BIAS and not self.inner.BIAS else None
        self.add_into = module.get_function("add_into")
        self.weights_symbol = module.get_global("c_weights")[0] if self.version.constant_weights else None
        self.warm = False

    def launch(self, y, x, k, bias, batch):
        """Queue the layer's kernels (device pointers as ints, bias 0 for none); no synchronisation."""
        s, cuda = self.shape, self.device.cuda
        if self.pad_input is not None:
            planes, inner = batch * s.C, self.inner
            padded = int(self.device.buffer("x-padded", planes * inner.H * inner.W * 4))
            self.pad_input(np.uintp(padded), np.uintp(x), np.int64(planes), *map(np.int32, (s.H, s.W, s.PH, s.PW)),
                           block=(256, 1, 1), grid=(min(math.ceil(planes * inner.H * inner.W / 256), 1 << 20), 1))
            x = padded
        if self.weights_symbol is not None:          # part of the forward, as in the course
            cuda.memcpy_dtod(self.weights_symbol, k, s.M * s.CKK * 4)
        self.version.launch(self, y, x, k, bias if self.inner.BIAS else 0, batch)
        if self.add_bias is not None:
            count = s.outputs(batch)
            self.add_bias(np.uintp(y), np.uintp(bias), np.int64(count), np.int32(s.M), np.int32(s.HO * s.WO),
                          block=(256, 1, 1), grid=(min(math.ceil(count / 256), 1 << 20), 1))

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
                cuda.memset_d32(y, 0, self.shape.outputs(batch))
            dev.synchronize()
            start = time.perf_counter()
            with dev.timed(f"conv_forward {self.version.label}"):
                self.launch(y, x, k, bias, batch)
            dev.synchronize()
        except cuda.Error as exc:
            raise GpuError(f"kernel {self.version.label} failed: {cuda_error_line(exc)}") from exc
        return time.perf_counter() - start

    def accumulate(self, y, tmp, batch):
        """y += tmp over the layer's outputs (req='add' on device arrays)."""
        count = self.shape.outputs(batch)
        self.add_into(np.uintp(y), np.uintp(tmp), np.int64(count), block=(256, 1, 1),
                      grid=(min(math.ceil(count / 256), 1 << 16), 1))
        self.device.synchronize()


def plan_for(device, shape, version, tuning_overrides=None):
    """The device's plan for ``version`` on ``shape`` (call inside ``device.active()``)."""
    key = (version, shape, tuple(sorted(module_defines(VERSIONS[version].inner(shape), tuning_overrides).items())))
    return device.plan(key, lambda: ConvPlan(device, shape, version, tuning_overrides))


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
        bd = 0
        with dev.timed("[CUDA memcpy HtoD] x, k"):
            cuda.memcpy_htod(xd, x)
            cuda.memcpy_htod(kd, k)
            if shape.BIAS:
                bias = np.ascontiguousarray(bias, dtype=np.float32)
                bd = dev.buffer("bias", bias.nbytes)
                cuda.memcpy_htod(bd, bias)
        seconds = plan.forward(int(yd), int(xd), int(kd), int(bd), batch)
        staging = dev.pinned("y", out.size).reshape(y_shape)
        with dev.timed("[CUDA memcpy DtoH] y"):
            cuda.memcpy_dtoh(staging, yd)
        with dev.timed_host("[host copy] y -> caller"):
            parallel_copy(out, staging, add=accumulate)
    return out, seconds


def conv2d_forward_device(y_ptr, x_ptr, k_ptr, x_shape, k_shape, bias_ptr=None, spec=None, version=None,
                          accumulate=False, device=None):
    """Device pointers in and out (zero-copy, e.g. MXNet GPU arrays): returns op_seconds.

    The caller synchronises its own framework before the call; this returns after
    the device is idle again.
    """
    if spec is None and bias_ptr:
        spec = ConvSpec.course(k_shape).with_(no_bias=False)
    shape = ConvShape.of(x_shape, k_shape, spec)
    version = choose_version(version, shape)
    batch = int(x_shape[0])
    if batch == 0:
        return 0.0
    bias = int(bias_ptr or 0)
    dev = GpuDevice.get(device)
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
