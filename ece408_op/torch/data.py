"""What the PyTorch front-end reads off the tensors besides their shapes: the element type the kernels
compute in (float32, float16, bfloat16; autocast's type under autocast), the layouts (NCHW or
channels-last), and the precision 'auto' stands for (PyTorch's ``torch.backends.cudnn.allow_tf32``).

Layouts, as PyTorch's convolutions: y is channels-last where x or the weights are, else NCHW. Half-precision
kernels (v21, v22) read channels-last data as it is (and pack NCHW data themselves); the float32 versions
read NCHW only, so float32 channels-last data is copied to NCHW first and y copied back to channels-last.
"""
import os

import torch

from ..kernels.choice import PRECISION_ENV

KERNEL_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
_CAST = object()                 # a layer cache's key of the weights autocast cast (``cast_for_autocast``)


def channels_last(tensor):
    """Whether ``tensor`` (4-D) is laid out channels-last and not also NCHW-contiguous (a tensor of one
    channel or a 1x1 plane is both: NCHW)."""
    return tensor.dim() == 4 and not tensor.is_contiguous() and tensor.is_contiguous(memory_format=torch.channels_last)


def autocast_on(device_type):
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:                                      # (PyTorch before 2.4: CUDA's flag alone)
        return device_type == "cuda" and torch.is_autocast_enabled()


def autocast_dtype(device_type):
    """The element type autocast computes convolutions in on ``device_type``."""
    try:
        return torch.get_autocast_dtype(device_type)
    except AttributeError:                                 # (PyTorch before 2.4)
        return torch.get_autocast_gpu_dtype() if device_type == "cuda" else torch.get_autocast_cpu_dtype()


def _castable(tensor, dtype):
    """autocast's rule: floating tensors other than float64 are cast, the others left as they are."""
    return tensor is not None and tensor.is_floating_point() and tensor.dtype not in (dtype, torch.float64)


def cast_for_autocast(cache, input, weight, bias, dtype):
    """(input, weight, bias) in autocast's ``dtype``, as nn.Conv2d computes under autocast. The weights'
    cast is kept in ``cache`` (a layer cache) while their memory and version (``_version``: an in-place
    change) are the same, as autocast keeps its casts of parameters."""
    if _castable(input, dtype):
        input = input.to(dtype)
    if not (_castable(weight, dtype) or _castable(bias, dtype)):
        return input, weight, bias
    stamp = (dtype, weight.data_ptr(), weight._version, None if bias is None else (bias.data_ptr(), bias._version))
    held = cache.get(_CAST)
    if held is None or held[0] != stamp:
        held = cache[_CAST] = (stamp, weight.to(dtype) if _castable(weight, dtype) else weight,
                               bias.to(dtype) if _castable(bias, dtype) else bias)
    return input, held[1], held[2]


def cast_traced(input, weight, bias, dtype):
    """``cast_for_autocast`` inside torch.compile's trace (no cache: the graph casts)."""
    return tuple(t.to(dtype) if _castable(t, dtype) else t for t in (input, weight, bias))


def auto_precision(precision):
    """The precision to resolve a float32 layer under: as given, or for None/'auto' $ECE408_PRECISION, else
    'tf32' where PyTorch lets cuDNN use TF32 (``torch.backends.cudnn.allow_tf32``, True by default), else
    None (the kernel layer's default, error-compensated 'tf32x3')."""
    if precision not in (None, "auto") or os.environ.get(PRECISION_ENV):
        return precision
    return "tf32" if torch.backends.cudnn.allow_tf32 else None


def tf32_flag():
    """PyTorch's cuDNN TF32 flag (a layer cache's key: 'auto' follows it)."""
    return torch._C._get_cudnn_allow_tf32()
