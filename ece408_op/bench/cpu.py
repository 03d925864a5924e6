"""CPU benchmarks against MXNet's built-in (MKLDNN) Convolution, in the same run, same threads.

    python -m ece408_op bench cpu [--layers NAME ...] [--repeats 5] [--json out.json]
    python -m ece408_op bench overhead [--json out.json]

``bench cpu`` times each layer (random float32 data) three ways, repeats interleaved, medians:
the built-in ``nd.Convolution`` call, the ``nd.Custom(op_type='ece408_conv')`` call (both until
the output is ready: whole calls, MXNet's fresh output memory included) and ece408_conv's Op Time
(its computation); and, as a yardstick, MXNet's fresh output alone (``fresh_output``: an array
of y's shape allocated, its pages faulted in as ece408_conv does before its clock, and released),
which every whole call of the layer pays whatever its kernel. The course layers run at 10,000
images, the real-network layers at their networks' batch sizes. MXNet's built-in uses
``OMP_NUM_THREADS`` threads (one by default on the project's CI machine): the CLI sets it to the
number of CPUs before MXNet loads, unless it is set; ece408_conv's thread pool has as many threads
(``$ECE408_CPU_THREADS``).

``bench overhead`` measures the fixed cost of one call: a bound graph (executor) of 50 chained
1x1 convolutions on an 8x8 image (computation negligible), per node: MXNet's built-in, an empty
CustomOp (MXNet's mechanism alone: registered with ``mx.operator.register``, and registered as
ece408_conv is, with ``lean.register``) and ece408_conv (with and without the layout guards);
and one imperative ``nd`` call, until its output is ready.
"""
import os
import platform
import time

import numpy as np

from ..conv import ConvSpec
from ..conv.parallel import pool_size
from ..mx import lean
from ..mx.compat import import_mxnet
from ..mx.op import fault_in_output, host_view, op_times
from ..mx.swap import swap_convolutions
from .timing import host_interleaved, summary

mx = import_mxnet()

K5 = dict(kernel=(5, 5))
COURSE_LAYERS = {           # name -> (B, C, H, W, M, Convolution attributes)
    "ece408 (2017, C=1)": (10000, 1, 28, 28, 50, K5),
    "2018 conv1 (C=1)": (10000, 1, 64, 64, 6, K5),
    "2018 conv2 (C=6)": (10000, 6, 30, 30, 16, K5),
    "2019 conv1 (C=1)": (10000, 1, 70, 70, 12, K5),
    "2019 conv2 (C=12)": (10000, 12, 33, 33, 24, K5),
}
NETWORK_LAYERS = {
    "ResNet 3x3 (pad 1)": (8, 64, 56, 56, 64, dict(kernel=(3, 3), pad=(1, 1))),
    "ResNet 3x3/2 (pad 1)": (8, 64, 56, 56, 128, dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1))),
    "VGG first (pad 1)": (4, 3, 224, 224, 64, dict(kernel=(3, 3), pad=(1, 1))),
    "1x1 (C=256)": (8, 256, 56, 56, 64, dict(kernel=(1, 1))),
    "ResNet stem 7x7/2 (pad 3)": (4, 3, 224, 224, 64, dict(kernel=(7, 7), stride=(2, 2), pad=(3, 3))),
    "dilated 3x3 (DeepLab, dilate 2)": (4, 256, 33, 33, 256, dict(kernel=(3, 3), pad=(2, 2), dilate=(2, 2))),
    "depthwise 3x3 (MobileNet)": (8, 128, 56, 56, 128, dict(kernel=(3, 3), pad=(1, 1), num_group=128)),
}
LAYERS = {**COURSE_LAYERS, **NETWORK_LAYERS}


def machine():
    return {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "ece408_threads": pool_size(),
            "mxnet": mx.__version__, "numpy": np.__version__}


def bench_layer(shape, repeats=5, seed=408):
    """{'builtin', 'custom_call', 'op_time'} summaries for one layer, repeats interleaved after a warm-up."""
    b, c, h, w, m, attrs = shape
    spec = ConvSpec.from_attrs(num_filter=m, no_bias=True, **{k: str(v) for k, v in attrs.items()})
    rng = np.random.default_rng(seed)
    x = mx.nd.array(rng.standard_normal((b, c, h, w), dtype=np.float32))
    k = mx.nd.array(rng.standard_normal(spec.weight_shape(c), dtype=np.float32))
    mx.nd.waitall()

    def builtin():
        mx.nd.Convolution(x, k, num_filter=m, no_bias=True, **attrs).wait_to_read()

    def custom():
        mx.nd.Custom(x, k, op_type="ece408_conv", num_filter=m, device="cpu", **attrs).wait_to_read()

    y_shape = spec.output_shape((b, c, h, w))

    def fresh_output():
        y = mx.nd.empty(y_shape)
        y.wait_to_read()
        fault_in_output(host_view(y))
        del y
        mx.nd.waitall()

    with op_times.capture() as start:              # round 0 warms up (MKLDNN primitives, pool)
        times = host_interleaved({"builtin": builtin, "custom_call": custom, "fresh_output": fresh_output}, repeats)
        ours = [seconds for seconds, _ in op_times.since(start)][1:]
    result = {key: summary(values) for key, values in times.items()}
    result["op_time"] = summary(ours)
    result["layer"] = {"B": b, "C": c, "H": h, "W": w, "M": m, **{k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items()}}
    result["ratio_call"] = result["custom_call"]["median_s"] / result["builtin"]["median_s"]
    result["ratio_op_time"] = result["op_time"]["median_s"] / result["builtin"]["median_s"]
    result["ratio_fresh_output"] = result["fresh_output"]["median_s"] / result["builtin"]["median_s"]
    return result


def bench_cpu(layers=None, repeats=5, progress=None):
    """Every layer of ``layers`` (default all); ``progress(name, result)`` after each one."""
    names = layers or list(LAYERS)
    result = {"machine": machine(), "repeats": repeats, "layers": {}}
    for name in names:
        result["layers"][name] = bench_layer(LAYERS[name], repeats)
        if progress is not None:
            progress(name, result["layers"][name])
    return result


CPU_TABLE_HEAD = ["| layer | B | built-in | ece408_conv whole call | Op Time | call / built-in | Op Time / built-in "
                  "| MXNet's fresh y / built-in |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]


def cpu_row(name, r):
    return (f"| {name} | {r['layer']['B']} | {r['builtin']['median_s'] * 1e3:.1f} ms | "
            f"{r['custom_call']['median_s'] * 1e3:.1f} ms | {r['op_time']['median_s'] * 1e3:.1f} ms | "
            f"{r['ratio_call']:.2f} | {r['ratio_op_time']:.2f} | {r['ratio_fresh_output']:.2f} |")


def cpu_png(result, path):
    """Each layer's whole call and Op Time over the built-in's (a bar chart, the targets as lines)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(result["layers"])
    rows = range(len(names))
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(names) + 1.2))
    ax.barh([r + 0.27 for r in rows], [result["layers"][n]["ratio_call"] for n in names], 0.27, label="whole call")
    ax.barh([r for r in rows], [result["layers"][n]["ratio_op_time"] for n in names], 0.27, label="Op Time")
    ax.barh([r - 0.27 for r in rows], [result["layers"][n]["ratio_fresh_output"] for n in names], 0.27,
            label="MXNet's fresh y alone (in every whole call)", color="grey")
    for x, style in ((1.0, "-"), (0.5, "--"), (0.4, ":")):
        ax.axvline(x, color="black", linestyle=style, linewidth=0.8)
    ax.set_yticks(list(rows), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time / MXNet built-in (same run, same threads); lines: 1.0, 0.5, 0.4")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


# ---------------------------------------------------------------- fixed cost of one call

class _Empty(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        pass


@mx.operator.register("ece408_bench_empty")
class _EmptyProp(mx.operator.CustomOpProp):
    """A CustomOp that does nothing: what MXNet's CustomOp mechanism costs by itself."""

    def __init__(self, **attrs):
        super().__init__(need_top_grad=False)

    def list_arguments(self):
        return ["data", "weight"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return _Empty()


@lean.register("ece408_bench_empty_lean")
class _EmptyLeanProp(_EmptyProp):
    """The same empty CustomOp registered as ece408_conv is (``lean.register``): what is left is
    MXNet's C++ side of the mechanism (engine hops, its CustomOp thread, the completion)."""


CHAIN = 50
EMPTY_OPS = {"empty": "ece408_bench_empty", "empty_lean": "ece408_bench_empty_lean"}


def _chain(kind):
    x = mx.sym.Variable("data")
    for i in range(CHAIN):
        w = mx.sym.Variable(f"w{i}")
        if kind in EMPTY_OPS:
            x = mx.sym.Custom(x, w, op_type=EMPTY_OPS[kind], name=f"c{i}")
        else:
            x = mx.sym.Convolution(x, w, kernel=(1, 1), num_filter=1, no_bias=True, name=f"c{i}")
    return x


def _per_node(symbol, rounds, forwards=20):
    shapes = {"data": (1, 1, 8, 8), **{f"w{i}": (1, 1, 1, 1) for i in range(CHAIN)}}
    executor = symbol.simple_bind(mx.cpu(), grad_req="null", **shapes)
    for array in executor.arg_dict.values():
        array[:] = 1.0
    executor.forward(is_train=False)[0].wait_to_read()
    for _ in range(rounds):
        begin = time.perf_counter()
        for _ in range(forwards):
            executor.forward(is_train=False)[0].wait_to_read()
        yield (time.perf_counter() - begin) / forwards / CHAIN


def bench_overhead(rounds=9):
    builtin = _chain("builtin")
    graphs = {"built-in Convolution": builtin, "empty CustomOp": _chain("empty"),
              "empty CustomOp, lean registration": _chain("empty_lean"),
              "ece408_conv (guarded)": swap_convolutions(builtin, device="cpu").result,
              "ece408_conv (no guards)": swap_convolutions(builtin, guard=False, device="cpu").result}
    runs = {name: _per_node(symbol, rounds) for name, symbol in graphs.items()}
    per_node = {name: [] for name in graphs}
    for _ in range(rounds):                                   # interleaved
        for name, run in runs.items():
            per_node[name].append(next(run))
    x, w = mx.nd.ones((1, 1, 8, 8)), mx.nd.ones((1, 1, 1, 1))
    calls = {"built-in Convolution": lambda: mx.nd.Convolution(x, w, kernel=(1, 1), num_filter=1, no_bias=True),
             "empty CustomOp": lambda: mx.nd.Custom(x, w, op_type="ece408_bench_empty"),
             "empty CustomOp, lean registration": lambda: mx.nd.Custom(x, w, op_type="ece408_bench_empty_lean"),
             "ece408_conv": lambda: mx.nd.Custom(x, w, op_type="ece408_conv", num_filter=1, kernel=(1, 1),
                                                 device="cpu")}
    imperative = {name: [] for name in calls}
    invoke = {name: [] for name in calls}         # until nd.Custom returns: operator creation, the
    for _ in range(rounds):                       # inference callbacks, the push to MXNet's engine
        for name, call in calls.items():
            total = pushed = 0.0
            for _ in range(50):
                begin = time.perf_counter()
                out = call()
                returned = time.perf_counter()
                out.wait_to_read()
                pushed += returned - begin
                total += time.perf_counter() - begin
            imperative[name].append(total / 50)
            invoke[name].append(pushed / 50)
    wait = {name: [t - i for t, i in zip(imperative[name], invoke[name])] for name in calls}
    return {"machine": machine(), "graph_per_node": {k: summary(v) for k, v in per_node.items()},
            "imperative_per_call": {k: summary(v) for k, v in imperative.items()},
            "imperative_invoke": {k: summary(v) for k, v in invoke.items()},
            "imperative_wait": {k: summary(v) for k, v in wait.items()}}


def overhead_table(result):
    lines = ["| one call of | in a bound graph (per node) | imperative nd call (until ready) |",
             "| --- | --- | --- |"]
    graph, nd = result["graph_per_node"], result["imperative_per_call"]
    for name in graph:
        key = "ece408_conv" if name.startswith("ece408_conv") and name not in nd else name
        shown = f"{nd[key]['median_s'] * 1e3:.3f} ms" if key in nd and (key == name or "guarded" in name) else ""
        lines.append(f"| {name} | {graph[name]['median_s'] * 1e3:.3f} ms | {shown} |")
    if "imperative_invoke" in result:
        lines += ["", "| imperative nd call of | until the call returns | then until the output is ready |",
                  "| --- | --- | --- |"]
        for name in nd:
            lines.append(f"| {name} | {result['imperative_invoke'][name]['median_s'] * 1e3:.3f} ms | "
                         f"{result['imperative_wait'][name]['median_s'] * 1e3:.3f} ms |")
    return "\n".join(lines)
