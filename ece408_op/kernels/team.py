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

The grader's own kernels (``GraderKernels``): fresh inputs under secret keys, and the check of a
team's whole output against a float64 reference, run after the timed region on the grader's own
copies of x and k (a team kernel may have written anything into the buffers it was given).
"""
import math

import numpy as np

from ..errors import GpuError, PlanError
from .device import cuda_error_line

WORKSPACE_SHARE = 0.5          # of the device's free memory, at most, for a plan's workspaces
STREAMS = 4                    # stream 0 (the default) and 1-3 (team/plan.py allows no more)
SHARED_DEFAULT_LIMIT = 48 * 1024

# The grader's own kernels, loaded beside the team's: a fresh-input fill (Philox4x32-10 under a
# secret 64-bit key, drawn from os.urandom for each fill) and the check of a team's whole output
# (every value's float64 reference, accumulated in double, against the float32 bound of
# conv.reference_and_bound). They are built by the trusted side (the runner, outside every
# sandbox; a student's own milestone run in-process), never from a cache a team process can write.
GRADER_SOURCE = r"""
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

extern "C" __global__ void grader_fill(float *x, unsigned long long n, unsigned int key0, unsigned int key1)
{
    unsigned long long blocks = (n + 3) / 4;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < blocks;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned int c0 = (unsigned int)i, c1 = (unsigned int)(i >> 32), c2 = 0u, c3 = 0u;
        unsigned int k0 = key0, k1 = key1;
        for (int round = 0; round < 10; ++round) {
            unsigned int hi0 = __umulhi(PHILOX_M0, c0), lo0 = PHILOX_M0 * c0;
            unsigned int hi1 = __umulhi(PHILOX_M1, c2), lo1 = PHILOX_M1 * c2;
            c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
            k0 += PHILOX_W0; k1 += PHILOX_W1;
        }
        unsigned int out[4] = {c0, c1, c2, c3};
        for (int j = 0; j < 4; ++j) {
            unsigned long long at = 4 * i + j;
            if (at < n) x[at] = (float)(out[j] >> 8) * (1.0f / 16777216.0f);
        }
    }
}

// result[0]: how many values miss the bound; result[1]: the lowest such flat index (host sets ~0).
extern "C" __global__ void grader_check(const float *y, const float *x, const float *k, int B, int M, int C,
                                        int H, int W, int K, unsigned long long *result)
{
    const int HO = H - K + 1, WO = W - K + 1;
    const unsigned long long total = (unsigned long long)B * M * HO * WO;
    const double terms = (double)C * K * K;
    for (unsigned long long idx = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; idx < total;
         idx += (unsigned long long)gridDim.x * blockDim.x) {
        const int w = (int)(idx % WO), h = (int)((idx / WO) % HO), m = (int)((idx / ((unsigned long long)WO * HO)) % M);
        const unsigned long long b = idx / ((unsigned long long)WO * HO * M);
        double acc = 0.0, magnitude = 0.0;
        for (int c = 0; c < C; ++c) {
            const float *xc = x + ((b * C + c) * H + h) * (unsigned long long)W + w;
            const float *kc = k + ((unsigned long long)m * C + c) * K * K;
            for (int p = 0; p < K; ++p)
                for (int q = 0; q < K; ++q) {
                    const double v = (double)xc[p * W + q] * (double)kc[p * K + q];
                    acc += v;
                    magnitude += fabs(v);
                }
        }
        const double bound = 1e-6 + terms * 1.2e-7 * magnitude;
        if (!(fabs((double)y[idx] - acc) <= bound)) {
            atomicAdd(result, 1ull);
            atomicMin(result + 1, idx);
        }
    }
}
"""
_grader_images = {}


def grader_cubin(arch):
    """The grader kernels' cubin for ``arch`` (``sm_90``): nvcc, once per process, no disk cache
    (a team process of this user must have no file to plant one in)."""
    if arch not in _grader_images:
        import subprocess
        import tempfile
        from pathlib import Path
        from .build import compile_error_line, require_nvcc
        require_nvcc()
        with tempfile.TemporaryDirectory(prefix="ece408-grader-") as tmp:
            source, out = Path(tmp, "grader.cu"), Path(tmp, "grader.cubin")
            source.write_text(GRADER_SOURCE)
            done = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-O3", "-o", str(out), str(source)],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise GpuError(f"the grader's check kernels did not compile: {compile_error_line(done.stderr)}")
            _grader_images[arch] = out.read_bytes()
    return _grader_images[arch]


class GraderKernels:
    """The grader's fill and check kernels loaded on ``dev`` (call inside ``dev.active()``)."""

    def __init__(self, dev, image):
        from .cudadrv import Module
        self.dev = dev
        try:
            self.module = Module(image)
        except Exception as exc:                      # noqa: BLE001  a driver error, in one line
            raise GpuError(f"the grader's check kernels could not be loaded on {dev.name}: {exc}") from exc
        self._fill = self.module.get_function("grader_fill")
        self._check = self.module.get_function("grader_check")
        self.sms = dev.device.get_attribute(dev.cuda.device_attribute.MULTIPROCESSOR_COUNT)

    def _grid(self, items):
        return (max(1, min(math.ceil(items / 256), 32 * self.sms)), 1, 1)

    def fill(self, ptr, count):
        """Fill ``count`` floats at ``ptr`` with a fresh input under a new secret key; returns the key
        (to fill the grader's own copy again after the timed run)."""
        import os
        key = int.from_bytes(os.urandom(8), "little")
        self.fill_with(ptr, count, key)
        return key

    def fill_with(self, ptr, count, key):
        self._fill(np.uint64(ptr), np.uint64(count), np.uint32(key & 0xFFFFFFFF), np.uint32(key >> 32),
                   block=(256, 1, 1), grid=self._grid((count + 3) // 4))

    def check(self, y, x, k, layer, result):
        """(values that miss the bound, the first one's flat index or None) of the output at ``y``
        against the float64 reference of ``x`` and ``k`` (device pointers); ``result`` is a device
        buffer of two 64-bit words. Synchronises."""
        cuda = self.dev.cuda
        words = np.array([0, np.iinfo(np.uint64).max], np.uint64)
        cuda.memcpy_htod(result, words)
        total = layer.B * layer.M * layer.HO * layer.WO
        self._check(np.uint64(y), np.uint64(x), np.uint64(k), *(np.int32(v) for v in
                    (layer.B, layer.M, layer.C, layer.H, layer.W, layer.K)), np.uint64(int(result)),
                    block=(256, 1, 1), grid=self._grid(total))
        cuda.memcpy_dtoh(words, result)
        bad = int(words[0])
        return bad, (int(words[1]) if bad else None)


# Dense half-precision tensor FLOP per clock per SM, by compute capability: the fastest arithmetic a
# forward could use and still keep the float32 bound (a float32 product needs at least two 11-bit
# products; one TF32 product misses the bound), so the FLOP floor counts every forward at twice
# any real method's speed. Volta/Turing 1024, A100 2048, other Ampere/Ada 1024, Hopper 4096,
# Blackwell 8192; older devices 512.
TENSOR_FLOP_PER_CLOCK = {(7, None): 1024, (8, 0): 2048, (8, None): 1024, (9, None): 4096, (10, None): 8192,
                         (12, None): 8192}


def tensor_flop_per_clock(major, minor):
    return TENSOR_FLOP_PER_CLOCK.get((major, minor), TENSOR_FLOP_PER_CLOCK.get((major, None), 512))


def device_peaks(dev):
    """(bytes/s, FLOP/s, cache bytes) no kernel can beat on ``dev`` (``team.checks.Peaks``), from its attributes: its theoretical DRAM bandwidth
    (memory clock x bus width x 2) for the bytes its L2 cannot hold, and its dense FP16 tensor
    rate (``TENSOR_FLOP_PER_CLOCK``) at its boost clock. On an H100 SXM: 3.35 TB/s beyond 50 MB,
    1.07 PFLOP/s. (Before: 4x the DRAM bandwidth for every byte and 16x 128 FP32 cores per SM.)"""
    a = dev.cuda.device_attribute
    get = dev.device.get_attribute
    dram = 2 * get(a.MEMORY_CLOCK_RATE) * 1e3 * get(a.GLOBAL_MEMORY_BUS_WIDTH) / 8
    major, minor = get(a.COMPUTE_CAPABILITY_MAJOR), get(a.COMPUTE_CAPABILITY_MINOR)
    flops = get(a.MULTIPROCESSOR_COUNT) * tensor_flop_per_clock(major, minor) * get(a.CLOCK_RATE) * 1e3
    return dram, flops, get(a.L2_CACHE_SIZE)


class TeamModule:
    """The team's kernels loaded on ``dev`` (call inside ``dev.active()``)."""

    def __init__(self, dev, image):
        self.dev = dev
        try:
            self.module = dev.cuda.module_from_buffer(bytes(image))
        except dev.cuda.Error as exc:
            raise GpuError(f"the team's compiled kernels could not be loaded on {dev.name}: "
                           f"{cuda_error_line(exc)}; compile new-forward.cu for this GPU ({dev.arch})") from exc

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

