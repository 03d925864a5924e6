"""Opt-in Winograd F(4x4, 3x3) on the CPU, the CPU's counterpart of the GPU's v12: for 3x3 stride-1
layers (no dilation, one group) of at least MIN_C channels. The filter, input and output transforms
are plain loops compiled by Numba (``winograd_loops.py``); the 36 products in between run as one grouped
1x1 convolution (36 groups of C channels -> 36 groups of M filters) on the direct path's kernels
(``direct.py``), as v12 runs them on v8/v9.

Why opt-in (``ECE408_CPU_KERNEL=fast``, ``cpu_kernel="fast"``): its rounding error follows each 6x6
input tile's magnitude, not each output's own 3x3 window, so it can exceed the elementwise float32
bound the direct path keeps (a zero window inside a tile of large values; tests/conv/test_numba_kernels.py shows
it), while staying within a small fraction of it on ordinary data. It does 36 products per 16 outputs
where the direct sum does 144 (4x fewer multiply-adds), plus the transforms (memory-bound passes).
"""
import functools

import numpy as np

from . import direct
from ..errors import ShapeError
from .spec import ConvSpec

MIN_C = 16                 # as v12: with fewer channels the error nears the bound even on random data
POINTS = 36


def unsupported(x_shape, k_shape, spec):
    """Why Winograd does not run this layer (None: it does)."""
    if not direct.available():
        return "Numba unavailable"
    if tuple(k_shape[2:]) != (3, 3) or spec.stride != (1, 1) or spec.dilate != (1, 1):
        return "Winograd F(4x4, 3x3) needs a 3x3 kernel, stride 1, no dilation"
    if spec.num_group != 1:
        return "Winograd runs one group only"
    if x_shape[1] < MIN_C:
        return f"fewer than {MIN_C} channels (the error nears the float32 bound)"
    _, _, ho, wo = spec.output_shape(x_shape)
    c, m = x_shape[1], k_shape[0]
    why = direct.unsupported((1, POINTS * c, -(-ho // 4), -(-wo // 4)), (POINTS * m, c, 1, 1), _gemm_spec(c, m))
    return None if why is None else f"the products' planes: {why}"


@functools.lru_cache(maxsize=64)
def _gemm_spec(c, m):
    return ConvSpec(num_filter=POINTS * m, kernel=(1, 1), num_group=POINTS)


def conv2d_forward_winograd(x, k, bias, spec, out, accumulate=False):
    """out (=|+=) conv(x, k) + bias by Winograd F(4x4, 3x3); the layer must pass ``unsupported``."""
    from . import winograd_loops as loops
    why = unsupported(x.shape, k.shape, spec)
    if why is not None:
        raise ShapeError(f"Winograd cannot run this layer: {why}")
    b, c, h, w = x.shape
    m = k.shape[0]
    _, _, ho, wo = out.shape
    th, tw = -(-ho // 4), -(-wo // 4)
    u = direct._scratch("winograd U", (POINTS * m, c, 1, 1))
    direct._call(loops.filter_transform, u, k)
    v = direct._scratch("winograd V", (b, POINTS * c, th, tw))
    direct._call(loops.input_transform, v, x, spec.pad[0], spec.pad[1])
    products = direct._scratch("winograd M", (b, POINTS * m, th, tw))
    direct.conv2d_forward_direct(v, u, None, _gemm_spec(c, m), products)
    bias_vec = direct._bias(m, bias)
    direct._call(loops.output_transform, out, products, bias_vec, bool(accumulate))
    return out
