"""The NumPy layer: the convolution's attributes and shape rules (``ConvSpec``), its float64
reference and error bound, and the CPU path: direct kernels compiled by Numba (``direct.py``,
``direct_loops.py``; Numba set up by ``numba_env.py``), opt-in Winograd (``winograd.py``), and the
im2col + OpenBLAS fallback (``cpu.py``).

Imports nothing of this package but ``errors``; no MXNet, no PyCUDA (Numba where installed). Semantics: MXNet's
``Convolution`` (NCHW, float32) for any ConvSpec (see spec.py); the course's layer is the
special case x: B x C x H x W, k: M x C x K x K, stride 1, no padding, no bias:

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
