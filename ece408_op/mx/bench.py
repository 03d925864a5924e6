"""CPU benchmark: ece408_conv's Op Time against MXNet's built-in CPU Convolution.

    python -m ece408_op bench cpu [--images 10000] [--repeats 5] [--json out.json]

Both run on the same tensors: the first N test images and the model's conv1
weights. Reported: median and spread of the repeats, and the ratio
ours / built-in measured in the same run.
"""
import os
import platform
import statistics
import time

import numpy as np

from .compat import import_mxnet
from .inference import load_test_batch
from .models import load_model
from .op import op_times

mx = import_mxnet()


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
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
        "builtin_convolution": _summary(builtin_s),
        "ece408_op_time": _summary(ours),
        "ece408_call_with_copies": _summary(custom_wall),
    }
    result["ratio_op_time_vs_builtin"] = result["ece408_op_time"]["median_s"] / result["builtin_convolution"]["median_s"]
    return result
