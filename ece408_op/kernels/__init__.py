"""The PyCUDA layer: the CUDA kernel ladder, its version table, the device and the launchers.

    from ece408_op.kernels import conv2d_forward_gpu
    y, op_seconds = conv2d_forward_gpu(x, k, version=7)      # NumPy in, NumPy out

Imports NumPy, PyCUDA (on first use of a device) and ``ece408_op.conv``; never MXNet, so
the benchmark runs next to PyTorch/cuDNN. Files:

    conv_forward.cu   the versions side by side (its header says how each differs)
    versions.py       the version table: capability check, #defines and grid of each version
    shape.py          the shape class a module is compiled for
    tuning.py/.json   tuned parameters, as data (bench --sweep writes them)
    device.py         a device's context, lock, memory, module and plan caches, profile
    launch.py         plans and the entry points conv2d_forward_gpu / conv2d_forward_device
    hostcopy.py       host arrays in and out at the link's speed, straight into MXNet's memory
    profile.py        the nvprof-style table of --profile
    bench.py          every version against cuDNN and the memory floor; the v7 sweep

CUDA is used through the device's primary context, pushed and popped around every use,
so that calls may come from any thread (MXNet calls an operator's forward on its own
worker threads); memory is reused while large enough and freed inside that context.
"""
from .device import DEVICE_ENV, SOURCE, GpuDevice, compile_error_line, require_nvcc
from .launch import ConvPlan, conv2d_forward_device, conv2d_forward_gpu, plan_for
from .profile import Profile
from .shape import ConvShape
from .versions import (KERNEL_ENV, PREFERENCE, VERSIONS, choose_version, default_version, module_defines,
                       parse_version)

__all__ = ["DEVICE_ENV", "SOURCE", "GpuDevice", "compile_error_line", "require_nvcc", "ConvPlan",
           "conv2d_forward_device", "conv2d_forward_gpu", "plan_for", "Profile", "ConvShape", "KERNEL_ENV",
           "PREFERENCE", "VERSIONS", "choose_version", "default_version", "module_defines", "parse_version"]
