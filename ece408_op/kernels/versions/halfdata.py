"""What the half-precision versions (v21, v22) share: the data they take (float16 or bfloat16, any layout)
and the packing their launch runs first where the caller's data is not what their kernels read (half.cuh:
channels-last x, channels-last weights, a one-group layer's odd channels padded to a multiple of 4)."""
import math
from dataclasses import replace

import numpy as np

from .version import Version

PACK_BLOCK = (32, 8, 1)           # half.cuh's pack_input: a 32 x 32 tile of positions x channels per block
GRID_Z = 65535


class HalfData(Version):
    """A version of half-precision data (float16 or bfloat16): its kernels read channels-last x and
    weights; the launch packs NCHW ones into a workspace first. The convolution is the first of its
    ``kernels``, half.cuh's ``pack_input`` and ``pack_weights`` follow."""
    general = True
    dynamic = True
    exact = False
    dtypes = ("float16", "bfloat16")
    channels_last = True
    prefix = ""
    MAX_X = 2**31 - 1             # a launch's x in elements: the kernels' offsets are 32-bit (larger batches: chunks)
    PAD_TO = 4                    # a one-group layer's odd channels padded to a multiple of this (8-byte copies)

    def inner(self, shape):
        """The layer the convolution kernel computes: ``shape`` with a one-group layer's odd channels padded."""
        if shape.G == 1 and shape.C % 2:
            return replace(shape, C=math.ceil(shape.C / self.PAD_TO) * self.PAD_TO)
        return shape

    def data_defines(self, inner):
        """The element type's and y's layout's #defines."""
        return {"HALF_BF16": int(inner.DTYPE == "bfloat16"), f"{self.prefix}_YNCHW": int(not inner.YL)}

    def data_limits(self, inner):
        if inner.C * inner.H * inner.W > self.MAX_X:
            return f"one image has more than {self.MAX_X} elements"
        return None

    def packs_weights(self, shape, inner):
        """Whether the launch packs the weights (NCHW order of a window wider than 1x1, or padded channels)."""
        return inner.C != shape.C or not shape.WL and shape.KH * shape.KW > 1

    def packed(self, plan, x, k, batch):
        """(x, k) as the convolution kernel reads them: the caller's, or packed into the device's workspaces
        (on the launch stream, in order with the kernels)."""
        s, inner, dev = plan.shape, plan.inner, plan.device
        pack_x, pack_w = plan.kernels[1], plan.kernels[2]
        if not s.XL or inner.C != s.C:
            plane = s.H * s.W
            packed = int(dev.buffer("half packed x", batch * inner.C * plane * 2))
            for b0 in range(0, batch, GRID_Z):
                n = min(GRID_Z, batch - b0)
                pack_x(np.uintp(packed + 2 * b0 * inner.C * plane), np.uintp(x + 2 * b0 * s.C * plane),
                       np.int32(s.C), np.int32(plane), np.int32(inner.C), np.int32(0 if s.XL else 1),
                       block=PACK_BLOCK, grid=(math.ceil(plane / 32), math.ceil(inner.C / 32), n))
            x = packed
        if self.packs_weights(s, inner):
            cg, cgp, taps = s.C // s.G, inner.C // inner.G, s.KH * s.KW
            count = s.M * taps * cgp
            packed = int(dev.buffer("half packed weights", count * 2))
            pack_w(np.uintp(packed), np.uintp(k), np.int32(s.M), np.int32(cg), np.int32(taps), np.int32(cgp),
                   np.int32(0 if s.WL else 1), block=(256, 1, 1), grid=(min(math.ceil(count / 256), 1 << 16), 1))
            k = packed
        return x, k

    def chunks(self, inner, batch):
        """[(first image, images)] of the launches: each within MAX_X elements of x and MAX_RUN positions."""
        from .version import MAX_RUN
        image = inner.C * inner.H * inner.W
        chunk = max(1, min(batch, self.MAX_X // image, MAX_RUN // (inner.HO * inner.WO)))
        return [(b0, min(chunk, batch - b0)) for b0 in range(0, batch, chunk)]
