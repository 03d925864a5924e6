"""v8 gemm: the register-tiled implicit GEMM in FP32 (v08_gemm.cu); ``ImplicitGemm`` is what v8 and
v9 share (tiles, shared memory, the launch)."""
import math

import numpy as np

from .registry import register
from .version import MAX_RUN, MAX_SHARED, Version


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


class ImplicitGemm(Version):
    """v8 and v9: a block computes a tile of positions x filters, the k-loop pipelined through shared
    memory; tile sizes from the layer's filters per group (``tile``), tuning overrides on top."""
    general = True
    dynamic = True
    prefix = ""
    BK_MIN, BK_MULTIPLE = 8, 1
    MAX_X = 2**31 - 1         # a launch's x in elements: the kernels' offsets are 32-bit (larger batches: chunks)
    MAX_GKK = 2**16           # C/G*KH*KW: the row decomposition's multiply-high division is exact below it

    def tile(self, inner):
        """The default tile for ``inner`` (a dict of the version's #defines)."""
        raise NotImplementedError

    def dynamic_reason(self, inner):
        if inner.KH * inner.KW > 64:           # (the sizes at run time: every layer's taps go through the mask)
            return f"a {inner.KH}x{inner.KW} window has more taps than its 64-bit mask"
        return None

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
        chunk = min(batch, self.MAX_X // image, MAX_RUN // (s.HO * s.WO))
        for b0 in range(0, batch, chunk):
            n = min(chunk, batch - b0)
            grid = (math.ceil(n * s.HO * s.WO / bp), s.G * math.ceil(s.M // s.G / self.bf(d)))
            plan.kernels[0](np.uintp(y + 4 * b0 * out), np.uintp(x + 4 * b0 * image), np.uintp(k), np.uintp(bias),
                            np.int32(n), *plan.dims, block=(threads, 1, 1), grid=grid, shared=plan.shared_bytes)


@register
class Gemm(ImplicitGemm):
    """Register-tiled implicit GEMM in FP32 (FFMA): each thread a V8_TP x V8_TF micro-tile."""
    number, name, kernels = 8, "gemm", ("conv_forward_v8",)
    prefix = "V8"
    fallback_rank = 40        # every layer, in plain FP32
    tune_rank = 40
    tune_tiles = ({}, {"V8_BP": 128, "V8_BF": 64, "V8_TP": 8, "V8_TF": 8}, {"V8_BP": 64, "V8_BF": 64, "V8_TP": 4, "V8_TF": 4})
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
