"""CPU benchmark: ece408_conv's Op Time against MXNet's built-in CPU Convolution.

    python scripts/bench_cpu.py [--images 10000] [--repeats 5] [--json out.json]

Both run on the same tensors: the first N test images and the model's conv1
weights. Reported: median and spread of the repeats, and the ratio
ours / built-in measured in the same run.
"""
import argparse
import json
import platform
import statistics
import time

import numpy as np

from .harness import load_test_batch
from .models import load_model, mx
from .op import op_times


def _timed(fn, repeats):
    fn()                                   # warm-up: allocation, MKLDNN primitive creation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _summary(times):
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
            "repeats": len(times)}


def bench_cpu(model="ece408-high", images=10000, repeats=5, data_dir=None):
    _, _, arg_params, _ = load_model(model)
    x = mx.nd.array(load_test_batch(images, data_dir)[0])
    k = arg_params["conv1_weight"].astype(np.float32)
    m, _, ksize, _ = k.shape

    def builtin():
        mx.nd.Convolution(x, k, kernel=(ksize, ksize), num_filter=m, no_bias=True).wait_to_read()

    def custom():
        mx.nd.Custom(x, k, op_type="ece408_conv", num_filter=m, kernel=ksize, device="cpu").wait_to_read()

    builtin_s = _timed(builtin, repeats)
    with op_times.capture(echo=False) as start:
        custom_wall = _timed(custom, repeats)
    ours = [seconds for seconds, _ in op_times.since(start)][1:]     # drop the warm-up's
    result = {
        "layer": {"B": images, "C": int(x.shape[1]), "M": int(m), "H": int(x.shape[2]), "K": int(ksize)},
        "machine": {"cpus": __import__("os").cpu_count(), "processor": platform.processor() or platform.machine()},
        "builtin_convolution": _summary(builtin_s),
        "ece408_op_time": _summary(ours),
        "ece408_call_with_copies": _summary(custom_wall),
    }
    result["ratio_op_time_vs_builtin"] = result["ece408_op_time"]["median_s"] / result["builtin_convolution"]["median_s"]
    return result


def cpu_main(argv=None):
    parser = argparse.ArgumentParser(description="Op Time of ece408_conv (CPU) vs MXNet's built-in Convolution.")
    parser.add_argument("--model", default="ece408-high")
    parser.add_argument("--images", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data-dir")
    parser.add_argument("--json", help="write the results here as JSON")
    args = parser.parse_args(argv)
    result = bench_cpu(args.model, args.images, args.repeats, args.data_dir)
    layer = result["layer"]
    print(f"layer B={layer['B']} C={layer['C']} M={layer['M']} {layer['H']}x{layer['H']} K={layer['K']}, "
          f"median of {args.repeats} after a warm-up, {result['machine']['cpus']} CPUs")
    for key, label in (("builtin_convolution", "MXNet built-in Convolution"),
                       ("ece408_op_time", "ece408_conv Op Time"),
                       ("ece408_call_with_copies", "ece408_conv whole call (with copies)")):
        s = result[key]
        print(f"  {label:40s} {s['median_s']:.4f} s  (min {s['min_s']:.4f}, max {s['max_s']:.4f})")
    print(f"  ratio Op Time / built-in: {result['ratio_op_time_vs_builtin']:.2f}x")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    return 0
