"""v10 filters: v7 with its loops swapped: channels streamed through one strip, every filter's
accumulators held (v10_filters.cu)."""
import math

import numpy as np

from .registry import register
from .version import Version, const_weights_reason


@register
class Filters(Version):
    """v7 with the loops swapped: channels streamed through one strip, every filter's accumulators held."""
    number, name, kernels = 10, "filters", ("conv_forward_v10",)
    constant_weights = True
    fallback_rank = 20        # several channels, where its accumulators fit (``suits``)
    tune_rank = 70            # a module per layer shape: timed only where autotune.worth_timing says
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
        return const_weights_reason(inner.M * inner.CKK)

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
