"""v7's tuning sweep (``bench gpu --sweep [--apply]``): every combination of its four parameters timed on
the course layer, the winner written to kernels/tuning.json with ``--apply`` (unless the stored tuning
ties with it within NOISE), the table to ``v7_sweep.{json,md}``.
"""
import json
from pathlib import Path

from ..kernels import tuning
from ..kernels.build import precompile
from ..kernels.plans import module_defines, module_spec
from ..kernels.versions import VERSIONS
from .gpu import Bench

# v7's sweep: every combination below (48 builds of the module, compiled in parallel first).
SWEEP_GRID = {"VEC": (4, 8), "UNROLL_M": ("full", 1, 2, 5, 8, 16), "STREAM": (0, 1), "THREADS": (128, 256)}


def sweep_configs(grid=SWEEP_GRID):
    keys = list(grid)
    configs = [{}]
    for key in keys:
        configs = [{**c, key: value} for c in configs for value in grid[key]]
    return configs


def _precompile(bench, configs):
    """Build every config's module on all cores (nvcc runs outside the GIL) into the cubin cache."""
    precompile([module_spec(7, bench.shape, config) for config in configs], bench.device.arch)


def sweep(batch, C, H, W, M, K, repeats=20, seed=408):
    """Time v7 under every SWEEP_GRID config on one layer; rows sorted by median (valid first)."""
    bench = Bench(batch, C, H, W, M, K, repeats, seed)
    configs = [c for c in sweep_configs() if VERSIONS[7].unsupported(bench.shape, c) is None]
    _precompile(bench, configs)
    rows = []
    for config in configs:
        entry = bench.measure(bench.ours(7, config))
        defines = module_defines(7, bench.shape, config)
        rows.append({**config, "unroll_compiled": defines["V7_UNROLL_M"], **entry})
    cudnn = bench.time(lambda: bench.torch.nn.functional.conv2d(bench.xd, bench.kd))
    rows.sort(key=lambda r: (not r["valid"], r["median_s"]))
    return {"device": bench.device.name, "layer": bench.layer, "repeats": repeats,
            "cudnn_median_s": cudnn["median_s"], "rows": rows}


def sweep_markdown(result):
    layer = result["layer"]
    lines = [f"v7 sweep on {result['device']}, layer B={layer['batch']} C={layer['C']} M={layer['M']} "
             f"{layer['H']}x{layer['W']} K={layer['K']}; median of {result['repeats']} (L2 flushed); "
             f"cuDNN fp32 {result['cudnn_median_s'] * 1e3:.3f} ms in the same run.",
             "", "| VEC | filter-loop unroll | stores | threads/block | median ms | valid |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row in result["rows"]:
        unroll = f"full ({row['unroll_compiled']})" if row["UNROLL_M"] == "full" else str(row["UNROLL_M"])
        lines.append(f"| {row['VEC']} | {unroll} | {'streaming' if row['STREAM'] else 'plain'} | "
                     f"{row['THREADS']} | {row['median_s'] * 1e3:.3f} | {row['valid']} |")
    return "\n".join(lines) + "\n"


NOISE = 0.02      # rows within 2% of the fastest are a tie: the stored tuning stays if it is one of them


def pick_winner(rows, stored):
    """The tuning to keep: the stored one where it ties with the fastest valid row, else the fastest."""
    valid = [row for row in rows if row["valid"]]
    if not valid:
        return None
    fastest = min(valid, key=lambda row: row["median_s"])
    for row in valid:
        if all(row[key] == stored[key] for key in tuning.V7_KEYS) and \
                row["median_s"] <= fastest["median_s"] * (1 + NOISE):
            return row
    return fastest


def save_sweep(result, out_dir, apply=False):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "v7_sweep.json").write_text(json.dumps(result, indent=2))
    (out / "v7_sweep.md").write_text(sweep_markdown(result))
    best = pick_winner(result["rows"], tuning.v7_values())
    if apply and best is not None:
        tuning.store_v7(best, result["device"], result["layer"], "docs/bench/v7_sweep.json")
    return best
