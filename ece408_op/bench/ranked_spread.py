"""How much a ranked total moves when one team submits the same file again: the spread of the ranking.

    python -m ece408_op.bench.ranked_spread [--runs 5] [--size 100] [--milestone m2] [--package DIR] [--json FILE]

Makes the course's template (``python -m ece408_op init``), submits it ``--runs`` times as a ranked
run (``submit --submit m2 --size 100``, the default sandbox: bubblewrap), each under its own team
name in one fresh database, and reads the totals back from ``ranking --json``: each run's total Op
Time (the ranking's statistic), its standard error and repeats where the record has them, the
1-minute load average as it started, and over the runs (max - min) / mean and stdev / mean.
``--package DIR``: the checkout whose package runs (another branch, for a before/after), by default
this one. A benchmark: it reports, it asserts nothing (docs/benchmarks.md keeps the figures).
"""
import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _cli(package, *args, timeout=1800):
    env = {**os.environ, "PYTHONPATH": str(package)}
    return subprocess.run([sys.executable, "-m", "ece408_op", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout)


def _repeats(db):
    """{team: [{model, n, stopped, min, median, mean, max}]} of the records' repeats (read from the
    SQLite file itself: the package measured may be another checkout's; records without repeats: n=0)."""
    out = {}
    with sqlite3.connect(db) as conn:
        for team, models in conn.execute("SELECT team, models FROM runs"):
            out[team] = []
            for m in json.loads(models):
                ts = m.get("repeats") or []
                out[team].append({"model": m.get("model"), "n": len(ts), "stopped": m.get("stopped"),
                                  **({"min": min(ts), "median": statistics.median(ts), "mean": statistics.fmean(ts),
                                      "max": max(ts)} if ts else {})})
    return out


def run(package, runs=5, size=100, milestone="m2", work=None):
    """{"runs": [{team, op_time, std_error, repeats, seconds}], "spread": {...}} of ``runs`` ranked
    submissions of the template, measured by the package in ``package``."""
    with tempfile.TemporaryDirectory(prefix="ranked-spread-", dir=work) as tmp:
        tmp = Path(tmp)
        made = _cli(package, "init", tmp / "team")
        if made.returncode:
            raise SystemExit(f"init failed: {made.stderr.strip()[-500:]}")
        db = tmp / "runs.db"
        walls, loads = {}, {}
        for i in range(1, runs + 1):
            loads[f"run-{i}"] = round(os.getloadavg()[0], 2)          # the machine's own load, said with the figure
            start = time.monotonic()
            out = _cli(package, "submit", tmp / "team", "--submit", milestone, "--size", size, "--name", f"run-{i}",
                       "--db", db)
            walls[f"run-{i}"] = round(time.monotonic() - start, 1)
            if out.returncode:
                raise SystemExit(f"submission {i} failed: {(out.stdout + out.stderr).strip()[-1500:]}")
            print(f"submission {i}: {walls[f'run-{i}']} s", file=sys.stderr, flush=True)
        board = json.loads(_cli(package, "ranking", "--db", db, "--milestone", milestone, "--size", size,
                                "--json").stdout)
        models = _repeats(db)
    rows = sorted(board["ranking"], key=lambda r: r["team"])
    found = [{"team": r["team"], "op_time": r["op_time"], "std_error": r.get("std_error"),
              "repeats_per_model": r.get("repeats_per_model"), "within_noise_of_above": r.get("within_noise_of_above"),
              "seconds": walls[r["team"]], "load_average": loads[r["team"]], "models": models.get(r["team"])}
             for r in rows]
    totals = [r["op_time"] for r in found]
    # beside the ranking's statistic, what the sum of the models' medians of the same repeats would give
    medians = [sum(m["median"] for m in r["models"] or []) for r in found if all("median" in m for m in r["models"] or [])]
    return {"milestone": milestone, "size": size, "package": str(package), "options": board.get("options"),
            "runs": found, "spread": _spread(totals), "spread_of_median_sums": _spread(medians) if medians else None}


def _spread(totals):
    mean = statistics.fmean(totals)
    return {"mean": mean, "range_over_mean": (max(totals) - min(totals)) / mean,
            "stdev_over_mean": statistics.stdev(totals) / mean if len(totals) > 1 else 0.0}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m ece408_op.bench.ranked_spread", allow_abbrev=False)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--milestone", default="m2")
    parser.add_argument("--package", default=str(Path(__file__).resolve().parents[2]),
                        help="the checkout whose package runs (default: this one)")
    parser.add_argument("--json", help="write the result here too")
    args = parser.parse_args(argv)
    result = run(Path(args.package).resolve(), args.runs, args.size, args.milestone)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
