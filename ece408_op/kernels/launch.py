"""Running a layer: plans (a version compiled for a shape class) and the two entry points."""
import math
import time

import numpy as np

from ..conv.parallel import parallel_copy
from ..errors import GpuError
from .device import GpuDevice, cuda_error_line
from .shape import ConvShape
from .versions import VERSIONS, choose_version, module_defines


class ConvPlan:
    """One version compiled for one shape class on one device: its kernels and their launch."""

    def __init__(self, device, shape, version, defines):
        self.device, self.shape, self.version = device, shape, VERSIONS[version]
        self.defines = defines                       # as compiled: the launch sizes its grid from them
        module = device.module(defines)
        self.kernels = [module.get_function(name) for name in self.version.kernels]
        self.weights_symbol = module.get_global("c_weights")[0] if self.version.constant_weights else None
        self.warm = False

    def launch(self, y, x, k, batch):
        """Queue the layer's kernels (device pointers as ints); no synchronisation."""
        if self.weights_symbol is not None:          # part of the forward, as in the course
            self.device.cuda.memcpy_dtod(self.weights_symbol, k, self.shape.M * self.shape.CKK * 4)
        self.version.launch(self, y, x, k, batch)

    def forward(self, y, x, k, batch):
        """The course's Op Time: zero y, synchronise, clock, kernels, synchronise, clock.

        The first call of a plan launches its kernels once before that, untimed, so that
        first-launch costs (module and constant-bank set-up, idle clocks) stay out of Op Time.
        """
        cuda, dev = self.device.cuda, self.device
        try:
            if not self.warm:
                self.launch(y, x, k, batch)
                dev.synchronize()
                self.warm = True
            with dev.timed("[memset] y"):
                cuda.memset_d32(y, 0, self.shape.outputs(batch))
            dev.synchronize()
            start = time.perf_counter()
            with dev.timed(f"conv_forward {self.version.label}"):
                self.launch(y, x, k, batch)
            dev.synchronize()
        except cuda.Error as exc:
            raise GpuError(f"kernel {self.version.label} failed: {cuda_error_line(exc)}") from exc
        return time.perf_counter() - start


def plan_for(device, shape, version, tuning_overrides=None):
    """The device's plan for ``version`` on ``shape`` (call inside ``device.active()``)."""
    defines = module_defines(shape, tuning_overrides)
    key = (version, tuple(sorted(defines.items())))
    return device.plan(key, lambda: ConvPlan(device, shape, version, defines))


def conv2d_forward_gpu(x, k, out=None, version=None, accumulate=False, device=None):
    """Host arrays in, host array out: (y, op_seconds).

    x is copied in, y copied back through the device's page-locked buffer (full-speed
    transfers), then into ``out`` (which may be another library's memory, e.g. MXNet's
    output), all while the device is held, so concurrent callers never share the buffer.
    ``accumulate`` adds to ``out`` instead (req='add'). Op Time covers the kernels (and, for
    the constant-memory versions v3, v4 and v7, the copy of the weights into the bank).
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
        with dev.timed("[CUDA memcpy HtoD] x, k"):
            cuda.memcpy_htod(xd, x)
            cuda.memcpy_htod(kd, k)
        seconds = plan.forward(int(yd), int(xd), int(kd), batch)
        staging = dev.pinned("y", out.size).reshape(y_shape)
        with dev.timed("[CUDA memcpy DtoH] y"):
            cuda.memcpy_dtoh(staging, yd)
        with dev.timed_host("[host copy] y -> caller"):
            parallel_copy(out, staging, add=accumulate)
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
        count = shape.outputs(batch)
        tmp = dev.buffer("y-add", count * 4)
        seconds = plan.forward(int(tmp), int(x_ptr), int(k_ptr), batch)
        add_into = dev.module(plan.defines).get_function("add_into")
        add_into(np.uintp(int(y_ptr)), np.uintp(int(tmp)), np.int64(count), block=(256, 1, 1),
                 grid=(min(math.ceil(count / 256), 1 << 16), 1))
        dev.synchronize()
        return seconds
