"""v9 tensor: v8 on the tensor cores, error-compensated 3xTF32 (v09_tensor.cu)."""
import math

from .registry import register
from .v08_gemm import ImplicitGemm


@register
class Tensor(ImplicitGemm):
    """Implicit GEMM on the tensor cores, error-compensated 3xTF32 (float32 accuracy)."""
    number, name, kernels = 9, "tensor", ("conv_forward_v9",)
    prefix = "V9"
    exact = False
    tf32 = True
    fallback_rank = 110       # after v1 (every layer, exact): in practice the table's or the autotuner's
    tune_rank = 30
    # Besides its default tile, the tile sweeps' winners (docs/bench/tiles*.md) on ResNet-18's layers and the
    # 1x1/Winograd GEMM shapes; the last two from a 133-tile sweep of the layers docs/gpu-dropin.md lists as
    # not met (H100, 2026-11-24): the fastest on MobileNetV2's 1x1 7x7 -> 160 layers (0.024/0.036 ms against
    # 0.041/0.064 for the default tile) and on ResNet-50's 1x1/2 512 -> 1024 (0.312 ms against v8's 0.335).
    tune_tiles = ({}, {"V9_WP": 2, "V9_WF": 2, "V9_MI": 4, "V9_NI": 4}, {"V9_WP": 4, "V9_WF": 2, "V9_MI": 2, "V9_NI": 4},
             {"V9_WP": 4, "V9_WF": 1, "V9_MI": 4}, {"V9_WP": 2, "V9_WF": 2, "V9_MI": 2, "V9_NI": 4},
             {"V9_WP": 4, "V9_WF": 2, "V9_MI": 2, "V9_NI": 2}, {"V9_WP": 4, "V9_WF": 4, "V9_MI": 4, "V9_NI": 4})
    tuning_keys = ("V9_MI", "V9_NI", "V9_WP", "V9_WF", "V9_BK", "V9_STAGES", "V9_ACOLS", "TF32_PASSES")
    BK_MIN, BK_MULTIPLE = 16, 8

    def tile(self, inner):
        # From the tile sweep on the H100 (docs/bench/tiles.md): 8 warps of 64 positions x 32 filters
        # where the planes are large; 32 positions per warp on 14x14 and 7x7 planes, where 256-position
        # tiles leave the last wave of blocks half empty at batch 64; few filters: 4 warps along positions.
        mg = inner.M // inner.G
        if mg > 32:
            return {"V9_WP": 4, "V9_WF": 2, "V9_MI": 4 if inner.HO * inner.WO >= 784 else 2,
                    "V9_NI": min(4, math.ceil(mg / 16))}
        ni = math.ceil(mg / 8)         # 64 positions per warp for 9-16 filters (measured); else 32 (ptxas
        return {"V9_WP": 4, "V9_WF": 1, "V9_MI": 4 if ni == 2 else 2, "V9_NI": ni}   # spilled with 64)

    def threads_and_bp(self, values):
        return 32 * values["V9_WP"] * values["V9_WF"], values["V9_WP"] * values["V9_MI"] * 16

    def bf(self, values):
        return values["V9_WF"] * values["V9_NI"] * 8
