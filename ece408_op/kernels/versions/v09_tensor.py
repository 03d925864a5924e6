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
    tuning_keys = ("V9_MI", "V9_NI", "V9_WP", "V9_WF", "V9_BK", "V9_STAGES", "V9_ACOLS")
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
