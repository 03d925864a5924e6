"""The model-zoo benchmark (``bench zoo``): each network of ``mx.zoo`` original and with every convolution
swapped, compared through every path MXNet runs a network (``mx.zoo.validate``), and each one's forward
timed, original against swapped (``time_pair``); the table of docs/benchmarks.md.

    python -m ece408_op bench zoo [--nets resnet18_v1 ...] [--batch 8] [--size 224] [--repeats 5]
                                  [--device cpu|gpu] [--json FILE]
"""
import json
import statistics

import numpy as np

from ..mx.compat import import_mxnet
from ..mx.swap import swap_convolutions
from ..mx.zoo import bind_executor, build, parameters
from .timing import host_interleaved

mx = import_mxnet()

def time_pair(name, batch=8, size=224, repeats=5, seed=408, **op_attrs):
    """Median seconds of one forward of the original and of the swapped network (executor path,
    MXNet's default subgraph optimisations for the original), repeats interleaved."""
    shape = (batch, 3, size, size)
    x = mx.nd.array(np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32))
    net = build(name, seed)
    net(x[:1]).wait_to_read()
    symbol = net(mx.sym.var("data"))
    params = parameters(net)
    executors = {"original": bind_executor(symbol, params, shape, mx.cpu()),
                 "swapped": bind_executor(swap_convolutions(symbol, **op_attrs).result, params, shape, mx.cpu())}
    times = host_interleaved({key: (lambda e=executor: e.forward(is_train=False, data=x)[0].wait_to_read())
                              for key, executor in executors.items()}, repeats)   # the first round warms up
    return {key: statistics.median(values) for key, values in times.items()}


def table(results):
    """The model-zoo table of docs/benchmarks.md (markdown)."""
    lines = ["| net | convolutions | swapped | max rel. diff (6 paths) | argmax agreement | timed input | "
             "time original | time swapped | swapped / original |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        agree = sum(r.argmax_equal.values())
        t, shape = r.seconds, r.timed_shape
        timing = (f"{shape[0]}x{shape[2]}x{shape[3]} | {t['original'] * 1e3:.0f} ms | {t['swapped'] * 1e3:.0f} ms | "
                  f"{t['swapped'] / t['original']:.2f}" if t else " | | |")
        lines.append(f"| {r.net} | {r.convolutions} | {r.swapped} | {max(r.max_rel.values()):.1e} | "
                     f"{agree}/{len(r.argmax_equal)} paths | {timing} |")
    return "\n".join(lines)


def to_json(results):
    return json.dumps([r.__dict__ for r in results], indent=2, default=list)
