"""The version table. Each version carries, side by side: the kernels it launches, what it
cannot run (its capability check), the compile-time constants it needs and the grid it
launches with. The constants go into the module as ``#define``s and the launch reads them
back from the plan, so host and device agree.

A ``general`` version computes any ConvShape itself (padding, stride, dilation, groups,
rectangular kernels, bias). The others are the course's kind of kernel (stride 1, no
dilation, one group, square kernel): for them the launcher pads x into a workspace first and
adds the bias after (``ConvShape.unpadded`` is the layer they see), and every other layer is
refused by their capability check, so that ``default_version`` falls back to one that runs it.

Adding a version: write its kernel in conv_forward.cu (one line in the header saying how it
differs from the previous one), add a class here, put its number in PREFERENCE.
"""
import math
import os

import numpy as np

from ..errors import GpuError, ShapeError
from . import tuning

KERNEL_ENV = "ECE408_KERNEL"
CONST_WEIGHTS = 16384     # floats of __constant__ memory for weights (64 KB): v3, v4, v7


def _ints(*values):
    return [np.int32(v) for v in values]


class Version:
    number = 0
    name = ""
    kernels = ()              # entry points in conv_forward.cu, in launch order
    constant_weights = False  # every launch copies k into constant memory (inside Op Time)
    general = False           # computes padding, stride, dilation, groups, rectangular kernels, bias itself

    def inner(self, shape):
        """The layer this version's kernels compute: ``shape`` itself, or for a course-style
        version the unpadded, bias-free layer the launcher wraps around it."""
        return shape if self.general else shape.unpadded()

    def unsupported(self, shape, tuning_overrides=None):
        """None if this version runs ``shape``, else a short reason."""
        if not self.general:
            reason = shape.course_reason()
            if reason:
                return reason
        return self.limits(self.inner(shape), tuning_overrides)

    def limits(self, inner, tuning_overrides=None):
        """None, or why the kernels cannot run ``inner`` (the layer they compute) on this device."""
        return None

    def defines(self, inner, tuning_overrides=None):
        """The ``#define``s its kernels are compiled with (the same values size its grid)."""
        return {}

    def launch(self, plan, y, x, k, bias, batch):
        """Queue the kernels on device pointers (ints; bias 0 where there is none); no
        synchronisation. ``plan.inner`` is the layer they compute."""
        raise NotImplementedError

    @property
    def label(self):
        return f"v{self.number} {self.name}"


def _const_weights_reason(floats):
    if floats > CONST_WEIGHTS:
        return f"weights ({floats} floats) exceed constant memory ({CONST_WEIGHTS})"
    return None


class Naive(Version):
    number, name, kernels = 1, "naive", ("conv_forward_v1",)
    general = True
    THREADS = 256

    def launch(self, plan, y, x, k, bias, batch):
        s = plan.inner
        plan.kernels[0](np.uintp(y), np.uintp(x), np.uintp(k), np.uintp(bias),
                        *_ints(batch, s.C, s.H, s.W, s.M, s.KH, s.KW, s.SH, s.SW, s.PH, s.PW, s.DH, s.DW, s.G),
                        block=(self.THREADS, 1, 1), grid=(math.ceil(s.outputs(batch) / self.THREADS), 1))


class Shared(Version):
    number, name, kernels = 2, "shared", ("conv_forward_v2",)
    TILE = 16                 # output tile edge, shared by v2-v4

    def defines(self, inner, tuning_overrides=None):
        return {"TILE": self.TILE}

    def launch(self, plan, y, x, k, bias, batch):
        s, tile = plan.inner, plan.defines["TILE"]
        tiles = math.ceil(s.HO / tile) * math.ceil(s.WO / tile)
        plan.kernels[0](np.uintp(y), np.uintp(x), np.uintp(k), *_ints(batch, s.C, s.H, s.W, s.M, s.K),
                        block=(tile, tile, 1), grid=(tiles, s.M, min(batch, 65535)),
                        shared=(tile + s.K - 1) ** 2 * 4)


class Constant(Shared):
    number, name, kernels = 3, "constant", ("conv_forward_v3",)
    constant_weights = True

    def limits(self, inner, tuning_overrides=None):
        return _const_weights_reason(inner.M * inner.CKK)


class Register(Version):
    number, name, kernels = 4, "register", ("conv_forward_v4",)
    constant_weights = True
    MB = 4                    # filters per thread

    def limits(self, inner, tuning_overrides=None):
        # The last group of MB filters reads past M (results not stored): that must stay in the bank.
        return _const_weights_reason(math.ceil(inner.M / self.MB) * self.MB * inner.CKK)

    def defines(self, inner, tuning_overrides=None):
        return {"TILE": Shared.TILE, "MB": self.MB}

    def launch(self, plan, y, x, k, bias, batch):
        s, tile = plan.inner, plan.defines["TILE"]
        tiles = math.ceil(s.HO / tile) * math.ceil(s.WO / tile)
        plan.kernels[0](np.uintp(y), np.uintp(x), np.int32(batch), block=(tile, tile, 1),
                        grid=(tiles, math.ceil(s.M / plan.defines["MB"]), min(batch, 65535)))


def _gemm_grid(s, tile, images):
    """v5/v6: (output-position tiles, groups x filter tiles of a group, images)."""
    return (math.ceil(s.HO * s.WO / tile), s.G * math.ceil(s.M // s.G / tile), min(images, 65535))


class Im2col(Version):
    number, name, kernels = 5, "im2col", ("im2col_v5", "gemm_v5")
    general = True
    GEMM_TILE = 16            # GEMM tile edge, shared with v6
    WORKSPACE_BYTES = 256 << 20   # im2col of as many images as fit

    def defines(self, inner, tuning_overrides=None):
        return {"GEMM_TILE": self.GEMM_TILE}

    def launch(self, plan, y, x, k, bias, batch):
        s, tile = plan.inner, plan.defines["GEMM_TILE"]
        per_image = s.G * s.CKK * s.HO * s.WO * 4          # every group's unrolled matrix
        chunk = max(1, min(batch, self.WORKSPACE_BYTES // per_image))
        cols = int(plan.device.buffer("im2col", chunk * per_image))
        im2col, gemm = plan.kernels
        for b0 in range(0, batch, chunk):
            n = min(chunk, batch - b0)
            im2col(np.uintp(cols), np.uintp(x), np.int64(b0), np.int32(n), block=(256, 1, 1),
                   grid=(min(math.ceil(n * per_image / 4 / 256), 1 << 20), 1))
            gemm(np.uintp(y), np.uintp(cols), np.uintp(k), np.uintp(bias), np.int64(b0), np.int32(n),
                 block=(tile, tile, 1), grid=_gemm_grid(s, tile, n))


class Implicit(Version):
    number, name, kernels = 6, "implicit", ("conv_forward_v6",)
    general = True

    def defines(self, inner, tuning_overrides=None):
        return {"GEMM_TILE": Im2col.GEMM_TILE}

    def launch(self, plan, y, x, k, bias, batch):
        s, tile = plan.inner, plan.defines["GEMM_TILE"]
        plan.kernels[0](np.uintp(y), np.uintp(x), np.uintp(k), np.uintp(bias), np.int64(0), np.int32(batch),
                        block=(tile, tile, 1), grid=_gemm_grid(s, tile, batch))


class Strip(Version):
    """Tuned by the sweep (tuning.json): VEC outputs per thread, filter-loop unroll, streaming
    stores, threads per block."""
    number, name, kernels = 7, "strip", ("conv_forward_v7",)
    constant_weights = True
    MAX_REGS = 128                 # a thread keeps C*K*(VEC+K-1) inputs (K*(VEC+K-1) at least)
    MAX_UNROLLED_FMAS = 20000      # "full" unroll only below this many FMAs in the filter loop

    def vec(self, shape, values):
        """Outputs per thread: the tuned width where a channel's strip fits in registers, else 1."""
        wide = int(values["VEC"])
        return wide if shape.WO >= wide and shape.K * (shape.K + wide - 1) <= self.MAX_REGS else 1

    def all_channels(self, shape, vec):
        """Whether every channel's strip fits in registers at once."""
        return shape.C * shape.K * (vec + shape.K - 1) <= self.MAX_REGS

    def unroll(self, shape, values, vec):
        if values["UNROLL_M"] != "full":
            return min(int(values["UNROLL_M"]), shape.M)
        body = (shape.CKK if self.all_channels(shape, vec) else shape.K * shape.K) * vec   # FMAs per filter
        return shape.M if shape.M * body <= self.MAX_UNROLLED_FMAS else min(5, shape.M)

    def limits(self, inner, tuning_overrides=None):
        vec = self.vec(inner, tuning.v7_values(tuning_overrides))
        strip = inner.K * (vec + inner.K - 1)
        if strip > self.MAX_REGS:
            return f"a K*(VEC+K-1) = {strip} register strip is too large"
        return _const_weights_reason(inner.M * inner.CKK)

    def defines(self, inner, tuning_overrides=None):
        values = tuning.v7_values(tuning_overrides)
        vec = self.vec(inner, values)
        enabled = inner.course_reason() is None and self.limits(inner, tuning_overrides) is None
        return {"VEC": vec, "V7_THREADS": int(values["THREADS"]), "V7_UNROLL_M": self.unroll(inner, values, vec),
                "V7_STREAM": int(values["STREAM"]), "V7_ENABLED": int(enabled),
                "V7_ALL_CHANNELS": int(self.all_channels(inner, vec))}

    def launch(self, plan, y, x, k, bias, batch):
        s, threads = plan.inner, plan.defines["V7_THREADS"]
        total = batch * s.HO * math.ceil(s.WO / plan.defines["VEC"])
        plan.kernels[0](np.uintp(y), np.uintp(x), np.int32(batch), block=(threads, 1, 1),
                        grid=(math.ceil(total / threads), 1))


VERSIONS = {v.number: v for v in (Naive(), Shared(), Constant(), Register(), Im2col(), Implicit(), Strip())}
# Fastest first, from the H100 benchmark of the course layer (README): v7 0.43 ms, v4 1.74,
# v6 3.04, v5 3.70, v1 5.72, v3 7.33, v2 7.61. v1, v2, v5 and v6 run every shape.
PREFERENCE = (7, 4, 6, 5, 1, 3, 2)


def module_defines(inner, tuning_overrides=None):
    """Every ``#define`` of the module for the layer ``inner``: its sizes and each version's constants."""
    defines = {**inner.defines(), "CONST_WEIGHTS": CONST_WEIGHTS}
    for version in VERSIONS.values():
        defines.update(version.defines(inner, tuning_overrides))
    return defines


def parse_version(text):
    """'auto' / None -> None; '3', 'v3', 'constant' -> 3. Raises GpuError for anything else."""
    if text is None or str(text).strip().lower() in ("", "auto"):
        return None
    key = str(text).strip().lower()
    for version in VERSIONS.values():
        if key in (str(version.number), f"v{version.number}", version.name):
            return version.number
    names = ", ".join(f"{v.number}/{v.name}" for v in VERSIONS.values())
    raise GpuError(f"unknown kernel {text!r}; choose auto or one of {names}")


def default_version(shape):
    """The fastest version that supports ``shape``."""
    return next(n for n in PREFERENCE if VERSIONS[n].unsupported(shape) is None)


def choose_version(requested, shape):
    """Resolve 'auto'/None (then $ECE408_KERNEL) and check support; returns a version number."""
    if requested is None or str(requested).strip().lower() in ("", "auto"):
        requested = os.environ.get(KERNEL_ENV)
    number = parse_version(requested)
    if number is None:
        return default_version(shape)
    reason = VERSIONS[number].unsupported(shape)
    if reason:
        raise ShapeError(f"kernel {VERSIONS[number].label} cannot run this layer: {reason}; use kernel=auto")
    return number
