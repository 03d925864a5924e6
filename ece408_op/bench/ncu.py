"""Nsight Compute over a command, as the course's later terms profiled (``ncu``): every kernel the
command launches, by name, with its time, achieved DRAM bandwidth, FP32 FLOP rate and achieved occupancy.

    python -m ece408_op m3 1000 --ncu                      # a milestone re-runs itself under ncu
    python -m ece408_op.bench.ncu [--kernels REGEX] [--csv FILE] -- COMMAND [ARGS...]

The ladder's kernels keep C names (``extern "C"``: conv_forward_v7, im2col_v5, fft_multiply, ...),
so ncu shows them as written; cuBLAS's and cuFFT's (v18, v19) appear under their libraries' names.
ncu runs with ``--clock-control none`` (the clocks as the benchmarks see them; ncu would otherwise lock
them to base), ``--page raw --csv --print-units base`` into a log file, which ``parse`` reads back. Under
ncu every kernel is replayed once per group of counters and the process is serialised: the command's own
Op Time lines are not comparable with an ordinary run; the durations here are ncu's (one replay).

Nsight Systems (``nsys profile --stats=true COMMAND``) gives the timeline instead: it is not usable on
the project's GPU machine (not on the PATH; its bundled copy wrote a .qdstrm it could not turn into a
report), so nothing here calls it.
"""
import argparse
import csv
import io
import os
import subprocess
import sys
import tempfile

from ..base import nsight
from ..errors import GpuError

# metric -> column; the FLOP rate is 2 x FFMA + FADD + FMUL thread instructions per second (FP32 only:
# v17's FP16 FMAs and the tensor-core products of v9, v11 and cuBLAS are not counted in it)
METRICS = {
    "gpu__time_duration.sum": "duration_s",
    "dram__bytes.sum.per_second": "dram_bytes_per_s",
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.per_second": "ffma_per_s",
    "sm__sass_thread_inst_executed_op_fadd_pred_on.sum.per_second": "fadd_per_s",
    "sm__sass_thread_inst_executed_op_fmul_pred_on.sum.per_second": "fmul_per_s",
    "sm__sass_thread_inst_executed_op_hfma_pred_on.sum.per_second": "hfma_per_s",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",
}
NCU_ENV = nsight.env_variable("ncu")   # the ncu executable, where it is not on the PATH


def find_ncu():
    """ncu's path (``base.nsight.find``: $ECE408_NCU, the PATH, the CUDA toolkit, /opt/nvidia/nsight-compute/*);
    else a one-line GpuError."""
    path = nsight.find("ncu")
    if path is None:
        raise GpuError(f"ncu (Nsight Compute) not found on the PATH, in /usr/local/cuda/bin or "
                       f"/opt/nvidia/nsight-compute; install it or set {NCU_ENV} to its path")
    return path


def command(argv, log_file, ncu="ncu", kernels=None):
    """The ncu command line that profiles ``argv`` into ``log_file`` (CSV)."""
    return [ncu, "--clock-control", "none", "--metrics", ",".join(METRICS), "--csv", "--page", "raw",
            "--print-units", "base", "--print-kernel-base", "function", "--log-file", str(log_file),
            *(["--kernel-name", f"regex:{kernels}"] if kernels else []), *argv]


def _number(text):
    text = (text or "").replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return None


PREFIXES = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def unit_scale(unit):
    """The factor to base units of ncu's unit name: 'ns' (ncu 2025 with --print-units base) and 'nsecond'
    1e-9, 'us' 1e-6, 'Gbyte/s' 1e9; 'byte/s', 'inst/s', '%', '' 1."""
    head = (unit or "").strip().split("/", 1)[0]
    if len(head) > 1 and head[0] in PREFIXES and head[1:] in ("s", "second", "B", "byte", "inst", "cycle"):
        return PREFIXES[head[0]]
    return 1.0


def parse(text):
    """Rows {kernel, duration_s, dram_bytes_per_s, ..., occupancy_pct} of ncu's raw CSV page (a header
    naming "Kernel Name" and the metrics, a units row, then one row per profiled launch), in base units."""
    rows, header, scales = [], None, {}
    for fields in csv.reader(io.StringIO(text)):
        if header is None:
            if "Kernel Name" in fields:
                header = fields
            continue
        record = dict(zip(header, fields))
        if not (record.get("ID") or "").strip().isdigit():
            if not scales:                              # the units row (then ==PROF== lines, if any)
                scales = {metric: unit_scale(record.get(metric)) for metric in METRICS}
            continue
        row = {"kernel": record.get("Kernel Name", "?"), "block": record.get("Block Size", ""),
               "grid": record.get("Grid Size", "")}
        for metric, column in METRICS.items():
            value = _number(record.get(metric))
            row[column] = None if value is None else value * scales.get(metric, 1.0)
        rows.append(row)
    return rows


def summary(rows):
    """Per kernel and launch shape (name, block, grid: one layer's launches of one kernel), in order of
    first launch: launches, total and mean time, and the time-weighted means of the rates and occupancy."""
    kernels = {}
    for row in rows:
        kernels.setdefault((row["kernel"], row.get("block", ""), row.get("grid", "")), []).append(row)
    out = []
    for (name, block, grid), launches in kernels.items():
        times = [r["duration_s"] or 0.0 for r in launches]
        total = sum(times) or 1e-30

        def mean(column):
            pairs = [(r[column], t) for r, t in zip(launches, times) if r[column] is not None]
            return sum(v * t for v, t in pairs) / sum(t for _, t in pairs) if pairs and sum(t for _, t in pairs) else None
        flops = [mean(c) for c in ("ffma_per_s", "fadd_per_s", "fmul_per_s")]
        out.append({"kernel": name, "block": block, "grid": grid, "launches": len(launches), "total_s": sum(times), "mean_s": total / len(launches),
                    "dram_GB_per_s": None if mean("dram_bytes_per_s") is None else mean("dram_bytes_per_s") / 1e9,
                    "fp32_GFLOP_per_s": None if flops[0] is None else (2 * flops[0] + (flops[1] or 0) + (flops[2] or 0)) / 1e9,
                    "hfma_G_per_s": None if mean("hfma_per_s") is None else mean("hfma_per_s") / 1e9,
                    "occupancy_pct": mean("occupancy_pct")})
    return out


def table(rows):
    """``summary(rows)`` as text, one line per kernel."""
    def show(value, fmt):
        return format(value, fmt) if value is not None else "-"
    lines = [f"{'kernel':32s} {'grid':>18s} {'calls':>5s} {'mean ms':>9s} {'DRAM GB/s':>10s} {'FP32 GFLOP/s':>13s} "
             f"{'HFMA G/s':>9s} {'occupancy %':>12s}"]
    for s in summary(rows):
        lines.append(f"{s['kernel'][:32]:32s} {s['grid'].replace(' ', '')[:18]:>18s} {s['launches']:5d} "
                     f"{s['mean_s'] * 1e3:9.3f} {show(s['dram_GB_per_s'], '10.0f')} "
                     f"{show(s['fp32_GFLOP_per_s'], '13.0f')} {show(s['hfma_G_per_s'], '9.0f')} "
                     f"{show(s['occupancy_pct'], '12.1f')}")
    return "\n".join(lines)


def profile(argv, kernels=None, keep_csv=None, say=print, env=None):
    """Run ``argv`` under ncu (its output passes through; ``env`` its environment), then print the
    kernels' table; returns the command's exit status (ncu's where it failed to start the command)."""
    ncu = find_ncu()
    with tempfile.TemporaryDirectory() as folder:
        log = os.path.join(folder, "ncu.csv")
        status = subprocess.call(command(argv, log, ncu, kernels), env=env)
        text = open(log, encoding="utf-8", errors="replace").read() if os.path.exists(log) else ""
    if keep_csv:
        with open(keep_csv, "w", encoding="utf-8") as handle:
            handle.write(text)
    rows = parse(text)
    if not rows:
        lines = [line for line in text.splitlines() if line.strip()]
        say(f"ncu profiled no kernel (exit status {status}){': ' + lines[-1] if lines else ''}")
        return status or 1
    say("\nNsight Compute (ncu --clock-control none; one replay per counter group, the process serialised: "
        "Op Time above is not comparable with an ordinary run):\n" + table(rows))
    return status


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m ece408_op.bench.ncu", description=__doc__.splitlines()[0],
                                     allow_abbrev=False)
    parser.add_argument("--kernels", help="profile only kernels whose name matches this regular expression")
    parser.add_argument("--csv", help="keep ncu's raw CSV here")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    run = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not run:
        parser.error("give the command to profile after --")
    try:
        return profile(run, args.kernels, args.csv)
    except GpuError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
