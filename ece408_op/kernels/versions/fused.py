"""The fused convolution (+ bias) + tanh + 2x2 max-pool of the course models (fused.cu): not a
version (it computes another function), but built and planned like one."""
from .v07_strip import Strip
from .version import Sourced, const_weights_reason


class Fused(Sourced):
    """The fused convolution (+ bias) + tanh + 2x2/2 max-pool kernel of the course models (v7's strips,
    two output rows per thread). Not a version: it computes another function. Course-style: the launcher
    pads x; it adds the bias itself (before tanh)."""
    name, kernel = "fused", "fused_forward"
    arch_features = False
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
        return const_weights_reason(inner.M * inner.CKK)

    def defines(self, inner, tuning_overrides=None):
        enabled = (inner.course_reason() is None and (inner.PH, inner.PW) == (0, 0) and min(inner.HO, inner.WO) >= 2
                   and self._limits(inner, tuning_overrides) is None)
        return {**self.values(inner, tuning_overrides), "FUSE_ENABLED": int(enabled)}


FUSED = Fused()
