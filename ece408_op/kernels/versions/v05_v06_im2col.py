"""v5 im2col and v6 implicit: a tiled shared-memory GEMM over the im2col matrix (v5) or gathering
from x (v6) (v05_v06_im2col.cu); v18_cublas.py runs v5's im2col before cuBLAS's GEMM."""
import math

import numpy as np

from .registry import register
from .version import Version


def _gemm_grid(s, tile, images):
    """v5/v6: (output-position tiles, groups x filter tiles of a group, images)."""
    return (math.ceil(s.HO * s.WO / tile), s.G * math.ceil(s.M // s.G / tile), min(images, 65535))


@register
class Im2col(Version):
    number, name, kernels = 5, "im2col", ("im2col_v5", "gemm_v5")
    general = True
    fallback_rank = 70        # runs every layer; the course layer in 3.70 ms (H100, docs/benchmarks.md)
    GEMM_TILE = 16            # GEMM tile edge, shared with v6
    WORKSPACE_BYTES = 256 << 20   # im2col of as many images as fit

    def defines(self, inner, tuning_overrides=None):
        return {"GEMM_TILE": self.GEMM_TILE}

    def launch(self, plan, y, x, k, bias, batch):
        s = plan.inner
        per_image = s.G * s.CKK * s.HO * s.WO * 4          # every group's unrolled matrix
        chunk = max(1, min(batch, self.WORKSPACE_BYTES // per_image))
        cols = int(plan.device.buffer("im2col", chunk * per_image))
        for b0 in range(0, batch, chunk):
            n = min(chunk, batch - b0)
            plan.kernels[0](np.uintp(cols), np.uintp(x), np.int64(b0), np.int32(n), block=(256, 1, 1),
                            grid=(min(math.ceil(n * per_image / 4 / 256), 1 << 20), 1))
            self.multiply(plan, y, cols, k, bias, b0, n)

    def multiply(self, plan, y, cols, k, bias, b0, n):
        """y's images b0 .. b0 + n - 1 from their unrolled columns ``cols``: v5's tiled GEMM kernel."""
        s, tile = plan.inner, plan.defines["GEMM_TILE"]
        plan.kernels[1](np.uintp(y), np.uintp(cols), np.uintp(k), np.uintp(bias), np.int64(b0), np.int32(n),
                        block=(tile, tile, 1), grid=_gemm_grid(s, tile, n))


@register
class Implicit(Version):
    number, name, kernels = 6, "implicit", ("conv_forward_v6",)
    general = True
    fallback_rank = 60        # runs every layer; the course layer in 3.04 ms (H100)

    def defines(self, inner, tuning_overrides=None):
        return {"GEMM_TILE": Im2col.GEMM_TILE}

    def launch(self, plan, y, x, k, bias, batch):
        s, tile = plan.inner, plan.defines["GEMM_TILE"]
        plan.kernels[0](np.uintp(y), np.uintp(x), np.uintp(k), np.uintp(bias), np.int64(0), np.int32(batch),
                        block=(tile, tile, 1), grid=_gemm_grid(s, tile, batch))
