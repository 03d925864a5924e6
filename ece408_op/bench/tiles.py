"""The tile sweep (``bench gpu --suite --tiles``): v7-v11 and the fused kernel under each of their
tuning overrides (TILE_GRID) on the suite's layers, validated and timed as the suite's entries.
"""
import json

from ..kernels.device import GpuDevice
from ..kernels.plans import fused_plan_for, module_spec, plan_for
from ..kernels.versions import FUSED, VERSIONS
from .suite import LADDER_BATCH, LAYERS, Case
from .timing import cuda_torch, l2_flush

# Tile sweep of v7-v11 and the fused kernel (``--tiles``): tuning overrides tried per layer.
TILE_GRID = {
    7: [{}, {"UNROLL_M": 1}, {"UNROLL_M": 4}, {"UNROLL_M": 8}, {"UNROLL_M": 16}, {"UNROLL_M": 64}, {"VEC": 8},
        {"VEC": 8, "UNROLL_M": 8}, {"THREADS": 128}, {"THREADS": 128, "UNROLL_M": 8}, {"STREAM": 1}],
    8: [{}, {"V8_BK": 16}, {"V8_STAGES": 4}, {"V8_BP": 128, "V8_BF": 128, "V8_TP": 8, "V8_TF": 8},
        {"V8_BP": 128, "V8_BF": 64, "V8_TP": 8, "V8_TF": 4}, {"V8_BP": 64, "V8_BF": 64, "V8_TP": 4, "V8_TF": 4}],
    9: [{}, {"V9_STAGES": 4}, {"V9_BK": 32, "V9_STAGES": 2}, {"V9_WP": 4, "V9_WF": 1, "V9_MI": 4},
        {"V9_WP": 8, "V9_WF": 1, "V9_MI": 2}, {"V9_WP": 2, "V9_WF": 2, "V9_MI": 4, "V9_NI": 4},
        {"V9_WP": 4, "V9_WF": 2, "V9_MI": 2, "V9_NI": 4}, {"V9_WP": 2, "V9_WF": 4, "V9_MI": 4, "V9_NI": 4},
        {"V9_WP": 4, "V9_WF": 2, "V9_MI": 4, "V9_NI": 4}],
    10: [{}, {"V10_VEC": 2}, {"V10_THREADS": 256}, {"V10_UNROLL_C": 2}, {"V10_VEC": 2, "V10_THREADS": 256}],
    11: [{"V11_WARPS": w, "V11_MT": mt, "V11_BUFFERS": nb} for w in (4, 8) for mt in (2, 3, 4) for nb in (1, 2)],
    "fused": [{}, {"FUSE_PV": 2}, {"FUSE_PV": 2, "FUSE_UNROLL_M": 5}, {"FUSE_UNROLL_M": 10}, {"FUSE_THREADS": 128}],
}
TILE_LAYERS = ("ece408-high", "2018-conv1", "2018-conv2", "2019-conv1", "2019-conv2", "resnet18-64",
               "resnet18-128s2", "resnet18-256", "resnet18-512", "vgg-first")


def tile_configs(layer, owners=None):
    """(owner, overrides, module spec) of TILE_GRID valid for ``layer`` (duplicates of the default dropped);
    ``owners``: the versions (and "fused") to sweep, default all of TILE_GRID."""
    shape, seen, out = layer.shape(), set(), []
    for owner, grid in TILE_GRID.items():
        if owners is not None and str(owner) not in owners:
            continue
        if owner == "fused" and not layer.fused:
            continue
        for overrides in grid:
            try:
                inner = shape.unpadded() if owner == "fused" else VERSIONS[owner].inner(shape)
                module = module_spec(FUSED if owner == "fused" else owner, inner, overrides)
            except ValueError:
                continue
            if owner != "fused" and VERSIONS[owner].unsupported(shape, overrides):
                continue
            if (owner, module) not in seen:
                seen.add((owner, module))
                out.append((owner, overrides, module))
    return out


def sweep_tiles(repeats=10, layers=TILE_LAYERS, batch=None, owners=None, log=print):
    """Time every tile configuration on each layer (course layers at 10,000 images, networks at their
    native batch); rows sorted per layer, valid and fastest first."""
    torch = cuda_torch()
    flush = l2_flush(torch)
    dev, rows = GpuDevice.get(), []
    for layer in LAYERS:
        if layer.name not in layers:
            continue
        case = Case(torch, layer, batch or (LADDER_BATCH if layer.course else layer.batches[0]), repeats, flush)
        for owner, overrides, _ in tile_configs(layer, owners):
            with dev.active():
                plan = fused_plan_for(dev, case.shape, "fused", overrides) if owner == "fused" else \
                    plan_for(dev, case.shape, owner, overrides)
            out = case.pooled if owner == "fused" else case.y
            entry = case.measure(case.launcher(plan, out), out, fused=owner == "fused")
            rows.append({"layer": layer.name, "batch": case.batch, "owner": str(owner), "overrides": overrides,
                         "median_s": entry["median_s"], "valid": entry["valid"]})
            log(f"  tiles {layer.name:16s} {str(owner):6s} {json.dumps(overrides):70s} {entry['median_s'] * 1e3:8.3f} ms "
                f"valid={entry['valid']}")
        del case
        torch.cuda.empty_cache()
    rows.sort(key=lambda r: (r["layer"], r["owner"], not r["valid"], r["median_s"]))
    return {"device": dev.name, "repeats": repeats, "rows": rows}


def tiles_markdown(tiles):
    """The tile sweep as a Markdown table (per layer and owner, fastest first)."""
    lines = [f"Tile sweep on {tiles['device']}: median of {tiles['repeats']} (L2 flushed); course layers at 10,000 "
             "images, networks at their native batch; every row validated against the float64 reference.", "",
             "| layer | batch | kernel | overrides (else the default tile) | median ms | valid |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row in tiles["rows"]:
        owner = row["owner"] if row["owner"] == "fused" else f"v{row['owner']}"
        overrides = ", ".join(f"{k}={v}" for k, v in row["overrides"].items()) or "(default)"
        lines.append(f"| {row['layer']} | {row['batch']} | {owner} | {overrides} | {row['median_s'] * 1e3:.3f} | "
                     f"{row['valid']} |")
    return "\n".join(lines) + "\n"
