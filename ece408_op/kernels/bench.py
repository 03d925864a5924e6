"""GPU benchmark: every kernel version, cuDNN (through PyTorch, fp32, TF32 off) and the memory floor.

    python -m ece408_op.kernels.bench [--batch 10000] [--repeats 30] [--out DIR]

Runs without MXNet (PyTorch, PyCUDA and NumPy only). cuDNN is "just another
version": every entry is validated against the float64 NumPy reference on a
sample of images, then timed the same way: a warm-up, then each repeat after
an L2 flush, between CUDA events; median, min and max are reported.

Memory floor = (bytes of x read + bytes of y written) / copy bandwidth, where
the copy bandwidth is 2 x bytes copied / time of a large device-to-device copy
measured in the same run (a copy reads and writes each byte).
"""
import argparse
import csv
import json
import statistics
from pathlib import Path

import numpy as np

from . import VERSIONS, ConvShape, GpuDevice, plan_for, unsupported_reason
from ..cpu import reference_and_bound

COURSE_LAYER = dict(batch=10000, C=1, H=28, W=28, M=50, K=5)


def _torch():
    import torch
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    return torch


def time_events(torch, fn, repeats, warmup=3, flush=None):
    """Median/min/max seconds of ``fn`` between CUDA events, L2 flushed before each repeat."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if flush is not None:
            flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
            "repeats": repeats}


def validate(y, x, k, sample):
    """Max error of y against the float64 reference on the sampled images, and the bound it must meet."""
    ref, bound = reference_and_bound(x[sample], k)
    err = np.abs(y[sample].astype(np.float64) - ref)
    return bool((err <= bound).all()), float((err / np.maximum(bound, 1e-30)).max())


def run(batch, C, H, W, M, K, repeats=30, versions=None, seed=408):
    torch = _torch()
    dev = GpuDevice.get()
    shape = ConvShape(C, H, W, M, K)
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (batch, C, H, W)).astype(np.float32)   # pixel-like values, never zeros
    k = (rng.standard_normal((M, C, K, K)) * 0.01).astype(np.float32)
    xd, kd = torch.from_numpy(x).cuda(), torch.from_numpy(k).cuda()
    yd = torch.empty((batch, M, shape.HO, shape.WO), device="cuda")
    sample = np.unique(np.concatenate([[0, batch - 1], rng.integers(0, batch, 30)]))
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(max(4 * l2, 256 << 20) // 4, device="cuda")
    x_bytes, y_bytes = x.nbytes, yd.numel() * 4
    flops = 2.0 * batch * M * shape.HO * shape.WO * shape.CKK

    entries = {}
    copy_src = torch.empty(y_bytes // 4, device="cuda").uniform_()
    copy_dst = torch.empty_like(copy_src)
    copy = time_events(torch, lambda: copy_dst.copy_(copy_src), repeats, flush=flush)
    copy_bw = 2 * y_bytes / copy["median_s"]
    floor_s = (x_bytes + y_bytes) / copy_bw
    entries["memcpy DtoD (floor)"] = {**copy, "note": f"{y_bytes / 1e6:.0f} MB copied"}

    def ours(version):
        with dev.active():
            plan = plan_for(dev, shape, version)

        def fn():
            with dev.active():
                plan.launch(yd.data_ptr(), xd.data_ptr(), kd.data_ptr(), batch)
        return fn

    candidates = [(f"v{n} {VERSIONS[n].name}", ours(n)) for n in (versions or VERSIONS)
                  if unsupported_reason(n, shape) is None]
    candidates.append(("cudnn (torch fp32)", lambda: yd.copy_(torch.nn.functional.conv2d(xd, kd))))
    for name, fn in candidates:
        yd.fill_(float("nan"))                          # poison: every element must be written
        fn()
        torch.cuda.synchronize()
        ok, worst = validate(yd.cpu().numpy(), x, k, sample)
        if name.startswith("cudnn"):                    # time the library call alone, not the copy
            fn = (lambda: torch.nn.functional.conv2d(xd, kd))
        entry = time_events(torch, fn, repeats, flush=flush)
        entry.update(valid=ok, worst_error_vs_bound=worst)
        entries[name] = entry
    cudnn_s = entries["cudnn (torch fp32)"]["median_s"]
    for name, entry in entries.items():
        entry["GB_per_s"] = (x_bytes + y_bytes) / entry["median_s"] / 1e9 if "floor" not in name \
            else 2 * y_bytes / entry["median_s"] / 1e9
        entry["TFLOP_per_s"] = flops / entry["median_s"] / 1e12 if "floor" not in name else None
        entry["vs_cudnn"] = entry["median_s"] / cudnn_s
        entry["vs_floor"] = entry["median_s"] / floor_s
    return {
        "device": dev.name, "layer": dict(batch=batch, C=C, H=H, W=W, M=M, K=K),
        "bytes": {"x": x_bytes, "y": y_bytes}, "flops": flops,
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for key, value in COURSE_LAYER.items():
        parser.add_argument(f"--{key}", type=int, default=value)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--versions", help="comma-separated version numbers (default: all)")
    parser.add_argument("--out", default="bench-gpu", help="folder for bench_gpu.json/.csv/.png")
    args = parser.parse_args(argv)
    versions = [int(v) for v in args.versions.split(",")] if args.versions else None
    result = run(args.batch, args.C, args.H, args.W, args.M, args.K, args.repeats, versions)
    save(result, args.out)
    print_table(result)
    bad = [name for name, e in result["entries"].items() if e.get("valid") is False]
    if bad:
        print(f"INVALID results: {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
