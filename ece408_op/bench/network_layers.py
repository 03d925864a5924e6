"""``python -m ece408_op bench gpu --network``: the kernels as convolutions of real networks, timed as
a PyTorch user waits for them (PyTorch + PyCUDA, no MXNet; torchvision for the whole networks).

    python -m ece408_op bench gpu --network [--out DIR] [--repeats N] [--nets resnet18,resnet50,vgg16,mobilenet_v2]
        [--whole resnet50,...] [--batches 64,1] [--no-cold] [--compile resnet18] [--compile-batch 1]

1. The hot path: host microseconds of a call on a layer seen before (a 1x8x8x8 3x3 layer, where the
   host's cost is the call's): the look-up alone, the lean call (look-up, checks, the recorded launches
   replayed), the replay alone, the plan's own launch code (what a call would pay without the
   recording), the Conv2d module's forward and nn.Conv2d's (cuDNN) for comparison.
2. Every distinct convolution of ResNet-18 and ResNet-50 (batch 64), VGG-16 (batch 32) and
   MobileNetV2 (batch 64): the Conv2d module's forward (``ece408_op.torch``: the version from
   defaults.json, else autotuned) against nn.Conv2d's (cuDNN fp32, TF32 off), whole call, each
   repeat after an L2 flush ("flushed") and as a run of calls without one ("back to back", as in a
   network: the mean of 10 consecutive calls, median of the repeats), the entries taking turns
   within each repeat (``timing.time_interleaved``); the kernels alone beside them
   (the layer's recorded launches replayed: no checks, no allocation, no look-up).
   Each layer's output is checked against the float64 reference (NumPy, conv.reference) on one image.
3. The autotuner's choice against a re-measurement of every candidate (median of 20, back to back) on
   new layers (``--autotune-check``: also the suite's layers).
4. The nine networks of bench/cold.py whole (bench/whole_networks.py): the cold start of each (a fresh process, an
   empty GPU cache folder) beside cuDNN's first forward in a fresh process; the steady state at batch 64
   and 1 of ours (both precisions), cuDNN fp32 and cuDNN TF32, each output against float64; torch.compile
   and CUDA graphs (mode='reduce-overhead') of the swapped network.

Writes network.json, network.csv (per layer), network.md (the tables) and network.png.
"""
import csv
import datetime
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from ..kernels import autotune, cudadrv, wait_for_specialised
from ..kernels.device import GpuDevice
from ..kernels.build import GPU_CACHE_ENV
from ..kernels.launch import conv2d_forward_async, layer_call
from ..torch import Conv2d
from . import precisions, whole_networks
from ..torch.nets import NETWORK_BATCH, NETWORKS, conv_layers, describe
from .precompile import autotune_shapes
from .timing import Timer, cuda_torch, host_us

def hot_path(torch):
    """Host microseconds per call on a 1x8x8x8 3x3 layer (seen before)."""
    conv = Conv2d(8, 8, 3, padding=1).cuda().eval()
    ref = torch.nn.Conv2d(8, 8, 3, padding=1).cuda().eval()
    x = torch.rand(1, 8, 8, 8, device="cuda")
    y = torch.empty(1, 8, 8, 8, device="cuda")
    with torch.inference_mode():
        conv(x)                             # resolve the layer (outside the timing)
        wait_for_specialised(300)
        conv(x)                             # (its own module, built in the background)
        ref(x)
    layer = next(iter(conv._layers.values()))
    spec, call = layer.spec, layer.call
    args = (y.data_ptr(), x.data_ptr(), conv.weight.data_ptr(), tuple(x.shape), tuple(conv.weight.shape),
            conv.bias.data_ptr(), spec)
    stream = torch.cuda.current_stream().cuda_stream
    conv2d_forward_async(*args, stream=stream)
    sync = torch.cuda.synchronize
    plan = call.plan

    def launch_only():
        previous = cudadrv.set_stream(stream)
        plan.launch(args[0], args[1], args[2], args[5], 1)
        cudadrv.set_stream(previous)
    call.queue(args[0], args[1], args[2], args[5], stream)              # recorded on this stream
    recording = call.recordings[(False, stream)][0]
    addresses = (args[0], args[1], args[2], args[5])
    with torch.inference_mode():
        result = {
            "layer": "1x8x8x8, 3x3, padding 1, bias",
            "version": call.plan.version.label,
            "lookup_us": host_us(lambda: layer_call(args[3], args[4], spec, True), torch),
            "lean_call_us": host_us(lambda: conv2d_forward_async(*args, stream=stream), torch),
            "queue_us": host_us(lambda: call.queue(args[0], args[1], args[2], args[5], stream), torch),
            "replay_only_us": host_us(lambda: recording.replay(addresses, stream), torch),
            "plan_launch_us": host_us(launch_only, torch),
            "module_forward_us": host_us(lambda: conv(x), torch),
            "cudnn_module_forward_us": host_us(lambda: ref(x), torch),
            "launches_per_call": plan.version.launches(plan.defines) + (plan.add_bias is not None) + (plan.pad_input is not None),
        }
    sync()
    result["before_queued_us"] = result["lean_call_us"] - result["replay_only_us"]
    return result


# ------------------------------------------------------------------ per layer

def _check_layer(conv, x, y):
    """(valid, worst error / bound) of y's first image against the float64 reference."""
    from ..conv import ConvSpec, reference_and_bound
    spec = ConvSpec(num_filter=conv.out_channels, kernel=tuple(conv.kernel_size), stride=tuple(conv.stride),
                    pad=tuple(conv.padding), dilate=tuple(conv.dilation), num_group=conv.groups,
                    no_bias=conv.bias is None)
    bias = None if conv.bias is None else conv.bias.detach().cpu().numpy()
    ref, bound = reference_and_bound(x[:1].cpu().numpy(), conv.weight.detach().cpu().numpy(), bias, spec)
    got = y[:1].cpu().double().numpy()
    err = np.abs(got - ref)
    return bool((err <= bound).all()), float((err / bound).max())


def layer_rows(torch, name, timer, log):
    """Each distinct convolution of network ``name``: ours and cuDNN, whole call and kernel, flushed and
    back to back."""
    torch.manual_seed(408)
    model = NETWORKS[name]().cuda().eval()
    batch = NETWORK_BATCH[name]
    x0 = torch.rand(batch, 3, 224, 224, device="cuda")
    rows = []
    for names, conv, shape in conv_layers(model, x0):
        x = torch.rand(shape, device="cuda") * 2 - 1
        ours = Conv2d.from_conv(conv)
        start = time.perf_counter()
        with torch.inference_mode():
            y = ours(x)                                           # resolves the layer (may autotune)
            torch.cuda.synchronize()
            resolve_s = time.perf_counter() - start
            wait_for_specialised(300)
            y = ours(x)                                           # (its own module, built in the background)
            valid, worst = _check_layer(conv, x, y)
            layer = next(iter(ours._layers.values()))
            plan, stream = layer.call.plan, torch.cuda.current_stream().cuda_stream
            bias = conv.bias.data_ptr() if conv.bias is not None else 0
            w = conv.weight.detach()

            layer.call.queue(y.data_ptr(), x.data_ptr(), w.data_ptr(), bias, stream)       # (recorded)
            recording = layer.call.recordings[(False, stream)][0]
            addresses = (y.data_ptr(), x.data_ptr(), w.data_ptr(), bias)

            def kernel(recording=recording, addresses=addresses):
                recording.replay(addresses, stream)
            fns = (lambda: ours(x), lambda: conv(x), kernel)
            flushed, b2b = timer.flushed(*fns), timer.back_to_back(*fns)
            row = {"network": name, "layer": names[0], "count": len(names), "names": names,
                   "what": describe(conv, shape), "batch": batch, "version": plan.version.label,
                   "overrides": plan.tuning_overrides, "resolve_s": resolve_s, "valid": valid,
                   "worst_error_vs_bound": worst,
                   "ours_call_flushed_s": flushed[0], "cudnn_call_flushed_s": flushed[1],
                   "ours_call_b2b_s": b2b[0], "cudnn_call_b2b_s": b2b[1],
                   "ours_kernel_flushed_s": flushed[2], "ours_kernel_b2b_s": b2b[2]}
        row["call_flushed_x"] = row["ours_call_flushed_s"] / row["cudnn_call_flushed_s"]
        row["call_b2b_x"] = row["ours_call_b2b_s"] / row["cudnn_call_b2b_s"]
        row["kernel_flushed_x"] = row["ours_kernel_flushed_s"] / row["cudnn_call_flushed_s"]
        row["kernel_b2b_x"] = row["ours_kernel_b2b_s"] / row["cudnn_call_b2b_s"]
        row["met"] = row["valid"] and row["call_flushed_x"] <= 1.0 and row["call_b2b_x"] <= 1.0
        log(f"  {name:12s} {row['what']:28s} x{row['count']} {row['version']:12s} "
            f"call {row['ours_call_flushed_s'] * 1e3:7.3f}/{row['cudnn_call_flushed_s'] * 1e3:7.3f} ms "
            f"= {row['call_flushed_x']:5.2f}x flushed, {row['call_b2b_x']:5.2f}x b2b; kernel "
            f"{row['kernel_flushed_x']:5.2f}x/{row['kernel_b2b_x']:5.2f}x; valid={valid} ({worst:.2g})")
        rows.append(row)
        del x, y
    del model
    torch.cuda.empty_cache()
    return rows


# ------------------------------------------------------------------ autotune check

def autotune_check(torch, shapes, log, repeats=20):
    """Per (name, ConvShape, batch): the autotuner's pick against every candidate re-measured."""
    dev = GpuDevice.get()
    out = []
    for name, shape, batch in shapes:
        options = autotune.candidates(shape, dev.arch)
        first = autotune.measure_on_device(dev, shape, batch, options, autotune.budget_s())
        chosen = autotune.pick(first)
        saved = autotune.REPEATS
        autotune.REPEATS = (repeats, repeats)
        try:
            again = autotune.measure_on_device(dev, shape, batch, options, float("inf"))
        finally:
            autotune.REPEATS = saved
        best = autotune.pick(again)
        chosen_again = next(t[2] for t in again if (t[0], t[1]) == (chosen[0], chosen[1]))
        row = {"layer": name, "batch": batch, "candidates": len(options),
               "chosen": autotune.describe(chosen[0], chosen[1]), "best": autotune.describe(best[0], best[1]),
               "chosen_ms": chosen_again * 1e3, "best_ms": best[2] * 1e3, "ratio": chosen_again / best[2]}
        row["within_10pct"] = row["ratio"] <= 1.10
        log(f"  autotune {name:22s} B={batch:<6d} chose {row['chosen']:40s} {row['chosen_ms']:8.3f} ms, best "
            f"{row['best']:40s} {row['best_ms']:8.3f} ms: {row['ratio']:.3f}")
        out.append(row)
    return out


# ------------------------------------------------------------------ output

def markdown(result):
    lines = [f"Measured on {result['device']}, {result['date']} (`{result['command']}`): PyTorch {result['torch']}, "
             f"cuDNN {result['cudnn']}, CUDA driver {result.get('driver', '?')}; fp32 with TF32 off unless a table says "
             f"otherwise; median of {result['repeats']}. *call*: the whole call a "
             "PyTorch user waits for (ece408_op.torch.Conv2d's forward against nn.Conv2d's), *kernel*: our kernels "
             "launched alone; *flushed*: L2 flushed before each repeat; *b2b*: back to back, the mean of 10 "
             "consecutive calls. Ratios are ours / cuDNN's whole call. Met: both call ratios <= 1.0."]
    if result["hot_path"]:
        lines += ["", "## Hot path (host microseconds per call, a layer seen before)", "", "| what | us |", "| --- | --- |"]
    for key, value in result["hot_path"].items():
        lines.append(f"| {key} | {value if isinstance(value, str) else round(value, 2)} |")
    if result["layers"]:
        lines += ["", "## Layers", "",
                  "| network | layer (count) | version | ours call ms flushed | cuDNN ms flushed | call x flushed | "
                  "call x b2b | kernel x flushed | kernel x b2b | valid | met |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in result["layers"]:
        tile = " " + ",".join(f"{k}={v}" for k, v in r["overrides"].items()) if r["overrides"] else ""
        lines.append(f"| {r['network']} | {r['what']} (x{r['count']}) | {r['version']}{tile} | "
                     f"{r['ours_call_flushed_s'] * 1e3:.3f} | {r['cudnn_call_flushed_s'] * 1e3:.3f} | "
                     f"{r['call_flushed_x']:.2f} | {r['call_b2b_x']:.2f} | {r['kernel_flushed_x']:.2f} | "
                     f"{r['kernel_b2b_x']:.2f} | {r['valid']} | {'yes' if r['met'] else 'no'} |")
    met = sum(r["met"] for r in result["layers"])
    lines += ["", f"{met} of {len(result['layers'])} distinct layers met.", ""] if result["layers"] else [""]
    if result.get("autotune"):
        lines += ["## Autotuner's choice against every candidate re-measured (median of 20, back to back)", "",
                  "| layer | batch | candidates | chosen | ms | best | ms | ratio |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in result["autotune"]:
            lines.append(f"| {r['layer']} | {r['batch']} | {r['candidates']} | {r['chosen']} | {r['chosen_ms']:.3f} | "
                         f"{r['best']} | {r['best_ms']:.3f} | {r['ratio']:.3f} |")
        lines.append("")
    lines.append(whole_networks.markdown(result))
    lines.append(precisions.markdown(result.get("precisions", [])))
    return "\n".join(lines) + "\n"


def save(result, out_dir):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "network.json").write_text(json.dumps(result, indent=1))
    (out / "network.md").write_text(markdown(result))
    keys = ["network", "layer", "count", "what", "batch", "version", "valid", "worst_error_vs_bound", "resolve_s",
            "ours_call_flushed_s", "cudnn_call_flushed_s", "ours_call_b2b_s", "cudnn_call_b2b_s",
            "ours_kernel_flushed_s", "ours_kernel_b2b_s", "call_flushed_x", "call_b2b_x", "kernel_flushed_x",
            "kernel_b2b_x", "met"]
    with open(out / "network.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(result["layers"])
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = result["layers"]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(max(8, 0.22 * len(rows)), 4))
    idx = np.arange(len(rows))
    ax.bar(idx - 0.2, [r["call_flushed_x"] for r in rows], 0.4, label="whole call, L2 flushed")
    ax.bar(idx + 0.2, [r["call_b2b_x"] for r in rows], 0.4, label="whole call, back to back")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(idx, [f"{r['network']} {r['what']}" for r in rows], rotation=90, fontsize=5)
    ax.set(yscale="log", ylabel="time / cuDNN fp32")
    ax.legend(fontsize=7)
    ax.set_title(f"every distinct convolution, {result['device']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "network.png", dpi=90)
    plt.close(fig)


def run(names, whole, repeats=20, check_autotune="new", hot=True, out="bench-gpu", command="", log=None,
        batches=whole_networks.BATCHES, cold=True, compile_names=("resnet18",), compile_batch=1, profile=False,
        precisions=(), channels_last=()):
    """``bench gpu --network``: the hot path (``hot``), every distinct layer of the networks ``names``, the
    autotuner's check (``check_autotune``: 'none', 'new' or 'suite'), the networks ``whole`` (bench/whole_networks.py:
    cold start, steady state at ``batches`` (in each of ``precisions`` where given, channels-last for those of
    ``channels_last``: bench/precisions.py), torch.compile of ``compile_names``); saved to ``out`` as it
    goes. This process's GPU cache folder is ``out``/gpu-cache (emptied first) unless $ECE408_GPU_CACHE is
    set. Returns 1 if any layer's output was invalid, else 0."""
    if not os.environ.get(GPU_CACHE_ENV):
        own = Path(out).resolve() / "gpu-cache"
        shutil.rmtree(own, ignore_errors=True)
        os.environ[GPU_CACHE_ENV] = str(own)
    torch = cuda_torch()
    dev = GpuDevice.get()
    timer = Timer(torch, repeats)
    log = log or (lambda line: print(line, flush=True))
    result = {"device": dev.name, "date": datetime.date.today().isoformat(), "repeats": repeats,
              "command": command, "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
              "driver": cudadrv.driver_version(), "layers": [],
              "autotune": []}
    if hot:
        result["hot_path"] = hot_path(torch)
        log("hot path: " + ", ".join(f"{k} {v:.2f}" if not isinstance(v, str) else f"{k} {v}"
                                     for k, v in result["hot_path"].items()))
    else:
        result["hot_path"] = {}
    for name in names:
        result["layers"] += layer_rows(torch, name, timer, log)
        save(result, out)
    if check_autotune != "none":
        result["autotune"] = autotune_check(torch, autotune_shapes(check_autotune == "suite"), log)
        save(result, out)
    if whole:
        whole_networks.run(torch, whole, timer, log, result, lambda: save(result, out), batches, cold,
                           compile_names, compile_batch, profile, precisions, channels_last)
    met = sum(r["met"] for r in result["layers"])
    log((f"{met} of {len(result['layers'])} distinct layers at <= 1.0x cuDNN (whole call, flushed and back to back); "
         if result["layers"] else "whole networks, ours / cuDNN fp32: ")
        + "; ".join(f"{r['network']} B{r['batch']} {r['ratio']:.2f}x" for r in result.get("whole", [])))
    bad = [r for r in result["layers"] if not r["valid"]]
    if bad:
        log("INVALID: " + "; ".join(f"{r['network']} {r['what']}" for r in bad))
    return 1 if bad else 0
