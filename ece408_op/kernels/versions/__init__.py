"""The ladder of kernel versions, one CUDA file and its Python half side by side (a family of
versions sharing one template shares a file, named with each of their numbers: v02_v03_shared):

    common.cuh            what every module includes: the layer's #defines, the helper kernels
    vNN_name.cu           a version's kernels; its header says how it differs from the one before
                          and what that measured
    vNN_name.py           its Python half: capability check, #defines, grid, its place in the fallback
                          and autotuning orders and the autotuner's tiles (``@register``)
    tiles.cuh, strips.cuh, gemm.cuh, tf32.cuh   what several versions' kernels share
    fused.cu, fused.py    the fused conv + tanh + max-pool kernel (not a version)
    version.py            what a version is (``Version``); registry.py, the table (``VERSIONS``)

Importing this package imports every module of the folder, so ``VERSIONS`` holds every version.
"""
from .registry import VERSIONS, discover, register
from .version import Version

discover(__name__, __path__)

from .fused import FUSED  # noqa: E402  (after discover: the folder's modules are loaded)

__all__ = ["FUSED", "VERSIONS", "Version", "register"]
