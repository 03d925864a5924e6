"""Plans: a version (or the fused kernel) compiled for one shape class on one device, its kernels
and their launch, with the course's Op Time around it (``_TimedPlan.forward``).

``module_spec(owner, inner, overrides)`` is the module a plan loads: the owner's CUDA file and its
``#define``s (the layer's sizes, the owner's constants and tuning); the launch reads them back from
``plan.defines``, so host and device agree. A version whose kernels take the layer's sizes as an argument
(``Version.dynamic``: v8, v9, v13, v20) leaves them out of its module (``CONV_DYNAMIC``): the plan passes
them at launch (``plan.dims``, common.cuh's ConvDims), and one module serves every layer of a tile.
The entry points that run plans are in ``launch.py``.
"""
import math
import time

import numpy as np

from ..errors import GpuError, ShapeError
from . import cudadrv
from .build import ModuleSpec
from .choice import choose_version
from .device import cuda_error_line
from .versions import FUSED, VERSIONS
from .versions.version import CONST_WEIGHTS, conv_dims

SHARED_DEFAULT_LIMIT = 48 * 1024     # dynamic shared memory beyond this needs the function's opt-in


def tuning_keys():
    return {key for owner in (*VERSIONS.values(), FUSED) for key in owner.tuning_keys}


def module_defines(owner, inner, tuning_overrides=None, static=False):
    """Every ``#define`` of the module of ``owner`` (a version number, or FUSED) for the layer ``inner``:
    its sizes and the owner's constants. ``tuning_overrides``: keys of any version's ``tuning_keys``
    (each owner takes its own). ``static``: the sizes as #defines even where the version can take them
    at run time (the layer's specialised module, built in the background: launch.py)."""
    unknown = set(tuning_overrides or {}) - tuning_keys()
    if unknown:
        raise ValueError(f"unknown tuning keys {sorted(unknown)}; use {', '.join(sorted(tuning_keys()))}")
    compiled = FUSED if owner is FUSED else VERSIONS[int(owner)]
    if compiled is not FUSED and compiled.dynamic:
        sizes = ({"CONV_DYNAMIC": 1, **compiled.static_dims(inner)} if compiled.sizes_at_run_time(inner) and not static
                 else {"CONV_DYNAMIC": 0, **inner.defines()})
    else:
        sizes = inner.defines()
    defines = {**sizes, "CONST_WEIGHTS": CONST_WEIGHTS, **compiled.defines(inner, tuning_overrides)}
    if compiled is not FUSED and compiled.tf32:
        defines.setdefault("TF32_PASSES", 3)  # (tf32.cuh's default, stated: precision 'tf32' passes 1)
    if compiled.arch_features:
        defines["ARCH_FEATURES"] = 1          # build.build_cubin: sm_90 -> sm_90a
    return defines


def module_spec(owner, inner, tuning_overrides=None, static=False):
    """The module a plan of ``owner`` on ``inner`` loads (a build.ModuleSpec: its file, its defines)."""
    compiled = FUSED if owner is FUSED else VERSIONS[int(owner)]
    return ModuleSpec(compiled.source_path,
                      tuple(sorted(module_defines(owner, inner, tuning_overrides, static).items())))


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
        except (cuda.Error, cudadrv.DriverError) as exc:
            raise GpuError(f"kernel {self.label} failed: {cuda_error_line(exc)}") from exc
        return time.perf_counter() - start


class ConvPlan(_TimedPlan):
    """One version compiled for one shape class on one device: its kernels and their launch.

    ``shape`` is the caller's layer; ``inner`` the one the version's kernels compute (the same,
    or for a course-style version the unpadded, bias-free layer: the plan pads x into a
    workspace before and adds the bias after, both inside the timed launch)."""

    def __init__(self, device, shape, version, tuning_overrides=None, static=False):
        self.device, self.shape, self.version = device, shape, VERSIONS[version]
        wrong_device = self.version.arch_reason(device.arch)
        if wrong_device:                      # (v20 on another GPU: its entry point would trap)
            raise GpuError(f"kernel {self.version.label} cannot run on device {device.index}: {wrong_device}")
        self.tuning_overrides = dict(tuning_overrides or {})
        self.inner = self.version.inner(shape)
        self.module_spec = module_spec(version, self.inner, tuning_overrides, static)
        # the launch sizes its grid from them (the layer's sizes too where the module takes them at run time)
        self.defines = {**self.inner.defines(), **self.module_spec.define_dict()}
        self.dims = conv_dims(self.inner) if self.defines.get("CONV_DYNAMIC") else ()   # the kernels' ConvDims
        module = device.module(self.module_spec)
        self.kernels = [module.get_function(name) for name in self.version.kernels]
        self.pad_input = module.get_function("pad_input") if self.inner.H != shape.H or self.inner.W != shape.W else None
        self.add_bias = module.get_function("add_bias") if shape.BIAS and not self.inner.BIAS else None
        self.add_into = module.get_function("add_into")
        self.weights_symbol = module.get_global("c_weights")[0] if self.version.constant_weights else None
        self.shared_bytes = self.version.shared_bytes(self.defines)
        if self.shared_bytes > SHARED_DEFAULT_LIMIT:     # (a module shared by several layers: the largest asked)
            for kernel in self.kernels:
                kernel.raise_shared_limit(self.shared_bytes)
        self.label = f"conv_forward {self.version.label}"
        self.warm = False

    def outputs(self, batch):
        return self.shape.outputs(batch)

    def launch(self, y, x, k, bias, batch):
        """Queue the layer's kernels (device pointers as ints, bias 0 for none); no synchronisation."""
        s = self.shape
        x = _prepare(self, x, k, batch, bias)
        self.version.launch(self, y, x, k, bias if self.inner.BIAS else 0, batch)
        if self.add_bias is not None:
            count = s.outputs(batch)
            self.add_bias(np.uintp(y), np.uintp(bias), np.int64(count), np.int32(s.M), np.int32(s.HO * s.WO),
                          block=(256, 1, 1), grid=(min(math.ceil(count / 256), 1 << 20), 1))

    def accumulate(self, y, tmp, batch, synchronize=True):
        """y += tmp over the layer's outputs (req='add' on device arrays)."""
        count = self.shape.outputs(batch)
        self.add_into(np.uintp(y), np.uintp(tmp), np.int64(count), block=(256, 1, 1),
                      grid=(min(math.ceil(count / 256), 1 << 16), 1))
        if synchronize:
            self.device.synchronize()

    def subplan(self, shape, version, tuning_overrides=None):
        """The device's plan of another version and layer (v12: its 36 GEMMs' plan)."""
        return plan_for(self.device, shape, version, tuning_overrides)


def _prepare(plan, x, k, batch, bias=0):
    """Before a course-style kernel: pad x into a workspace (returns the x to read) and copy the
    weights into the constant bank (part of the forward, as in the course), and after them the bias
    where the version adds it from there (v7: ``Strip.inner`` keeps the bias)."""
    s, inner = plan.shape, plan.inner
    if plan.pad_input is not None:
        planes = batch * s.C
        padded = int(plan.device.buffer("x-padded", planes * inner.H * inner.W * 4))
        plan.pad_input(np.uintp(padded), np.uintp(x), np.int64(planes), *map(np.int32, (s.H, s.W, s.PH, s.PW)),
                       block=(256, 1, 1), grid=(min(math.ceil(planes * inner.H * inner.W / 256), 1 << 20), 1))
        x = padded
    if plan.weights_symbol is not None:       # on the launch stream, in order with the kernels
        cudadrv.memcpy_dtod_async(plan.weights_symbol, k, s.M * s.CKK * 4)
        if plan.inner.BIAS and bias:
            cudadrv.memcpy_dtod_async(plan.weights_symbol + s.M * s.CKK * 4, bias, s.M * 4)
    return x


class FusedPlan(_TimedPlan):
    """Convolution (+ bias) + tanh + 2x2/2 max-pool of one shape class on one device.

    ``conv`` None: the fused kernel (one pass; x padded first where the layer has padding).
    Else ``conv`` is a convolution plan: it writes the convolution into a workspace and the
    tanh_pool kernel pools it (any layer; also the baseline the fused kernel is measured against)."""

    def __init__(self, device, shape, conv=None, tuning_overrides=None):
        self.device, self.shape, self.conv = device, shape, conv
        self.inner = shape.unpadded()
        self.module_spec = conv.module_spec if conv else module_spec(FUSED, self.inner, tuning_overrides)
        self.defines = self.module_spec.define_dict()
        module = device.module(self.module_spec)
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


def plan_for(device, shape, version, tuning_overrides=None, static=False):
    """The device's plan for ``version`` on ``shape`` (call inside ``device.active()``); ``static``: its
    module with the sizes as #defines (``module_defines``)."""
    key = (version, shape, module_spec(version, VERSIONS[version].inner(shape), tuning_overrides, static))
    return device.plan(key, lambda: ConvPlan(device, shape, version, tuning_overrides, static))


def fused_plan_for(device, shape, version=None, tuning_overrides=None, precision=None):
    """The device's fused plan for ``shape``: ``version`` None/'auto' is the fused kernel where it
    runs the layer, else the default convolution + tanh_pool; 'fused' the fused kernel (ShapeError
    where it cannot run the layer); a convolution version, that version + tanh_pool."""
    text = None if version is None else str(version).strip().lower()
    reason = FUSED.reason(shape, tuning_overrides)
    if text in (None, "", "auto") and reason is None or text == FUSED.name:
        if reason:
            raise ShapeError(f"the fused kernel cannot run this layer: {reason}; use version=auto")
        key = ("fused", shape, module_spec(FUSED, shape.unpadded(), tuning_overrides))
        return device.plan(key, lambda: FusedPlan(device, shape, None, tuning_overrides))
    if shape.HO < 2 or shape.WO < 2:
        raise ShapeError(f"the {shape.HO}x{shape.WO} convolution output has no 2x2 window to pool")
    number = choose_version(version, shape, device.name, precision)
    conv = plan_for(device, shape, number, tuning_overrides)
    return device.plan(("fused+conv", conv), lambda: FusedPlan(device, shape, conv))
