"""The course's optimisation list measured on the course layers (docs/course-map.md quotes the table):
each step of the ladder against the version it improves, in the same run, and the streams option of
m3's copy path against its unoverlapped form.

    python -m ece408_op bench gpu --course-map [--batch 10000] [--repeats 20] [--out DIR]

Writes ``course_map.json`` and ``course_map.md`` in DIR. Kernels: the suite's cases (``suite.Case``: x
and k drawn on the device, every entry validated on sampled images against the float64 reference, v17
and v19 against their own error models, then timed: warm-up, L2 flushed before each repeat, CUDA
events, median). Streams: ``hostcopy.engine.forward_into`` on host arrays into memory already faulted in (so
that the page faults of fresh memory, which dominate a first call, do not hide the copies), with
``ECE408_STREAMS`` = 1, 2, 4, 8, 16 and unset (the default ring copy), median of the repeats.
"""
import datetime
import json
import os
import statistics
from pathlib import Path

import numpy as np

from ..conv.reference import reference_and_bound
from ..kernels.build import precompile
from ..kernels.choice import default_version
from ..kernels.device import GpuDevice
from ..kernels.hostcopy.engine import forward_into
from ..kernels.hostcopy.records import record_count, records_since
from ..kernels.hostcopy.streams import STREAMS_ENV
from ..kernels.launch import conv2d_forward_gpu
from ..kernels.plans import module_spec
from ..kernels.versions import VERSIONS
from .suite import LAYERS, Case
from .timing import cuda_torch, l2_flush

COURSE = ("ece408-high", "2018-conv1", "2018-conv2", "2019-conv1", "2019-conv2")
# (version, the version it improves, the course's item); "default": the layer's default version
STEPS = ((14, 3, "__restrict__ and loop unrolling"), (4, 14, "register blocking on top (the existing v4)"),
         (15, 14, "input-channel reduction: tree"), (16, 14, "input-channel reduction: atomics"),
         (17, 14, "FP16 arithmetic"), (18, 5, "cuBLAS GEMM (after im2col)"), (19, "default", "FFT overlap-add"))
STREAM_CHUNKS = (1, 2, 4, 8, 16)


def _layers():
    return [layer for layer in LAYERS if layer.name in COURSE]


def measure_kernels(batch, repeats, log=print):
    """Rows {layer, version, label, median_s, valid, worst_error_vs_bound, [worst_error_vs_float32]}."""
    torch, dev = cuda_torch(), GpuDevice.get()
    wanted = {n for step in STEPS for n in step[:2] if n != "default"}
    sets, plans = [], {}
    for layer in _layers():
        shape = layer.shape()
        numbers = sorted((wanted | {default_version(shape, dev.name)}) - {None})
        plans[layer.name] = [n for n in numbers if VERSIONS[n].unsupported(shape) is None]
        sets += [module_spec(n, VERSIONS[n].inner(shape)) for n in plans[layer.name]]
    log(f"precompiled {precompile(sets, dev.arch)} modules")
    flush = l2_flush(torch)
    rows = []
    for layer in _layers():
        case = Case(torch, layer, batch, repeats, flush)
        default = default_version(case.shape, dev.name)
        for number in plans[layer.name]:
            version = VERSIONS[number]
            if version.available() is not None:
                rows.append({"layer": layer.name, "version": number, "label": version.label, "skipped": version.available()})
                log(f"  {layer.name:12s} {version.label:14s} skipped: {version.available()}")
                continue
            entry = case.measure(case.ours(number), case.y, version=version)
            rows.append({"layer": layer.name, "batch": batch, "version": number, "label": version.label,
                         "default": number == default, **entry})
            extra = f", x float32 bound {entry['worst_error_vs_float32']:.3g}" if "worst_error_vs_float32" in entry else ""
            log(f"  {layer.name:12s} {version.label:14s} {entry['median_s'] * 1e3:9.3f} ms  valid={entry['valid']} "
                f"err/bound={entry['worst_error_vs_bound']:.3g}{extra}")
        del case
        torch.cuda.empty_cache()
    return rows


def measure_streams(batch, repeats=3, log=print):
    """Rows {layer, streams, wall_s, op_time_s, kernels_s, gpu_pipeline_s, valid}: ``forward_into`` with
    ECE408_STREAMS = each of STREAM_CHUNKS and unset ("ring"), medians of ``repeats`` after one warm call."""
    rng = np.random.default_rng(408)
    saved = os.environ.get(STREAMS_ENV)
    rows = []
    try:
        for layer in _layers():
            s = layer.shape()
            x = rng.random((batch, s.C, s.H, s.W), dtype=np.float32)
            k = (rng.standard_normal((s.M, s.C, s.KH, s.KW)) / np.sqrt(s.CKK)).astype(np.float32)
            out = np.zeros((batch, s.M, s.HO, s.WO), np.float32)          # faulted in once, reused
            ref, bound = reference_and_bound(x[:2], k)
            for chunks in (*STREAM_CHUNKS, None):
                if chunks is None:
                    os.environ.pop(STREAMS_ENV, None)
                else:
                    os.environ[STREAMS_ENV] = str(chunks)
                records = []
                for i in range(repeats + 1):
                    out[:2] = np.nan
                    start = record_count()
                    forward_into(out, x, k)
                    if i:
                        records += records_since(start)
                valid = bool((np.abs(out[:2] - ref) <= bound).all())

                def median(field):
                    return statistics.median(getattr(r, field) for r in records)
                row = {"layer": layer.name, "batch": batch, "streams": chunks or "ring", "valid": valid,
                       **{f"{f}_s": median(f) for f in ("wall", "op_time", "kernels", "gpu_pipeline", "copy_out")}}
                rows.append(row)
                log(f"  {layer.name:12s} streams={str(row['streams']):5s} wall {row['wall_s'] * 1e3:8.1f} ms  "
                    f"Op Time {row['op_time_s'] * 1e3:7.3f}  kernels {row['kernels_s'] * 1e3:7.3f}  "
                    f"GPU pipeline {row['gpu_pipeline_s'] * 1e3:7.2f} ms  valid={valid}")
    finally:
        if saved is None:
            os.environ.pop(STREAMS_ENV, None)
        else:
            os.environ[STREAMS_ENV] = saved
    return rows


def _ms(seconds):
    return f"{seconds * 1e3:.3f}"


def markdown(result):
    """The two tables of docs/course-map.md."""
    kernels = {(r["layer"], r["version"]): r for r in result["kernels"] if "median_s" in r}
    defaults = {r["layer"]: r["version"] for r in result["kernels"] if r.get("default")}
    lines = [f"Measured on {result['device']}, {result['date']}: batch {result['batch']}, median of "
             f"{result['repeats']} (L2 flushed before each), CUDA events; every entry validated on sampled images "
             "(v17, v19 against their own error models). ratio = version / the version it improves (< 1: faster).", "",
             "| step | improves | " + " | ".join(COURSE) + " |", "| --- | --- | " + " | ".join("---" for _ in COURSE) + " |"]
    for number, base, item in STEPS:
        cells = []
        for layer in COURSE:
            mine = kernels.get((layer, number))
            other = kernels.get((layer, defaults.get(layer) if base == "default" else base))
            if mine is None or other is None:
                cells.append("-")
                continue
            flag = "" if mine["valid"] else " INVALID"
            cells.append(f"{_ms(mine['median_s'])} vs {_ms(other['median_s'])} ms = {mine['median_s'] / other['median_s']:.2f}x{flag}")
        base_label = "default" if base == "default" else f"v{base}"
        lines.append(f"| v{number} ({item}) | {base_label} | " + " | ".join(cells) + " |")
    errors = [r for r in result["kernels"] if "worst_error_vs_float32" in r]
    if errors:
        lines += ["", "| version | layer | error / own bound | error / float32 bound | relative error (norm) |",
                  "| --- | --- | --- | --- | --- |"]
        for r in errors:
            lines.append(f"| {r['label']} | {r['layer']} | {r['worst_error_vs_bound']:.3g} | "
                         f"{r['worst_error_vs_float32']:.3g} | {r['rel_error']:.2g} |")
    if result.get("streams"):
        lines += ["", "Streams (`ECE408_STREAMS=N`, `hostcopy.engine.forward_into` into memory already faulted in; median of "
                  f"{result['stream_repeats']}): Op Time = first chunk's kernels starting to the last chunk's ending "
                  "(GPU clock); kernels = their own time added up; GPU pipeline = first copy in starting to last copy "
                  "out ending.", "",
                  "| layer | streams | wall ms | Op Time ms | kernels ms | GPU pipeline ms | valid |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in result["streams"]:
            lines.append(f"| {r['layer']} | {r['streams']} | {r['wall_s'] * 1e3:.1f} | {_ms(r['op_time_s'])} | "
                         f"{_ms(r['kernels_s'])} | {r['gpu_pipeline_s'] * 1e3:.2f} | {r['valid']} |")
    return "\n".join(lines) + "\n"


def run(batch=10000, repeats=20, out="bench-gpu", streams=True, log=print):
    result = {"device": GpuDevice.get().name, "date": datetime.date.today().isoformat(), "batch": batch,
              "repeats": repeats, "kernels": measure_kernels(batch, repeats, log)}
    if streams:
        result["stream_repeats"] = 3
        result["streams"] = measure_streams(batch, 3, log)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "course_map.json").write_text(json.dumps(result, indent=1))
    (folder / "course_map.md").write_text(markdown(result))
    log(markdown(result))
    bad = [r for r in result["kernels"] if r.get("valid") is False] + [r for r in result.get("streams", []) if not r["valid"]]
    return 1 if bad else 0


def ncu_target():
    """What docs/bench/ncu_course_list.txt profiles: v3, v14, v4, v17, v18, v19 once each (a warm-up and a
    timed launch) on ece408-high's layer, then v14-v17 on 2019 conv2's, at 1,000 images:
    ``python -m ece408_op.bench.ncu -- python -m ece408_op.bench.coursemap``."""
    rng = np.random.default_rng(0)
    for (c, hw, m), numbers in (((1, 28, 50), (3, 14, 4, 17, 18, 19)), ((12, 33, 24), (14, 15, 16, 17))):
        x = rng.random((1000, c, hw, hw), dtype=np.float32)
        k = (rng.standard_normal((m, c, 5, 5)) / np.sqrt(c * 25)).astype(np.float32)
        for number in numbers:
            conv2d_forward_gpu(x, k, version=number)


if __name__ == "__main__":
    ncu_target()
