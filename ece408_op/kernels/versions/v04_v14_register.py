"""v4 register and v14 restrict: v3's tiles with compile-time sizes and unrolled loops; v4 with MB
filters per thread (register blocking), v14 with one (v04_v14_register.cu)."""
import math

import numpy as np

from .registry import register
from .version import TILE, Version, const_weights_reason, plane_grid


@register
class Register(Version):
    number, name, kernels = 4, "register", ("conv_forward_v4",)
    constant_weights = True
    fallback_rank = 50        # the course layer in 1.74 ms (H100, docs/benchmarks.md); after v8, which runs
                              # every layer
    MB = 4                    # filters per thread

    def limits(self, inner, tuning_overrides=None):
        # The last group of MB filters reads past M (results not stored): that must stay in the bank.
        return const_weights_reason(math.ceil(inner.M / self.MB) * self.MB * inner.CKK)

    def defines(self, inner, tuning_overrides=None):
        return {"TILE": TILE, "MB": self.MB}

    def launch(self, plan, y, x, k, bias, batch):
        s, tile = plan.inner, plan.defines["TILE"]
        tiles = math.ceil(s.HO / tile) * math.ceil(s.WO / tile)
        plan.kernels[0](np.uintp(y), np.uintp(x), np.int32(batch), block=(tile, tile, 1),
                        grid=(tiles, math.ceil(s.M / plan.defines["MB"]), min(batch, 65535)))


@register
class RestrictUnroll(Register):
    """v14: v3's tiles with compile-time sizes and unrolled loops, one filter per thread (v4 without
    its register blocking): the course's "__restrict__ and loop unrolling" as a step of its own."""
    number, name, kernels = 14, "restrict", ("conv_forward_v14",)
    defaultable = False
    fallback_rank = None      # (not its parent's: opt-in)
    MB = 1                    # (its capability check; the module's MB define stays v4's)

    def defines(self, inner, tuning_overrides=None):
        return {"TILE": TILE}

    def launch(self, plan, y, x, k, bias, batch):
        tile = plan.defines["TILE"]
        plan.kernels[0](np.uintp(y), np.uintp(x), np.int32(batch), block=(tile, tile, 1),
                        grid=plane_grid(plan.inner, batch))
