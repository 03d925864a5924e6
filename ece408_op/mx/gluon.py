"""``ece408_op.gluon.Conv2D``: a drop-in for ``mxnet.gluon.nn.Conv2D`` computed by ece408_conv.

    from ece408_op.gluon import Conv2D
    conv = Conv2D(64, kernel_size=3, strides=2, padding=1, in_channels=0)   # nn.Conv2D's arguments

Same constructor (channels, kernel_size, strides, padding, dilation, groups, layout, activation,
use_bias, weight_initializer, bias_initializer, in_channels=0 with deferred initialisation,
prefix, params), same parameters and names (``conv0_weight``, ``conv0_bias``), so
``load_parameters`` of an ``nn.Conv2D`` checkpoint works, and ``hybridize``, ``export`` and
``SymbolBlock.imports`` do as they do for nn.Conv2D. Two more keywords: ``device`` and
``gpu_kernel``, the operator's attributes (see ece408_op.mx.op).

What ece408_conv cannot run (the NHWC layout, parameters cast to a type other than float32)
falls back to MXNet's built-in Convolution, with one warning per configuration.

``swap_blocks(net)`` replaces, in place, every ``nn.Conv2D`` inside a Gluon network by this
Conv2D, keeping its parameters (the same Parameter objects): the network then runs ece408_conv
imperatively or hybridized, as it ran the built-in.
"""
import warnings

import numpy as np

from .. import OP_TYPE
from .compat import import_mxnet
from .op import guard_inputs, parse_device, parse_gpu_kernel

mx = import_mxnet()

_warned = set()


def _fallback_warning(reason):
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"ece408_op.gluon.Conv2D: {reason}; using MXNet's built-in Convolution", stacklevel=3)


class Conv2D(mx.gluon.nn.Conv2D):
    """``nn.Conv2D`` whose forward is ``ece408_conv`` (see the module docstring)."""

    def __init__(self, channels, kernel_size, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
                 layout="NCHW", activation=None, use_bias=True, weight_initializer=None,
                 bias_initializer="zeros", in_channels=0, device="auto", gpu_kernel="auto", **kwargs):
        super().__init__(channels, kernel_size, strides=strides, padding=padding, dilation=dilation,
                         groups=groups, layout=layout, activation=activation, use_bias=use_bias,
                         weight_initializer=weight_initializer, bias_initializer=bias_initializer,
                         in_channels=in_channels, **kwargs)
        self._ece408_attrs = {"device": parse_device(device), "gpu_kernel": parse_gpu_kernel(gpu_kernel)}

    def fallback_reason(self):
        """None where ece408_conv computes this layer, else why the built-in does."""
        if self._kwargs["layout"] != "NCHW":
            return f"layout={self._kwargs['layout']} is not supported (NCHW only)"
        dtype = np.dtype(self.weight.dtype)
        if dtype != np.float32:
            return f"parameters of type {dtype.name} are not supported (float32 only)"
        if self._op_name != "Convolution":
            return f"{self._op_name} (NumPy-array mode) is not supported"
        return None

    def hybrid_forward(self, F, x, weight, bias=None):
        reason = self.fallback_reason()
        if reason is not None:
            _fallback_warning(reason)
            return super().hybrid_forward(F, x, weight, bias)
        inputs = guard_inputs(F, x, weight, *([] if bias is None else [bias]))
        attrs = {k: str(v) for k, v in self._kwargs.items()}
        act = F.Custom(*inputs, op_type=OP_TYPE, name="fwd", **attrs, **self._ece408_attrs)
        if self.act is not None:
            act = self.act(act)
        return act


def swap_blocks(net, **op_attrs):
    """Replace every ``nn.Conv2D`` child (at any depth) of ``net`` by ``Conv2D`` in place, sharing
    its parameters; returns the names (prefixes) of the replaced blocks. ``op_attrs``: device,
    gpu_kernel."""
    replaced = []

    def visit(parent):
        for key, child in list(parent._children.items()):
            if type(child) is mx.gluon.nn.Conv2D:
                parent._children[key] = _converted(child, op_attrs)
                if getattr(parent, key, None) is child:
                    object.__setattr__(parent, key, parent._children[key])
                replaced.append(child.prefix)
            else:
                visit(child)
    visit(net)
    net.apply(lambda block: block._clear_cached_op() if isinstance(block, mx.gluon.HybridBlock) else None)
    return replaced


def _converted(conv, op_attrs):
    kwargs = conv._kwargs
    new = Conv2D(kwargs["num_filter"], kwargs["kernel"], strides=kwargs["stride"], padding=kwargs["pad"],
                 dilation=kwargs["dilate"], groups=kwargs["num_group"], layout=kwargs["layout"],
                 use_bias=not kwargs["no_bias"], in_channels=conv._in_channels, prefix=conv.prefix,
                 params=conv.params, **op_attrs)
    new.act = conv.act                               # (registered as a child by Block.__setattr__)
    return new
