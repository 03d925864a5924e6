"""v15 tree and v16 atomics: v14 with the input channels split among a block's z-slices, their
partial sums added by a shared-memory tree (v15) or atomicAdd (v16) (v15_v16_tree.cu)."""
import math

import numpy as np

from .registry import register
from .version import TILE, Version, const_weights_reason, plane_grid


@register
class ChannelTree(Version):
    """v15: v14 with the input channels split among V15_CZ slices of each block, their partial sums
    added by a tree in shared memory (the course's input-channel reduction)."""
    number, name, kernels = 15, "tree", ("conv_forward_v15",)
    constant_weights = True
    defaultable = False
    MAX_SLICES = 4            # 4 x 16 x 16 = 1024 threads per block

    def slices(self, inner):
        """The largest power of two <= min(C, MAX_SLICES)."""
        return 1 << int(math.log2(max(1, min(inner.C, self.MAX_SLICES))))

    def limits(self, inner, tuning_overrides=None):
        return const_weights_reason(inner.M * inner.CKK)

    def defines(self, inner, tuning_overrides=None):
        return {"TILE": TILE, "V15_CZ": self.slices(inner)}

    def launch(self, plan, y, x, k, bias, batch):
        tile = plan.defines["TILE"]
        plan.kernels[0](np.uintp(y), np.uintp(x), np.int32(batch), block=(tile, tile, plan.defines["V15_CZ"]),
                        grid=plane_grid(plan.inner, batch))


@register
class ChannelAtomics(ChannelTree):
    """v16: v15 with the partial sums added by atomicAdd into y, which the launch zeroes first."""
    number, name, kernels = 16, "atomics", ("conv_forward_v16",)

    def launch(self, plan, y, x, k, bias, batch):
        plan.device.cuda.memset_d32(y, 0, plan.inner.outputs(batch))
        super().launch(plan, y, x, k, bias, batch)
