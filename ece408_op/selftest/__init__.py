"""``python -m ece408_op selftest``: every bad input and fault of the reliability table tried
in temporary folders and fresh processes, then the load figures; the report and its claims.

    faults.py   loopback servers that misbehave, small data sets, broken checkpoints, processes
    cases.py    the table's rows: how each case is set up and run, and what it must print
    verdict.py  a case's problems against what it must do, and what the user got, in one line
    load.py     1,000 inferences in one process (memory before/after), threads with own executors

A layer above ``mx`` (it runs the network for the load figures) and below ``cli``. Nothing
here touches the user's cache: every command runs with ``XDG_CACHE_HOME`` and ``TMPDIR`` in
a temporary folder.
"""
import time

from . import cases as case_table
from .verdict import judge, what_the_user_gets
from . import faults
from .load import load_figures

HOST_GROWTH_LIMIT_MIB = 32.0        # host memory growth allowed over the repeated inferences
DEVICE_GROWTH_LIMIT_MIB = 16.0


def run_cases(only=None, progress=None):
    """Run the table's cases (those whose title matches the regex ``only``); returns the rows."""
    import re
    selected = [c for c in case_table.cases() if only is None or re.search(only, c.title)]
    rows = []
    with faults.temporary_folder("ece408-selftest-fixtures-") as fixtures:
        shared = case_table.Shared(fixtures)
        for number, case in enumerate(selected, 1):
            if progress:
                progress(f"[{number}/{len(selected)}] {case.title}")
            with faults.temporary_folder() as home:
                ctx = case_table.Context(home, shared)
                row = {"group": case.group, "case": case.title}
                try:
                    result = case.run(ctx)
                except case_table.Skip as exc:
                    rows.append({**row, "skipped": str(exc), "ok": True})
                    continue
                problems = judge(case, result, ctx)
                rows.append({**row, "got": what_the_user_gets(result, ctx), "status": result.status,
                             "seconds": round(result.seconds, 1), "ok": not problems, "problems": problems})
    return rows


def run_selftest(device="cpu", inferences=1000, threads=8, runs=20, only=None, load=True, progress=None):
    """The whole report: rows, load figures (CPU; and GPU with ``device='gpu'``), claims checked."""
    start = time.monotonic()
    report = {"rows": run_cases(only, progress), "load": []}
    if load:
        for path in (["cpu", "gpu"] if device == "gpu" else ["cpu"]):
            if progress:
                progress(f"load figures, {path} path: {inferences} inferences, {threads} threads x {runs} runs")
            report["load"].append(load_figures(path, inferences, threads, runs))
    report["seconds"] = round(time.monotonic() - start, 1)
    report["problems"] = check_claims(report)
    return report


def check_claims(report):
    """Every claim the report makes, checked again from its figures: a list of what fails."""
    problems = []
    for row in report["rows"]:
        if "skipped" in row:
            continue
        if not row["ok"] or row.get("problems"):
            problems.append(f"{row['case']}: {'; '.join(row.get('problems') or ['failed'])}")
        elif row["status"] == -1 or "Traceback" in row["got"]:
            problems.append(f"{row['case']}: hung or printed a traceback")
    for figures in report["load"]:
        if "skipped" in figures:
            continue
        device = figures["device"]
        repeated, threads = figures["repeated"], figures["threads"]
        if repeated["identical"] != repeated["inferences"]:
            problems.append(f"{device}: {repeated['inferences'] - repeated['identical']} of "
                            f"{repeated['inferences']} repeated inferences differ from the first")
        if repeated["host_rss_growth_mib"] > HOST_GROWTH_LIMIT_MIB:
            problems.append(f"{device}: host memory grew {repeated['host_rss_growth_mib']} MiB "
                            f"over {repeated['inferences']} inferences (limit {HOST_GROWTH_LIMIT_MIB})")
        if repeated.get("device_growth_mib", 0) > DEVICE_GROWTH_LIMIT_MIB:
            problems.append(f"{device}: device memory grew {repeated['device_growth_mib']} MiB "
                            f"(limit {DEVICE_GROWTH_LIMIT_MIB})")
        if threads["errors"] or threads["identical"] != threads["expected"]:
            problems.append(f"{device}: {threads['identical']} of {threads['expected']} threaded results identical "
                            f"to the single-threaded run; errors: {threads['errors'][:2]}")
    return problems


def format_report(report):
    """The report as Markdown: the table, then the load figures."""
    lines = ["| # | failure class | bad input or fault | what the user gets now | exit |",
             "| --- | --- | --- | --- | --- |"]
    for number, row in enumerate(report["rows"], 1):
        if "skipped" in row:
            got, status = f"skipped here: {row['skipped']}", ""
        else:
            got = row["got"] if row["ok"] else f"**FAILED** ({'; '.join(row['problems'])}): {row['got']}"
            status = str(row["status"])
        cell, title = got.replace("|", "\\|").replace("`", "'"), row["case"].replace("|", "\\|")
        lines.append(f"| {number} | {row['group']} | {title} | `{cell}` | {status} |")
    for figures in report["load"]:
        lines.append("")
        if "skipped" in figures:
            lines.append(f"Load figures, {figures['device'].upper()} path: skipped ({figures['skipped']})")
            continue
        repeated, threads = figures["repeated"], figures["threads"]
        where = f" on {figures['gpu']}" if "gpu" in figures else ""
        lines.append(f"Load figures, {figures['device'].upper()} path{where} (ece408-high with ece408_conv, "
                     f"batch of {figures['batch']}: {figures['data']}):")
        lines.append("")
        lines.append(f"- {repeated['inferences']} inferences in one process, one executor: "
                     f"{repeated['seconds']} s; host RSS {repeated['host_rss_mib_before']} MiB before, "
                     f"{repeated['host_rss_mib_after']} MiB after ({repeated['host_rss_growth_mib']:+} MiB)"
                     + (f"; device memory in use {repeated['device_mib_before']} MiB before, "
                        f"{repeated['device_mib_after']} MiB after ({repeated['device_growth_mib']:+} MiB)"
                        if "device_growth_mib" in repeated else "")
                     + f"; {repeated['identical']} of {repeated['inferences']} outputs identical to the first.")
        lines.append(f"- {threads['threads']} threads, each binding its own executor and running "
                     f"{threads['runs_per_thread']} inferences at once: {threads['identical']} of "
                     f"{threads['expected']} outputs identical (bit for bit) to the single-threaded run; "
                     f"{len(threads['errors'])} errors; {threads['seconds']} s.")
    passed = sum(1 for row in report["rows"] if row["ok"] and "skipped" not in row)
    skipped = sum(1 for row in report["rows"] if "skipped" in row)
    lines += ["", f"{passed} of {len(report['rows'])} cases as required, {skipped} skipped, "
                  f"{len(report['problems'])} problems; {report['seconds']} s in all."]
    return "\n".join(lines)
