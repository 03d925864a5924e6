"""v21 hmma: the implicit GEMM in half precision (float16, bfloat16) on the tensor cores, mma.sync
m16n8k16 with float32 sums, channels-last (v21_hmma.cu)."""
import math

import numpy as np

from .halfdata import HalfData
from .registry import register
from .version import MAX_SHARED


@register
class Hmma(HalfData):
    """Half-precision implicit GEMM: a block BM positions x BN filters, WM x WN warps, BK of the GEMM's
    depth per stage (cp.async, STAGES deep), VEC halves per copy (the largest of 8, 4, 2 dividing the
    channels per group); NCHW data and odd channels packed first (halfdata.py)."""
    number, name, kernels = 21, "hmma", ("conv_forward_v21", "pack_input", "pack_weights")
    prefix = "V21"
    fallback_rank = 140       # half-precision data only (the float32 versions refuse it); after v22 (depthwise)
    tune_rank = 12            # half-precision data only: timed where nothing else is, besides v22
    tuning_keys = ("V21_BM", "V21_BN", "V21_WM", "V21_WN", "V21_BK", "V21_STAGES", "V21_MINB")
    # the autotuner's tiles besides the default: smaller blocks for small planes and batches (a 7x7 plane at
    # batch 1 fills 49 positions of a block), wider and deeper ones for large layers, registers capped for 2 blocks
    tune_tiles = ({}, {"V21_MINB": 1}, {"V21_BM": 64, "V21_BN": 64, "V21_WM": 2, "V21_WN": 2},
                  {"V21_BM": 128, "V21_BN": 64, "V21_WM": 2, "V21_WN": 2},
                  {"V21_BM": 64, "V21_BN": 128, "V21_WM": 2, "V21_WN": 2},
                  {"V21_BM": 128, "V21_BN": 128, "V21_WM": 2, "V21_WN": 2, "V21_MINB": 1},
                  {"V21_BM": 256, "V21_BN": 128, "V21_WM": 4, "V21_WN": 2, "V21_MINB": 1},
                  {"V21_BM": 32, "V21_BN": 64, "V21_WM": 1, "V21_WN": 2},
                  {"V21_BK": 64, "V21_STAGES": 3, "V21_MINB": 1})
    MAX_WINDOW = 16               # KH, KW: a row's window rows and columns are bits of one 32-bit mask

    def tile(self, inner):
        """The default tile: 128 x 128 of 8 warps for many filters per group (registers capped for 2 blocks
        per SM: 124, no spills), 128 x 64 for 33-64, and for fewer all of them (a multiple of 8) against 128
        positions of 4 warps."""
        mg = inner.M // inner.G
        if mg > 64:
            return {"V21_BM": 128, "V21_BN": 128, "V21_WM": 2, "V21_WN": 4, "V21_MINB": 2}
        if mg > 32:
            return {"V21_BM": 128, "V21_BN": 64, "V21_WM": 4, "V21_WN": 2}
        return {"V21_BM": 128, "V21_BN": 8 * math.ceil(mg / 8), "V21_WM": 4, "V21_WN": 1}

    @staticmethod
    def vec(inner):
        cg = inner.C // inner.G
        return next((v for v in (8, 4, 2) if cg % v == 0), 2)      # (2: a layer it refuses, odd channels per group)

    def values(self, inner, tuning_overrides=None):
        values = {"V21_MINB": 1, **self.tile(inner), "V21_BK": 32, "V21_STAGES": 4, **self.own(tuning_overrides)}
        values["V21_VEC"] = self.vec(self.inner(inner))
        return {k: int(v) for k, v in values.items()}

    def tile_reason(self, values):
        bm, bn, wm, wn, bk, vec = (values[f"V21_{k}"] for k in ("BM", "BN", "WM", "WN", "BK", "VEC"))
        threads, ch = 32 * wm * wn, bk // vec if vec else 0
        if (bk % 16 or not ch or bk % vec or threads % ch or bm % (threads // ch) or bm % (16 * wm)
                or bn % (8 * wn) or threads > 1024 or values["V21_STAGES"] < 2 or values["V21_MINB"] < 1):
            return (f"tile {values} (BM a multiple of 16*WM and of the rows a pass copies, BN of 8*WN, BK of 16, "
                    "2+ stages)")
        return None

    def defines(self, inner, tuning_overrides=None):
        values = self.values(inner, tuning_overrides)
        reason = self.tile_reason(values)
        if reason:
            raise ValueError(f"v21: {reason}")
        return {**values, **self.data_defines(inner)}

    def shared_bytes(self, defines):
        d = defines
        return d["V21_STAGES"] * (d["V21_BM"] + d["V21_BN"]) * (d["V21_BK"] + 8) * 2 if "V21_BM" in d else 0

    def limits(self, inner, tuning_overrides=None):
        if (inner.C // inner.G) % 2:
            return f"{inner.C // inner.G} channels per group: an even number needed (one group's are padded)"
        if inner.KH > self.MAX_WINDOW or inner.KW > self.MAX_WINDOW:
            return f"a {inner.KH}x{inner.KW} window is wider than {self.MAX_WINDOW} (its bit masks)"
        values = self.values(inner, tuning_overrides)
        reason = self.tile_reason(values) or self.data_limits(inner)
        if reason:
            return reason
        shared = self.shared_bytes(values)
        if shared > MAX_SHARED:
            return f"its stages need {shared} bytes of shared memory (at most {MAX_SHARED})"
        return None

    def launch(self, plan, y, x, k, bias, batch):
        inner, d = plan.inner, plan.defines
        x, k = self.packed(plan, x, k, batch)
        threads = 32 * d["V21_WM"] * d["V21_WN"]
        image, out = inner.C * inner.H * inner.W, inner.M * inner.HO * inner.WO
        ftiles = inner.G * math.ceil(inner.M // inner.G / d["V21_BN"])
        for b0, n in self.chunks(inner, batch):
            plan.kernels[0](np.uintp(y + 2 * b0 * out), np.uintp(x + 2 * b0 * image), np.uintp(k), np.uintp(bias),
                            np.int32(n), *plan.dims, block=(threads, 1, 1),
                            grid=(math.ceil(n * inner.HO * inner.WO / d["V21_BM"]), ftiles), shared=plan.shared_bytes)
