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

Which version runs a layer by default: the per-device table ``defaults.json`` (written by
``python -m ece408_op bench gpu --suite --apply`` from measurements on that device, keyed by
the device's name and the layer's shape class), else the first version of PREFERENCE that
runs the layer and suits it (``suits``: v7 only where every channel's strip fits in registers).
The fused conv + tanh + max-pool kernel is not a version (it computes another function); its
capability check and defines are FUSED's, here too, because they share the module.
"""
import functools
import json
import math
import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..conv.bounds import fft_reference_and_bound, fp16_reference_and_bound
from ..conv.reference import reference_and_bound
from ..errors import GpuError, ShapeError
from . import libraries, tuning
from .shape import ConvShape

KERNEL_ENV = "ECE408_KERNEL"
DEFAULTS_FILE = Path(__file__).with_name("defaults.json")
MAX_SHARED = 227 * 1024   # bytes of shared memory a block may opt into on sm_80/sm_90
CONST_WEIGHTS = 16384     # floats of __constant__ memory for weights (64 KB): v3, v4, v7


def _ints(*values):
    return [np.int32(v) for v in values]


class Version:
    number = 0
    name = ""
    kernels = ()              # entry points in conv_forward.cu, in launch order
    constant_weights = False  # every launch copies k into constant memory (inside Op Time)
    general = False           # computes padding, stride, dilation, groups, rectangular kernels, bias itself
    tuning_keys = ()          # the tuning overrides it takes (see module_defines)
    exact = True              # plain float32 arithmetic (v9: error-compensated TF32 tensor cores)
    defaultable = True        # may be a default (measured table or fallback); v12 only when asked for
    own_error_model = False   # checked against its own error model (v17 FP16, v19 FFT), not the float32 bound
    arch_features = False     # built for the device's architecture-specific target (v20: sm_90a's wgmma)

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

    def own(self, tuning_overrides):
        """The overrides among ``tuning_overrides`` that are this version's."""
        return {k: v for k, v in (tuning_overrides or {}).items() if k in self.tuning_keys}

    def suits(self, shape):
        """Whether the fallback rule (no measured table for the device) may pick it for ``shape``."""
        return True

    def shared_bytes(self, defines):
        """Dynamic shared memory per block (bytes) of its launch."""
        return 0

    def launch(self, plan, y, x, k, bias, batch):
        """Queue the kernels on device pointers (ints; bias 0 where there is none); no
        synchronisation. ``plan.inner`` is the layer they compute."""
        raise NotImplementedError

    def available(self):
        """None if this machine has what the version calls besides its kernels (v18, v19: cuBLAS,
        cuFFT), else why not; checked where it runs, not by ``unsupported`` (a property of the layer)."""
        return None

    def arch_reason(self, arch):
        """None if its kernels run on a device of ``arch`` ('sm_90'), else why not (v20: 9.0 only)."""
        return None

    def launches(self, defines):
        """Kernel launches per call (besides a course-style version's padding and bias passes)."""
        return len(self.kernels)

    def reference_and_bound(self, x, k, bias=None, spec=None):
        """(float64 reference, elementwise bound its results must meet): the float32 bound, or the
        version's own error model (``own_error_model``; ece408_op/conv/bounds.py)."""
        return reference_and_bound(x, k, bias, spec)

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
        s = plan.inner
        per_image = s.G * s.CKK * s.HO * s.WO * 4          # every group's unrolled matrix
        chunk = max(1, min(batch, self.WORKSPACE_BYTES // per_image))
        cols = int(plan.device.buffer("im2col", chunk * per_image))
        for b0 in range(0, batch, chunk):
            n = min(chunk, batch - b0)
            plan.kernels[0](np.uintp(cols), np.uintp(x), np.int64(b0), np.int32(n), block=(256, 1, 1),
                            grid=(min(math.ceil(n * per_image / 4 / 256), 1 << 20), 1))
            self.multiply(plan, y, cols, k, bias, b0, n)

    def multiply(self, plan, y, cols, k, bias, b0, n):
        """y's images b0 .. b0 + n - 1 from their unrolled columns ``cols``: v5's tiled GEMM kernel."""
        s, tile = plan.inner, plan.defines["GEMM_TILE"]
        plan.kernels[1](np.uintp(y), np.uintp(cols), np.uintp(k), np.uintp(bias), np.int64(b0), np.int32(n),
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
    tuning_keys = tuning.V7_KEYS
    MAX_REGS = 128                 # a thread keeps C*K*(VEC+K-1) inputs (K*(VEC+K-1) at least)
    MAX_UNROLLED_FMAS = 20000      # "full" unroll only below this many FMAs in the filter loop, and
                                   # only with one channel; several channels' strips: SEVERAL_UNROLL
    SEVERAL_UNROLL = 8             # VGG's first layer (H100, --tiles): 0.191 ms unrolled 8 times, 0.206
                                   # 5 times, 0.244 fully (68 registers, no spills, 4096 instructions)

    def inner(self, shape):
        """The unpadded layer, its bias kept where it fits in the constant bank after the weights: v7 starts
        each sum from it (a separate add_bias pass reads and writes y again: VGG's first layer, 411 MB)."""
        inner = shape.unpadded()
        if shape.BIAS and shape.course_reason() is None and shape.M * (shape.CKK + 1) <= CONST_WEIGHTS:
            return replace(inner, BIAS=1)
        return inner

    def vec(self, shape, values):
        """Outputs per thread: the tuned width where a channel's strip fits in registers, else 1."""
        wide = int(values["VEC"])
        return wide if shape.WO >= wide and shape.K * (shape.K + wide - 1) <= self.MAX_REGS else 1

    def all_channels(self, shape, vec):
        """Whether every channel's strip fits in registers at once."""
        return shape.C * shape.K * (vec + shape.K - 1) <= self.MAX_REGS

    def unroll(self, shape, values, vec, forced=None):
        """The filter loop's unroll factor: ``forced`` (an explicit override) if given; else the stored
        tuning where the sweep measured it (one channel); several channels' strips held at once:
        SEVERAL_UNROLL; one channel reloaded per filter: fully where the body is small, else 5 (a
        tuned 16 with a remainder spilled 28 bytes on 2019 conv2)."""
        wanted = forced if forced is not None else values["UNROLL_M"]
        all_channels = self.all_channels(shape, vec)
        if forced == "full":
            return shape.M
        if forced is None and shape.C > 1:
            if all_channels:
                return min(self.SEVERAL_UNROLL, shape.M)
            wanted = "full"
        if wanted != "full":
            return min(int(wanted), shape.M)
        body = (shape.CKK if all_channels else shape.K * shape.K) * vec     # FMAs per filter
        several = shape.C > 1 and all_channels
        return shape.M if shape.M * body <= self.MAX_UNROLLED_FMAS and not several else min(5, shape.M)

    def stream(self, shape, values, vec, tuning_overrides=None):
        """Streaming stores: as tuned (or overridden) where y leaves in 16-byte stores, as on the course
        layer where the sweep measured it; always for one-float stores (2019 conv1, H100: v7 2.02 ms
        streaming, 2.78 ms plain)."""
        wide = vec % 4 == 0 and shape.WO % vec == 0          # as store_strip decides in conv_forward.cu
        forced = self.own(tuning_overrides).get("STREAM")
        return int(values["STREAM"]) if wide or forced is not None else 1

    def limits(self, inner, tuning_overrides=None):
        vec = self.vec(inner, tuning.v7_values(self.own(tuning_overrides)))
        strip = inner.K * (vec + inner.K - 1)
        if strip > self.MAX_REGS:
            return f"a K*(VEC+K-1) = {strip} register strip is too large"
        return _const_weights_reason(inner.M * inner.CKK)

    def defines(self, inner, tuning_overrides=None):
        values = tuning.v7_values(self.own(tuning_overrides))
        vec = self.vec(inner, values)
        enabled = inner.course_reason() is None and self.limits(inner, tuning_overrides) is None
        unroll = self.unroll(inner, values, vec, self.own(tuning_overrides).get("UNROLL_M"))
        return {"VEC": vec, "V7_THREADS": int(values["THREADS"]), "V7_UNROLL_M": unroll,
                "V7_STREAM": self.stream(inner, values, vec, tuning_overrides), "V7_ENABLED": int(enabled),
                "V7_ALL_CHANNELS": int(self.all_channels(inner, vec))}

    def suits(self, shape):
        inner = self.inner(shape)
        return self.all_channels(inner, self.vec(inner, tuning.v7_values()))

    def launch(self, plan, y, x, k, bias, batch):
        s, threads = plan.inner, plan.defines["V7_THREADS"]
        total = batch * s.HO * math.ceil(s.WO / plan.defines["VEC"])
        plan.kernels[0](np.uintp(y), np.uintp(x), np.int32(batch), block=(threads, 1, 1),
                        grid=(math.ceil(total / threads), 1))


class Filters(Version):
    """v7 with the loops swapped: channels streamed through one strip, every filter's accumulators held."""
    number, name, kernels = 10, "filters", ("conv_forward_v10",)
    constant_weights = True
    tuning_keys = ("V10_VEC", "V10_THREADS", "V10_UNROLL_C")
    MAX_REGS = 160                 # M * VEC accumulators + a K x (VEC+K-1) strip
    MAX_UNROLLED_FMAS = 12000      # the channel loop unrolls fully below this many FMAs

    def vec(self, inner, overrides=None):
        """Outputs per thread: the widest of 4, 2, 1 whose accumulators and strip fit (0: none)."""
        wanted = self.own(overrides).get("V10_VEC")
        for vec in ((int(wanted),) if wanted else (4, 2, 1)):
            if inner.WO >= vec and inner.M * vec + inner.K * (vec + inner.K - 1) <= self.MAX_REGS:
                return vec
        return 0

    def limits(self, inner, tuning_overrides=None):
        if not self.vec(inner, tuning_overrides):
            return f"{inner.M} filters' accumulators and a {inner.K}-row strip exceed {self.MAX_REGS} registers"
        return _const_weights_reason(inner.M * inner.CKK)

    def defines(self, inner, tuning_overrides=None):
        own = self.own(tuning_overrides)
        vec = self.vec(inner, tuning_overrides) or 1
        full = inner.C * inner.M * inner.K * inner.K * vec <= self.MAX_UNROLLED_FMAS
        enabled = inner.course_reason() is None and self.limits(inner, tuning_overrides) is None
        return {"V10_VEC": vec, "V10_THREADS": int(own.get("V10_THREADS", 128)),
                "V10_UNROLL_C": int(own.get("V10_UNROLL_C", inner.C if full else 1)), "V10_ENABLED": int(enabled)}

    def suits(self, shape):
        return shape.C > 1           # one channel: v7 (all its strips fit) is the faster one

    def launch(self, plan, y, x, k, bias, batch):
        s, d = plan.inner, plan.defines
        total = batch * s.HO * math.ceil(s.WO / d["V10_VEC"])
        plan.kernels[0](np.uintp(y), np.uintp(x), np.int32(batch), block=(d["V10_THREADS"], 1, 1),
                        grid=(math.ceil(total / d["V10_THREADS"]), 1))


def gemm_stride(n):
    """A shared-memory row of n floats padded to 8 (mod 16) floats: conflict-free fragment loads."""
    return n + (24 - n % 16) % 16


def _x_tile_split(threads, bp, bk_min, multiple=1):
    """(ACOLS, BK) for the x tile of v8/v9: each thread copies ACOLS columns of BK / (threads / (bp /
    ACOLS)) rows; BK is the smallest multiple of that row step (and of ``multiple``) >= bk_min."""
    for cols in (4, 2, 1, 8):
        if bp % cols or threads % (bp // cols):
            continue
        step = threads // (bp // cols)
        step = step * multiple // math.gcd(step, multiple)
        return cols, max(step, math.ceil(bk_min / step) * step)
    raise ValueError(f"no split of a {bp}-position tile among {threads} threads")


class _ImplicitGemm(Version):
    """v8 and v9: a block computes a tile of positions x filters, the k-loop pipelined through shared
    memory; tile sizes from the layer's filters per group (``tile``), tuning overrides on top."""
    general = True
    prefix = ""
    BK_MIN, BK_MULTIPLE = 8, 1
    MAX_X = 2**31 - 1         # a launch's x in elements: the kernels' offsets are 32-bit (larger batches: chunks)
    MAX_GKK = 2**16           # C/G*KH*KW: the row decomposition's multiply-high division is exact below it

    def tile(self, inner):
        """The default tile for ``inner`` (a dict of the version's #defines)."""
        raise NotImplementedError

    def threads_and_bp(self, values):
        raise NotImplementedError

    def values(self, inner, tuning_overrides=None):
        own = self.own(tuning_overrides)
        values = {**self.tile(inner), f"{self.prefix}_STAGES": 3}
        values.update({k: v for k, v in own.items() if not k.endswith(("_ACOLS", "_BK"))})
        threads, bp = self.threads_and_bp(values)
        cols, bk = _x_tile_split(threads, bp, self.BK_MIN, self.BK_MULTIPLE)
        values.update({f"{self.prefix}_ACOLS": cols, f"{self.prefix}_BK": bk})
        values.update(own)
        return {k: int(v) for k, v in values.items()}

    def defines(self, inner, tuning_overrides=None):
        values = self.values(inner, tuning_overrides)
        threads, bp = self.threads_and_bp(values)
        cols, bk = values[f"{self.prefix}_ACOLS"], values[f"{self.prefix}_BK"]
        tc = bp // cols if bp % cols == 0 else 0
        if not tc or threads % tc or bk % (threads // tc) or threads > 1024 or threads % 32:
            raise ValueError(f"v{self.number}: tile {values} does not divide among {threads} threads")
        return values

    def shared_bytes(self, defines):
        p = self.prefix
        _, bp = self.threads_and_bp(defines)
        bf = self.bf(defines)
        return defines[f"{p}_STAGES"] * defines[f"{p}_BK"] * (gemm_stride(bp) + gemm_stride(bf)) * 4

    def limits(self, inner, tuning_overrides=None):
        shared = self.shared_bytes(self.defines(inner, tuning_overrides))
        if shared > MAX_SHARED:
            return f"its tiles need {shared} bytes of shared memory (at most {MAX_SHARED})"
        if (inner.PH or inner.PW) and inner.KH * inner.KW > 64:
            return f"a padded {inner.KH}x{inner.KW} window has more taps than its 64-bit mask"
        if inner.CKK >= self.MAX_GKK:
            return f"C/G*KH*KW = {inner.CKK} is not below {self.MAX_GKK}"
        if inner.C * inner.H * inner.W > self.MAX_X:
            return f"one image has more than {self.MAX_X} elements"
        return None

    def launch(self, plan, y, x, k, bias, batch):
        s, d = plan.inner, plan.defines
        threads, bp = self.threads_and_bp(d)
        image, out = s.C * s.H * s.W, s.M * s.HO * s.WO
        chunk = min(batch, self.MAX_X // image)
        for b0 in range(0, batch, chunk):
            n = min(chunk, batch - b0)
            grid = (math.ceil(n * s.HO * s.WO / bp), s.G * math.ceil(s.M // s.G / self.bf(d)))
            plan.kernels[0](np.uintp(y + 4 * b0 * out), np.uintp(x + 4 * b0 * image), np.uintp(k), np.uintp(bias),
                            np.int32(n), block=(threads, 1, 1), grid=grid, shared=plan.shared_bytes)


class Gemm(_ImplicitGemm):
    """Register-tiled implicit GEMM in FP32 (FFMA): each thread a V8_TP x V8_TF micro-tile."""
    number, name, kernels = 8, "gemm", ("conv_forward_v8",)
    prefix = "V8"
    tuning_keys = ("V8_BP", "V8_BF", "V8_TP", "V8_TF", "V8_BK", "V8_STAGES", "V8_ACOLS")

    def tile(self, inner):
        mg = inner.M // inner.G
        if mg > 64:
            return {"V8_BP": 128, "V8_BF": 128, "V8_TP": 8, "V8_TF": 8}
        if mg > 32:
            return {"V8_BP": 128, "V8_BF": 64, "V8_TP": 8, "V8_TF": 4}
        bf = 4 * math.ceil(mg / 4)                  # few filters: all of them, 32 threads along positions
        return {"V8_BP": 256, "V8_BF": bf, "V8_TP": 8, "V8_TF": 4}

    def defines(self, inner, tuning_overrides=None):
        values = super().defines(inner, tuning_overrides)
        bp, bf, tp, tf = (values[f"V8_{k}"] for k in ("BP", "BF", "TP", "TF"))
        if tp % 4 or bp % tp or bf % tf:        # the kernel's static_assert, as one line before nvcc runs
            raise ValueError(f"v8: tile V8_BP={bp} V8_BF={bf} V8_TP={tp} V8_TF={tf} does not divide "
                             "(V8_TP a multiple of 4 dividing V8_BP, V8_TF dividing V8_BF)")
        return values

    def threads_and_bp(self, values):
        bp = values["V8_BP"]
        return (bp // values["V8_TP"]) * (values["V8_BF"] // values["V8_TF"]), bp

    def bf(self, values):
        return values["V8_BF"]


class Tensor(_ImplicitGemm):
    """Implicit GEMM on the tensor cores, error-compensated 3xTF32 (float32 accuracy)."""
    number, name, kernels = 9, "tensor", ("conv_forward_v9",)
    prefix = "V9"
    exact = False
    tuning_keys = ("V9_MI", "V9_NI", "V9_WP", "V9_WF", "V9_BK", "V9_STAGES", "V9_ACOLS")
    BK_MIN, BK_MULTIPLE = 16, 8

    def tile(self, inner):
        # From the tile sweep on the H100 (docs/bench/tiles.md): 8 warps of 64 positions x 32 filters
        # where the planes are large; 32 positions per warp on 14x14 and 7x7 planes, where 256-position
        # tiles leave the last wave of blocks half empty at batch 64; few filters: 4 warps along positions.
        mg = inner.M // inner.G
        if mg > 32:
            return {"V9_WP": 4, "V9_WF": 2, "V9_MI": 4 if inner.HO * inner.WO >= 784 else 2,
                    "V9_NI": min(4, math.ceil(mg / 16))}
        ni = math.ceil(mg / 8)         # 64 positions per warp for 9-16 filters (measured); else 32 (ptxas
        return {"V9_WP": 4, "V9_WF": 1, "V9_MI": 4 if ni == 2 else 2, "V9_NI": ni}   # spilled with 64)

    def threads_and_bp(self, values):
        return 32 * values["V9_WP"] * values["V9_WF"], values["V9_WP"] * values["V9_MI"] * 16

    def bf(self, values):
        return values["V9_WF"] * values["V9_NI"] * 8


class Resident(Version):
    """3xTF32 tensor cores like v9, on whole images kept in shared memory (no im2col gather): the x
    operand read at tap offsets (``tap_order``) from each position's window corner, the weights split
    once per block in fragment order."""
    number, name, kernels = 11, "resident", ("conv_forward_v11",)
    exact = False
    tuning_keys = ("V11_WARPS", "V11_MT", "V11_BUFFERS")
    MAX_M = 64                # 8 fragments of 8 filters per warp (their accumulators in registers)
    MAX_CKK = 512             # the k-loop is unrolled fully: at most 64 k-steps of 8 taps

    def values(self, inner, tuning_overrides=None):
        # From the tile sweep (H100, docs/bench/tiles_v11.md): 2 fragments per warp and one image buffer
        # (other blocks on the SM compute while one loads); 4 warps for at most 16 filters (2018 conv2:
        # 0.588 ms, 8 warps 0.614), else 8 (2019 conv2: 1.90 ms, 4 warps 2.08)
        values = {"V11_WARPS": 4 if inner.M <= 16 else 8, "V11_MT": 2, "V11_BUFFERS": 1}
        values.update(self.own(tuning_overrides))
        return {k: int(v) for k, v in values.items()}

    @staticmethod
    def _shared(c, h, w, m, k, buffers):
        ks, nt = math.ceil(c * k * k / 8), math.ceil(m / 8)
        return ks * nt * 32 * 16 + ks * 4 * 8 + buffers * math.ceil(c * h * w / 4) * 16

    def shared_bytes(self, defines):
        d = defines
        return self._shared(d["CONV_C"], d["CONV_H"], d["CONV_W"], d["CONV_M"], d["CONV_K"], d["V11_BUFFERS"])

    def limits(self, inner, tuning_overrides=None):
        if inner.M > self.MAX_M:
            return f"{inner.M} filters exceed its {self.MAX_M} (accumulators in registers)"
        if inner.CKK > self.MAX_CKK:
            return f"C*K*K = {inner.CKK} exceeds its fully unrolled {self.MAX_CKK}"
        buffers = self.values(inner, tuning_overrides)["V11_BUFFERS"]
        shared = self._shared(inner.C, inner.H, inner.W, inner.M, inner.K, buffers)
        if shared > MAX_SHARED:
            return f"{buffers} image buffers and the split weights need {shared} bytes of shared memory (at most {MAX_SHARED})"
        return None

    def defines(self, inner, tuning_overrides=None):
        enabled = inner.course_reason() is None and self.limits(inner, tuning_overrides) is None
        return {**self.values(inner, tuning_overrides), "V11_ENABLED": int(enabled)}

    def blocks(self, plan):
        """Blocks resident on the device at once (the grid: each loops over images)."""
        cached = getattr(plan, "resident_blocks", None)
        if cached:
            return cached
        cuda, dev, kernel = plan.device.cuda, plan.device.device, plan.kernels[0]
        warps = plan.defines["V11_WARPS"]
        per_warp = math.ceil(kernel.num_regs * 32 / 256) * 256
        per_sm = min(dev.get_attribute(cuda.device_attribute.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)
                     // (plan.shared_bytes + 1024),
                     dev.get_attribute(cuda.device_attribute.MAX_THREADS_PER_MULTIPROCESSOR) // (32 * warps),
                     dev.get_attribute(cuda.device_attribute.MAX_REGISTERS_PER_MULTIPROCESSOR) // per_warp // warps)
        plan.resident_blocks = max(1, per_sm) * dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)
        return plan.resident_blocks

    def launch(self, plan, y, x, k, bias, batch):
        order = getattr(plan, "resident_order", None)
        if order is None:                     # the tap order, copied to the device once per plan (the
            s = plan.inner                    # device's buffer: freed with its other memory)
            taps = np.array(tap_order(s.C, s.H, s.W, s.K), np.int32)
            order = plan.device.buffer(f"v11 tap order C{s.C} H{s.H} W{s.W} K{s.K}", taps.nbytes)
            plan.device.cuda.memcpy_htod(order, taps)
            plan.resident_order = order
        plan.kernels[0](np.uintp(y), np.uintp(x), np.uintp(k), order, np.int32(batch),
                        block=(32 * plan.defines["V11_WARPS"], 1, 1), grid=(min(batch, self.blocks(plan)), 1),
                        shared=plan.shared_bytes)


class Depthwise(Version):
    """A direct kernel for depthwise layers (C/G = 1): V13_VEC adjacent outputs of one filter's row per
    thread, every size at compile time (memory-bound: v8's GEMM has a depth of only KH*KW there)."""
    number, name, kernels = 13, "depthwise", ("conv_forward_v13",)
    general = True
    tuning_keys = ("V13_VEC", "V13_THREADS")
    MAX_TAPS = 49             # KH*KW taps in registers
    MAX_SPAN = 64             # input values under a strip, per tap row

    def values(self, inner, tuning_overrides=None):
        values = {"V13_VEC": 4 if inner.WO >= 4 else 1, "V13_THREADS": 256, **self.own(tuning_overrides)}
        return {k: int(v) for k, v in values.items()}

    def limits(self, inner, tuning_overrides=None):
        if inner.C // inner.G != 1:
            return f"needs a depthwise layer (one input channel per group), not {inner.C // inner.G}"
        if inner.KH * inner.KW > self.MAX_TAPS:
            return f"a {inner.KH}x{inner.KW} kernel has more than {self.MAX_TAPS} taps"
        vec = self.values(inner, tuning_overrides)["V13_VEC"]
        span = (vec - 1) * inner.SW + (inner.KW - 1) * inner.DW + 1
        if span > self.MAX_SPAN:
            return f"{span} input values per strip and tap row exceed {self.MAX_SPAN}"
        return None

    def suits(self, shape):
        return shape.G > 1       # a true depthwise layer; one channel (G = 1): v7, else the rest of the order

    def defines(self, inner, tuning_overrides=None):
        values = self.values(inner, tuning_overrides)
        if values["V13_VEC"] < 1 or values["V13_THREADS"] % 32 or not 32 <= values["V13_THREADS"] <= 1024:
            raise ValueError(f"v13: V13_VEC must be positive, V13_THREADS a multiple of 32 up to 1024: {values}")
        return {**values, "V13_ENABLED": int(self.limits(inner, tuning_overrides) is None)}

    def launch(self, plan, y, x, k, bias, batch):
        s, d = plan.inner, plan.defines
        total = batch * s.M * s.HO * math.ceil(s.WO / d["V13_VEC"])
        plan.kernels[0](np.uintp(y), np.uintp(x), np.uintp(k), np.uintp(bias), np.int32(batch),
                        block=(d["V13_THREADS"], 1, 1), grid=(math.ceil(total / d["V13_THREADS"]), 1))


class Winograd(Version):
    """Winograd F(4x4, 3x3) for 3x3 stride-1 layers: filter and input transforms, 36 GEMMs (v8's or v9's
    kernel on a grouped 1x1 convolution, V12_GEMM; V8_*/V9_* overrides go to that GEMM's plan), the
    output transform, a chunk of images at a time (at most V12_CHUNK_MB of transformed input and GEMM
    output; chunks small enough to stay in L2 measured slower, docs/kernel-notes.md). Opt-in only
    (``defaultable``): its error follows each 6x6 input tile's magnitude, not each output's own
    window, so it can exceed the elementwise float32 bound the default versions keep."""
    number, name, kernels = 12, "winograd", ("wino_filter", "wino_input", "wino_output")
    general = True
    exact = False
    defaultable = False
    tuning_keys = ("V12_GEMM", "V12_CHUNK_MB")
    MIN_C = 16                # fewer channels: its error nears the bound even on random data (measured)
    POINTS = 36               # 6x6 transform points
    CHUNK_MB = 1024           # default V12_CHUNK_MB

    @staticmethod
    def tiles(inner):
        return math.ceil(inner.HO / 4), math.ceil(inner.WO / 4)

    def values(self, tuning_overrides=None):
        values = {"V12_GEMM": 0, "V12_CHUNK_MB": self.CHUNK_MB, **self.own(tuning_overrides)}
        values = {k: int(v) for k, v in values.items()}
        if values["V12_GEMM"] not in (0, 8, 9):
            raise ValueError(f"V12_GEMM must be 8, 9 or 0 (by the layer), not {values['V12_GEMM']}")
        if values["V12_CHUNK_MB"] < 1:
            raise ValueError(f"V12_CHUNK_MB must be at least 1, not {values['V12_CHUNK_MB']}")
        return values

    def gemm_shape(self, inner):
        """The 36 GEMMs as one grouped 1x1 convolution: 36*C channels of TH x TW tiles -> 36*M filters."""
        th, tw = self.tiles(inner)
        return ConvShape(self.POINTS * inner.C, th, tw, self.POINTS * inner.M, 1, G=self.POINTS)

    def gemm_tuning(self, inner, tuning_overrides=None):
        """(version, overrides) of the GEMMs' plan. V12_GEMM 0 (the default) picks by the layer, from the
        tile sweep on ResNet-18's stride-1 layers (H100, docs/kernel-notes.md): below 128 channels v8 in
        128 positions x 64 filters (C=64: 0.246 ms, v9's best 0.265); else v9 in 2 x 2 warps of 4 filter
        fragments and 2 position fragments (4 from 256 channels). V8_*/V9_* overrides replace the tile."""
        number = self.values(tuning_overrides)["V12_GEMM"] or (8 if inner.C < 128 else 9)
        given = {k: v for k, v in (tuning_overrides or {}).items() if k.startswith(f"V{number}_")}
        if given:
            return number, given
        if number == 8:
            return 8, {"V8_BP": 128, "V8_BF": 64, "V8_TP": 8, "V8_TF": 8}
        return 9, {"V9_WP": 2, "V9_WF": 2, "V9_MI": 4 if inner.C >= 256 else 2, "V9_NI": 4}

    def limits(self, inner, tuning_overrides=None):
        s = inner
        if (s.KH, s.KW, s.SH, s.SW, s.DH, s.DW, s.G) != (3, 3, 1, 1, 1, 1, 1):
            return "needs a 3x3 kernel, stride 1, no dilation and one group"
        if s.C < self.MIN_C:
            return f"{s.C} channels: below {self.MIN_C} its error nears the float32 bound"
        number, overrides = self.gemm_tuning(s, tuning_overrides)
        return VERSIONS[number].limits(self.gemm_shape(s), overrides)

    def defines(self, inner, tuning_overrides=None):
        return self.values(tuning_overrides)      # (not read by its kernels: they key the plan)

    def images_per_chunk(self, inner, batch, tuning_overrides=None):
        th, tw = self.tiles(inner)
        per_image = self.POINTS * th * tw * (inner.C + inner.M) * 4
        return max(1, min(batch, (self.values(tuning_overrides)["V12_CHUNK_MB"] << 20) // per_image))

    def launch(self, plan, y, x, k, bias, batch):
        from .launch import plan_for          # (launch imports this module)
        s, dev, overrides = plan.inner, plan.device, plan.tuning_overrides
        gemm = getattr(plan, "winograd_gemm", None)
        if gemm is None:
            gemm = plan.winograd_gemm = plan_for(dev, self.gemm_shape(s), *self.gemm_tuning(s, overrides))
        th, tw = self.tiles(s)
        tt = th * tw
        u = int(dev.buffer("winograd U", self.POINTS * s.M * s.C * 4))
        chunk = self.images_per_chunk(s, batch, overrides)
        v = int(dev.buffer("winograd V", chunk * self.POINTS * s.C * tt * 4))
        mh = int(dev.buffer("winograd M", chunk * self.POINTS * s.M * tt * 4))
        filt, inp, out = plan.kernels
        filt(np.uintp(u), np.uintp(k), block=(256, 1, 1), grid=(math.ceil(s.M * s.C / 256), 1))
        image, plane = s.C * s.H * s.W, s.M * s.HO * s.WO
        for b0 in range(0, batch, chunk):
            n = min(chunk, batch - b0)
            inp(np.uintp(v), np.uintp(x + 4 * b0 * image), np.int32(n), block=(256, 1, 1),
                grid=(math.ceil(n * s.C * tt / 256), 1))
            gemm.version.launch(gemm, mh, v, u, 0, n)
            out(np.uintp(y + 4 * b0 * plane), np.uintp(mh), np.uintp(bias), np.int32(n), block=(256, 1, 1),
                grid=(math.ceil(n * s.M * tt / 256), 1))


class Wgmma(Version):
    """3xTF32 like v9, on Hopper's warpgroup MMA (wgmma, sm_90a): a warpgroup multiplies 64 positions x
    V20_BN filters per instruction, x gathered into its registers, the weights split once per call by
    ``wgmma_weights`` into the shared-memory stages' layout (V20_INLINE 1: staged raw and split by the
    kernel itself, one launch). One group; compute capability 9.0 only."""
    number, name, kernels = 20, "wgmma", ("conv_forward_v20", "wgmma_weights")
    general = True
    exact = False
    arch_features = True
    tuning_keys = ("V20_BN", "V20_WG", "V20_BK", "V20_STAGES", "V20_MINB", "V20_INLINE")
    MAX_IMAGE = 2**25         # offsets into an image: the k table packs one and a 6-bit tap into 32 bits
    MAX_X = _ImplicitGemm.MAX_X

    WAVE_BLOCKS = 660         # 5 blocks per SM of an H100 (132 SMs)

    def values(self, inner, tuning_overrides=None):
        # From a 48-tile sweep on the H100 (docs/kernel-notes.md, "v20"): 2 stages of 32 k, registers capped
        # for 2 blocks per SM, 128 filters per block (64 for at most 64 filters); 2 warpgroups where that
        # still leaves WAVE_BLOCKS blocks (VGG's 28x28 layers at B=32, 784), else 1 (ResNet-18's 28x28
        # layer at B=64: 0.157 ms with 1, 0.172 with 2, whose grid is 392 blocks). The grid's size is not
        # known here (the batch is not part of a plan): the rule takes a batch of 64.
        bn = 128 if inner.M > 64 else 64
        blocks = math.ceil(64 * inner.HO * inner.WO / 128) * math.ceil(inner.M / bn)
        values = {"V20_BN": bn, "V20_WG": 2 if blocks >= self.WAVE_BLOCKS else 1, "V20_BK": 32, "V20_STAGES": 2,
                  "V20_MINB": 2, "V20_INLINE": 0}
        values.update(self.own(tuning_overrides))
        return {k: int(v) for k, v in values.items()}

    @staticmethod
    def _shared(ckk, v):
        """Bytes of shared memory: the weight stages (hi and lo) and the k table padded to whole stages."""
        return v["V20_STAGES"] * 2 * v["V20_BK"] * v["V20_BN"] * 4 + math.ceil(ckk / v["V20_BK"]) * v["V20_BK"] * 4

    def shared_bytes(self, defines):
        d = defines
        return self._shared(d["CONV_C"] * d["CONV_KH"] * d["CONV_KW"], d) if "V20_BN" in d else 0

    def limits(self, inner, tuning_overrides=None):
        s, v = inner, self.values(inner, tuning_overrides)
        if s.G != 1:
            return "needs one group"
        if s.KH * s.KW > 63:
            return f"a {s.KH}x{s.KW} window has more taps than its 63-tap mask"
        reach = max(s.C * s.H * s.W, (s.C - 1) * s.H * s.W + (s.KH - 1) * s.DH * s.W + (s.KW - 1) * s.DW + 1)
        if reach >= self.MAX_IMAGE:
            return f"a window reaches {reach} elements into an image (its k table: below {self.MAX_IMAGE})"
        if (v["V20_BN"] not in (64, 128) or v["V20_BK"] % 8 or not v["V20_BK"] or v["V20_WG"] not in (1, 2)
                or v["V20_STAGES"] < 2 or v["V20_MINB"] not in (1, 2) or v["V20_INLINE"] not in (0, 1)):
            return f"tile {v} (V20_BN 64 or 128, V20_BK a multiple of 8, 1 or 2 warpgroups and blocks, 2+ stages)"
        shared = self._shared(s.CKK, v)
        if shared > MAX_SHARED:
            return f"its stages need {shared} bytes of shared memory (at most {MAX_SHARED})"
        return None

    def defines(self, inner, tuning_overrides=None):
        return self.values(inner, tuning_overrides)

    def available(self):
        """Whether the default device ($ECE408_GPU) has it; ``arch_reason`` checks a given device."""
        from .device import GpuDevice          # (device does not import this module's users)
        try:
            arch = GpuDevice.get().arch
        except GpuError as exc:
            return str(exc)
        return self.arch_reason(arch)

    def arch_reason(self, arch):
        return None if arch == "sm_90" else f"wgmma needs compute capability 9.0 (sm_90a), not {arch}"

    def launches(self, defines):
        return 1 if defines.get("V20_INLINE") else 2

    def launch(self, plan, y, x, k, bias, batch):
        s, d, dev = plan.inner, plan.defines, plan.device
        conv, weights = plan.kernels
        ftiles = math.ceil(s.M / d["V20_BN"])
        w2 = k                                # V20_INLINE: the kernel stages and splits k itself
        if not d["V20_INLINE"]:
            count = ftiles * math.ceil(s.CKK / d["V20_BK"]) * 2 * d["V20_BK"] * d["V20_BN"]
            w2 = int(dev.buffer("v20 split weights", count * 4))
            weights(np.uintp(w2), np.uintp(k), block=(256, 1, 1), grid=(min(math.ceil(count / 256), 1 << 16), 1))
        image, out = s.C * s.H * s.W, s.M * s.HO * s.WO
        chunk = min(batch, self.MAX_X // image)
        for b0 in range(0, batch, chunk):
            n = min(chunk, batch - b0)
            conv(np.uintp(y + 4 * b0 * out), np.uintp(x + 4 * b0 * image), np.uintp(w2), np.uintp(bias), np.int32(n),
                 block=(128 * d["V20_WG"], 1, 1), grid=(math.ceil(n * s.HO * s.WO / (64 * d["V20_WG"])), ftiles),
                 shared=plan.shared_bytes)


# ------------------------------------------------------------------ v14-v19: the rest of the course's list
# (docs/course-map.md). None is ever a default: v14-v16 are steps of the ladder, slower than the defaults
# on every course layer; v17 and v19 do not keep the float32 bound; v18 depends on a library.

def _plane_grid(s, batch):
    """v14-v17: (tiles of the output plane, M filters, images up to grid z's limit)."""
    tile = Shared.TILE
    return (math.ceil(s.HO / tile) * math.ceil(s.WO / tile), s.M, min(batch, 65535))


class RestrictUnroll(Register):
    """v14: v3's tiles with compile-time sizes and unrolled loops, one filter per thread (v4 without
    its register blocking): the course's "__restrict__ and loop unrolling" as a step of its own."""
    number, name, kernels = 14, "restrict", ("conv_forward_v14",)
    defaultable = False
    MB = 1                    # (its capability check; the module's MB define stays v4's)

    def defines(self, inner, tuning_overrides=None):
        return {"TILE": Shared.TILE}

    def launch(self, plan, y, x, k, bias, batch):
        tile = plan.defines["TILE"]
        plan.kernels[0](np.uintp(y), np.uintp(x), np.int32(batch), block=(tile, tile, 1),
                        grid=_plane_grid(plan.inner, batch))


class ChannelTree(Version):
    """v15: v14 with the input channels split among V15_CZ slices of each block, their partial sums
    added by a tree in shared memory (the course's input-channel reduction)."""
    number, name, kernels = 15, "tree", ("conv_forward_v15",)
    constant_weights = True
    defaultable = False
    MAX_SLICES = 4            # 4 x 16 x 16 = 1024 threads per block

    def slices(self, inner):
        """The largest power of two <= min(C, MAX_SLICES)."""
        return 1 << int(math.log2(max(1, min(inner.C, self.MAX_SLICES))))

    def limits(self, inner, tuning_overrides=None):
        return _const_weights_reason(inner.M * inner.CKK)

    def defines(self, inner, tuning_overrides=None):
        return {"TILE": Shared.TILE, "V15_CZ": self.slices(inner)}

    def launch(self, plan, y, x, k, bias, batch):
        tile = plan.defines["TILE"]
        plan.kernels[0](np.uintp(y), np.uintp(x), np.int32(batch), block=(tile, tile, plan.defines["V15_CZ"]),
                        grid=_plane_grid(plan.inner, batch))


class ChannelAtomics(ChannelTree):
    """v16: v15 with the partial sums added by atomicAdd into y, which the launch zeroes first."""
    number, name, kernels = 16, "atomics", ("conv_forward_v16",)

    def launch(self, plan, y, x, k, bias, batch):
        plan.device.cuda.memset_d32(y, 0, plan.inner.outputs(batch))
        super().launch(plan, y, x, k, bias, batch)


class Half(Version):
    """v17: v14 in half precision (storage and arithmetic): pre-passes convert x to half and each
    weight to a half2 pair (k, k) in its constant-bank slot; two outputs per thread in one half2
    accumulator. Its error is checked against conv/bounds.py's FP16 model, never the float32 bound."""
    number, name, kernels = 17, "fp16", ("conv_forward_v17", "half_input", "half_weights")
    constant_weights = True   # the launch overwrites the float weights _prepare copied with their half2 pairs
    exact = False
    defaultable = False
    own_error_model = True

    def limits(self, inner, tuning_overrides=None):
        return _const_weights_reason(inner.M * inner.CKK)

    def defines(self, inner, tuning_overrides=None):
        return {"TILE": Shared.TILE}

    def reference_and_bound(self, x, k, bias=None, spec=None):
        return fp16_reference_and_bound(x, k, bias, spec)

    def launch(self, plan, y, x, k, bias, batch):
        s, tile, dev = plan.inner, plan.defines["TILE"], plan.device
        conv, to_half, weights = plan.kernels
        count, weights_count = batch * s.C * s.H * s.W, s.M * s.CKK
        xh = int(dev.buffer("fp16 x", count * 2))
        pairs = int(dev.buffer("fp16 weight pairs", weights_count * 4))
        weights(np.uintp(pairs), np.uintp(k), np.int32(weights_count), block=(256, 1, 1),
                grid=(math.ceil(weights_count / 256), 1))
        dev.cuda.memcpy_dtod(plan.weights_symbol, pairs, weights_count * 4)
        to_half(np.uintp(xh), np.uintp(x), np.int64(count), block=(256, 1, 1),
                grid=(min(math.ceil(count / 256), 1 << 20), 1))
        conv(np.uintp(y), np.uintp(xh), np.int32(batch), block=(tile // 2, tile, 1), grid=_plane_grid(s, batch))


class Cublas(Im2col):
    """v18: v5 with cuBLAS's GEMM (cublasSgemmStridedBatched in FP32, libraries.py): per chunk of
    unrolled images and per group, one strided-batched product over the images, then the bias."""
    number, name, kernels = 18, "cublas", ("im2col_v5", "add_bias")
    defaultable = False

    def available(self):
        return libraries.missing("libcublas")

    def multiply(self, plan, y, cols, k, bias, b0, n):
        # Row-major Y_bg (MG x HO*WO) = K_g (MG x GKK) . X_bg (GKK x HO*WO) is, read column-major,
        # Y^T = X^T K^T: m = HO*WO, n = MG, k = GKK, A = X_bg (lda HO*WO), B = K_g (ldb GKK), C = Y_bg.
        s = plan.inner
        blas = libraries.cublas(self.label)
        howo, gkk, mg = s.HO * s.WO, s.CKK, s.M // s.G
        for g in range(s.G):
            blas.gemm_strided_batched(plan.device.index, howo, mg, gkk,
                                      cols + 4 * g * gkk * howo, howo, s.G * gkk * howo,
                                      k + 4 * g * mg * gkk, gkk, 0,
                                      y + 4 * (b0 * s.M + g * mg) * howo, howo, s.M * howo, n)
        if bias:
            count = n * s.M * howo
            plan.kernels[1](np.uintp(y + 4 * b0 * s.M * howo), np.uintp(bias), np.int64(count), np.int32(s.M),
                            np.int32(howo), block=(256, 1, 1), grid=(min(math.ceil(count / 256), 1 << 20), 1))


class Fft(Version):
    """v19: FFT overlap-add with cuFFT (libraries.py): x in V19_F - K + 1 square tiles, each padded to
    V19_F x V19_F; R2C of the tiles and of the flipped filters, the products summed over channels per
    frequency, C2R, the overlapping tile outputs added into y; a chunk of images at a time (at most
    V19_CHUNK_MB of workspace). Checked against conv/bounds.py's FFT model (norm-wise), never a default."""
    number, name = 19, "fft"
    kernels = ("fft_tiles", "fft_weights", "fft_multiply", "fft_overlap_add")
    exact = False
    defaultable = False
    own_error_model = True
    tuning_keys = ("V19_F", "V19_CHUNK_MB")
    SIZES = (8, 16, 32, 64, 128)
    CHUNK_MB = 1024

    @staticmethod
    def tiles(inner, size):
        edge = size - inner.K + 1
        return math.ceil(inner.H / edge), math.ceil(inner.W / edge)

    def size(self, inner):
        """The transform size of least work (tiles x F^2; the smaller F on a tie) whose tile is >= 1."""
        fits = [f for f in self.SIZES if f >= inner.K]
        return min(fits, key=lambda f: (math.prod(self.tiles(inner, f)) * f * f, f)) if fits else self.SIZES[-1]

    def values(self, inner, tuning_overrides=None):
        values = {"V19_F": self.size(inner), "V19_CHUNK_MB": self.CHUNK_MB, **self.own(tuning_overrides)}
        values = {key: int(value) for key, value in values.items()}
        if values["V19_F"] not in self.SIZES:
            raise ValueError(f"V19_F must be one of {', '.join(map(str, self.SIZES))}, not {values['V19_F']}")
        return values

    def limits(self, inner, tuning_overrides=None):
        size = self.values(inner, tuning_overrides)["V19_F"]
        if size < inner.K:
            return f"a {inner.K}x{inner.K} kernel does not fit its {size}x{size} transforms"
        return None

    def defines(self, inner, tuning_overrides=None):
        return self.values(inner, tuning_overrides)

    def available(self):
        return libraries.missing("libcufft")

    def reference_and_bound(self, x, k, bias=None, spec=None):
        inner = self.inner(ConvShape.of(x.shape, k.shape, spec))
        return fft_reference_and_bound(x, k, bias, spec, self.size(inner))

    def workspace_per_image(self, inner, size):
        """Bytes of tiles, spectra and tile outputs per image."""
        nt, nf = math.prod(self.tiles(inner, size)), size * (size // 2 + 1)
        return nt * (inner.C + inner.M) * (size * size * 4 + nf * 8)

    def launch(self, plan, y, x, k, bias, batch):
        s, d, dev = plan.inner, plan.defines, plan.device
        fft, size = libraries.cufft(self.label), d["V19_F"]
        nt, nf, area = math.prod(self.tiles(s, size)), size * (size // 2 + 1), size * size
        tiles, weights, multiply, overlap_add = plan.kernels

        def grid(count):
            return (min(math.ceil(count / 256), 1 << 20), 1)
        kt = int(dev.buffer("fft filter tiles", s.M * s.C * area * 4))
        kh = int(dev.buffer("fft filter spectra", s.M * s.C * nf * 8))
        weights(np.uintp(kt), np.uintp(k), block=(256, 1, 1), grid=grid(s.M * s.C * area))
        fft.r2c(fft.plan(dev.index, size, fft.R2C, s.M * s.C), kt, kh)
        chunk = max(1, min(batch, (d["V19_CHUNK_MB"] << 20) // self.workspace_per_image(s, size)))
        xt = int(dev.buffer("fft x tiles", chunk * s.C * nt * area * 4))
        xh = int(dev.buffer("fft x spectra", chunk * s.C * nt * nf * 8))
        yh = int(dev.buffer("fft y spectra", chunk * s.M * nt * nf * 8))
        z = int(dev.buffer("fft y tiles", chunk * s.M * nt * area * 4))
        for b0 in range(0, batch, chunk):
            n = min(chunk, batch - b0)
            tiles(np.uintp(xt), np.uintp(x + 4 * b0 * s.C * s.H * s.W), np.int32(n), block=(256, 1, 1),
                  grid=grid(n * s.C * nt * area))
            fft.r2c(fft.plan(dev.index, size, fft.R2C, n * s.C * nt), xt, xh)
            multiply(np.uintp(yh), np.uintp(xh), np.uintp(kh), np.int32(n), block=(256, 1, 1),
                     grid=grid(n * s.M * nt * nf))
            fft.c2r(fft.plan(dev.index, size, fft.C2R, n * s.M * nt), yh, z)
            overlap_add(np.uintp(y + 4 * b0 * s.M * s.HO * s.WO), np.uintp(z), np.int32(n), block=(256, 1, 1),
                        grid=grid(n * s.M * s.HO * s.WO))


class Fused:
    """The fused convolution (+ bias) + tanh + 2x2/2 max-pool kernel of the course models (v7's strips,
    two output rows per thread). Not a version: it computes another function. Course-style: the launcher
    pads x; it adds the bias itself (before tanh)."""
    name, kernel = "fused", "fused_forward"
    tuning_keys = ("FUSE_PV", "FUSE_THREADS", "FUSE_UNROLL_M")
    MAX_REGS = Strip.MAX_REGS
    MAX_UNROLLED_FMAS = 12000      # the course layer's 50 filters x 200 FMAs unroll fully (105 registers)

    def values(self, inner, tuning_overrides=None):
        # 4 pooled outputs per thread (where they tile the pooled row: 16-byte stores) and the filter loop
        # unrolled 5 times: 0.33 ms on the course layer against 0.52 for 2 and a full unroll (H100 sweep)
        pwo = inner.WO // 2
        values = {"FUSE_PV": 4 if pwo % 4 == 0 else 2 if pwo >= 2 else 1, "FUSE_THREADS": 256, "FUSE_UNROLL_M": "full"}
        values.update({k: v for k, v in (tuning_overrides or {}).items() if k in self.tuning_keys})
        if values["FUSE_UNROLL_M"] == "full":
            body = inner.CKK * 4 * values["FUSE_PV"]          # FMAs per filter
            full = inner.M * body <= self.MAX_UNROLLED_FMAS and inner.C == 1
            values["FUSE_UNROLL_M"] = inner.M if full else min(5, inner.M)
        return {k: int(v) for k, v in values.items()}

    def reason(self, shape, tuning_overrides=None):
        """None if the fused kernel runs ``shape`` (the caller's layer), else why not."""
        if shape.HO < 2 or shape.WO < 2:
            return f"a {shape.HO}x{shape.WO} output has no 2x2 window to pool"
        why = shape.course_reason()
        return why or self._limits(shape.unpadded(), tuning_overrides)

    def _limits(self, inner, tuning_overrides=None):
        pv = self.values(inner, tuning_overrides)["FUSE_PV"]
        regs = inner.C * (inner.K + 1) * (2 * pv + inner.K - 1)
        if regs > self.MAX_REGS:
            return f"its C*(K+1)*(2*PV+K-1) = {regs} input strips do not fit in registers"
        return _const_weights_reason(inner.M * inner.CKK)

    def defines(self, inner, tuning_overrides=None):
        enabled = (inner.course_reason() is None and (inner.PH, inner.PW) == (0, 0) and min(inner.HO, inner.WO) >= 2
                   and self._limits(inner, tuning_overrides) is None)
        return {**self.values(inner, tuning_overrides), "FUSE_ENABLED": int(enabled)}


VERSIONS = {v.number: v for v in (Naive(), Shared(), Constant(), Register(), Im2col(), Implicit(), Strip(), Gemm(),
                                  Tensor(), Filters(), Resident(), Winograd(), Depthwise(), RestrictUnroll(),
                                  ChannelTree(), ChannelAtomics(), Half(), Cublas(), Fft(), Wgmma())}
FUSED = Fused()
FUSED_ID = 100            # ONLY_KERNEL of the fused kernel's module
# The fallback order where no table measured on this device names the layer's shape: from the H100
# benchmark of the course layer (docs/benchmarks.md): v7 0.43 ms, v4 1.74, v6 3.04, v5 3.70, v1 5.72, v3 7.33,
# v2 7.61; v10 for several channels where its accumulators fit; v8 (any layer, exact FP32) before the
# course-layer-only v4; v9 and v11 (tensor cores, 3xTF32) only where a measured table (defaults.json) chose them;
# v13 before v8 where it runs (depthwise layers, MobileNetV2 on the H100: docs/gpu-dropin.md).
# v1, v5, v6, v8 and v9 run every shape. v12 (Winograd) is never a default: only asked for. v20 (wgmma) runs on
# compute capability 9.0 only, so it is never a fallback: a default where the table or the autotuner chose it.
PREFERENCE = (7, 10, 13, 8, 4, 6, 5, 1, 3, 2, 9, 11)


def tuning_keys():
    return {key for owner in (*VERSIONS.values(), FUSED) for key in owner.tuning_keys}


def module_defines(inner, tuning_overrides=None):
    """Every ``#define`` of the module for the layer ``inner``: its sizes and each version's constants
    (and the fused kernel's). ``tuning_overrides``: keys of any version's ``tuning_keys``."""
    unknown = set(tuning_overrides or {}) - tuning_keys()
    if unknown:
        raise ValueError(f"unknown tuning keys {sorted(unknown)}; use {', '.join(sorted(tuning_keys()))}")
    defines = {**inner.defines(), "CONST_WEIGHTS": CONST_WEIGHTS}
    for owner in (*VERSIONS.values(), FUSED):
        defines.update(owner.defines(inner, tuning_overrides))
    return defines


def plan_defines(owner, inner, tuning_overrides=None):
    """The #defines of the module a plan loads: ``module_defines`` plus ONLY_KERNEL, so that only the
    kernels of ``owner`` (a version number, or FUSED) are compiled (a sixth of the build time)."""
    defines = {**module_defines(inner, tuning_overrides), "ONLY_KERNEL": FUSED_ID if owner is FUSED else int(owner)}
    if owner is not FUSED and VERSIONS[int(owner)].arch_features:
        defines["ARCH_FEATURES"] = 1          # device.build_cubin: sm_90 -> sm_90a
    return defines


FAST = "fast"             # the request "v12 (Winograd) where it runs the layer, else the default"


def parse_version(text):
    """'auto' / None -> None; '3', 'v3', 'constant' -> 3; 'fast' -> FAST. Raises GpuError for anything else."""
    if text is None or str(text).strip().lower() in ("", "auto"):
        return None
    key = str(text).strip().lower()
    if key == FAST:
        return FAST
    for version in VERSIONS.values():
        if key in (str(version.number), f"v{version.number}", version.name):
            return version.number
    names = ", ".join(f"{v.number}/{v.name}" for v in VERSIONS.values())
    raise GpuError(f"unknown kernel {text!r}; choose auto, {FAST} (v12 where it runs, else auto) or one of {names}")


def shape_key(shape):
    """The defaults table's key of a shape class (its bias aside)."""
    s = shape
    return f"C{s.C} H{s.H} W{s.W} M{s.M} K{s.KH}x{s.KW} S{s.SH}x{s.SW} P{s.PH}x{s.PW} D{s.DH}x{s.DW} G{s.G}"


def load_defaults():
    """The measured defaults table: {device name: {"shapes": {shape key: version}, ...}}, read from disk."""
    if not DEFAULTS_FILE.exists():
        return {}
    return json.loads(DEFAULTS_FILE.read_text(encoding="utf-8"))


_measured = {}


def measured_defaults():
    """``load_defaults()`` read once per process and file (``reload_defaults`` forgets it)."""
    if DEFAULTS_FILE not in _measured:
        _measured[DEFAULTS_FILE] = load_defaults()
    return _measured[DEFAULTS_FILE]


def reload_defaults():
    _measured.clear()


def measured_version(shape, device_name):
    """The version defaults.json names for ``shape`` on this device, where it is still defaultable and
    runs the layer; else None."""
    if device_name is None:
        return None
    measured = measured_defaults().get(device_name, {}).get("shapes", {}).get(shape_key(shape))
    if measured in VERSIONS and VERSIONS[measured].defaultable and VERSIONS[measured].unsupported(shape) is None:
        return measured
    return None


def fallback_version(shape):
    """The first of PREFERENCE that runs ``shape`` and suits it."""
    supported = [n for n in PREFERENCE if VERSIONS[n].unsupported(shape) is None]
    return next((n for n in supported if VERSIONS[n].suits(shape)), supported[0])


def default_version(shape, device_name=None):
    """The version measured fastest for ``shape`` on this device (defaults.json), else the first of
    PREFERENCE that runs ``shape`` and suits it."""
    return measured_version(shape, device_name) or fallback_version(shape)


def _requested(requested):
    """The request as a version number, FAST or None (auto), $ECE408_KERNEL standing in for auto."""
    if requested is None or str(requested).strip().lower() in ("", "auto"):
        requested = os.environ.get(KERNEL_ENV)
    return parse_version(requested)


def choose_version(requested, shape, device_name=None):
    """Resolve 'auto'/None (then $ECE408_KERNEL) and 'fast' (for a whole network: v12 on its 3x3 stride-1
    layers, the default on the others) and check support; returns a version number."""
    return resolve_version(requested, shape, device_name)[0]


def resolve_version(requested, shape, device_name=None, tune=None):
    """(version, tuning overrides or None) to run ``shape``: an explicit request (checked), else 'fast''s
    v12 where it runs, else the measured table (defaults.json), else ``tune(shape)`` (the autotuner's
    (version, overrides), or None), else the fallback order."""
    number = _requested(requested)
    if number == FAST and VERSIONS[12].unsupported(shape) is None:
        return 12, None
    if number in (None, FAST):
        measured = measured_version(shape, device_name)
        if measured is not None:
            return measured, None
        tuned = tune(shape) if tune is not None else None
        return tuned if tuned is not None else (fallback_version(shape), None)
    reason = VERSIONS[number].unsupported(shape)
    if reason:
        raise ShapeError(f"kernel {VERSIONS[number].label} cannot run this layer: {reason}; use kernel=auto")
    if VERSIONS[number].arch_features:        # (v20: built for sm_90a; elsewhere its entry point traps)
        missing = VERSIONS[number].available()
        if missing:
            raise GpuError(f"kernel {VERSIONS[number].label} cannot run here: {missing}; use kernel=auto")
    return number, None


def _read_cost(C, H, W, K):
    """(tap offsets, cost): cost(groups) is the mean number of shared-memory wavefronts of one warp-wide
    read of v11's x operand (8 adjacent positions x the 4 taps of each row of ``groups``, tap indices),
    over the layer's patterns of 8 positions (an output row's wrap included), weighted by frequency."""
    WO, HO = W - K + 1, H - K + 1
    offsets = np.array([c * H * W + p * W + q for c in range(C) for p in range(K) for q in range(K)])
    counts = {}
    for t in range(0, HO * WO, 8):
        corners = [(n // WO) * W + n % WO for n in (min(t + g, HO * WO - 1) for g in range(8))]
        key = tuple(c - corners[0] for c in corners)
        counts[key] = counts.get(key, 0) + 1
    patterns = np.array(list(counts))                              # (P, 8)
    weights = np.array(list(counts.values()), dtype=float) / sum(counts.values())

    def cost(groups):
        addresses = np.sort((patterns[None, :, :, None] + offsets[groups][:, None, None, :]).reshape(
            len(groups), len(patterns), -1), axis=-1)                # (G, P, 8n)
        first = np.ones(addresses.shape, bool)
        first[..., 1:] = addresses[..., 1:] != addresses[..., :-1]  # each distinct address once
        rows = np.arange(addresses.shape[0] * addresses.shape[1]).reshape(addresses.shape[:2] + (1,))
        per_bank = np.bincount((rows * 32 + addresses % 32).ravel(), weights=first.ravel(),
                               minlength=rows.size * 32)            # distinct addresses per (row, bank)
        return per_bank.reshape(addresses.shape[:2] + (32,)).max(axis=-1) @ weights
    return offsets, cost


def _mean_wavefronts(cost, order):
    """Mean of ``cost`` (``_read_cost``) over the groups of 4 taps of ``order`` (padding reads tap 0)."""
    taps = [r if r >= 0 else 0 for r in order]
    return float(cost(np.array(taps + [0] * (-len(taps) % 4)).reshape(-1, 4)).mean())


def read_wavefronts(C, H, W, K, order):
    """Mean shared-memory wavefronts per x read of v11 with the tap ``order`` (1.0: conflict-free)."""
    return _mean_wavefronts(_read_cost(C, H, W, K)[1], order)


@functools.lru_cache(maxsize=32)
def tap_order(C, H, W, K, look=64):
    """v11's order of the C*K*K taps along the GEMM's k (one permutation for x and the weights), padded
    with -1 to whole k-steps of 8. The lanes tig = 0..3 of a warp read taps 4j .. 4j+3 at once, each for
    8 adjacent positions: the order groups taps whose 4 x 8 shared-memory reads fall in distinct banks.
    Greedily: each group starts with the first tap left and adds, among the next ``look``, the one with
    the fewest bank conflicts (``_read_cost``); the natural order where that is no better. Padding only
    at the end (the kernel zeroes the last k-step's tail). 2018 conv2: 1.49 -> 1.19 wavefronts per read."""
    offsets, cost = _read_cost(C, H, W, K)
    remaining, order = list(range(len(offsets))), []
    while remaining:
        group = [remaining.pop(0)]
        while len(group) < 4 and remaining:
            candidates = remaining[:look]
            best = candidates[int(np.argmin(np.round(cost(np.array([group + [r] for r in candidates])), 6)))]
            group.append(best)
            remaining.remove(best)
        order += group
    natural = list(range(len(offsets)))
    best = order if _mean_wavefronts(cost, order) < _mean_wavefronts(cost, natural) else natural
    return tuple(best + [-1] * (-len(best) % 8))
