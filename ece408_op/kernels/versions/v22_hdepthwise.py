"""v22 hdepthwise: depthwise layers in half precision (float16, bfloat16), channels-last
(v22_hdepthwise.cu)."""
import math

import numpy as np

from .halfdata import HalfData
from .registry import register
from .version import MAX_SHARED


@register
class HalfDepthwise(HalfData):
    """A direct kernel for half-precision depthwise layers (one channel per group, one filter per channel):
    a thread VEC adjacent channels of one position (the largest of 8, 4, 2, 1 dividing C), a block CV such
    vectors of THREADS / CV positions, its weights staged in shared memory as float32."""
    number, name, kernels = 22, "hdepthwise", ("conv_forward_v22", "pack_input", "pack_weights")
    prefix = "V22"
    fallback_rank = 130       # half-precision depthwise layers (``suits``)
    tune_rank = 14
    tuning_keys = ("V22_CV", "V22_THREADS")
    tune_tiles = ({}, {"V22_THREADS": 128}, {"V22_CV": 4})

    def values(self, inner, tuning_overrides=None):
        vec = next(v for v in (8, 4, 2, 1) if inner.C % v == 0)
        vectors = min(8, math.ceil(inner.C / vec))          # (a power of two: it divides the block's threads)
        values = {"V22_VEC": vec, "V22_CV": 1 << (vectors.bit_length() - 1), "V22_THREADS": 256,
                  **self.own(tuning_overrides)}
        return {k: int(v) for k, v in values.items()}

    def defines(self, inner, tuning_overrides=None):
        values = self.values(inner, tuning_overrides)
        if values["V22_THREADS"] % 32 or not 32 <= values["V22_THREADS"] <= 1024 or values["V22_CV"] < 1 \
                or values["V22_THREADS"] % values["V22_CV"]:
            raise ValueError(f"v22: V22_THREADS a multiple of 32 up to 1024 and of V22_CV: {values}")
        return {**values, **self.data_defines(inner)}

    def shared_bytes(self, defines):
        d = defines
        return d["CONV_KH"] * d["CONV_KW"] * d["V22_CV"] * d["V22_VEC"] * 4 if "V22_CV" in d else 0

    def limits(self, inner, tuning_overrides=None):
        if inner.C != inner.G or inner.M != inner.G:
            return "needs a depthwise layer (one input channel and one filter per group)"
        values = self.values(inner, tuning_overrides)
        shared = inner.KH * inner.KW * values["V22_CV"] * values["V22_VEC"] * 4
        if shared > MAX_SHARED:
            return f"its weights need {shared} bytes of shared memory (at most {MAX_SHARED})"
        return self.data_limits(inner)

    def suits(self, shape):
        return shape.G > 1

    def packs_weights(self, shape, inner):
        return False             # M x 1 x KH x KW: the same memory in either layout

    def launch(self, plan, y, x, k, bias, batch):
        inner, d = plan.inner, plan.defines
        x, k = self.packed(plan, x, k, batch)
        positions = d["V22_THREADS"] // d["V22_CV"]
        image, out = inner.C * inner.H * inner.W, inner.M * inner.HO * inner.WO
        for b0, n in self.chunks(inner, batch):
            plan.kernels[0](np.uintp(y + 2 * b0 * out), np.uintp(x + 2 * b0 * image), np.uintp(k), np.uintp(bias),
                            np.int32(n), *plan.dims, block=(d["V22_THREADS"], 1, 1),
                            grid=(math.ceil(n * inner.HO * inner.WO / positions),
                                  math.ceil(inner.C / (d["V22_CV"] * d["V22_VEC"]))),
                            shared=plan.shared_bytes)
