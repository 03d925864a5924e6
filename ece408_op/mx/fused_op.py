"""The ``ece408_conv_tanh_pool`` MXNet custom operator: convolution (+ bias) -> tanh -> 2x2
max-pool in one operator, inference only (opt-in; ``mx/fuse_pass.py`` puts it into a graph).

    y = mx.sym.Custom(data, weight, op_type="ece408_conv_tanh_pool", num_filter=50, kernel=(5, 5))
    y = mx.sym.Custom(data, weight, bias, op_type="ece408_conv_tanh_pool", num_filter=6,
                      kernel=5, no_bias=False)

Same as Convolution(stride 1, no padding) -> Activation(tanh) -> Pooling(max, 2x2, stride 2,
'valid') within the float32 bound (``conv.fused``), with an output 4x smaller than the
convolution's: B x M x HO//2 x WO//2.

Attributes (strings, as MXNet passes them): ``num_filter``, ``kernel`` (square), ``no_bias``
(default True; False adds a third input, the bias), ``device`` and ``gpu_kernel`` as for
``ece408_conv``. Paths: CPU, ``conv.fused.conv_tanh_pool_cpu``; GPU with arrays in host memory
(MXNet's CPU build), ``kernels.hostcopy.engine.forward_into`` (x in, the fused kernel, y straight
into MXNet's output); GPU with arrays on the GPU (mxnet-cu), the kernel on their device
pointers. Op Time covers the fused computation; one ``Op Time`` line per forward, as for
``ece408_conv``. Nothing is validated in ``__init__`` (an exception there crashes MXNet):
bad attributes raise in ``infer_shape``, which MXNet turns into a catchable error.
"""
import time

import numpy as np

from ..conv import ConvSpec, parallel_zero, warm_up
from ..conv.fused import conv_tanh_pool_cpu, pooled_shape, prepare_fused_cpu
from ..errors import Ece408Error, ShapeError
from . import lean
from .compat import import_mxnet
from .op import (DEVICES, InferenceOnlyError, _remember_errors, host_view, ndarray_pointer, op_times,
                 resolve_device)

mx = import_mxnet()

FUSED_OP_TYPE = "ece408_conv_tanh_pool"


class ConvTanhPool(mx.operator.CustomOp):
    def __init__(self, device, version):
        super().__init__()
        self.device, self.version = device, version

    @_remember_errors
    def forward(self, is_train, req, in_data, out_data, aux):
        if req[0] == "null":
            return
        y_nd = out_data[0]
        path = resolve_device(self.device, in_data[0].context.device_type)
        if path == "gpu" and in_data[0].context.device_type == "gpu":
            seconds = self._on_device_arrays(in_data, y_nd, req[0])
        else:
            seconds = self._on_host_arrays(path, in_data, y_nd, req[0])
        op_times.add(seconds, path)

    def _on_host_arrays(self, path, in_data, y_nd, req):
        on_host = all(a.context.device_type == "cpu" for a in list(in_data) + [y_nd])
        x, k, *rest = [host_view(a) if on_host else a.asnumpy() for a in in_data]
        bias = rest[0] if rest else None
        direct = on_host and req != "add"           # write straight into MXNet's memory
        out = host_view(y_nd) if direct else np.empty(y_nd.shape, np.float32)
        if path == "gpu":
            from ..kernels.hostcopy.engine import forward_into
            seconds = forward_into(out, x, k, bias, version=self.version, fused=True)
        else:
            warm_up()
            prepare_fused_cpu(x, k, bias)           # compilation (first call) out of Op Time
            parallel_zero(out)                      # as the course did: page faults before the clock
            start = time.perf_counter()
            conv_tanh_pool_cpu(x, k, bias, out=out)
            seconds = time.perf_counter() - start
        if not direct:
            self.assign(y_nd, req, mx.nd.array(out, ctx=y_nd.context, dtype=np.float32))
        return seconds

    def _on_device_arrays(self, in_data, y_nd, req):
        """mxnet-cu builds: the fused kernel on the arrays' device pointers."""
        from ..kernels.launch import fused_forward_device
        if req == "add":
            raise Ece408Error(f"{FUSED_OP_TYPE} cannot add into its output on GPU arrays (req='add')")
        x_nd, k_nd, *rest = in_data
        return fused_forward_device(ndarray_pointer(y_nd), ndarray_pointer(x_nd), ndarray_pointer(k_nd), x_nd.shape,
                     k_nd.shape, bias_ptr=ndarray_pointer(rest[0]) if rest else None, version=self.version,
                     device=x_nd.context.device_id)

    @_remember_errors
    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        raise InferenceOnlyError(f"{FUSED_OP_TYPE} is inference-only: it has no backward pass; "
                                 "train the unfused network, then fuse it for inference")


@lean.register(FUSED_OP_TYPE)
class ConvTanhPoolProp(mx.operator.CustomOpProp):
    """Keeps the attributes as given; ``infer_shape`` parses them (raising there is safe)."""

    KNOWN = ("num_filter", "kernel", "no_bias", "device", "gpu_kernel")

    def __init__(self, **attrs):                    # never raises: unknown attributes too are
        super().__init__(need_top_grad=False)       # reported by infer_shape
        self.unknown = sorted(k for k in attrs if k not in self.KNOWN and not k.startswith("__"))
        no_bias = attrs.get("no_bias", "True")
        self.attrs = {"num_filter": attrs.get("num_filter"), "kernel": attrs.get("kernel"), "no_bias": no_bias}
        self.device, self.gpu_kernel = str(attrs.get("device", "auto")).lower(), str(attrs.get("gpu_kernel", "auto"))
        self.with_bias = str(no_bias).strip().lower() in ("false", "0")

    def _parsed(self):
        if self.unknown:
            raise ShapeError(f"{FUSED_OP_TYPE}: unknown attribute {self.unknown[0]}; known: {', '.join(self.KNOWN)}")
        if self.attrs["num_filter"] is None or self.attrs["kernel"] is None:
            raise ShapeError(f"{FUSED_OP_TYPE} needs num_filter and kernel, e.g. num_filter=50, kernel=5")
        if self.device not in DEVICES:
            raise Ece408Error(f"device={self.device!r} is not one of {', '.join(DEVICES)}")
        if self.gpu_kernel.lower() != "auto":
            from ..kernels import parse_version
            parse_version(self.gpu_kernel)
        spec = ConvSpec.from_attrs(**self.attrs)
        if spec.kernel[0] != spec.kernel[1]:
            raise ShapeError(f"{FUSED_OP_TYPE}: kernel={self.attrs['kernel']!r}: square kernels only")
        return spec.num_filter, spec.kernel[0]

    def list_arguments(self):
        return ["data", "weight", "bias"] if self.with_bias else ["data", "weight"]

    def list_outputs(self):
        return ["output"]

    @_remember_errors
    def infer_shape(self, in_shape):
        num_filter, kernel = self._parsed()
        data_shape = tuple(in_shape[0])
        if len(data_shape) != 4:
            raise ShapeError(f"{FUSED_OP_TYPE}: data must be 4-D (B, C, H, W), got {data_shape}")
        shapes = [data_shape, (num_filter, data_shape[1], kernel, kernel)] + [(num_filter,)] * self.with_bias
        for given, want, name in zip(in_shape[1:], shapes[1:], self.list_arguments()[1:]):
            if given and any(given) and tuple(given) != want:
                raise ShapeError(f"{FUSED_OP_TYPE}: {name} shape {tuple(given)} does not match {want} "
                                 "implied by num_filter, kernel and the data's channels")
        return shapes, [pooled_shape(data_shape, shapes[1])], []

    @_remember_errors
    def infer_type(self, in_type):
        for dtype in in_type:
            if dtype is not None and np.dtype(dtype) != np.float32:
                raise ShapeError(f"{FUSED_OP_TYPE} works on float32 only, got {np.dtype(dtype).name}")
        return [np.float32] * len(in_type), [np.float32], []

    def create_operator(self, ctx, shapes, dtypes):
        return ConvTanhPool(self.device, self.gpu_kernel)
