"""v17 fp16: v14 in half precision, checked against its own error model (v17_fp16.cu)."""
import math

import numpy as np

from ...conv.bounds import fp16_reference_and_bound
from .registry import register
from .version import TILE, Version, const_weights_reason, plane_grid


@register
class Half(Version):
    """v17: v14 in half precision (storage and arithmetic): pre-passes convert x to half and each
    weight to a half2 pair (k, k) in its constant-bank slot; two outputs per thread in one half2
    accumulator. Its error is checked against conv/bounds.py's FP16 model, never the float32 bound."""
    number, name, kernels = 17, "fp16", ("conv_forward_v17", "half_input", "half_weights")
    constant_weights = True   # the launch overwrites the float weights _prepare copied with their half2 pairs
    exact = False
    defaultable = False
    own_error_model = True

    def limits(self, inner, tuning_overrides=None):
        return const_weights_reason(inner.M * inner.CKK)

    def defines(self, inner, tuning_overrides=None):
        return {"TILE": TILE}

    def reference_and_bound(self, x, k, bias=None, spec=None):
        return fp16_reference_and_bound(x, k, bias, spec)

    def launch(self, plan, y, x, k, bias, batch):
        s, tile, dev = plan.inner, plan.defines["TILE"], plan.device
        conv, to_half, weights = plan.kernels
        count, weights_count = batch * s.C * s.H * s.W, s.M * s.CKK
        xh = int(dev.buffer("fp16 x", count * 2))
        pairs = int(dev.buffer("fp16 weight pairs", weights_count * 4))
        weights(np.uintp(pairs), np.uintp(k), np.int32(weights_count), block=(256, 1, 1),
                grid=(math.ceil(weights_count / 256), 1))
        dev.cuda.memcpy_dtod(plan.weights_symbol, pairs, weights_count * 4)
        to_half(np.uintp(xh), np.uintp(x), np.int64(count), block=(256, 1, 1),
                grid=(min(math.ceil(count / 256), 1 << 20), 1))
        conv(np.uintp(y), np.uintp(xh), np.int32(batch), block=(tile // 2, tile, 1), grid=plane_grid(s, batch))
