"""v23 hgmma: v21's half-precision implicit GEMM (float16, bfloat16; channels-last, float32 sums) on
Hopper's warpgroup MMA, wgmma.mma_async m64nNk16 from shared memory, built for sm_90a (v23_hgmma.cu)."""
import math

import numpy as np

from ...errors import GpuError
from ..device import GpuDevice
from .halfdata import HalfData
from .registry import register
from .version import MAX_SHARED


@register
class Hgmma(HalfData):
    """Half-precision implicit GEMM on the warpgroup MMA: a block WG warpgroups of MI x 64 positions by BN
    filters (wgmma's N: 64, 128, 256), BK of the depth per stage (cp.async, STAGES deep, wgmma's canonical
    K-major layout), VEC halves per copy (8 or 4 dividing the channels). One group, channels a multiple of 4
    (odd ones padded, halfdata.py); compute capability 9.0 only. The others stay on v21 and v22."""
    number, name, kernels = 23, "hgmma", ("conv_forward_v23", "pack_input", "pack_weights")
    prefix = "V23"
    arch_features = True      # built for sm_90a (build.feature_arch)
    # Never a fallback (compute capability 9.0 only): where the table or the autotuner chose it.
    tune_rank = 11            # half-precision data on sm_90: timed before v21
    tuning_keys = ("V23_BN", "V23_MI", "V23_WG", "V23_STAGES", "V23_MINB")
    # the autotuner's tiles besides the default: 256 filters (80 of shared memory's 128 bytes per clock against
    # 96), 256 positions, one warpgroup (small planes), 64 filters of 256 positions. All 4 stages deep: ptxas
    # serialised the wgmma (C7515) in some builds of 5, 6 and 8.
    tune_tiles = ({}, {"V23_BN": 256}, {"V23_BN": 128, "V23_MI": 2}, {"V23_BN": 128, "V23_WG": 1},
                  {"V23_BN": 64, "V23_MI": 2}, {"V23_BN": 256, "V23_WG": 1}, {"V23_BN": 64, "V23_WG": 1})
    MAX_WINDOW = 16               # KH, KW: a row's window rows and columns are bits of one 32-bit mask

    @staticmethod
    def vec(inner):
        return 8 if inner.C % 8 == 0 else 4           # (4 also for a layer it refuses: channels not a multiple of 4)

    def tile(self, inner):
        """The default tile: 2 warpgroups of 64 positions by 64 filters (at most 64), 128, or 256 where that
        still leaves MIN_BLOCKS blocks at batch 64 (the batch is not part of a plan). From the autotuner's
        picks on ResNet-50 and VGG-16 at batch 64 (H200, fp16 channels-last, docs/gpu-dropin.md): 256 filters
        won on 15 of the 20 layers of 256 filters or more; the other 5 have 7x7 (3: 50 blocks) or 14x14 planes."""
        if inner.M <= 64:
            return {"V23_BN": 64}
        blocks = math.ceil(64 * inner.HO * inner.WO / 128) * math.ceil(inner.M / 256)
        return {"V23_BN": 256 if inner.M >= 256 and blocks >= self.MIN_BLOCKS else 128}

    MIN_BLOCKS = 96

    def values(self, inner, tuning_overrides=None):
        values = {**self.tile(inner), "V23_MI": 1, "V23_WG": 2, "V23_BK": 64, "V23_STAGES": 4,
                  "V23_MINB": 1, **self.own(tuning_overrides)}
        values["V23_VEC"] = self.vec(self.inner(inner))
        return {k: int(v) for k, v in values.items()}

    @staticmethod
    def tile_reason(values):
        bn, mi, wg, bk, vec = (values[f"V23_{k}"] for k in ("BN", "MI", "WG", "BK", "VEC"))
        threads = 128 * wg
        cpr = bk // vec
        if (bn not in (64, 128, 256) or mi not in (1, 2) or wg not in (1, 2) or bk != 64
                or threads % (8 * cpr) or (64 * mi * wg) % (threads // cpr) or values["V23_STAGES"] < 4
                or values["V23_MINB"] not in (1, 2)):
            return (f"tile {values} (V23_BN 64, 128 or 256, 1 or 2 tiles of 64 and warpgroups, V23_BK 64, "
                    "4+ stages)")
        return None

    def defines(self, inner, tuning_overrides=None):
        values = self.values(inner, tuning_overrides)
        reason = self.tile_reason(values)
        if reason:
            raise ValueError(f"v23: {reason}")
        return {**values, **self.data_defines(inner)}

    def shared_bytes(self, defines):
        d = defines
        if "V23_BN" not in d:
            return 0
        return d["V23_STAGES"] * (64 * d["V23_MI"] * d["V23_WG"] + d["V23_BN"]) * d["V23_BK"] * 2 + 1024

    def limits(self, inner, tuning_overrides=None):
        if inner.G != 1:
            return "needs one group"
        if self.inner(inner).C % 4:
            return f"{inner.C} channels: a multiple of 4 needed (odd channels are padded)"
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

    def available(self):
        """Whether the default device ($ECE408_GPU) has it; ``arch_reason`` checks a given device."""
        try:
            arch = GpuDevice.get().arch
        except GpuError as exc:
            return str(exc)
        return self.arch_reason(arch)

    def arch_reason(self, arch):
        return None if arch == "sm_90" else f"wgmma needs compute capability 9.0 (sm_90a), not {arch}"

    def launch(self, plan, y, x, k, bias, batch):
        inner, d = plan.inner, plan.defines
        x, k = self.packed(plan, x, k, batch)
        bm = 64 * d["V23_MI"] * d["V23_WG"]
        image, out = inner.C * inner.H * inner.W, inner.M * inner.HO * inner.WO
        for b0, n in self.chunks(inner, batch):
            plan.kernels[0](np.uintp(y + 2 * b0 * out), np.uintp(x + 2 * b0 * image), np.uintp(k), np.uintp(bias),
                            np.int32(n), *plan.dims, block=(128 * d["V23_WG"], 1, 1),
                            grid=(math.ceil(n * inner.HO * inner.WO / bm), math.ceil(inner.M / d["V23_BN"])),
                            shared=plan.shared_bytes)
