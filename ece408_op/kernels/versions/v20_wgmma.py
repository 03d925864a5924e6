"""v20 wgmma: v9's 3xTF32 on Hopper's warpgroup MMA, built for sm_90a (v20_wgmma.cu)."""
import math

import numpy as np

from ...errors import GpuError
from ..device import GpuDevice
from .registry import register
from .v08_gemm import ImplicitGemm
from .version import MAX_RUN, MAX_SHARED, Version


@register
class Wgmma(Version):
    """3xTF32 like v9, on Hopper's warpgroup MMA (wgmma, sm_90a): a warpgroup multiplies 64 positions x
    V20_BN filters per instruction, x gathered into its registers, the weights split once per call by
    ``wgmma_weights`` into the shared-memory stages' layout (V20_INLINE 1: staged raw and split by the
    kernel itself, one launch). One group; compute capability 9.0 only."""
    number, name, kernels = 20, "wgmma", ("conv_forward_v20", "wgmma_weights")
    general = True
    dynamic = True
    exact = False
    tf32 = True
    arch_features = True
    # Never a fallback (compute capability 9.0 only): a default where the table or the autotuner chose it.
    tune_rank = 10            # where the device has it (``arch_reason``)
    # Besides its default, from the H100 sweep of 48 tiles on the 3x3 layers (docs/kernel-notes.md "v20"):
    # either number of warpgroups, 16 k per stage (VGG's 512-channel 14x14 layer at B=32: 0.321 ms against
    # 0.418), 64 filters, the weights split in the kernel (one launch).
    tune_tiles = ({}, {"V20_WG": 1}, {"V20_WG": 2}, {"V20_WG": 1, "V20_BK": 16}, {"V20_WG": 2, "V20_BK": 16},
             {"V20_BN": 64, "V20_WG": 2}, {"V20_INLINE": 1, "V20_WG": 1}, {"V20_INLINE": 1, "V20_WG": 2, "V20_MINB": 1})
    tuning_keys = ("V20_BN", "V20_WG", "V20_BK", "V20_STAGES", "V20_MINB", "V20_INLINE", "TF32_PASSES")
    MAX_IMAGE = 2**25         # offsets into an image: the k table packs one and a 6-bit tap into 32 bits
    MAX_X = ImplicitGemm.MAX_X

    WAVE_BLOCKS = 660         # 5 blocks per SM of an H100 (132 SMs)

    def values(self, inner, tuning_overrides=None):
        # From a 48-tile sweep on the H100 (docs/kernel-notes.md, "v20"): 2 stages of 32 k, registers capped
        # for 2 blocks per SM, 128 filters per block (64 for at most 64 filters); 2 warpgroups where that
        # still leaves WAVE_BLOCKS blocks (VGG's 28x28 layers at B=32, 784), else 1 (ResNet-18's 28x28
        # layer at B=64: 0.157 ms with 1, 0.172 with 2, whose grid is 392 blocks). The grid's size is not
        # known here (the batch is not part of a plan): the rule takes a batch of 64.
        bn = 128 if inner.M > 64 else 64
        blocks = math.ceil(64 * inner.HO * inner.WO / 128) * math.ceil(inner.M / bn)
        values = {"V20_BN": bn, "V20_WG": 2 if blocks >= self.WAVE_BLOCKS else 1, "V20_BK": 32, "V20_STAGES": 2,
                  "V20_MINB": 2, "V20_INLINE": 0}
        values.update(self.own(tuning_overrides))
        return {k: int(v) for k, v in values.items()}

    @staticmethod
    def _shared(ckk, v):
        """Bytes of shared memory: the weight stages (hi and lo) and the k table padded to whole stages."""
        return v["V20_STAGES"] * 2 * v["V20_BK"] * v["V20_BN"] * 4 + math.ceil(ckk / v["V20_BK"]) * v["V20_BK"] * 4

    def shared_bytes(self, defines):
        d = defines
        return self._shared(d["CONV_C"] * d["CONV_KH"] * d["CONV_KW"], d) if "V20_BN" in d else 0

    def limits(self, inner, tuning_overrides=None):
        s, v = inner, self.values(inner, tuning_overrides)
        if s.G != 1:
            return "needs one group"
        if s.KH * s.KW > 63:
            return f"a {s.KH}x{s.KW} window has more taps than its 63-tap mask"
        reach = max(s.C * s.H * s.W, (s.C - 1) * s.H * s.W + (s.KH - 1) * s.DH * s.W + (s.KW - 1) * s.DW + 1)
        if reach >= self.MAX_IMAGE:
            return f"a window reaches {reach} elements into an image (its k table: below {self.MAX_IMAGE})"
        if (v["V20_BN"] not in (64, 128) or v["V20_BK"] % 8 or not v["V20_BK"] or v["V20_WG"] not in (1, 2)
                or v["V20_STAGES"] < 2 or v["V20_MINB"] not in (1, 2) or v["V20_INLINE"] not in (0, 1)):
            return f"tile {v} (V20_BN 64 or 128, V20_BK a multiple of 8, 1 or 2 warpgroups and blocks, 2+ stages)"
        shared = self._shared(s.CKK, v)
        if shared > MAX_SHARED:
            return f"its stages need {shared} bytes of shared memory (at most {MAX_SHARED})"
        return None

    def defines(self, inner, tuning_overrides=None):
        return self.values(inner, tuning_overrides)

    def available(self):
        """Whether the default device ($ECE408_GPU) has it; ``arch_reason`` checks a given device."""
        try:
            arch = GpuDevice.get().arch
        except GpuError as exc:
            return str(exc)
        return self.arch_reason(arch)

    def arch_reason(self, arch):
        return None if arch == "sm_90" else f"wgmma needs compute capability 9.0 (sm_90a), not {arch}"

    def launches(self, defines):
        return 1 if defines.get("V20_INLINE") else 2

    def launch(self, plan, y, x, k, bias, batch):
        s, d, dev = plan.inner, plan.defines, plan.device
        conv, weights = plan.kernels
        ftiles = math.ceil(s.M / d["V20_BN"])
        w2 = k                                # V20_INLINE: the kernel stages and splits k itself
        if not d["V20_INLINE"]:
            count = ftiles * math.ceil(s.CKK / d["V20_BK"]) * 2 * d["V20_BK"] * d["V20_BN"]
            w2 = int(dev.buffer("v20 split weights", count * 4))
            weights(np.uintp(w2), np.uintp(k), *plan.dims, block=(256, 1, 1),
                    grid=(min(math.ceil(count / 256), 1 << 16), 1))
        image, out = s.C * s.H * s.W, s.M * s.HO * s.WO
        chunk = min(batch, self.MAX_X // image, MAX_RUN // (s.HO * s.WO))
        for b0 in range(0, batch, chunk):
            n = min(chunk, batch - b0)
            conv(np.uintp(y + 4 * b0 * out), np.uintp(x + 4 * b0 * image), np.uintp(w2), np.uintp(bias), np.int32(n),
                 *plan.dims, block=(128 * d["V20_WG"], 1, 1), grid=(math.ceil(n * s.HO * s.WO / (64 * d["V20_WG"])), ftiles),
                 shared=plan.shared_bytes)
