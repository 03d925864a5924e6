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
the benchmark runs next to PyTorch/cuDNN. Files:

    conv_forward.cu   the versions side by side (its header says how each differs)
    versions.py       the version table: capability check, #defines and grid of each version
    shape.py          the shape class a module is compiled for
    tuning.py/.json   tuned parameters, as data (bench --sweep writes them)
    device.py         a device's context, lock, memory, module and plan caches, profile
    launch.py         plans and the entry points conv2d_forward_gpu / conv2d_forward_device (the
                      course's Op Time), conv2d_forward_async / layer_call (network use: the
                      caller's stream, no synchronisation), fused_forward_gpu / fused_forward_device
    autotune.py       timing the versions on a layer the table does not name; the user's cache
    cudadrv.py        the driver calls made through ctypes: modules, launches on any stream
    defaults.json     the default version per shape class, per device, from measurements
    hostcopy.py       host arrays in and out at the link's speed, straight into MXNet's memory
    profile.py        the nvprof-style table of --profile
    bench.py          every version against cuDNN and the memory floor; the v7 sweep
    suite.py          the benchmark suite: every shape and batch, ratio tables, plots, defaults.json
    libraries.py      cuBLAS and cuFFT through ctypes (v18, v19), found where CUDA's loaders look
    coursemap.py      the course's optimisation list measured: v14-v19 and ECE408_STREAMS (docs/course-map.md)
    ncu.py            Nsight Compute over a command (--ncu): each kernel's time, bandwidth, FLOP rate, occupancy

CUDA is used through the device's primary context, pushed and popped around every use,
so that calls may come from any thread (MXNet calls an operator's forward on its own
worker threads); memory is reused while large enough and freed inside that context.
"""
from .device import DEVICE_ENV, SOURCE, GpuDevice, compile_error_line, require_nvcc
from .launch import (ConvPlan, FusedPlan, LayerCall, conv2d_forward_async, conv2d_forward_device, conv2d_forward_gpu,
                     forget_layer_calls, fused_forward_device, fused_forward_gpu, fused_plan_for, layer_call, plan_for,
                     pooled_shape)
from .profile import Profile
from .shape import ConvShape
from .versions import (FUSED, KERNEL_ENV, PREFERENCE, VERSIONS, choose_version, default_version, module_defines,
                       parse_version, shape_key)

__all__ = ["DEVICE_ENV", "SOURCE", "GpuDevice", "compile_error_line", "require_nvcc", "ConvPlan", "FusedPlan",
           "conv2d_forward_device", "conv2d_forward_gpu", "fused_forward_device", "fused_forward_gpu",
           "fused_plan_for", "plan_for", "pooled_shape", "LayerCall", "conv2d_forward_async", "forget_layer_calls",
           "layer_call", "Profile", "ConvShape", "FUSED", "KERNEL_ENV",
           "PREFERENCE", "VERSIONS", "choose_version", "default_version", "module_defines", "parse_version",
           "shape_key"]
