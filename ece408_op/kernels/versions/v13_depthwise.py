"""v13 depthwise: a direct kernel for depthwise layers (v13_depthwise.cu)."""
import math

import numpy as np

from .registry import register
from .version import MAX_RUN, Version, fast_div


@register
class Depthwise(Version):
    """A direct kernel for depthwise layers (C/G = 1): V13_VEC adjacent outputs of one filter's row per
    thread, every size at compile time (memory-bound: v8's GEMM has a depth of only KH*KW there)."""
    number, name, kernels = 13, "depthwise", ("conv_forward_v13",)
    general = True
    dynamic = True
    specialise = False        # its sizes at run time measured as fast as at compile time (bench/sizes.py: 1.00x)
    tuning_keys = ("V13_VEC", "V13_THREADS")
    fallback_rank = 30        # depthwise layers (``suits``), before v8 (MobileNetV2 on the H100: docs/gpu-dropin.md)
    tune_rank = 20
    tune_tiles = ({}, {"V13_VEC": 2})
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

    def static_dims(self, inner):
        return {"CONV_KH": inner.KH, "CONV_KW": inner.KW, "CONV_SW": inner.SW, "CONV_DW": inner.DW}

    def suits(self, shape):
        return shape.G > 1       # a true depthwise layer; one channel (G = 1): v7, else the rest of the order

    def defines(self, inner, tuning_overrides=None):
        values = self.values(inner, tuning_overrides)
        if values["V13_VEC"] < 1 or values["V13_THREADS"] % 32 or not 32 <= values["V13_THREADS"] <= 1024:
            raise ValueError(f"v13: V13_VEC must be positive, V13_THREADS a multiple of 32 up to 1024: {values}")
        return {**values, "V13_ENABLED": int(self.limits(inner, tuning_overrides) is None)}

    def launch(self, plan, y, x, k, bias, batch):
        s, d = plan.inner, plan.defines
        strips = math.ceil(s.WO / d["V13_VEC"])
        per_image = s.M * s.HO * strips
        extra = ()
        chunk = batch
        if plan.dims:                       # the sizes at run time: 32-bit thread indices, strips as a divisor
            extra = (*plan.dims, *(np.uint32(v) if i == 0 else np.int32(v) for i, v in enumerate(fast_div(strips))))
            chunk = max(1, min(batch, MAX_RUN // per_image))
        image, out = s.C * s.H * s.W, s.M * s.HO * s.WO
        for b0 in range(0, batch, chunk):
            n = min(chunk, batch - b0)
            plan.kernels[0](np.uintp(y + 4 * b0 * out), np.uintp(x + 4 * b0 * image), np.uintp(k), np.uintp(bias),
                            np.int32(n), *extra, block=(d["V13_THREADS"], 1, 1),
                            grid=(math.ceil(n * per_image / d["V13_THREADS"]), 1))
