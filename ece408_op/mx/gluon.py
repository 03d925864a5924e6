"""``ece408_op.gluon.Conv2D``: a drop-in for ``mxnet.gluon.nn.Conv2D`` computed by ece408_conv.

    from ece408_op.gluon import Conv2D
    conv = Conv2D(64, kernel_size=3, strides=2, padding=1, in_channels=0)   # nn.Conv2D's arguments

Same constructor (channels, kernel_size, strides, padding, dilation, groups, layout, activation,
use_bias, weight_initializer, bias_initializer, in_channels=0 with deferred initialisation,
prefix, params), same parameters and names (``conv0_weight``, ``conv0_bias``), so
``load_parameters`` of an ``nn.Conv2D`` checkpoint works, and ``hybridize``, ``export`` and
``SymbolBlock.imports`` do as they do for nn.Conv2D. Three more keywords: ``device``, ``gpu_kernel`` and
``precision`` ('auto', 'tf32x3' or 'fp32'), the operator's attributes (see ece408_op.mx.op).

What ece408_conv cannot run (the NHWC layout, parameters cast to a type other than float32)
falls back to MXNet's built-in Convolution, with one warning per configuration.

``swap_blocks(net)`` turns, in place, every ``nn.Conv2D`` of a Gluon network (``net`` itself
included) into this Conv2D, keeping its parameters (the same Parameter objects), and swaps the
convolution nodes inside its SymbolBlocks: the network then runs ece408_conv imperatively or
hybridized, as it ran the built-in. It returns a SwapReport (what was swapped, what was kept and why).
"""
import warnings

import numpy as np

from ..course import OP_TYPE
from .compat import import_mxnet
from .op import guard_inputs, parse_device, parse_gpu_kernel, parse_precision_attr
from .swap import SwapReport, parse_op_attrs, swap_graph

mx = import_mxnet()
_Conv = mx.gluon.nn.conv_layers._Conv
_DEFAULT_ATTRS = {"device": "auto", "gpu_kernel": "auto", "precision": "auto"}

_warned = set()


def _fallback_warning(reason):
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"ece408_op.gluon.Conv2D: {reason}; using MXNet's built-in Convolution", stacklevel=3)


class Conv2D(mx.gluon.nn.Conv2D):
    """``nn.Conv2D`` whose forward is ``ece408_conv`` (see the module docstring)."""

    def __init__(self, channels, kernel_size, strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
                 layout="NCHW", activation=None, use_bias=True, weight_initializer=None,
                 bias_initializer="zeros", in_channels=0, device="auto", gpu_kernel="auto", precision="auto", **kwargs):
        super().__init__(channels, kernel_size, strides=strides, padding=padding, dilation=dilation,
                         groups=groups, layout=layout, activation=activation, use_bias=use_bias,
                         weight_initializer=weight_initializer, bias_initializer=bias_initializer,
                         in_channels=in_channels, **kwargs)
        self._ece408_attrs = {"device": parse_device(device), "gpu_kernel": parse_gpu_kernel(gpu_kernel),
                              "precision": parse_precision_attr(precision)}

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
    """Make every 2-D convolution of the Gluon network ``net`` run ece408_conv, in place; returns
    a SwapReport (``result`` is ``net``; ``swapped``: the blocks' names and, inside SymbolBlocks,
    the graph nodes' names; ``kept``: (name, reason) of the convolutions left as they were).

    * each ``nn.Conv2D`` (``net`` itself included) becomes this module's ``Conv2D``: the same
      block object, its class changed, so its Parameters, their initializers and every
      reference to the block stay as they were;
    * in each ``SymbolBlock``, the graph's convolution nodes are swapped as ``swap_convolutions``
      swaps them (guards in front, same parameter names);
    * other convolution blocks (1-D, 3-D, transposed, subclasses with their own forward) and
      what ece408_conv cannot compute (NHWC, parameters of another type than float32) are kept.
    ``op_attrs``: device, gpu_kernel, precision, set on every swapped convolution."""
    attrs = parse_op_attrs(op_attrs)
    report = SwapReport(net)

    def visit(block):
        if isinstance(block, Conv2D) or type(block) is mx.gluon.nn.Conv2D:
            reason = Conv2D.fallback_reason(block)
            if reason is None:
                block.__class__ = Conv2D
                block._ece408_attrs = {**_DEFAULT_ATTRS, **getattr(block, "_ece408_attrs", {}), **attrs}
                report.swapped.append(block.name)
            else:
                report.kept.append((block.name, reason))
        elif isinstance(block, mx.gluon.SymbolBlock):
            inputs, graph = block._cached_graph
            swapped_graph, swapped, kept, _ = swap_graph(graph, **attrs)
            block._cached_graph = inputs, swapped_graph
            report.swapped.extend(swapped)
            report.kept.extend(kept)
        elif isinstance(block, _Conv):
            report.kept.append((block.name, _other_convolution(block)))
        for child in block._children.values():
            visit(child)
    visit(net)
    net.apply(lambda block: block._clear_cached_op() if isinstance(block, mx.gluon.HybridBlock) else None)
    return report


def _other_convolution(block):
    """Why a convolution block other than nn.Conv2D is kept."""
    name = type(block).__name__
    if isinstance(block, mx.gluon.nn.Conv2D):
        return f"{name} subclasses nn.Conv2D with its own forward (swap_convolutions(net) swaps its graph)"
    if block._op_name.lower() == "deconvolution":
        return f"{name} is a transposed convolution: ece408_conv computes the forward convolution"
    return f"{name} is {len(block._kwargs['kernel'])}-D: ece408_conv is 2-D only"
