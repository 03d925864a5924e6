"""The convolution's gradients for the front-end's autograd (``_Trained`` and the registered operator's
formula, torch/__init__.py): ``gradients`` gives (d input, d weight, d bias) as PyTorch asks for them.

    float32 CPU tensors       the project's CPU backward (conv/backward.py)
    CUDA float32/16/bf16      the project's backward kernels (kernels/backward/: dx, dw, db, each plain or
                              fast by the layer), queued on PyTorch's current stream into tensors of its
                              caching allocator; dw summed in float32 (split-K atomics), cast to the type
    anything else             PyTorch's own gradient operators (torch.nn.grad: cuDNN on CUDA), said once
                              per configuration where a CUDA layer falls back (a UserWarning)

Under torch.compile (``ours`` False) every gradient is torch.nn.grad's: the compiler traces PyTorch's
operators only, the registered forward excepted.
"""
import warnings

import torch

from ..conv import ConvSpec
from ..errors import Ece408Error, ShapeError
from ..kernels.backward import backward_call

_TYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
_said = set()


def _say_fallback(reason):
    if reason not in _said:
        _said.add(reason)
        warnings.warn(f"ece408_op.torch: {reason}; its gradients run on torch.nn.grad", stacklevel=5)


def gradients(needs, input, weight, bias, grad, stride, padding, dilation, groups, ours=True):
    """(d input, d weight, d bias) of the convolution for the output's gradient ``grad``, each None where
    ``needs`` (PyTorch's needs_input_grad for the three) does not ask for it. ``ours``: the project's
    backward where it runs the layer (False under torch.compile). Computed in the gradient's type
    (autocast: y's); autograd casts each to its tensor's type."""
    unbatched = input.dim() == 3
    x, g = (input.unsqueeze(0), grad.unsqueeze(0)) if unbatched else (input, grad)
    if not any(needs[:3]):
        return None, None, None
    wants = (bool(needs[0]), bool(needs[1]), bool(needs[2]) and bias is not None)
    done = None
    if ours and x.device.type == "cpu" and x.dtype == torch.float32 and weight.dtype == torch.float32 and \
            g.dtype == torch.float32:
        done = _cpu(wants, x, weight, bias, g, stride, padding, dilation, groups)
    elif ours and x.device.type == "cuda" and x.shape[0]:
        done = _cuda(wants, x.to(g.dtype), weight.to(g.dtype), g, stride, padding, dilation, groups)
    if done is None:
        x, w = x.to(g.dtype), weight.to(g.dtype)
        dx = torch.nn.grad.conv2d_input(x.shape, w, g, stride, padding, dilation, groups) if wants[0] else None
        dw = torch.nn.grad.conv2d_weight(x, w.shape, g, stride, padding, dilation, groups) if wants[1] else None
        db = g.sum(dim=(0, 2, 3)) if wants[2] else None
        done = dx, dw, db
    dx, dw, db = done
    if dx is not None and unbatched:
        dx = dx[0]
    return dx, dw, db


def _cpu(wants, x, weight, bias, g, stride, padding, dilation, groups):
    from ..conv.backward import conv2d_backward_cpu
    spec = ConvSpec(num_filter=int(weight.shape[0]), kernel=tuple(weight.shape[2:]), stride=tuple(stride),
                    pad=tuple(padding), dilate=tuple(dilation), num_group=int(groups), no_bias=bias is None)
    numpy = lambda t: t.detach().contiguous().numpy()            # noqa: E731
    dx, dw, db = conv2d_backward_cpu(numpy(g), numpy(x), numpy(weight), spec, wants)
    return tuple(None if a is None else torch.from_numpy(a) for a in (dx, dw, db))


def _cuda(wants, x, w, g, stride, padding, dilation, groups, versions=None):
    """The gradients on the backward kernels, or None where they do not run the layer (said once)."""
    dtype = _TYPES.get(g.dtype)
    if dtype is None:
        _say_fallback(f"the backward kernels compute float32, float16 and bfloat16, not {g.dtype}")
        return None
    if not x.device == w.device == g.device:
        return None                                  # (PyTorch's operators say what is wrong)
    try:
        call = backward_call(tuple(x.shape), tuple(w.shape), tuple(stride), tuple(padding), tuple(dilation),
                             int(groups), dtype, x.device.index, versions)
    except ShapeError as exc:
        _say_fallback(f"{exc} ({g.dtype})")
        return None
    except Ece408Error as exc:
        raise RuntimeError(str(exc)) from None
    g = g.contiguous()
    stream = torch.cuda.current_stream(x.device).cuda_stream
    dx = dw = db = None
    try:
        if wants[0]:
            w_ = w.contiguous()
            dx = torch.empty(x.shape, dtype=g.dtype, device=x.device)
            call.data(dx.data_ptr(), g.data_ptr(), w_.data_ptr(), stream)
        if wants[1]:
            x_ = x.contiguous()
            dw = torch.zeros(w.shape, dtype=torch.float32, device=x.device)
            call.weight(dw.data_ptr(), g.data_ptr(), x_.data_ptr(), stream)
            if dw.dtype != g.dtype:
                dw = dw.to(g.dtype)
        if wants[2]:
            db = torch.empty(w.shape[0], dtype=g.dtype, device=x.device)
            call.bias(db.data_ptr(), g.data_ptr(), stream)
    except Ece408Error as exc:
        raise RuntimeError(str(exc)) from None
    return dx, dw, db


def cuda_gradients(input, weight, grad, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, versions=None,
                   wants=(True, True, True)):
    """(dx, dw, db) of a batched CUDA layer on the backward kernels, ``versions`` as the kernel layer's
    ``backward_call`` takes them ({'data': 'plain', ...}); a RuntimeError where they cannot run it (tests
    and benchmarks: no fallback)."""
    pair = lambda v: (int(v), int(v)) if isinstance(v, int) else tuple(v)          # noqa: E731
    done = _cuda(wants, input, weight, grad, pair(stride), pair(padding), pair(dilation), groups, versions)
    if done is None:
        raise RuntimeError("the backward kernels do not run this layer")
    return done
