"""The PyCUDA layer: the CUDA kernel ladder, its version table, the device and the launchers.

    from ece408_op.kernels import conv2d_forward_gpu
    y, op_seconds = conv2d_forward_gpu(x, k, version=7)      # NumPy in, NumPy out
    z, op_seconds = fused_forward_gpu(x, k, bias)             # tanh(max_pool_2x2(conv + bias))

The fused layer's API (the MXNet operator builds on exactly this; keep it stable):

    fused_forward_gpu(x, k, bias=None, spec=None, out=None, version=None, device=None)
        -> (z, op_seconds); z is pooled_shape(x.shape, k.shape, spec) = B x M x HO//2 x WO//2
    fused_forward_device(y_ptr, x_ptr, k_ptr, x_shape, k_shape, bias_ptr=None, spec=None,
                         version=None, device=None) -> op_seconds      (device pointers)
    version: None/'auto' (the one-pass fused kernel where FUSED.reason(shape) is None, else the
             default convolution + a tanh_pool kernel), 'fused' (ShapeError where it cannot run),
             or a convolution version (that version + tanh_pool)
    Checked against ece408_op.conv.fused_reference_and_bound (float64, float32 bound).

Imports NumPy, PyCUDA (on first use of a device) and ``ece408_op.conv``; never MXNet, so
the benchmarks (``ece408_op/bench/``) run next to PyTorch/cuDNN. Files:

    versions/         the ladder: each version's CUDA file and its Python half side by side
                      (capability check, #defines, grid), the table they register in (VERSIONS)
    choice.py         which version runs a layer: parsing, the precision, defaults.json, the fallback order
    autotune.py       timing the versions on a layer the table does not name (a cost model drops those that
                      cannot win); the GPU cache folder's autotune/
    shape.py          the shape class a module is compiled for
    tuning.py/.json   tuned parameters, as data (bench gpu --sweep writes them)
    build.py          a module's sources, nvcc and the on-disk cubin cache (no GPU needed); the GPU cache
                      folder ($ECE408_GPU_CACHE: cubin/ and autotune/, copyable)
    device.py         a device's context, lock, memory, module and plan caches, profile
    plans.py          a version compiled for a shape class on a device: its module, kernels, launch
    launch.py         the entry points conv2d_forward_gpu / conv2d_forward_device (the course's Op
                      Time), conv2d_forward_async / layer_call (network use: the caller's stream, no
                      synchronisation), fused_forward_gpu / fused_forward_device
    cudadrv.py        the driver calls made through ctypes: modules, launches on any stream, host memory
    libraries.py      cuBLAS and cuFFT through ctypes (v18, v19), found where CUDA's loaders look
    defaults.json     the default version per shape class, per device, from measurements
    hostcopy/         host arrays in and out at the link's speed, straight into MXNet's memory
    profile.py        the nvprof-style table of --profile
    team.py           a team's compiled kernels: load, check a launch plan, run and time it

CUDA is used through the device's primary context, pushed and popped around every use,
so that calls may come from any thread (MXNet calls an operator's forward on its own
worker threads); memory is reused while large enough and freed inside that context.
"""
from .build import compile_error_line, require_nvcc
from .choice import (KERNEL_ENV, PRECISION_ENV, PRECISIONS, choose_version, default_version, fallback_order,
                     parse_precision, parse_version, shape_key)
from .device import DEVICE_ENV, GpuDevice
from .launch import (LayerCall, conv2d_forward_async, conv2d_forward_device, conv2d_forward_gpu, forget_layer_calls,
                     fused_forward_device, fused_forward_gpu, layer_call, pooled_shape, wait_for_specialised)
from .plans import ConvPlan, FusedPlan, fused_plan_for, module_defines, module_spec, plan_for
from .profile import Profile
from .shape import ConvShape
from .versions import FUSED, VERSIONS

__all__ = ["DEVICE_ENV", "GpuDevice", "compile_error_line", "require_nvcc", "ConvPlan", "FusedPlan",
           "conv2d_forward_device", "conv2d_forward_gpu", "fused_forward_device", "fused_forward_gpu",
           "fused_plan_for", "plan_for", "pooled_shape", "LayerCall", "conv2d_forward_async", "forget_layer_calls",
           "layer_call", "Profile", "ConvShape", "FUSED", "KERNEL_ENV",
           "VERSIONS", "choose_version", "default_version", "fallback_order", "module_defines", "module_spec",
           "parse_version", "shape_key", "PRECISION_ENV", "PRECISIONS", "parse_precision", "wait_for_specialised"]
