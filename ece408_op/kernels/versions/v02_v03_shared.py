"""v2 shared and v3 constant: a TILE x TILE output tile per block, the input tile in shared memory;
v3 with the weights in constant memory (v02_v03_shared.cu)."""
import math

import numpy as np

from . import version
from .registry import register
from .version import Version, const_weights_reason, ints


@register
class Shared(Version):
    number, name, kernels = 2, "shared", ("conv_forward_v2",)
    fallback_rank = 100       # the course layer in 7.61 ms (H100, docs/benchmarks.md)
    TILE = version.TILE       # output tile edge, shared by v2-v4 and v14-v17 (tiles.cuh)

    def defines(self, inner, tuning_overrides=None):
        return {"TILE": self.TILE}

    def launch(self, plan, y, x, k, bias, batch):
        s, tile = plan.inner, plan.defines["TILE"]
        tiles = math.ceil(s.HO / tile) * math.ceil(s.WO / tile)
        plan.kernels[0](np.uintp(y), np.uintp(x), np.uintp(k), *ints(batch, s.C, s.H, s.W, s.M, s.K),
                        block=(tile, tile, 1), grid=(tiles, s.M, min(batch, 65535)),
                        shared=(tile + s.K - 1) ** 2 * 4)


@register
class Constant(Shared):
    number, name, kernels = 3, "constant", ("conv_forward_v3",)
    constant_weights = True
    fallback_rank = 90        # the course layer in 7.33 ms (H100)

    def limits(self, inner, tuning_overrides=None):
        return const_weights_reason(inner.M * inner.CKK)
