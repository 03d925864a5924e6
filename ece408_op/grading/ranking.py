"""The course's ranking: teams by their fastest valid total Op Time.

A run is valid when its build succeeded and every model's Correctness equals the value the
reference run (MXNet's built-in Convolution, m1, same model, same N images, same image or host)
gave. Each team appears once, with its best valid run; ties go to the earlier run.
"""
import csv
import io
import json
from dataclasses import dataclass

from .names import printable


@dataclass
class Row:
    rank: int
    team: str
    op_time: float
    models: list
    submitted_at: str
    device: str
    team_files: list                # [{name, sha256, size}] the run measured
    record_id: str
    runs: int                       # every run of this team (valid or not)

    def to_dict(self):
        return {"rank": self.rank, "team": self.team, "op_time": self.op_time,
                "op_times": {str(m.get("model")): m.get("op_time") for m in self.models},
                "correctness": {str(m.get("model")): m.get("correctness") for m in self.models},
                "submitted_at": self.submitted_at, "device": self.device, "team_files": self.team_files,
                "record_id": self.record_id, "runs": self.runs}


def rank(records):
    """[Row] from ``records`` of one milestone and size: valid runs only, one row per team."""
    best, counts = {}, {}
    for record in records:
        counts[record.team] = counts.get(record.team, 0) + 1
        if record.status != "ok" or not record.correct or record.op_time is None:
            continue
        current = best.get(record.team)
        if current is None or (record.op_time, record.created_at) < (current.op_time, current.created_at):
            best[record.team] = record
    ordered = sorted(best.values(), key=lambda r: (r.op_time, r.created_at, r.team))
    return [Row(i, r.team, r.op_time, r.models, r.created_at, r.device, r.team_files, r.id, counts[r.team])
            for i, r in enumerate(ordered, start=1)]


def format_table(rows, milestone, size, excluded):
    if not rows:
        return f"No valid {milestone} run on {size} images yet ({excluded} run(s) not valid)."
    models = list(dict.fromkeys(printable(m.get("model"), 40) for row in rows for m in row.models))
    head = ["rank", "team", "total Op Time (s)", *[f"{m} (s)" for m in models], "device", "submitted (UTC)"]
    body = []
    for row in rows:
        times = {printable(m.get("model"), 40): m.get("op_time") for m in row.models}
        body.append([str(row.rank), printable(row.team, 60), f"{row.op_time:.6f}",
                     *[f"{times[m]:.6f}" if isinstance(times.get(m), (int, float)) else "-" for m in models],
                     printable(row.device or "-", 60), printable(str(row.submitted_at)[:19].replace("T", " "))])
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = [f"Ranking: {milestone}, {size} images ({len(rows)} team(s); {excluded} run(s) not valid)",
             "  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in body]
    return "\n".join(line.rstrip() for line in lines)


def format_csv(rows):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["rank", "team", "op_time", "op_times", "correctness", "submitted_at", "device",
                     "team_files", "record_id", "runs"])
    for row in rows:
        d = row.to_dict()
        writer.writerow([d["rank"], printable(d["team"]), f"{d['op_time']:.6f}", json.dumps(d["op_times"]),
                         json.dumps(d["correctness"]), d["submitted_at"], printable(d["device"] or ""),
                         " ".join(f"{f.get('name')}:{f.get('sha256')}" for f in d["team_files"] or []),
                         d["record_id"], d["runs"]])
    return out.getvalue().rstrip("\n")


def format_json(rows, milestone, size):
    return json.dumps({"milestone": milestone, "size": size, "ranking": [r.to_dict() for r in rows]}, indent=2)


def ranking_report(store, milestone=None, size=None, fmt="table"):
    """The ranking of ``milestone`` on ``size`` images (default: those of the newest record) as
    text: ``fmt`` table, csv or json."""
    if milestone is None or size is None:
        latest = store.latest()
        if latest is None:
            return "No records yet: run 'python -m ece408_op submit --submit m2' first."
        milestone = milestone or latest[0]
        size = size or latest[1]
    records = store.records(milestone=milestone, size=size)
    rows = rank(records)
    if fmt == "csv":
        return format_csv(rows)
    if fmt == "json":
        return format_json(rows, milestone, size)
    excluded = sum(1 for r in records if r.status != "ok" or not r.correct or r.op_time is None)
    return format_table(rows, milestone, size, excluded)
