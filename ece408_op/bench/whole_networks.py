"""Whole networks for ``bench gpu --network``: the nine torchvision networks of ``bench/cold.py`` (random
weights), every convolution swapped, as a PyTorch user meets them.

1. Cold start (``cold_starts``): for each network a fresh process with an empty GPU cache folder times
   its first forward at the big batch (compiling the modules it needs, tuning every layer), then a
   first forward at each other batch (a new batch size of a network just tuned); a fresh process runs
   the unswapped network's first forward (cuDNN in benchmark mode, TF32 off: its own tuning); a third
   process, given the folder the first one filled (as an operator copies it to another machine), times
   its first forward again (``bench/cold.py``).
2. Steady state (``steady_rows``), per batch: ours (default precision), ours with precision='fp32',
   cuDNN fp32 (TF32 off) and cuDNN TF32 (PyTorch's default for convolutions), whole forwards back to back
   (the entries taking turns), and each one's output against the network in float64 (max |error| over
   max |y|); ours are tuned by the cold-start process's tunings (its cache folder merged into this
   process's), so the figure is what a user gets after the first forward.
3. torch.compile (``compile_rows``): graph breaks (``torch._dynamo.explain``) of the swapped network, the
   time of the first compiled call, the compiled network's steady time and its output against eager's,
   and mode='reduce-overhead' (CUDA graphs): the same, and its output for a new input tensor (new memory)
   against eager's; cuDNN's network compiled the same way beside it.
"""
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .cold import NETWORKS, build_network, input_size

BATCHES = (64, 1)
TARGETS = {"resnet50": 5.0, "densenet121": 10.0}      # cold start, batch 64, seconds (docs/gpu-dropin.md)
NEW_BATCH_TARGET_S = 1.0
RATIO_TARGETS = {64: 0.8, 1: 1.0}                     # ours / cuDNN fp32, steady state
FP32_ERROR_FACTOR = 2.0                               # precision='fp32': error within 2x cuDNN fp32's


def _child(args, log, timeout=600):
    """Run bench/cold.py in a fresh process; its JSON line (None where it failed, with its last lines logged)."""
    command = [sys.executable, "-m", "ece408_op.bench.cold", *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        log(f"  {' '.join(args)}: no answer in {timeout} s")
        return None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        log(f"  {' '.join(args)} failed ({done.returncode}): " + " | ".join(done.stderr.strip().splitlines()[-3:]))
    return json.loads(lines[-1]) if lines else None            # (figures printed before a failure at exit kept)


def cold_starts(names, batch, then, log, work, profile=False, warm=None):
    """[row per network] of the three first forwards (module doc, 1); ``work``: a folder for the
    networks' cache folders (kept, so that the steady state reads their tunings); ``warm``: the networks
    whose third process runs (default all)."""
    rows = []
    for name in names:
        cache = Path(work) / f"cold-{name}"
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)
        base = ["--net", name, "--batch", str(batch)]
        ours = _child(base + ["--mode", "ours", "--cache", str(cache), "--then", ",".join(map(str, then))]
                      + (["--profile"] if profile else []), log)
        cudnn = _child(base + ["--mode", "cudnn", "--cache", tempfile.mkdtemp(prefix="ece408-cudnn-")], log)
        again = _child(base + ["--mode", "ours", "--cache", str(cache), "--then", ",".join(map(str, then))], log) \
            if warm is None or name in warm else None
        row = {"network": name, "batch": batch, "cache": str(cache),
               "ours_first_s": ours and ours["first_s"], "ours_second_s": ours and ours["second_s"],
               "ours_new_batch_s": ours and ours["then"], "cudnn_first_s": cudnn and cudnn["first_s"],
               "warm_first_s": again and again["first_s"], "warm_new_batch_s": again and again["then"],
               "profile": ours and ours.get("profile"), "device": (ours or cudnn or {}).get("device")}
        target = TARGETS.get(name)
        row["target_s"] = target
        row["met"] = None if target is None or row["ours_first_s"] is None else row["ours_first_s"] <= target
        newest = max((ours or {}).get("then", {}).values(), default=None)
        row["new_batch_met"] = None if newest is None else newest <= NEW_BATCH_TARGET_S
        log(f"  cold {name:16s} B={batch}: ours {row['ours_first_s']} s (new batch {row['ours_new_batch_s']}), "
            f"cuDNN {row['cudnn_first_s']} s, a process with the cache folder copied {row['warm_first_s']} s"
            + (f"; profile {row['profile']}" if row["profile"] else ""))
        rows.append(row)
    return rows


def merge_caches(folders, into):
    """Merge the tunings and modules of GPU cache ``folders`` into the folder ``into`` (this process's)."""
    from ..kernels import autotune
    into = Path(into)
    for folder in map(Path, folders):
        for cubin in (folder / "cubin").glob("*.cubin.gz"):
            target = into / "cubin" / cubin.name
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(cubin, target)
        for tuned in (folder / "autotune").glob("*.json"):
            target = into / "autotune" / tuned.name
            target.parent.mkdir(parents=True, exist_ok=True)
            data = json.loads(tuned.read_text())
            if target.exists():
                data["entries"] = {**json.loads(target.read_text())["entries"], **data["entries"]}
            target.write_text(json.dumps(data, indent=1))
    autotune.forget_caches()


def _relative_error(out, want):
    return float((out.double() - want).abs().max() / want.abs().max())


def steady_rows(torch, names, batches, timer, log):
    """[row per (network, batch)]: the four entries' times and errors against float64 (module doc, 2)."""
    from ..kernels import wait_for_specialised
    from ..torch import swap_convolutions
    rows = []
    for name in names:
        torch.manual_seed(408)
        model = build_network(name).cuda().eval()
        ours = swap_convolutions(copy.deepcopy(model)).result
        plain = swap_convolutions(copy.deepcopy(model), precision="fp32").result
        for batch in batches:
            x = torch.rand(batch, 3, input_size(name), input_size(name), device="cuda")
            reference = copy.deepcopy(model).double()
            with torch.inference_mode():
                want = reference(x.double())
                del reference
                torch.backends.cudnn.allow_tf32 = False
                ours(x), plain(x)                         # resolved (tuned where the cold start did not)
                wait_for_specialised(300)                 # the layers' own modules, built in the background
                outs = {"ours": ours(x), "ours_fp32": plain(x), "cudnn_fp32": model(x)}
                torch.backends.cudnn.allow_tf32 = True
                outs["cudnn_tf32"] = model(x)
                torch.backends.cudnn.allow_tf32 = False

                def tf32(model=model, x=x):
                    torch.backends.cudnn.allow_tf32 = True
                    model(x)
                    torch.backends.cudnn.allow_tf32 = False
                seconds = timer.back_to_back(lambda: ours(x), lambda: plain(x), lambda: model(x), tf32,
                                             calls=3 if batch >= 32 else 10)
            row = {"network": name, "batch": batch, "convolutions": sum(1 for m in ours.modules()
                                                                         if type(m).__name__ == "Conv2d")}
            for key, s in zip(("ours", "ours_fp32", "cudnn_fp32", "cudnn_tf32"), seconds):
                row[f"{key}_s"] = s
                row[f"{key}_error"] = _relative_error(outs[key], want)
            row["ratio"] = row["ours_s"] / row["cudnn_fp32_s"]
            row["fp32_ratio"] = row["ours_fp32_s"] / row["cudnn_fp32_s"]
            row["tf32_ratio"] = row["ours_s"] / row["cudnn_tf32_s"]
            row["argmax_equal"] = bool((outs["ours"].argmax(1) == outs["cudnn_fp32"].argmax(1)).all())
            row["met"] = row["ratio"] <= RATIO_TARGETS.get(batch, 1.0)
            row["fp32_error_met"] = row["ours_fp32_error"] <= FP32_ERROR_FACTOR * max(row["cudnn_fp32_error"], 1e-12)
            log(f"  steady {name:16s} B={batch:<3d} ours {row['ours_s'] * 1e3:8.2f} ms, fp32 {row['ours_fp32_s'] * 1e3:8.2f}, "
                f"cuDNN fp32 {row['cudnn_fp32_s'] * 1e3:8.2f}, TF32 {row['cudnn_tf32_s'] * 1e3:8.2f}: "
                f"{row['ratio']:.2f}x (fp32 {row['fp32_ratio']:.2f}x, vs TF32 {row['tf32_ratio']:.2f}x); error "
                f"{row['ours_error']:.1e} / fp32 {row['ours_fp32_error']:.1e} / cuDNN {row['cudnn_fp32_error']:.1e} / "
                f"TF32 {row['cudnn_tf32_error']:.1e}")
            rows.append(row)
            del outs, want, x
        del model, ours, plain
        torch.cuda.empty_cache()
    return rows


def _timed_first(torch, fn):
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - start


def compile_rows(torch, names, batch, timer, log):
    """[row per network]: torch.compile of the swapped network (module doc, 3)."""
    from ..kernels import wait_for_specialised
    from ..torch import swap_convolutions
    rows = []
    for name in names:
        torch.manual_seed(408)
        model = build_network(name).cuda().eval()
        ours = swap_convolutions(copy.deepcopy(model)).result
        size = input_size(name)
        x = torch.rand(batch, 3, size, size, device="cuda")
        row = {"network": name, "batch": batch}
        with torch.inference_mode():
            ours(x)
            wait_for_specialised(300)
            eager = ours(x)
            torch._dynamo.reset()
            explained = torch._dynamo.explain(ours)(x)
            row["graphs"], row["graph_breaks"] = explained.graph_count, explained.graph_break_count
            torch._dynamo.reset()
            compiled = torch.compile(ours)
            out, row["compile_s"] = _timed_first(torch, lambda: compiled(x))
            row["compiled_error_vs_eager"] = _relative_error(out, eager.double())
            graphed = torch.compile(ours, mode="reduce-overhead")
            _, row["graphed_compile_s"] = _timed_first(torch, lambda: graphed(x))
            for _ in range(3):
                graphed(x)
            fresh = torch.rand(batch, 3, size, size, device="cuda")          # new memory, new values
            row["graphed_error_vs_eager"] = _relative_error(graphed(x).clone(), eager.double())
            row["graphed_new_input_error_vs_eager"] = _relative_error(graphed(fresh).clone(), ours(fresh).double())
            cudnn_graphed = torch.compile(model, mode="reduce-overhead")
            _, row["cudnn_graphed_compile_s"] = _timed_first(torch, lambda: cudnn_graphed(x))
            for _ in range(3):
                cudnn_graphed(x)
            seconds = timer.back_to_back(lambda: ours(x), lambda: compiled(x), lambda: graphed(x), lambda: model(x),
                                         lambda: cudnn_graphed(x), calls=10)
        for key, s in zip(("eager", "compiled", "graphed", "cudnn_eager", "cudnn_graphed"), seconds):
            row[f"{key}_s"] = s
        row["ok"] = (row["graph_breaks"] == 0 and row["compiled_error_vs_eager"] <= 1e-5
                     and row["graphed_error_vs_eager"] <= 1e-5 and row["graphed_new_input_error_vs_eager"] <= 1e-5)
        log(f"  compile {name:14s} B={batch}: {row['graphs']} graph(s), {row['graph_breaks']} breaks; compiled "
            f"{row['compiled_s'] * 1e3:.2f} ms (first call {row['compile_s']:.1f} s), reduce-overhead "
            f"{row['graphed_s'] * 1e3:.2f} ms, eager {row['eager_s'] * 1e3:.2f}; cuDNN eager "
            f"{row['cudnn_eager_s'] * 1e3:.2f}, reduce-overhead {row['cudnn_graphed_s'] * 1e3:.2f}; errors vs eager "
            f"{row['compiled_error_vs_eager']:.1e}, {row['graphed_error_vs_eager']:.1e}, new input "
            f"{row['graphed_new_input_error_vs_eager']:.1e}")
        rows.append(row)
        del model, ours, compiled, graphed, cudnn_graphed
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    return rows


def _s(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(result):
    """The cold-start, steady-state and torch.compile tables."""
    lines = []
    if result.get("cold"):
        lines += ["## Cold start (first forward, empty GPU cache folder, a fresh process each)", "",
                  "| network | batch | ours s | new batch s | cuDNN s (benchmark mode) | cache folder copied s | "
                  "target s | met |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in result["cold"]:
            new = ", ".join(f"B{b}: {s}" for b, s in (r["ours_new_batch_s"] or {}).items())
            lines.append(f"| {r['network']} | {r['batch']} | {_s(r['ours_first_s'])} | {new} | {_s(r['cudnn_first_s'])} | "
                         f"{_s(r['warm_first_s'])} | {_s(r['target_s'], 0) if r['target_s'] else '-'} | "
                         f"{'-' if r['met'] is None else 'yes' if r['met'] else 'no'} |")
        lines.append("")
    if result.get("whole"):
        lines += ["## Steady state (back to back, median) and error against float64 (max |error| / max |y|)", "",
                  "| network | batch | ours ms | fp32 ms | cuDNN fp32 ms | cuDNN TF32 ms | ratio | fp32 ratio | "
                  "vs TF32 | error ours | fp32 | cuDNN fp32 | cuDNN TF32 | argmax equal | met |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in result["whole"]:
            lines.append(
                f"| {r['network']} | {r['batch']} | {r['ours_s'] * 1e3:.2f} | {r['ours_fp32_s'] * 1e3:.2f} | "
                f"{r['cudnn_fp32_s'] * 1e3:.2f} | {r['cudnn_tf32_s'] * 1e3:.2f} | **{r['ratio']:.2f}** | "
                f"{r['fp32_ratio']:.2f} | {r['tf32_ratio']:.2f} | {r['ours_error']:.1e} | {r['ours_fp32_error']:.1e} | "
                f"{r['cudnn_fp32_error']:.1e} | {r['cudnn_tf32_error']:.1e} | {r['argmax_equal']} | "
                f"{'yes' if r['met'] else 'no'} |")
        lines.append("")
    if result.get("compile"):
        lines += ["## torch.compile (swapped network; cuDNN's network beside it)", "",
                  "| network | batch | graphs | breaks | eager ms | compiled ms | reduce-overhead ms | first compiled "
                  "call s | cuDNN eager ms | cuDNN reduce-overhead ms | error vs eager (compiled, graphs, new input) |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in result["compile"]:
            lines.append(f"| {r['network']} | {r['batch']} | {r['graphs']} | {r['graph_breaks']} | "
                         f"{r['eager_s'] * 1e3:.2f} | {r['compiled_s'] * 1e3:.2f} | {r['graphed_s'] * 1e3:.2f} | "
                         f"{r['compile_s']:.1f} | {r['cudnn_eager_s'] * 1e3:.2f} | {r['cudnn_graphed_s'] * 1e3:.2f} | "
                         f"{r['compiled_error_vs_eager']:.1e}, {r['graphed_error_vs_eager']:.1e}, "
                         f"{r['graphed_new_input_error_vs_eager']:.1e} |")
        lines.append("")
    return "\n".join(lines)


def run(torch, names, timer, log, result, save, batches=BATCHES, cold=True, compile_names=("resnet18",),
        compile_batch=1, profile=False, precisions=(), channels_last=()):
    """The three parts for ``names`` (module doc), into ``result`` ("cold", "whole", "compile"), saved as
    each part ends (``save()``); with ``precisions``, the steady state is bench/precisions.py's instead
    (ours against cuDNN in each precision, channels-last for those of ``channels_last``: "precisions")."""
    from ..kernels.build import GPU_CACHE_ENV
    work = Path(os.environ[GPU_CACHE_ENV]).parent / "cold-caches"       # (network_layers.run sets this process's folder)
    if cold:
        result["cold"] = cold_starts(names, batches[0], batches[1:], log, work, profile)
        save()
        merge_caches([r["cache"] for r in result["cold"]], os.environ[GPU_CACHE_ENV])
    if precisions:
        from .precisions import precision_rows
        result["precisions"] = []
        precision_rows(torch, names, batches, precisions, channels_last, timer, log, result["precisions"], save)
    else:
        result["whole"] = steady_rows(torch, names, batches, timer, log)
    save()
    if compile_names:
        result["compile"] = compile_rows(torch, [n for n in compile_names if n in NETWORKS], compile_batch, timer, log)
        save()
    return result
