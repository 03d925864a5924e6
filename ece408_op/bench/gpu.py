"""GPU benchmark: every kernel version, cuDNN (through PyTorch, fp32, TF32 off) and the memory floor.

    python -m ece408_op bench gpu [--batch 10000] [--repeats 30] [--out DIR] [--versions 7,8]

Runs without MXNet (PyTorch, PyCUDA and NumPy only). cuDNN is "just another
version": every entry is validated against the float64 NumPy reference on a
sample of images, then timed the same way (``timing.py``): a warm-up, then each
repeat after an L2 flush, between CUDA events; median, min and max are reported.

Memory floor = (bytes of x read + bytes of y written) / copy bandwidth, where
the copy bandwidth is 2 x bytes copied / time of a large device-to-device copy
measured in the same run (a copy reads and writes each byte).
"""
import csv
import json
from pathlib import Path

import numpy as np

from ..conv.reference import reference_and_bound
from ..kernels.device import GpuDevice
from ..kernels.plans import plan_for
from ..kernels.shape import ConvShape
from ..kernels.versions import VERSIONS
from .timing import cuda_torch, l2_flush, time_events

COURSE_LAYER = dict(batch=10000, C=1, H=28, W=28, M=50, K=5)


def validate(y, x, k, sample, version=None):
    """Max error of y against the float64 reference on the sampled images, and the bound it must meet
    (``version``'s own error model where it has one: v17, v19)."""
    ref, bound = (version.reference_and_bound if version is not None else reference_and_bound)(x[sample], k)
    err = np.abs(y[sample].astype(np.float64) - ref)
    return bool((err <= bound).all()), float((err / np.maximum(bound, 1e-30)).max())


class Bench:
    """One layer's tensors on the device, and validated, event-timed measurements of callables."""

    def __init__(self, batch, C, H, W, M, K, repeats=30, seed=408):
        self.torch = torch = cuda_torch()
        self.device = GpuDevice.get()
        self.shape = shape = ConvShape(C, H, W, M, K)
        self.batch, self.repeats = batch, repeats
        self.layer = dict(batch=batch, C=C, H=H, W=W, M=M, K=K)
        rng = np.random.default_rng(seed)
        self.x = rng.integers(0, 256, (batch, C, H, W)).astype(np.float32)   # pixel-like, never zeros
        self.k = (rng.standard_normal((M, C, K, K)) * 0.01).astype(np.float32)
        self.xd, self.kd = torch.from_numpy(self.x).cuda(), torch.from_numpy(self.k).cuda()
        self.yd = torch.empty((batch, M, shape.HO, shape.WO), device="cuda")
        self.sample = np.unique(np.concatenate([[0, batch - 1], rng.integers(0, batch, 30)]))
        self.flush = l2_flush(torch)
        self.x_bytes, self.y_bytes = self.x.nbytes, self.yd.numel() * 4
        self.flops = 2.0 * batch * M * shape.HO * shape.WO * shape.CKK

    def time(self, fn):
        return time_events(self.torch, fn, self.repeats, flush=self.flush)

    def measure(self, fn, timed=None, version=None):
        """Validate ``fn``'s output (poisoned first: every element must be written), then time
        ``timed`` (default ``fn``)."""
        self.yd.fill_(float("nan"))
        fn()
        self.torch.cuda.synchronize()
        ok, worst = validate(self.yd.cpu().numpy(), self.x, self.k, self.sample, version)
        entry = self.time(timed or fn)
        entry.update(valid=ok, worst_error_vs_bound=worst)
        return entry

    def ours(self, version, tuning_overrides=None):
        """A callable launching our ``version`` into yd (compiled now, outside the timing)."""
        dev = self.device
        with dev.active():
            plan = plan_for(dev, self.shape, version, tuning_overrides)

        def fn():
            with dev.active():
                plan.launch(self.yd.data_ptr(), self.xd.data_ptr(), self.kd.data_ptr(), 0, self.batch)
        return fn


def run(batch, C, H, W, M, K, repeats=30, versions=None, seed=408):
    bench = Bench(batch, C, H, W, M, K, repeats, seed)
    torch, shape = bench.torch, bench.shape
    entries = {}
    copy_src = torch.empty(bench.y_bytes // 4, device="cuda").uniform_()
    copy_dst = torch.empty_like(copy_src)
    copy = bench.time(lambda: copy_dst.copy_(copy_src))
    copy_bw = 2 * bench.y_bytes / copy["median_s"]
    floor_s = (bench.x_bytes + bench.y_bytes) / copy_bw
    entries["memcpy DtoD (floor)"] = {**copy, "note": f"{bench.y_bytes / 1e6:.0f} MB copied"}
    for n in (versions or VERSIONS):
        if VERSIONS[n].unsupported(shape) is None and VERSIONS[n].available() is None:
            entries[VERSIONS[n].label] = bench.measure(bench.ours(n), version=VERSIONS[n])
    conv = torch.nn.functional.conv2d
    # cuDNN is "just another version": validated through a copy into yd, timed alone.
    entries["cudnn (torch fp32)"] = bench.measure(lambda: bench.yd.copy_(conv(bench.xd, bench.kd)),
                                                  timed=lambda: conv(bench.xd, bench.kd))
    cudnn_s = entries["cudnn (torch fp32)"]["median_s"]
    for name, entry in entries.items():
        moved = 2 * bench.y_bytes if "floor" in name else bench.x_bytes + bench.y_bytes
        entry["GB_per_s"] = moved / entry["median_s"] / 1e9
        entry["TFLOP_per_s"] = None if "floor" in name else bench.flops / entry["median_s"] / 1e12
        entry["vs_cudnn"] = entry["median_s"] / cudnn_s
        entry["vs_floor"] = entry["median_s"] / floor_s
    return {
        "device": bench.device.name, "layer": bench.layer,
        "bytes": {"x": bench.x_bytes, "y": bench.y_bytes}, "flops": bench.flops,
        "copy_bandwidth_GB_per_s": copy_bw / 1e9, "memory_floor_s": floor_s,
        "repeats": repeats, "entries": entries,
    }


def print_table(result):
    layer = result["layer"]
    print(f"{result['device']}: B={layer['batch']} C={layer['C']} M={layer['M']} "
          f"{layer['H']}x{layer['W']} K={layer['K']}; median of {result['repeats']} (L2 flushed); "
          f"copy bandwidth {result['copy_bandwidth_GB_per_s']:.0f} GB/s, "
          f"memory floor {result['memory_floor_s'] * 1e3:.3f} ms")
    print(f"{'version':22s} {'median ms':>10} {'min':>8} {'max':>8} {'GB/s':>7} {'TFLOP/s':>8} "
          f"{'x cuDNN':>8} {'x floor':>8}  valid")
    for name, e in result["entries"].items():
        tflops = f"{e['TFLOP_per_s']:8.2f}" if e["TFLOP_per_s"] is not None else f"{'':8}"
        print(f"{name:22s} {e['median_s'] * 1e3:10.3f} {e['min_s'] * 1e3:8.3f} {e['max_s'] * 1e3:8.3f} "
              f"{e['GB_per_s']:7.0f} {tflops} {e['vs_cudnn']:8.2f} {e['vs_floor']:8.2f}  "
              f"{e.get('valid', '-')}")


def save(result, out_dir):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_gpu.json").write_text(json.dumps(result, indent=2))
    with open(out / "bench_gpu.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["version", "median_ms", "min_ms", "max_ms", "GB_per_s", "TFLOP_per_s",
                         "vs_cudnn", "vs_floor", "valid"])
        for name, e in result["entries"].items():
            writer.writerow([name, e["median_s"] * 1e3, e["min_s"] * 1e3, e["max_s"] * 1e3, e["GB_per_s"],
                             e["TFLOP_per_s"], e["vs_cudnn"], e["vs_floor"], e.get("valid", "")])
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    names = list(result["entries"])
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.barh(names, [result["entries"][n]["median_s"] * 1e3 for n in names])
    ax.axvline(result["memory_floor_s"] * 1e3, color="red", linestyle="--", label="memory floor")
    ax.set_xscale("log")
    ax.set_xlabel("median ms (log)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "bench_gpu.png", dpi=100)
