"""The GPU benchmark suite: every layer of the course models and of the real networks it names
(``LAYERS``), at several batch sizes, every relevant version against cuDNN (fp32, TF32 off, through
PyTorch) in the same run; ratios to cuDNN and to the limit that binds (the memory floor or the
FP32 compute peak); JSON/CSV, three plots; and the table of default versions per shape class,
recorded with the device's name (``defaults.json``, read by ``kernels.choice.default_version``).

    python -m ece408_op bench gpu --suite [--quick] [--out DIR] [--apply] [--repeats N] [--tiles ...]

Every entry is validated on sampled images against the float64 reference (x drawn as full-mantissa
floats, so that the tensor-core path's operand splitting is exercised) before it is timed: a
warm-up, then each repeat after an L2 flush, between CUDA events; the median is reported.

Limits: memory floor = (bytes of x + bytes of y) / copy bandwidth (a device-to-device copy in the
same run, read + write); compute floor = 2 * B * M * HO * WO * C/G * KH * KW / FP32 peak, the peak
= SMs x 128 FMA/clock x 2 x the device's maximum clock (the tensor-core version can beat it).
"""
import csv
import datetime
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..conv.fused import fused_reference_and_bound
from ..conv.reference import reference_and_bound
from ..conv.spec import ConvSpec
from ..kernels.choice import DEFAULTS_FILE, default_version, load_defaults, reload_defaults, shape_key
from ..kernels.device import GpuDevice, driver
from ..kernels.launch import conv2d_forward_async
from ..kernels.plans import fused_plan_for, plan_for
from ..kernels.shape import ConvShape
from ..kernels.versions import VERSIONS
from .timing import cuda_torch, l2_flush, time_events

COURSE_BATCHES = (100, 1000, 10000, 100000)
BASELINE_LIMIT = 100000         # the unfused baselines of the fused layer run below this batch (memory)
LADDER_BATCH = 10000            # course layers: every version at this batch; elsewhere only FAST ones
FAST = (7, 8, 9, 10, 11, 12, 20)    # besides the default version


@dataclass(frozen=True)
class Layer:
    name: str
    C: int
    H: int
    W: int
    M: int
    kernel: int
    stride: int = 1
    pad: int = 0
    batches: tuple = COURSE_BATCHES
    fused: bool = False         # the course models' conv -> tanh -> max-pool block follows
    course: bool = True

    def spec(self):
        return ConvSpec.from_attrs(num_filter=str(self.M), kernel=str(self.kernel), stride=str(self.stride),
                                   pad=str(self.pad))

    def shape(self):
        return ConvShape.of((1, self.C, self.H, self.W), (self.M, self.C, self.kernel, self.kernel), self.spec())


def _resnet(name, c, hw, m, stride):
    return Layer(name, c, hw, hw, m, 3, stride, 1, batches=(64, 1000), course=False)


LAYERS = (
    Layer("ece408-high", 1, 28, 28, 50, 5, fused=True),
    Layer("2018-conv1", 1, 64, 64, 6, 5, fused=True),
    Layer("2018-conv2", 6, 30, 30, 16, 5),
    Layer("2019-conv1", 1, 70, 70, 12, 5, fused=True),
    Layer("2019-conv2", 12, 33, 33, 24, 5),
    Layer("resnet-3x3-nopad", 64, 58, 58, 64, 3, batches=(64, 1000), course=False),
    _resnet("resnet18-64", 64, 56, 64, 1),
    _resnet("resnet18-128s2", 64, 56, 128, 2),
    _resnet("resnet18-128", 128, 28, 128, 1),
    _resnet("resnet18-256s2", 128, 28, 256, 2),
    _resnet("resnet18-256", 256, 14, 256, 1),
    _resnet("resnet18-512s2", 256, 14, 512, 2),
    _resnet("resnet18-512", 512, 7, 512, 1),
    Layer("vgg-first", 3, 224, 224, 64, 3, 1, 1, batches=(32, 1000), course=False),
)
QUICK_BATCHES = {"course": (10000,), "network": None}     # --quick: course layers at 10,000, networks native


def fp32_peak_flops(torch):
    """SMs x 128 FP32 FMA per clock x 2 x the maximum SM clock (from the device's attributes)."""
    cuda = driver()
    dev = cuda.Device(torch.cuda.current_device())
    clock_hz = dev.get_attribute(cuda.device_attribute.CLOCK_RATE) * 1e3
    return dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT) * 128 * 2 * clock_hz


class Case:
    """One layer at one batch size on the device: tensors, validation and timing."""

    SAMPLE = 6                  # random images validated besides the first and the last (networks: 1)

    def __init__(self, torch, layer, batch, repeats, flush, seed=408):
        self.torch, self.layer, self.batch, self.repeats, self.flush = torch, layer, batch, repeats, flush
        self.shape, self.spec = layer.shape(), layer.spec()
        s = self.shape
        gen = torch.Generator(device="cuda").manual_seed(seed + batch)
        self.x = torch.rand((batch, s.C, s.H, s.W), device="cuda", generator=gen)
        self.k = torch.randn((s.M, s.C // s.G, s.KH, s.KW), device="cuda", generator=gen) * (1.0 / math.sqrt(s.CKK))
        self.y = torch.empty((batch, s.M, s.HO, s.WO), device="cuda")
        self.pooled = torch.empty((batch, s.M, s.HO // 2, s.WO // 2), device="cuda") if layer.fused else None
        picks = torch.randint(0, batch, (self.SAMPLE if layer.course else 1,), generator=gen, device="cuda").cpu().numpy()
        self.sample = np.unique(np.concatenate([[0, batch - 1], picks]))
        self.x_host = self.x[self.sample.tolist()].cpu().numpy()
        self.k_host = self.k.cpu().numpy()
        self.flops = 2.0 * batch * s.M * s.HO * s.WO * s.CKK
        self.x_bytes = 4 * self.x.numel()
        self._references = {}

    def reference(self, fused, version=None):
        """(float64 reference, bound) of the sampled images, computed once per case; ``version``: one
        with its own error model (v17, v19) is held to that model's bound instead of float32's."""
        own = version if version is not None and version.own_error_model and not fused else None
        key = (fused, own.number if own else None)
        if key not in self._references:
            compute = own.reference_and_bound if own else fused_reference_and_bound if fused else reference_and_bound
            self._references[key] = compute(self.x_host, self.k_host, None, self.spec)
        return self._references[key]

    def conv_conv(self):
        return self.torch.nn.functional.conv2d(self.x, self.k, None, self.layer.stride, self.layer.pad)

    def measure(self, fn, out, fused=False, timed=None, version=None):
        """Poison ``out``, run ``fn`` once and validate the sampled images, then time ``timed``
        (default ``fn``; cuDNN's entries validate through a copy into ``out`` and are timed alone).
        ``version`` with its own error model: valid against that model, and its error against the
        float32 bound is kept too (``worst_error_vs_float32``)."""
        out.fill_(float("nan"))
        fn()
        self.torch.cuda.synchronize()
        got = out[self.sample.tolist()].cpu().numpy().astype(np.float64)
        ref, bound = self.reference(fused, version)
        err = np.abs(got - ref)
        entry = time_events(self.torch, timed or fn, self.repeats, warmup=2, flush=self.flush)
        entry.update(valid=bool((err <= bound).all()), worst_error_vs_bound=float(np.nanmax(err / np.maximum(bound, 1e-30))),
                     rel_error=float(np.linalg.norm(np.nan_to_num(got - ref, nan=1e30)) / max(np.linalg.norm(ref), 1e-30)))
        if version is not None and version.own_error_model and not fused:
            bound32 = self.reference(fused)[1]
            entry["worst_error_vs_float32"] = float(np.nanmax(err / np.maximum(bound32, 1e-30)))
        return entry

    def launcher(self, plan, out):
        """A call running ``plan`` on this case's x and k into ``out`` (y or pooled)."""
        dev = plan.device

        def fn():
            with dev.active():
                plan.launch(out.data_ptr(), self.x.data_ptr(), self.k.data_ptr(), 0, self.batch)
        return fn

    def ours(self, version):
        dev = GpuDevice.get()
        with dev.active():
            plan = plan_for(dev, self.shape, version)
        return self.launcher(plan, self.y)

    def whole_call(self, version):
        """The call a network makes (``conv2d_forward_async`` on PyTorch's current stream: the layer
        looked up, its kernels queued), resolved once before it is timed."""
        args = (self.y.data_ptr(), self.x.data_ptr(), self.k.data_ptr(), tuple(self.x.shape), tuple(self.k.shape),
                None, self.spec, version)

        def fn():
            conv2d_forward_async(*args, stream=self.torch.cuda.current_stream().cuda_stream)
        fn()
        return fn

    def fused(self, version=None):
        dev = GpuDevice.get()
        with dev.active():
            plan = fused_plan_for(dev, self.shape, version)
        return self.launcher(plan, self.pooled), plan.label


def _versions_for(layer, shape, batch, default):
    numbers = set(FAST) | {default}
    if layer.course and batch == LADDER_BATCH:
        numbers = set(VERSIONS)
    return [n for n in sorted(numbers) if VERSIONS[n].unsupported(shape) is None and VERSIONS[n].available() is None]


def run_case(torch, layer, batch, repeats, flush, copy_bw, peak, log):
    """Every entry of one layer and batch: a list of row dicts (ratios filled in)."""
    case = Case(torch, layer, batch, repeats, flush)
    shape, dev = case.shape, GpuDevice.get()
    rows = []

    def add(entry_name, entry, kind, y_bytes):
        mem_s = (case.x_bytes + y_bytes) / copy_bw
        flop_s = case.flops / peak
        rows.append({"layer": layer.name, "shape": shape_key(shape), "batch": batch, "entry": entry_name, "kind": kind,
                     **entry, "memory_floor_s": mem_s, "compute_floor_s": flop_s,
                     "binds": "memory" if mem_s >= flop_s else "compute",
                     "vs_bound": entry["median_s"] / max(mem_s, flop_s), "GFLOP_per_s": case.flops / entry["median_s"] / 1e9,
                     "GB_per_s": (case.x_bytes + y_bytes) / entry["median_s"] / 1e9,
                     "intensity": case.flops / (case.x_bytes + y_bytes)})
        log(f"  {layer.name:18s} B={batch:<6d} {entry_name:28s} {entry['median_s'] * 1e3:9.3f} ms  "
            f"valid={entry['valid']} err/bound={entry['worst_error_vs_bound']:.3f}")

    y_bytes = 4 * case.y.numel()
    default = default_version(shape, dev.name)
    for number in _versions_for(layer, shape, batch, default):
        entry = case.measure(case.ours(number), case.y, version=VERSIONS[number])
        call = time_events(torch, case.whole_call(number), repeats, warmup=2, flush=flush)
        add(VERSIONS[number].label, {**entry, "call_median_s": call["median_s"]}, "conv", y_bytes)
    cudnn_entry = case.measure(lambda: case.y.copy_(case.conv_conv()), case.y, timed=case.conv_conv)
    add("cudnn", {**cudnn_entry, "call_median_s": cudnn_entry["median_s"]}, "conv", y_bytes)
    if layer.fused:
        p_bytes = 4 * case.pooled.numel()
        fn, _ = case.fused("fused")
        add("fused kernel", case.measure(fn, case.pooled, fused=True), "fused", p_bytes)
    if layer.fused and batch < BASELINE_LIMIT:     # their convolution-sized intermediates: 2-3 more y's
        fn, _ = case.fused(default)
        add(f"two-pass (v{default} + tanh_pool)", case.measure(fn, case.pooled, fused=True), "fused", p_bytes)
        nn = torch.nn.functional
        torch_fused = lambda: nn.max_pool2d(torch.tanh(case.conv_conv()), 2)            # noqa: E731
        add("cudnn + torch tanh, max_pool", case.measure(lambda: case.pooled.copy_(torch_fused()), case.pooled,
                                                         fused=True, timed=torch_fused), "fused", p_bytes)
    cudnn = next(r["median_s"] for r in rows if r["entry"] == "cudnn")
    for row in rows:
        row["vs_cudnn"] = row["median_s"] / cudnn      # fused rows: against cuDNN's convolution alone
        row["call_vs_cudnn"] = row["call_median_s"] / cudnn if row.get("call_median_s") else None
    del case
    torch.cuda.empty_cache()
    return rows


def run_suite(repeats=10, quick=False, layers=None, log=print, progress=None):
    """Every layer of LAYERS (or those named in ``layers``) at its batches; ``progress(result)`` is
    called after each layer with the result so far (so that an interrupted run keeps its rows)."""
    torch = cuda_torch()
    dev = GpuDevice.get()
    free, _ = torch.cuda.mem_get_info()
    flush = l2_flush(torch)
    src = torch.empty(256 << 20, device="cuda").uniform_()       # 1 GiB copied
    dst = torch.empty_like(src)
    copy = time_events(torch, lambda: dst.copy_(src), 10, flush=flush)
    copy_bw = 2 * 4 * src.numel() / copy["median_s"]
    del src, dst
    peak = fp32_peak_flops(torch)
    log(f"{dev.name}: copy bandwidth {copy_bw / 1e9:.0f} GB/s, FP32 peak {peak / 1e12:.1f} TFLOP/s, "
        f"{free / 2**30:.0f} GiB free")
    result = {"device": dev.name, "date": datetime.date.today().isoformat(), "repeats": repeats,
              "copy_bandwidth_GB_per_s": copy_bw / 1e9, "fp32_peak_TFLOP_per_s": peak / 1e12,
              "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
              "layers": [asdict(layer) for layer in LAYERS], "rows": []}
    for layer in LAYERS:
        if layers and layer.name not in layers:
            continue
        batches = layer.batches
        if quick:
            batches = QUICK_BATCHES["course"] if layer.course else batches[:1]
        for batch in batches:
            result["rows"].extend(run_case(torch, layer, batch, repeats, flush, copy_bw, peak, log))
        if progress is not None:
            progress(result)
    return result


def _entry_version(entry):
    """The version number of a row's entry label (``Version.label``: "v12 winograd" -> 12)."""
    return int(entry.split()[0][1:])


def choose_defaults(result):
    """{shape key: version}: per layer, the fastest of our versions at its largest measured batch,
    among those valid at every batch measured; v9 (3xTF32) only if valid on every row of the layer; never
    a version that is not ``defaultable`` (v12)."""
    table = {}
    for layer in result["layers"]:
        rows = [r for r in result["rows"] if r["layer"] == layer["name"] and r["kind"] == "conv" and r["entry"] != "cudnn"
                and VERSIONS[_entry_version(r["entry"])].defaultable]
        if not rows:
            continue
        invalid = {r["entry"] for r in rows if not r["valid"]}
        largest = max(r["batch"] for r in rows)
        best = min((r for r in rows if r["batch"] == largest and r["entry"] not in invalid),
                   key=lambda r: r["median_s"], default=None)
        if best is not None:
            table[rows[0]["shape"]] = _entry_version(best["entry"])
    return table


def apply_defaults(result, path=DEFAULTS_FILE, source="docs/bench/suite.json"):
    """Record this run's choice of defaults for its device in ``path`` (other devices' entries kept)."""
    data = load_defaults() if Path(path) == DEFAULTS_FILE else (json.loads(Path(path).read_text()) if Path(path).exists() else {})
    data[result["device"]] = {"date": result["date"], "source": source,
                              "how": "python -m ece408_op bench gpu --suite --apply (fastest valid version at the "
                                     "largest batch measured)",
                              "shapes": choose_defaults(result)}
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    reload_defaults()
    return data[result["device"]]


def headline(result):
    """Per layer: its headline batch (10,000 for the course layers, the native batch otherwise) rows."""
    out = []
    for layer in result["layers"]:
        batches = sorted({r["batch"] for r in result["rows"] if r["layer"] == layer["name"]})
        if not batches:
            continue
        batch = LADDER_BATCH if LADDER_BATCH in batches and layer["course"] else batches[0]
        out.append((layer, batch, [r for r in result["rows"] if r["layer"] == layer["name"] and r["batch"] == batch]))
    return out


def summary_lines(result, defaults):
    lines = [f"{result['device']} ({result['date']}): median of {result['repeats']} (L2 flushed), cuDNN fp32 "
             f"(TF32 off) in the same run; bound = max(memory floor, FP32 compute floor); ms: kernels alone, "
             f"call: the whole network call (conv2d_forward_async)",
             f"{'layer':18s} {'batch':>6s} {'default':>8s} {'ms':>9s} {'call ms':>9s} {'cuDNN ms':>9s} {'x cuDNN':>8s} "
             f"{'call x':>8s} {'x bound':>8s} {'binds':>7s} {'best':>8s} {'x cuDNN':>8s}"]
    for layer, batch, rows in headline(result):
        conv = [r for r in rows if r["kind"] == "conv"]
        cudnn = next(r for r in conv if r["entry"] == "cudnn")
        ours = [r for r in conv if r["entry"] != "cudnn" and r["valid"]]
        key = conv[0]["shape"]
        chosen = next((r for r in ours if r["entry"].startswith(f"v{defaults.get(key, 0)} ")), None)
        best = min(ours, key=lambda r: r["median_s"], default=None)
        d = chosen or best
        call_ms = (d.get("call_median_s") or float("nan")) * 1e3
        lines.append(f"{layer['name']:18s} {batch:6d} {d['entry'].split()[0]:>8s} {d['median_s'] * 1e3:9.3f} "
                     f"{call_ms:9.3f} {cudnn['median_s'] * 1e3:9.3f} {d['vs_cudnn']:8.2f} "
                     f"{d.get('call_vs_cudnn') or float('nan'):8.2f} {d['vs_bound']:8.2f} {d['binds']:>7s} "
                     f"{best['entry'].split()[0]:>8s} {best['vs_cudnn']:8.2f}")
        for r in rows:
            if r["kind"] == "fused":
                lines.append(f"{'':18s} {'':6s} {r['entry']:>30s} {r['median_s'] * 1e3:9.3f} ms = {r['vs_cudnn']:.2f}x "
                             f"cuDNN conv, {r['vs_bound']:.2f}x bound, valid={r['valid']}")
    bad = [f"{r['layer']} B={r['batch']} {r['entry']}" for r in result["rows"] if not r["valid"]]
    lines.append("INVALID: " + "; ".join(bad) if bad else "every entry valid")
    return lines


def save(result, out_dir):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "suite.json").write_text(json.dumps(result, indent=1))
    keys = ["layer", "shape", "batch", "entry", "kind", "median_s", "min_s", "max_s", "call_median_s", "call_vs_cudnn",
            "valid", "worst_error_vs_bound", "rel_error", "vs_cudnn", "vs_bound", "binds", "memory_floor_s", "compute_floor_s", "GFLOP_per_s",
            "GB_per_s", "intensity"]
    with open(out / "suite.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(result["rows"])


def plot(result, out_dir):
    """Three small PNGs: time vs batch per version (course layers), ratio to cuDNN per layer (headline
    batch), roofline position (headline batch). Skips quietly without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    out = Path(out_dir)
    files = []
    course = [layer for layer in result["layers"] if layer["course"]]
    fig, axes = plt.subplots(1, len(course), figsize=(3.2 * len(course), 3.2), squeeze=False)
    for ax, layer in zip(axes[0], course):
        rows = [r for r in result["rows"] if r["layer"] == layer["name"] and r["kind"] == "conv" and r["valid"]]
        for entry in sorted({r["entry"] for r in rows}):
            pts = sorted((r["batch"], r["median_s"] * 1e3) for r in rows if r["entry"] == entry)
            if len(pts) > 1:
                ax.plot(*zip(*pts), marker="o", ms=3, label=entry.split()[0],
                        color="black" if entry == "cudnn" else None, linestyle="--" if entry == "cudnn" else "-")
        ax.set(xscale="log", yscale="log", title=layer["name"], xlabel="batch")
        ax.title.set_fontsize(9)
    axes[0][0].set_ylabel("median ms")
    if axes[0][-1].get_legend_handles_labels()[0]:
        axes[0][-1].legend(fontsize=7)
    fig.suptitle(f"time vs batch, {result['device']}", fontsize=9)
    fig.tight_layout()
    files.append(out / "suite_time_vs_batch.png")
    fig.savefig(files[-1], dpi=80)
    plt.close(fig)

    heads = headline(result)
    fig, ax = plt.subplots(figsize=(9, 3.6))
    entries = ["v7 strip", "v8 gemm", "v9 tensor", "v10 filters", "fused kernel"]
    width = 0.8 / len(entries)
    for i, entry in enumerate(entries):
        vals = [next((r["vs_cudnn"] for r in rows if r["entry"] == entry and r["valid"]), np.nan) for _, _, rows in heads]
        ax.bar(np.arange(len(heads)) + i * width, vals, width, label=entry)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(np.arange(len(heads)) + 0.4, [f"{layer['name']}\nB={batch}" for layer, batch, _ in heads],
                  rotation=60, fontsize=7, ha="right")
    ax.set(yscale="log", ylabel="time / cuDNN fp32")
    ax.legend(fontsize=7)
    ax.set_title(f"ratio to cuDNN per layer (headline batch), {result['device']}", fontsize=9)
    fig.tight_layout()
    files.append(out / "suite_ratio_to_cudnn.png")
    fig.savefig(files[-1], dpi=80)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5.5, 4))
    bw, peak = result["copy_bandwidth_GB_per_s"], result["fp32_peak_TFLOP_per_s"] * 1e3
    xs = np.logspace(-1, 3, 100)
    ax.plot(xs, np.minimum(xs * bw, peak), color="black", lw=1, label="copy bandwidth / FP32 peak")
    for layer, batch, rows in heads:
        conv = [r for r in rows if r["kind"] == "conv" and r["valid"]]
        best = min((r for r in conv if r["entry"] != "cudnn"), key=lambda r: r["median_s"], default=None)
        cudnn = next((r for r in conv if r["entry"] == "cudnn"), None)
        for r, marker in ((best, "o"), (cudnn, "x")):
            if r is not None:
                ax.scatter(r["intensity"], r["GFLOP_per_s"], marker=marker, s=18)
        if best is not None:
            ax.annotate(layer["name"], (best["intensity"], best["GFLOP_per_s"]), fontsize=6)
    ax.set(xscale="log", yscale="log", xlabel="FLOP per byte (x read + y written once)", ylabel="GFLOP/s")
    ax.set_title("roofline: o = our fastest, x = cuDNN", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    files.append(out / "suite_roofline.png")
    fig.savefig(files[-1], dpi=80)
    plt.close(fig)
    return files


def markdown_table(result, defaults):
    """The full ratio table (every layer, batch and entry) as Markdown."""
    lines = [f"Measured on {result['device']}, {result['date']}: median of {result['repeats']} (L2 flushed before "
             f"each), CUDA events; cuDNN fp32 with TF32 off through PyTorch {result['torch']} (cuDNN "
             f"{result['cudnn']}); copy bandwidth {result['copy_bandwidth_GB_per_s']:.0f} GB/s, FP32 peak "
             f"{result['fp32_peak_TFLOP_per_s']:.1f} TFLOP/s. x cuDNN of a fused row: against cuDNN's convolution "
             "alone. bound = max(memory floor, FP32 compute floor). * = the default version for the device. "
             "kernel: the version's kernels launched alone; call: the whole call a network makes "
             "(conv2d_forward_async: look-up and launches; cuDNN's F.conv2d is its own call), both L2-flushed.",
             "", "| layer | batch | entry | kernel ms | call ms | kernel x cuDNN | call x cuDNN | x bound | binds | valid "
             "| err/bound |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in result["rows"]:
        star = "*" if row["kind"] == "conv" and row["entry"].startswith(f"v{defaults.get(row['shape'], 0)} ") else ""
        call = f"{row['call_median_s'] * 1e3:.3f}" if row.get("call_median_s") else "-"
        call_ratio = f"{row['call_vs_cudnn']:.2f}" if row.get("call_vs_cudnn") else "-"
        lines.append(f"| {row['layer']} | {row['batch']} | {row['entry']}{star} | {row['median_s'] * 1e3:.3f} | {call} | "
                     f"{row['vs_cudnn']:.2f} | {call_ratio} | {row['vs_bound']:.2f} | {row['binds']} | {row['valid']} | "
                     f"{row['worst_error_vs_bound']:.2g} |")
    return "\n".join(lines) + "\n"
