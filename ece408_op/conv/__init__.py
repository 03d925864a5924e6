"""The NumPy layer: the convolution's shape rules, its float64 reference and the CPU fast path.

Imports nothing of this package but ``errors``; no MXNet, no PyCUDA. Semantics (the course's):
x is B x C x H x W, k is M x C x K x K, y is B x M x (H-K+1) x (W-K+1); stride 1, no padding,
no bias, float32:

    y[b][m][h][w] = sum over c, p, q of x[b][c][h+p][w+q] * k[m][c][p][q]
"""
from .cpu import conv2d_forward_cpu
from .fused import fused_reference_and_bound, max_pool_2x2, tanh_maxpool
from .parallel import parallel_copy, parallel_zero, warm_up
from .reference import conv2d_forward_reference, reference_and_bound
from .spec import ConvSpec, output_shape, parse_kernel, parse_num_filter

__all__ = ["conv2d_forward_cpu", "conv2d_forward_reference", "reference_and_bound", "output_shape",
           "ConvSpec", "parse_kernel", "parse_num_filter", "parallel_copy", "parallel_zero", "warm_up",
           "fused_reference_and_bound", "max_pool_2x2", "tanh_maxpool"]
