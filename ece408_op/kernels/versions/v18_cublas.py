"""v18 cublas: v5's im2col (v05_v06_im2col.cu), then cuBLAS's GEMM through ctypes (kernels/libraries.py)."""
import math

import numpy as np

from .. import libraries
from .registry import register
from .v05_v06_im2col import Im2col


@register
class Cublas(Im2col):
    """v18: v5 with cuBLAS's GEMM (cublasSgemmStridedBatched in FP32, libraries.py): per chunk of
    unrolled images and per group, one strided-batched product over the images, then the bias."""
    number, name, kernels = 18, "cublas", ("im2col_v5", "add_bias")
    source = "v05_v06_im2col.cu"  # no kernel of its own: v5's im2col, the helpers' add_bias
    defaultable = False
    fallback_rank = None      # (not its parent's: opt-in)

    def available(self):
        return libraries.missing("libcublas")

    def multiply(self, plan, y, cols, k, bias, b0, n):
        # Row-major Y_bg (MG x HO*WO) = K_g (MG x GKK) . X_bg (GKK x HO*WO) is, read column-major,
        # Y^T = X^T K^T: m = HO*WO, n = MG, k = GKK, A = X_bg (lda HO*WO), B = K_g (ldb GKK), C = Y_bg.
        s = plan.inner
        blas = libraries.cublas(self.label)
        howo, gkk, mg = s.HO * s.WO, s.CKK, s.M // s.G
        for g in range(s.G):
            blas.gemm_strided_batched(plan.device.index, howo, mg, gkk,
                                      cols + 4 * g * gkk * howo, howo, s.G * gkk * howo,
                                      k + 4 * g * mg * gkk, gkk, 0,
                                      y + 4 * (b0 * s.M + g * mg) * howo, howo, s.M * howo, n)
        if bias:
            count = n * s.M * howo
            plan.kernels[1](np.uintp(y + 4 * b0 * s.M * howo), np.uintp(bias), np.int64(count), np.int32(s.M),
                            np.int32(howo), block=(256, 1, 1), grid=(min(math.ceil(count / 256), 1 << 20), 1))
