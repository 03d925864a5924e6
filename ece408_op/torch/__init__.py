"""The project's convolution kernels as PyTorch modules (forward only): ``Conv2d``, ``conv2d``,
``swap_convolutions`` and ``warmup``. Needs PyTorch; never imports MXNet.

    from ece408_op.torch import Conv2d, swap_convolutions
    conv = Conv2d(64, 128, 3, padding=1).cuda().eval()      # nn.Conv2d's constructor and state dict
    report = swap_convolutions(model)                        # every nn.Conv2d -> Conv2d, same parameters
    with torch.inference_mode():
        y = model(x)

On CUDA tensors the layer runs the kernel layer's versions on the tensors' own device memory (no
copies: x, the weight and the bias are read where they are, y is a new tensor of PyTorch's caching
allocator, of x's type and PyTorch's layout: channels-last where x or the weights are) and queues them on PyTorch's current stream, like any PyTorch operator: no
synchronisation, no zeroing of y (``kernels.LayerCall.queue``). The first call of each input shape
resolves the layer (shape checks, the version: defaults.json, else autotuned, else the fallback
order; ``kernel=`` asks for one, e.g. ``kernel=9`` or ``kernel="fast"``); later calls cost a
dictionary look-up and the launches. CPU tensors run the project's CPU path (through NumPy).

Training: while autograd records and the input, the weight or the bias requires grad, the forward
runs on the kernels as above inside an ``autograd.Function`` whose backward gives the input, weight
and bias gradients PyTorch asks for (``needs_input_grad``; torch/backward.py): float32 CPU tensors on
the project's CPU backward (conv/backward.py), float32/float16/bfloat16 CUDA tensors on the project's
backward kernels (kernels/backward/), other types on PyTorch's own gradient operators (``torch.nn.grad``);
torch.compile trains through the registered operator's autograd formula, on torch.nn.grad (cuDNN). Errors follow PyTorch's: a wrong dtype is a TypeError, wrong shapes
and devices RuntimeErrors with PyTorch's wording, a bad ``kernel=`` a ValueError.

Every layer ``F.conv2d`` runs runs here too: a layer no kernel version takes (say, half-precision groups
whose channels are not a multiple of 8), another element type (float64, complex; anything but float32 on
the CPU) or another device runs on ``torch.nn.functional.conv2d`` itself (cuDNN on CUDA), said once per
configuration (a UserWarning, as the Gluon front-end says its fallbacks); its errors are then PyTorch's own.
``conv2d`` takes ``padding='same'``/``'valid'`` as ``F.conv2d`` does.

Data types and layouts (torch/data.py): float32, float16 and bfloat16 on CUDA (``.half()``,
``.bfloat16()`` modules; half precision on the tensor cores with float32 sums, v21 and v22, y in x's
type), float32 on the CPU. NCHW and channels-last (``torch.channels_last``) data: half-precision data is
read as it is in either layout; float32 channels-last data is copied to NCHW for the float32 versions and
y copied back to channels-last. Other strides, and tensors whose data does not start on a 16-byte
boundary, are copied first (the kernels move 16 bytes at a time).

``precision`` (of float32 data): None/'auto' ($ECE408_PRECISION, else 'tf32' where
``torch.backends.cudnn.allow_tf32`` is set, PyTorch's default: one TF32 product as cuDNN's; else 'tf32x3':
the error-compensated TF32 tensor-core versions allowed), 'tf32', 'tf32x3' or 'fp32' (plain float32
arithmetic only); kernels/choice.py.

torch.compile: under compilation the forward is one registered operator, ``torch.ops.ece408.conv2d``
(``torch.library.custom_op`` with a fake implementation for the shapes), so a swapped network compiles
without graph breaks, and with ``mode="reduce-overhead"`` its kernels are captured in the CUDA graph (the
first call on the graph's stream, before capture, sets the layer up). Eager calls keep the direct path.
Autocast: as nn.Conv2d, the convolution runs in autocast's type (x, the weights and the bias cast to it;
the weights' cast kept while they are unchanged) and returns it, eager and compiled alike; on the CPU
(float32 only) it computes in float32 and returns autocast's type.
"""
import warnings
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..conv import ConvSpec, conv2d_forward_cpu
from ..errors import Ece408Error, GpuError, ShapeError
from ..kernels import layer_call, parse_precision, parse_version
from .backward import gradients as _gradients
from .data import (KERNEL_DTYPES, auto_precision, autocast_dtype, autocast_on, cast_for_autocast, cast_traced,
                   channels_last, tf32_flag)

__all__ = ["Conv2d", "conv2d", "swap_convolutions", "SwapReport", "warmup"]

def _stream(index):
    """PyTorch's current CUDA stream on device ``index``, as a CUstream handle (an int)."""
    return torch.cuda.current_stream(index).cuda_stream


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", _stream)


def _check_version(version):
    """``version`` (the ``kernel=`` a user gave) as it is, or a ValueError where it names no version."""
    try:
        parse_version(version)
    except GpuError as exc:
        raise ValueError(str(exc)) from None
    return version


def _check_precision(precision):
    """``precision`` as given (None, 'auto', 'tf32', 'tf32x3', 'fp32'), or a ValueError where it names none."""
    try:
        parse_precision(precision)
    except GpuError as exc:
        raise ValueError(str(exc)) from None
    return None if precision is None else str(precision)


_is_compiling = torch.compiler.is_compiling
_CHANNELS_LAST, _CONTIGUOUS = torch.channels_last, torch.contiguous_format


def _records(input, weight, bias):
    """Whether autograd records this call: grad enabled and a tensor that requires grad."""
    return torch.is_grad_enabled() and (getattr(input, "requires_grad", False) or weight.requires_grad or
                                        bias is not None and bias.requires_grad)


class _Trained(torch.autograd.Function):
    """The forward on the kernels (``_run``), the backward by ``_gradients``."""

    @staticmethod
    def forward(ctx, input, weight, bias, cache, stride, padding, dilation, groups, version, precision):
        ctx.save_for_backward(input, weight, bias)
        ctx.conv = (tuple(stride), tuple(padding), tuple(dilation), int(groups))
        return _run(cache, input, weight, bias, stride, padding, dilation, groups, version, precision)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        input, weight, bias = ctx.saved_tensors
        dx, dw, db = _gradients(ctx.needs_input_grad, input, weight, bias, grad, *ctx.conv)
        return dx, dw, db, None, None, None, None, None, None, None


@dataclass
class _Layer:
    """One input shape resolved: y's shape, type and layouts and the kernel layer's LayerCall (None on the
    CPU); for a batched CUDA input whose tensors the kernels read as they are (``x_cl``: x channels-last,
    checked per call), ``queue`` (the LayerCall's) and ``device``, where ``torch.empty`` makes each new y.
    The layer keeps no tensor: one resolved during torch.compile's CUDA-graph warm-up would keep memory
    of the graphs' pool alive, which their check refuses (an expanded one-element template that
    ``empty_like`` copies saved 1.5 us a call, on the meta device it cost 20 us more: H200, 2026-11-26)."""
    out_shape: tuple
    spec: ConvSpec
    call: object = None
    device_index: int = None
    unbatched: bool = False
    queue: object = None
    device: object = None
    dtype: object = torch.float32
    x_format: object = _CONTIGUOUS      # the layouts the kernels read x and the weights in (others: copied)
    w_format: object = _CONTIGUOUS
    y_format: object = _CONTIGUOUS      # what the kernels write; ``y_cl``: y returned channels-last
    y_cl: bool = False
    x_cl: bool = False
    fallback: str = None                # why the layer runs on F.conv2d (None: on the project's kernels)


_said = set()


def _say_fallback(reason):
    """One UserWarning per configuration that runs on F.conv2d (``reason`` names it)."""
    if reason not in _said:
        _said.add(reason)
        warnings.warn(f"ece408_op.torch: {reason}; this layer runs on torch.nn.functional.conv2d", stacklevel=4)


def _pairs(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (int(value), int(value))


def _out_shape(input, weight, stride, padding, dilation):
    """(N, M, HO, WO) of a batched ``input`` (SymInts welcome: the fake implementation's too)."""
    (sh, sw), (ph, pw), (dh, dw) = _pairs(stride), _pairs(padding), _pairs(dilation)
    kh, kw = weight.shape[2], weight.shape[3]
    return (input.shape[0], weight.shape[0], (input.shape[2] + 2 * ph - dh * (kh - 1) - 1) // sh + 1,
            (input.shape[3] + 2 * pw - dw * (kw - 1) - 1) // sw + 1)


def _resolve(input, weight, bias, stride, padding, dilation, groups, version, precision=None, unbatched=False):
    """PyTorch's shape checks (its messages), then the layer (its LayerCall on CUDA; the hot path's
    ``queue`` and ``device`` for a batched input whose tensors need no copy). ``input`` is batched
    (``unbatched``: by the caller)."""
    if weight.dim() != 4:
        raise RuntimeError(f"Expected 4-dimensional weight for 4-dimensional input {list(input.shape)}, "
                           f"but got {weight.dim()}-dimensional weight of size {list(weight.shape)} instead")
    m, cg, kh, kw = weight.shape
    c, h, w = input.shape[1:]
    if groups < 1 or m % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, "
                           f"but got weight of size {list(weight.shape)} instead")
    if c != cg * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {list(weight.shape)}, expected input"
                           f"{list(input.shape)} to have {cg * groups} channels, but got {c} channels instead")
    if bias is not None and tuple(bias.shape) != (m,):
        raise RuntimeError(f"Given weight of size {list(weight.shape)}, expected bias to be 1-dimensional with "
                           f"{m} elements, but got bias of size {list(bias.shape)} instead")
    (sh, sw), (ph, pw), (dh, dw) = _pairs(stride), _pairs(padding), _pairs(dilation)
    if min(sh, sw) < 1 or min(dh, dw) < 1 or min(ph, pw) < 0:
        raise RuntimeError(f"non-positive stride or dilation, or negative padding: stride={(sh, sw)}, "
                           f"padding={(ph, pw)}, dilation={(dh, dw)}")
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    if h + 2 * ph < span_h or w + 2 * pw < span_w:
        raise RuntimeError(f"Calculated padded input size per channel: ({h + 2 * ph} x {w + 2 * pw}). Kernel size: "
                           f"({span_h} x {span_w}). Kernel size can't be greater than actual input size")
    spec = ConvSpec(num_filter=int(m), kernel=(int(kh), int(kw)), stride=(sh, sw), pad=(ph, pw), dilate=(dh, dw),
                    num_group=int(groups), no_bias=bias is None)
    out_shape = (input.shape[0], int(m), (h + 2 * ph - span_h) // sh + 1, (w + 2 * pw - span_w) // sw + 1)
    layer = _Layer(out_shape, spec, unbatched=unbatched, dtype=input.dtype)
    x_cl, w_cl = not unbatched and channels_last(input), channels_last(weight)
    layer.y_cl = x_cl or w_cl
    half = input.dtype != torch.float32
    if half:                     # (v21, v22: either layout as it is; float32 channels-last data: copied)
        layer.x_format, layer.w_format = (_CHANNELS_LAST if x_cl else _CONTIGUOUS), (_CHANNELS_LAST if w_cl else _CONTIGUOUS)
        layer.y_format, layer.x_cl = (_CHANNELS_LAST if layer.y_cl else _CONTIGUOUS), x_cl
    if input.device.type == "cuda" and input.shape[0]:
        layer.device_index = input.device.index
        try:
            layer.call = layer_call(tuple(input.shape), tuple(weight.shape), spec, bias is not None, version,
                                    input.device.index, None if half else precision, KERNEL_DTYPES[input.dtype],
                                    (int(half and x_cl), int(half and w_cl)))
        except ShapeError as exc:            # no version takes it: PyTorch's own convolution does
            if version not in (None, "auto", "fast"):
                raise RuntimeError(str(exc)) from None       # a version asked by name: its refusal
            layer.fallback = f"{str(exc).splitlines()[0]} ({input.dtype})"
            return layer
        except Ece408Error as exc:
            raise RuntimeError(str(exc)) from None
        direct = (half or not layer.y_cl) and (input.is_contiguous(memory_format=layer.x_format)) and \
            weight.is_contiguous(memory_format=layer.w_format)
        if not unbatched and direct:
            layer.queue = layer.call.queue
            layer.device = input.device
    return layer


def _aligned(tensor, memory_format=_CONTIGUOUS):
    """(``tensor`` as a tensor contiguous in ``memory_format`` whose data starts on a 16-byte boundary, its
    data pointer): the tensor itself where it is one, else a copy. A copy lives until the kernels are
    queued, and PyTorch reuses its memory only for work queued after them on the same stream."""
    pointer = tensor.data_ptr()
    if pointer % 16 == 0 and tensor.is_contiguous(memory_format=memory_format):
        return tensor, pointer
    if not tensor.is_contiguous(memory_format=memory_format):
        tensor = tensor.contiguous(memory_format=memory_format)
    if tensor.data_ptr() % 16:
        tensor = tensor.clone(memory_format=memory_format)
    return tensor, tensor.data_ptr()


def _check(input, weight, bias):
    """PyTorch's checks of dtypes and devices (its wording); all follow from ``_run``'s cache key. Returns
    why the layer runs on F.conv2d (an element type or device the kernels do not compute), or None."""
    dims = input.dim()
    if dims not in (3, 4):
        raise RuntimeError(f"Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: "
                           f"{list(input.shape)}")
    if input.dtype != weight.dtype:
        raise RuntimeError(f"Input type ({input.dtype}) and weight type ({weight.dtype}) should be the same")
    if bias is not None and bias.dtype != weight.dtype:
        raise RuntimeError(f"Input type ({input.dtype}) and bias type ({bias.dtype}) should be the same")
    device = input.device
    if weight.device != device or bias is not None and bias.device != device:
        other = weight.device if weight.device != device else bias.device
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"{device} and {other}!")
    if device.type not in ("cuda", "cpu"):
        return f"the kernels run on CUDA and CPU tensors, not on {device.type}"
    if weight.dtype not in KERNEL_DTYPES or device.type != "cuda" and weight.dtype != torch.float32:
        where = "" if device.type == "cuda" else " on the CPU"
        kinds = "float32, float16 and bfloat16" if device.type == "cuda" else "float32"
        return f"the kernels compute {kinds} only{where}, not {weight.dtype}"
    return None


def _run(cache, input, weight, bias, stride, padding, dilation, groups, version, precision=None, autocast=True):
    """The forward. Everything that depends only on the shapes, dtypes, layouts and devices is checked and
    resolved once per cache key; a call with a key seen before pays the look-up, y's allocation and the
    queue. ``autocast``: follow autocast's state (the registered operator's body does not: its caller cast)."""
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"conv2d(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")
    if autocast:
        device_type = "cuda" if input.is_cuda else input.device.type
        if autocast_on(device_type):
            dtype = autocast_dtype(device_type)
            if device_type == "cuda":
                input, weight, bias = cast_for_autocast(cache, input, weight, bias, dtype)
            else:                       # the CPU path computes float32; the result in autocast's type
                if input.is_floating_point() and input.dtype != torch.float64:
                    input = input.float()
                return _run(cache, input, weight, bias, stride, padding, dilation, groups, version, precision,
                            False).to(dtype)
    key = (input.shape, input.dtype, input.device, input.is_contiguous(), weight.shape, weight.dtype, weight.device,
           weight.is_contiguous(), None if bias is None else (bias.shape, bias.dtype, bias.device), tf32_flag())
    layer = cache.get(key)
    if layer is None:
        unbatched = input.dim() == 3
        reason = _check(input, weight, bias)
        if reason is not None:
            layer = _Layer(None, None, unbatched=unbatched, dtype=input.dtype, fallback=reason)
        else:
            layer = _resolve(input.unsqueeze(0) if unbatched else input, weight, bias, stride, padding, dilation,
                             groups, version, auto_precision(precision), unbatched)
        cache[key] = layer
    if layer.fallback is not None:
        _say_fallback(layer.fallback)
        return F.conv2d(input, weight, bias, stride, padding, dilation, groups)
    queue = layer.queue
    if queue is not None:                # the hot path: a batched CUDA layer, its tensors usable as they are
        xp, wp = input.data_ptr(), weight.data_ptr()
        bp = 0 if bias is None else bias.data_ptr()
        if not (xp | wp | bp) & 15 and (bias is None or bias.is_contiguous()) and (
                not layer.x_cl or input.is_contiguous(memory_format=_CHANNELS_LAST)) and (
                layer.w_format is _CONTIGUOUS or weight.is_contiguous(memory_format=_CHANNELS_LAST)):
            if layer.y_format is _CONTIGUOUS:
                y = torch.empty(layer.out_shape, dtype=layer.dtype, device=layer.device)
            else:
                y = torch.empty(layer.out_shape, dtype=layer.dtype, device=layer.device, memory_format=_CHANNELS_LAST)
            try:
                queue(y.data_ptr(), xp, wp, bp, _raw_stream(layer.device_index))
            except Ece408Error as exc:
                raise RuntimeError(str(exc)) from None
            return y
    x = input.unsqueeze(0) if layer.unbatched else input
    y_format = _CHANNELS_LAST if layer.y_cl else _CONTIGUOUS
    if not layer.out_shape[0]:
        y = torch.empty(layer.out_shape, dtype=x.dtype, device=x.device, memory_format=y_format)
    elif layer.call is None:                                   # CPU tensors
        y = _run_cpu(layer, x, weight, bias).contiguous(memory_format=y_format)
    else:
        x, xp = _aligned(x, layer.x_format)
        weight, wp = _aligned(weight, layer.w_format)
        bias, bp = _aligned(bias) if bias is not None else (None, 0)
        y = torch.empty(layer.out_shape, dtype=layer.dtype, device=x.device, memory_format=layer.y_format)
        try:
            layer.call.queue(y.data_ptr(), xp, wp, bp, _raw_stream(layer.device_index))
        except Ece408Error as exc:
            raise RuntimeError(str(exc)) from None
        if y_format is not layer.y_format:          # float32 channels-last data: computed NCHW, returned as given
            y = y.contiguous(memory_format=y_format)
    return y[0] if layer.unbatched else y


def _run_cpu(layer, input, weight, bias):
    numpy = lambda t: t.detach().contiguous().numpy()            # noqa: E731
    try:
        y = conv2d_forward_cpu(numpy(input), numpy(weight), None if bias is None else numpy(bias), layer.spec)
    except Ece408Error as exc:
        raise RuntimeError(str(exc)) from None
    return torch.from_numpy(y)


_functional_cache = {}


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, kernel=None, precision=None):
    """``torch.nn.functional.conv2d`` on the project's kernels (``padding`` numeric, 'same' or 'valid');
    forward only."""
    if isinstance(padding, str):
        input, padding = _string_padding(input, weight, stride, padding, dilation)
    if torch.compiler.is_compiling():
        return _traced(input, weight, bias, list(_pairs(stride)), list(_pairs(padding)), list(_pairs(dilation)),
                       int(groups), _kernel_text(kernel), precision)
    return _functional(input, weight, bias, _pairs(stride), _pairs(padding), _pairs(dilation), int(groups),
                       _check_version(kernel), _check_precision(precision))


def _string_padding(input, weight, stride, padding, dilation):
    """(input, numeric padding) for F.conv2d's ``padding='valid'|'same'``: 'same' pads ``dilation * (k - 1)``
    a dimension, the odd one at the end (as PyTorch does: F.pad first where the two sides differ);
    PyTorch's errors for strided 'same' and for another string."""
    if padding == "valid":
        return input, (0, 0)
    if padding != "same":
        raise RuntimeError(f"Invalid padding string: '{padding}'")
    if any(s != 1 for s in _pairs(stride)):
        raise RuntimeError("padding='same' is not supported for strided convolutions")
    if not isinstance(input, torch.Tensor) or not isinstance(weight, torch.Tensor) or weight.dim() != 4:
        return input, (0, 0)                 # the checks that follow say what is wrong, in PyTorch's words
    totals = [d * (k - 1) for d, k in zip(_pairs(dilation), weight.shape[2:])]
    before = [t // 2 for t in totals]
    if all(2 * b == t for b, t in zip(before, totals)):
        return input, tuple(before)
    pad = [before[1], totals[1] - before[1], before[0], totals[0] - before[0]]        # (left, right, top, bottom)
    return F.pad(input, pad), (0, 0)


def _functional(input, weight, bias, stride, padding, dilation, groups, kernel, precision, autocast=True):
    cache = _functional_cache.get((stride, padding, dilation, groups, kernel, precision))
    if cache is None:
        cache = _functional_cache.setdefault((stride, padding, dilation, groups, kernel, precision), {})
    if isinstance(input, torch.Tensor) and isinstance(weight, torch.Tensor) and _records(input, weight, bias):
        return _Trained.apply(input, weight, bias, cache, stride, padding, dilation, groups, kernel, precision)
    return _run(cache, input, weight, bias, stride, padding, dilation, groups, kernel, precision, autocast)


def _traced(input, weight, bias, stride, padding, dilation, groups, kernel, precision):
    """The registered operator as torch.compile traces a call: autocast applied as eager's ``_run`` does
    (x, the weights and the bias cast to its type on CUDA; on the CPU float32 in, its type out)."""
    device_type = input.device.type
    if autocast_on(device_type):
        dtype = autocast_dtype(device_type)
        if device_type != "cuda":
            x = input.float() if input.is_floating_point() and input.dtype != torch.float64 else input
            return conv2d_op(x, weight, bias, stride, padding, dilation, groups, kernel, precision).to(dtype)
        input, weight, bias = cast_traced(input, weight, bias, dtype)
    return conv2d_op(input, weight, bias, stride, padding, dilation, groups, kernel, precision)


def _kernel_text(kernel):
    return None if kernel is None else str(kernel)


@torch.library.custom_op("ece408::conv2d", mutates_args=())
def conv2d_op(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: list[int],
              padding: list[int], dilation: list[int], groups: int, kernel: Optional[str],
              precision: Optional[str]) -> torch.Tensor:
    """The forward as one registered operator (``torch.ops.ece408.conv2d``): what ``torch.compile`` sees of
    a Conv2d (no graph break; a CUDA graph captures its kernels)."""
    y = _functional(input, weight, bias, tuple(stride), tuple(padding), tuple(dilation), groups,
                    kernel, precision, autocast=False)
    return y.clone() if input.dim() == 3 else y          # (an unbatched y is a view of the batched one)


@conv2d_op.register_fake
def _conv2d_fake(input, weight, bias, stride, padding, dilation, groups, kernel, precision):
    batched = input if input.dim() == 4 else input.unsqueeze(0)
    shape = _out_shape(batched, weight, stride, padding, dilation)
    layout = _CHANNELS_LAST if input.dim() == 4 and channels_last(input) or channels_last(weight) else _CONTIGUOUS
    out = torch.empty(shape, dtype=input.dtype, device=input.device, memory_format=layout)   # (x's type, y's layout)
    return out if input.dim() == 4 else out[0].clone()


def _setup_context(ctx, inputs, output):
    input, weight, bias, stride, padding, dilation, groups, _kernel, _precision = inputs
    ctx.save_for_backward(input, weight, bias)
    ctx.conv = (tuple(stride), tuple(padding), tuple(dilation), int(groups))


def _op_backward(ctx, grad):
    input, weight, bias = ctx.saved_tensors
    needs = ctx.needs_input_grad
    dx, dw, db = _gradients(needs, input, weight, bias, grad, *ctx.conv, ours=False)
    return dx, dw, db, None, None, None, None, None, None


conv2d_op.register_autograd(_op_backward, setup_context=_setup_context)


# what a resolved layer depends on besides the tensors: setting one drops the module's resolved layers
_LAYER_ATTRIBUTES = frozenset({"stride", "padding", "dilation", "groups", "padding_mode", "kernel_size", "kernel",
                               "precision", "_reversed_padding_repeated_twice"})


class Conv2d(nn.Conv2d):
    """``torch.nn.Conv2d`` (same constructor, parameters and state dict) whose forward runs the
    project's kernels; ``kernel``: None/'auto', 'fast' or a version ('9', 'v8', 'gemm', ...);
    ``precision``: None/'auto', 'tf32', 'tf32x3' or 'fp32' (plain float32 arithmetic only)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None, *, kernel=None, precision=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)
        self.kernel = _check_version(kernel)
        self.precision = _check_precision(precision)
        self._layers, self._padding = {}, None

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if name in _LAYER_ATTRIBUTES and "_layers" in self.__dict__:    # the layers resolved so far are stale
            self._layers, self._padding = {}, None

    @classmethod
    def from_conv(cls, conv, kernel=None, precision=None):
        """A Conv2d sharing ``conv``'s parameters (no copy), training flag and hooks."""
        new = cls(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, conv.dilation,
                  conv.groups, conv.bias is not None, conv.padding_mode, device="meta", kernel=kernel,
                  precision=precision)
        new.weight = conv.weight
        if conv.bias is not None:
            new.bias = conv.bias
        new.train(conv.training)
        for hooks in ("_forward_hooks", "_forward_pre_hooks"):
            getattr(new, hooks).update(getattr(conv, hooks))
        return new

    def _explicit_padding(self):
        """(numeric padding for the kernels, F.pad's pad list applied first or None), as nn.Conv2d pads:
        numeric zero padding as it stands, 'same'/'valid' and the other modes through the reversed list."""
        if self.padding_mode == "zeros" and not isinstance(self.padding, str):
            return tuple(self.padding), None
        lr = self._reversed_padding_repeated_twice            # (left_w, right_w, top_h, bottom_h)
        if self.padding_mode == "zeros" and lr[0] == lr[1] and lr[2] == lr[3]:
            return (lr[2], lr[0]), None
        return (0, 0), list(lr)

    def forward(self, input):
        if _is_compiling():                       # torch.compile traces one operator
            return self._forward_compiled(input)
        # weight and bias straight from _parameters (where nn.Module keeps them; assigning anything but a
        # Parameter or None there is nn.Module's TypeError): nn.Module.__getattr__ costs 0.3-0.5 us each
        parameters = self._parameters
        if "weight" in parameters and "bias" in parameters:
            weight, bias = parameters["weight"], parameters["bias"]
        else:                                                  # deleted: nn.Module's AttributeError
            weight, bias = self.weight, self.bias
        if self._padding is None:
            self._padding = self._explicit_padding()
        padding, pre = self._padding
        if pre is not None and isinstance(input, torch.Tensor):
            mode = "constant" if self.padding_mode == "zeros" else self.padding_mode
            input = F.pad(input, pre, mode=mode)
        if torch.is_grad_enabled() and isinstance(input, torch.Tensor) and _records(input, weight, bias):
            return _Trained.apply(input, weight, bias, self._layers, self.stride, padding, self.dilation, self.groups,
                                  self.kernel, self.precision)
        return _run(self._layers, input, weight, bias, self.stride, padding, self.dilation, self.groups, self.kernel,
                    self.precision)

    def _forward_compiled(self, input):
        weight, bias = self.weight, self.bias
        padding, pre = self._explicit_padding()
        if pre is not None:
            input = F.pad(input, pre, mode="constant" if self.padding_mode == "zeros" else self.padding_mode)
        return _traced(input, weight, bias, list(_pairs(self.stride)), list(padding), list(_pairs(self.dilation)),
                       self.groups, _kernel_text(self.kernel), self.precision)

    def extra_repr(self):
        return super().extra_repr() + (f", kernel={self.kernel!r}" if self.kernel is not None else "") + (
            f", precision={self.precision!r}" if self.precision is not None else "")


@dataclass
class SwapReport:
    """What ``swap_convolutions`` did; unpacks as ``(result, swapped)`` like ece408_op.mx's."""
    result: object
    swapped: list = field(default_factory=list)       # module names
    kept: list = field(default_factory=list)          # (module name, reason)

    def __iter__(self):
        return iter((self.result, self.swapped))


def _reason_to_keep(conv):
    if conv.weight.dtype not in KERNEL_DTYPES:
        return f"its weight is {conv.weight.dtype}; ece408_op computes float32, float16 and bfloat16 only"
    return None


def swap_convolutions(model, kernel=None, precision=None):
    """Replace every ``torch.nn.Conv2d`` (exactly that class) in ``model`` by a ``Conv2d`` sharing its
    parameters, in place; a bare nn.Conv2d is returned swapped as ``report.result``. ``kernel`` and
    ``precision`` are set on every swapped layer."""
    _check_version(kernel)
    _check_precision(precision)
    report = SwapReport(model)
    if type(model) is nn.Conv2d:
        reason = _reason_to_keep(model)
        if reason:
            report.kept.append(("", reason))
        else:
            report.result, report.swapped = Conv2d.from_conv(model, kernel, precision), [""]
        return report
    for full, child in [(name, m) for name, m in model.named_modules() if name and type(m) is nn.Conv2d]:
        reason = _reason_to_keep(child)
        if reason:
            report.kept.append((full, reason))
            continue
        parent_name, _, name = full.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, name,
                Conv2d.from_conv(child, kernel, precision))
        report.swapped.append(full)
    return report


def warmup(model, *inputs, batches=None):
    """Resolve every swapped convolution of ``model`` for ``inputs`` ahead of use: one forward (no grad) per
    batch size of ``batches`` (the first input's batch dimension cut or repeated to it; default: as
    given). Fills the GPU cache folder (``$ECE408_GPU_CACHE``: compiled modules and tunings), which
    another machine of the same GPU can copy. Returns {batch: seconds}."""
    import time
    seconds = {}
    first = inputs[0]
    for batch in batches or [first.shape[0]]:
        x = first[:batch] if batch <= first.shape[0] else first.repeat(-(-batch // first.shape[0]), 1, 1, 1)[:batch]
        if first.is_cuda:
            torch.cuda.synchronize(first.device)
        start = time.perf_counter()
        with torch.inference_mode():
            model(x, *inputs[1:])
        if first.is_cuda:
            torch.cuda.synchronize(first.device)
        seconds[int(batch)] = time.perf_counter() - start
    return seconds
