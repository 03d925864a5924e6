"""v1 naive: one thread per output, every operand from global memory (v01_naive.cu)."""
import math

import numpy as np

from .registry import register
from .version import Version, ints


@register
class Naive(Version):
    number, name, kernels = 1, "naive", ("conv_forward_v1",)
    general = True
    fallback_rank = 80        # runs every layer; the course layer in 5.72 ms (H100, docs/benchmarks.md)
    THREADS = 256

    def launch(self, plan, y, x, k, bias, batch):
        s = plan.inner
        plan.kernels[0](np.uintp(y), np.uintp(x), np.uintp(k), np.uintp(bias),
                        *ints(batch, s.C, s.H, s.W, s.M, s.KH, s.KW, s.SH, s.SW, s.PH, s.PW, s.DH, s.DW, s.G),
                        block=(self.THREADS, 1, 1), grid=(math.ceil(s.outputs(batch) / self.THREADS), 1))
