"""What a kernel version is (``Version``) and what several versions share.

A ``general`` version computes any ConvShape itself (padding, stride, dilation, groups, rectangular
kernels, bias). The others are the course's kind of kernel (stride 1, no dilation, one group, square
kernel): for them the launcher pads x into a workspace first and adds the bias after
(``ConvShape.unpadded`` is the layer they see), and every other layer is refused by their capability
check, so that the default choice (``kernels/choice.py``) falls back to one that runs it.
"""
import math
import os
import sys
from pathlib import Path

import numpy as np

from ...conv.reference import reference_and_bound

MAX_SHARED = 227 * 1024   # bytes of shared memory a block may opt into on sm_80/sm_90
CONST_WEIGHTS = 16384     # floats of __constant__ memory for weights (64 KB): v3, v4, v7
TILE = 16                 # the output tile edge of v2-v4 and v14-v17 (tiles.cuh)
STATIC_SIZES_ENV = "ECE408_STATIC_SIZES"   # 1: build the ``dynamic`` ones per layer shape from the start
                                           # (comparisons: bench/sizes.py)
MAX_RUN = 2**31 - 1       # positions (v8, v9, v20) and threads (v13) of one launch with the sizes at run time


def fast_div(d):
    """(m, s) of common.cuh's FastDiv for the divisor ``d`` >= 1: n // d == (n * m >> 32) >> s for every
    0 <= n < 2^31 (m 0: d is a power of two, n >> s). Granlund-Montgomery with s = floor(log2 d) and
    m = ceil(2^(32+s) / d), below 2^32 unless d is a power of two."""
    d = int(d)
    if d < 1:
        raise ValueError(f"a divisor of {d}")
    s = d.bit_length() - 1
    if d == 1 << s:
        return 0, s
    return -(-(1 << (32 + s)) // d), s


DIMS_FIELDS = ("C", "H", "W", "M", "KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW", "G", "BIAS",
               "HO", "WO", "HW", "HOWO", "CG", "MG", "GKK", "KHKW")
DIMS_DIVISORS = ("HOWO", "WO", "HO", "M", "MG", "KHKW", "KW", "CG")


def conv_dims(inner):
    """common.cuh's ConvDims for the layer ``inner``, as the kernel arguments that pack it (int32 sizes,
    then a FastDiv (uint32 m, int32 s) per divisor)."""
    s = inner
    values = {"C": s.C, "H": s.H, "W": s.W, "M": s.M, "KH": s.KH, "KW": s.KW, "SH": s.SH, "SW": s.SW, "PH": s.PH,
              "PW": s.PW, "DH": s.DH, "DW": s.DW, "G": s.G, "BIAS": s.BIAS, "HO": s.HO, "WO": s.WO, "HW": s.H * s.W,
              "HOWO": s.HO * s.WO, "CG": s.C // s.G, "MG": s.M // s.G, "GKK": s.CKK, "KHKW": s.KH * s.KW}
    args = [np.int32(values[name]) for name in DIMS_FIELDS]
    for name in DIMS_DIVISORS:
        m, shift = fast_div(values[name])
        args += [np.uint32(m), np.int32(shift)]
    return tuple(args)


def ints(*values):
    return [np.int32(v) for v in values]


def const_weights_reason(floats):
    if floats > CONST_WEIGHTS:
        return f"weights ({floats} floats) exceed constant memory ({CONST_WEIGHTS})"
    return None


def plane_grid(s, batch):
    """v14-v17: (tiles of the output plane, M filters, images up to grid z's limit)."""
    return (math.ceil(s.HO / TILE) * math.ceil(s.WO / TILE), s.M, min(batch, 65535))


class Sourced:
    """Kernels built from one CUDA file of this folder: ``source``, else the .cu file beside the
    Python module that defines the class (v07_strip.py: v07_strip.cu)."""
    source = None

    @property
    def source_path(self):
        module = Path(sys.modules[type(self).__module__].__file__)
        return module.with_name(self.source) if self.source else module.with_suffix(".cu")


class Version(Sourced):
    """One rung of the ladder: its kernels (in the CUDA file ``source_path``), what it cannot run, the
    constants its kernels are compiled with and the grid they launch with. A subclass put into the
    table by ``registry.register`` is a version."""
    number = 0
    name = ""
    kernels = ()              # entry points in its CUDA file, in launch order
    constant_weights = False  # every launch copies k into constant memory (inside Op Time)
    general = False           # computes padding, stride, dilation, groups, rectangular kernels, bias itself
    tuning_keys = ()          # the tuning overrides it takes (see plans.module_spec)
    exact = True              # plain float32 arithmetic (v9: error-compensated TF32 tensor cores)
    tf32 = False              # its products are TF32 tensor-core ones (tf32.cuh): TF32_PASSES 1 (precision 'tf32',
                              # one product) or 3 (error-compensated 3xTF32, the default), a tuning key
    defaultable = True        # may be a default (measured table, autotuner, fallback); else only when asked for
    own_error_model = False   # checked against its own error model (v17 FP16, v19 FFT), not the float32 bound
    arch_features = False     # built for the device's architecture-specific target (v20: sm_90a's wgmma)
    dynamic = False           # its kernels take the layer's sizes as an argument (common.cuh: CONV_DYNAMIC):
                              # one module per tile (and ``static_dims``) for every layer, not one per shape
    specialise = True         # (dynamic ones) a layer's module with its sizes as #defines is built in the
                              # background and replaces the run-time-size one (kernels/launch.py)
    dtypes = ("float32",)     # the element types of the data it computes on (ConvShape.DTYPE)
    channels_last = False     # runs channels-last layers (ConvShape.XL, WL): v21, v22 read NHWC data and pack
                              # NCHW data first; the others read NCHW float32 only
    # Where it runs unasked (a default-able version with neither rank: only where defaults.json names it).
    # Lower ranks come first; two versions may not share one, and a subclass sets its own (registry.register).
    fallback_rank = None      # its place in the fallback order (kernels/choice.py); None: never a fallback
    tune_rank = None          # its place in the autotuner's timing order (kernels/autotune.py), the most
                              # often fastest first (the budget may end before the last); None: never timed
    tune_tiles = ({},)        # the autotuner's tile choices, as tuning overrides ({}: its default tile)

    def inner(self, shape):
        """The layer this version's kernels compute: ``shape`` itself, or for a course-style
        version the unpadded, bias-free layer the launcher wraps around it."""
        return shape if self.general else shape.unpadded()

    def unsupported(self, shape, tuning_overrides=None):
        """None if this version runs ``shape``, else a short reason."""
        if shape.DTYPE not in self.dtypes:
            return f"it computes on {' or '.join(self.dtypes)} data, not {shape.DTYPE}"
        if (shape.XL or shape.WL) and not self.channels_last:
            return "it reads NCHW data only, not channels-last"
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

    def static_dims(self, inner):
        """The sizes a module with the sizes at run time still takes as ``#define``s (v13: its window)."""
        return {}

    def dynamic_reason(self, inner):
        """None if its kernels can take ``inner``'s sizes at run time, else why (then a module per shape)."""
        return None

    def sizes_at_run_time(self, inner):
        """Whether its module for ``inner`` takes the sizes as a kernel argument (``dynamic``, the layer
        allows it, and $ECE408_STATIC_SIZES is not 1)."""
        return (self.dynamic and os.environ.get(STATIC_SIZES_ENV, "").strip() != "1"
                and self.dynamic_reason(inner) is None)

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
