"""v7 strip: a thread's K x (VEC+K-1) input strips in registers, VEC outputs for every filter, the
weights as constant-bank FMA operands (v07_strip.cu); tuned by the sweep (kernels/tuning.json)."""
import math
from dataclasses import replace

import numpy as np

from .. import tuning
from .registry import register
from .version import CONST_WEIGHTS, Version, const_weights_reason


@register
class Strip(Version):
    """Tuned by the sweep (tuning.json): VEC outputs per thread, filter-loop unroll, streaming
    stores, threads per block."""
    number, name, kernels = 7, "strip", ("conv_forward_v7",)
    constant_weights = True
    tuning_keys = tuning.V7_KEYS
    fallback_rank = 10        # where all its strips fit (``suits``): the course layer in 0.43 ms (H100)
    tune_rank = 60            # a module per layer shape: timed only where autotune.worth_timing says
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
        wide = vec % 4 == 0 and shape.WO % vec == 0          # as store_strip decides in strips.cuh
        forced = self.own(tuning_overrides).get("STREAM")
        return int(values["STREAM"]) if wide or forced is not None else 1

    def limits(self, inner, tuning_overrides=None):
        vec = self.vec(inner, tuning.v7_values(self.own(tuning_overrides)))
        strip = inner.K * (vec + inner.K - 1)
        if strip > self.MAX_REGS:
            return f"a K*(VEC+K-1) = {strip} register strip is too large"
        return const_weights_reason(inner.M * inner.CKK)

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
