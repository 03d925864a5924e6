"""A team's compiled kernels on one device: load them, bind a launch plan to them (checked
against the device's own limits), launch the plan and time it with CUDA events.

Nothing here runs a team's host code: the kernels come as a compiled image (cubin or fatbin,
built by nvcc from the team's new-forward.cu), the launch plan as data (``team/plan.py``).
Checked when a plan is bound, each a one-line PlanError naming the step:

    the kernel exists (extern "C"), its block fits the kernel's own thread limit (registers),
    the grid fits the device, static + dynamic shared memory fits the per-block opt-in limit,
    a constant copy fits its __constant__ symbol, the workspaces fit half the free memory.

Op Time (``TeamPlan.run``): y zeroed, the device synchronised, CUDA events around every step,
as the course timed its kernels (zero y, synchronise, clock, kernels, synchronise, clock).
"""
import math

import numpy as np

from ..errors import GpuError, PlanError
from .device import cuda_error_line

WORKSPACE_SHARE = 0.5          # of the device's free memory, at most, for a plan's workspaces
STREAMS = 4                    # stream 0 (the default) and 1-3 (team/plan.py allows no more)
SHARED_DEFAULT_LIMIT = 48 * 1024

# The harness's fresh-input fill: the same counter-based hash as team/checks.py's fresh_values.
FILL_SOURCE = r"""
extern "C" __global__ void fresh_fill(float *x, unsigned long long n, unsigned int seed)
{
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned int h = (unsigned int)i * 0x9E3779B1u + (unsigned int)(i >> 32) * 0x85EBCA77u + seed;
        h ^= h >> 16; h *= 0x7FEB352Du; h ^= h >> 15; h *= 0x846CA68Bu; h ^= h >> 16;
        x[i] = (float)(h >> 8) * (1.0f / 16777216.0f);
    }
}
"""


def device_peaks(dev):
    """(bytes/s, FLOP/s) no kernel can beat on ``dev``: 4x its DRAM bandwidth (data can sit in
    L2) and 16x its plain fp32 rate (tensor cores), from the device's attributes."""
    a = dev.cuda.device_attribute
    get = dev.device.get_attribute
    dram = 2 * get(a.MEMORY_CLOCK_RATE) * 1e3 * get(a.GLOBAL_MEMORY_BUS_WIDTH) / 8
    fp32 = get(a.MULTIPROCESSOR_COUNT) * 128 * 2 * get(a.CLOCK_RATE) * 1e3
    return 4 * dram, 16 * fp32


class TeamModule:
    """The team's kernels loaded on ``dev`` (call inside ``dev.active()``)."""

    def __init__(self, dev, image):
        self.dev = dev
        try:
            self.module = dev.cuda.module_from_buffer(bytes(image))
        except dev.cuda.Error as exc:
            raise GpuError(f"the team's compiled kernels could not be loaded on {dev.name}: "
                           f"{cuda_error_line(exc)}; compile new-forward.cu for this GPU ({dev.arch})") from exc
        self._fill = None

    def function(self, name):
        try:
            return self.module.get_function(name)
        except self.dev.cuda.Error:
            raise PlanError(f"new-forward.cu has no kernel named {name}; declare it "
                            f'extern "C" __global__ void {name}(...)') from None

    def symbol(self, name):
        try:
            return self.module.get_global(name)
        except self.dev.cuda.Error:
            raise PlanError(f"new-forward.cu has no __constant__ array named {name}") from None

    def fill(self, ptr, count, seed):
        """Fill ``count`` floats at ``ptr`` with the fresh input ``seed`` (queued on stream 0)."""
        if self._fill is None:
            from pycuda.compiler import SourceModule
            self._fill = SourceModule(FILL_SOURCE, no_extern_c=True, arch=self.dev.arch).get_function("fresh_fill")
        blocks = min(max(1, math.ceil(count / 256)), 65535)
        self._fill(np.uintp(ptr), np.uint64(count), np.uint32(seed & 0xFFFFFFFF), block=(256, 1, 1),
                   grid=(blocks, 1, 1))


class TeamPlan:
    """A LaunchPlan bound to a TeamModule for one layer: functions, symbols and workspaces resolved,
    every limit checked (PlanError). ``run`` launches and times it."""

    def __init__(self, module, plan, layer, key):
        self.module, self.plan, self.layer = module, plan, layer
        dev = self.dev = module.dev
        cuda = dev.cuda
        a = cuda.device_attribute
        get = dev.device.get_attribute
        grid_max = (get(a.MAX_GRID_DIM_X), get(a.MAX_GRID_DIM_Y), get(a.MAX_GRID_DIM_Z))
        shared_optin = get(a.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        self.sizes = {"x": 4 * math.prod(layer.x_shape), "k": 4 * math.prod(layer.k_shape),
                      "y": 4 * math.prod(layer.y_shape)}
        free, _ = cuda.mem_get_info()
        total = sum(size for _, size in plan.workspaces)
        if total > WORKSPACE_SHARE * free:
            raise PlanError(f"launch.py: the workspaces ask for {total / 2**20:.0f} MiB; at most "
                            f"{WORKSPACE_SHARE * free / 2**20:.0f} MiB (half the GPU's free memory)")
        self.workspaces = {}
        for name, size in plan.workspaces:
            buf = dev.buffer(f"team:{key}:{name}", size)
            cuda.memset_d8(buf, 0, size)
            self.workspaces[name] = int(buf)
            self.sizes[name] = size
        self.steps = []
        for i, step in enumerate(plan.steps):
            what = f"launch.py: step {i + 1}"
            if hasattr(step, "symbol"):                 # team/plan.py's ConstantStep
                ptr, size = module.symbol(step.symbol)
                if self.sizes[step.source] > size:
                    raise PlanError(f"{what}: {step.source} has {self.sizes[step.source]} bytes; __constant__ "
                                    f"{step.symbol} holds {size}")
                self.steps.append(("constant", int(ptr), step.source, self.sizes[step.source]))
                continue
            fn = module.function(step.name)
            what = f"{what} (kernel {step.name})"
            fa = cuda.function_attribute
            limit = fn.get_attribute(fa.MAX_THREADS_PER_BLOCK)
            if step.threads > limit:
                raise PlanError(f"{what}: block {step.block} has {step.threads} threads; this kernel allows "
                                f"at most {limit} on {dev.name} (its registers)")
            for d, (n, most) in enumerate(zip(step.grid, grid_max)):
                if n > most:
                    raise PlanError(f"{what}: grid {step.grid} exceeds the device's limit {grid_max}")
            static = fn.get_attribute(fa.SHARED_SIZE_BYTES)
            if static + step.shared > shared_optin:
                raise PlanError(f"{what}: {static} bytes of static and {step.shared} of dynamic shared memory; "
                                f"{dev.name} allows {shared_optin} per block")
            if step.shared > SHARED_DEFAULT_LIMIT - static:
                fn.set_attribute(fa.MAX_DYNAMIC_SHARED_SIZE_BYTES, step.shared)
            self.steps.append(("kernel", fn, step))
        self.streams = [None] + [dev.stream(f"team-{s}") for s in range(1, STREAMS)]

    def _pointer(self, name, buffers):
        return buffers[name] if name in buffers else self.workspaces[name]

    def launch(self, y, x, k):
        """Queue every step (pointers as ints). Stream 0 is the default (legacy) stream, which
        waits for the other streams and they for it: steps on streams 1-3 overlap one another,
        and everything has finished when a later step on stream 0 starts."""
        cuda, dev = self.dev.cuda, self.dev
        buffers = {"y": int(y), "x": int(x), "k": int(k)}
        for step in self.steps:
            if step[0] == "constant":
                _, ptr, source, size = step
                cuda.memcpy_dtod(ptr, self._pointer(source, buffers), size)
                continue
            _, fn, spec = step
            args = [np.uintp(self._pointer(a.value, buffers)) if a.kind == "ptr" else
                    np.int32(a.value) if a.kind == "i32" else np.int64(a.value) if a.kind == "i64" else
                    np.float32(a.value) for a in spec.args]
            with dev.timed(spec.name):
                fn(*args, block=spec.block, grid=spec.grid, shared=spec.shared, stream=self.streams[spec.stream])

    def run(self, y, x, k):
        """The course's Op Time of the plan: zero y, synchronise, events around the steps,
        synchronise; returns seconds. GpuError where a kernel fails."""
        cuda, dev = self.dev.cuda, self.dev
        start, stop = dev.events("team-time", 2)
        try:
            cuda.memset_d32(int(y), 0, self.sizes["y"] // 4)
            dev.synchronize()
            start.record()
            self.launch(y, x, k)
            stop.record()
            stop.synchronize()
            dev.synchronize()
        except cuda.Error as exc:
            raise GpuError(f"the team's kernels failed on {dev.name}: {cuda_error_line(exc)}") from exc
        return start.time_till(stop) / 1e3

