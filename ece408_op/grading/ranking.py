"""The course's ranking: teams by their fastest valid total Op Time.

A run is valid when its build succeeded and every model's Correctness equals the value the
reference run (MXNet's built-in Convolution, m1, same model, same N images, same image or host)
gave. Each team appears once, with its best valid run; ties go to the earlier run.

Only runs measured with the same options are compared (``options_key``: the models, the hidden
model, the repeats, the engine; grading/options.py): a total over three models is not a total
over two. Within a milestone and size, the records fall into option sets; one set is ranked (the
newest by default, or the one asked for) and one line names the others and how to choose one.
Records from before options were kept form their own set, ``unrecorded``.
"""
import csv
import io
import json
from dataclasses import dataclass

from ..errors import Ece408Error
from .names import printable, shown
from .options import describe_options

UNRECORDED = "unrecorded"          # the key of the records stored without options (before migration 3)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")     # what a spreadsheet may read as a formula


class RankingError(Ece408Error):
    """The option set asked for is not there (or its key prefix names several)."""


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
    runs: int                       # every run of this team with these options (valid or not)

    def to_dict(self):
        return {"rank": self.rank, "team": self.team, "op_time": self.op_time,
                "op_times": {str(m.get("model")): m.get("op_time") for m in self.models},
                "correctness": {str(m.get("model")): m.get("correctness") for m in self.models},
                "submitted_at": self.submitted_at, "device": self.device, "team_files": self.team_files,
                "record_id": self.record_id, "runs": self.runs}


@dataclass
class OptionSet:
    """The runs of one milestone and size measured with the same options."""
    key: str
    options: dict                   # None: not recorded
    records: list

    @property
    def newest(self):
        return max((r.created_at for r in self.records), default="")

    def describe(self):
        return f"{self.key} ({describe_options(self.options)}; {len(self.records)} run(s))"


@dataclass
class Report:
    """The ranking as text, and the line naming the other option sets (None where there are none)."""
    text: str
    others: str = None


def valid(record):
    return record.status == "ok" and record.correct and record.op_time is not None


def key_of(record):
    return record.options_key or UNRECORDED


def option_sets(records):
    """[OptionSet] of ``records`` (one milestone and size), the newest first."""
    sets = {}
    for record in records:
        key = key_of(record)
        if key not in sets:
            sets[key] = OptionSet(key, record.options if record.options_key else None, [])
        sets[key].records.append(record)
    return sorted(sets.values(), key=lambda s: (s.newest, s.key), reverse=True)


def choose_set(sets, wanted=None, exact=False):
    """The set whose key is (or starts with) ``wanted``; the newest where None; RankingError
    where ``wanted`` names none or several. ``exact``: ``wanted`` is a whole key, and an empty
    set where no run has it (grade's own options, before any record of them)."""
    if wanted is None:
        return sets[0] if sets else None
    found = [s for s in sets if s.key == wanted]
    if exact:
        return found[0] if found else OptionSet(wanted, None, [])
    found = found or [s for s in sets if s.key.startswith(wanted)]
    if len(found) == 1:
        return found[0]
    listed = "; ".join(s.describe() for s in sets) or "none"
    what = "names several option sets" if found else "is not an option set of these runs"
    raise RankingError(f"--options {printable(wanted, 40)} {what}; the sets: {listed}")


def rank(records):
    """[Row] from ``records`` of one milestone, size and option set: valid runs only, one row per team."""
    best, counts = {}, {}
    for record in records:
        counts[record.team] = counts.get(record.team, 0) + 1
        if not valid(record):
            continue
        current = best.get(record.team)
        if current is None or (record.op_time, record.created_at) < (current.op_time, current.created_at):
            best[record.team] = record
    ordered = sorted(best.values(), key=lambda r: (r.op_time, r.created_at, r.team))
    return [Row(i, r.team, r.op_time, r.models, r.created_at, r.device, r.team_files, r.id, counts[r.team])
            for i, r in enumerate(ordered, start=1)]


def others_line(milestone, size, chosen, sets):
    """One line naming the option sets not shown, or None."""
    others = [s for s in sets if chosen is None or s.key != chosen.key]
    if not others:
        return None
    return (f"Other option sets of {milestone} on {size} images, not compared with these: "
            f"{'; '.join(s.describe() for s in others)}; choose one with: ranking --options KEY")


def format_table(rows, milestone, size, excluded, chosen=None, others=None):
    lines = []
    if chosen is not None and chosen.options is not None:
        lines.append(f"Options: {describe_options(chosen.options)} (--options {chosen.key})")
    if others:
        lines.append(others)
    if not rows:
        return "\n".join([f"No valid {milestone} run on {size} images yet ({excluded} run(s) not valid)."] + lines)
    models = list(dict.fromkeys(printable(m.get("model"), 40) for row in rows for m in row.models))
    head = ["rank", "team", "total Op Time (s)", *[f"{m} (s)" for m in models], "device", "submitted (UTC)"]
    body = []
    for row in rows:
        times = {printable(m.get("model"), 40): m.get("op_time") for m in row.models}
        body.append([str(row.rank), shown(row.team), f"{row.op_time:.6f}",
                     *[f"{times[m]:.6f}" if isinstance(times.get(m), (int, float)) else "-" for m in models],
                     printable(row.device or "-", 60), printable(str(row.submitted_at)[:19].replace("T", " "))])
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = [f"Ranking: {milestone}, {size} images ({len(rows)} team(s); {excluded} run(s) not valid)", *lines,
             "  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in body]
    return "\n".join(line.rstrip() for line in lines)


def csv_cell(value):
    """``value`` as a CSV cell a spreadsheet reads as text: a leading ``= + - @``, tab or carriage
    return (a formula) gets a single quote before it."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def format_csv(rows):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["rank", "team", "op_time", "op_times", "correctness", "submitted_at", "device",
                     "team_files", "record_id", "runs"])
    for row in rows:
        d = row.to_dict()
        writer.writerow([csv_cell(c) for c in (
            d["rank"], shown(d["team"]), f"{d['op_time']:.6f}", json.dumps(d["op_times"]),
            json.dumps(d["correctness"]), d["submitted_at"], printable(d["device"] or ""),
            " ".join(f"{f.get('name')}:{f.get('sha256')}" for f in d["team_files"] or []), d["record_id"], d["runs"])])
    return out.getvalue().rstrip("\n")


def format_json(rows, milestone, size, chosen=None, sets=()):
    def entry(s):
        return {"key": s.key, "options": s.options, "runs": len(s.records)}
    return json.dumps({"milestone": milestone, "size": size,
                       "options_key": chosen.key if chosen else None,
                       "options": chosen.options if chosen else None,
                       "other_options": [entry(s) for s in sets if chosen is None or s.key != chosen.key],
                       "ranking": [r.to_dict() for r in rows]}, indent=2)


def ranking_report(store, milestone=None, size=None, fmt="table", options=None, exact=False):
    """The Report of ``milestone`` on ``size`` images (default: those of the newest record), runs
    of the option set ``options`` (a key or its prefix; default: the newest set) only: ``fmt``
    table, csv or json. ``exact``: ``options`` is a whole key (grade's own)."""
    if milestone is None or size is None:
        latest = store.latest()
        if latest is None:
            return Report("No records yet: run 'python -m ece408_op submit --submit m2' first.")
        milestone = milestone or latest[0]
        size = size or latest[1]
    sets = option_sets(store.records(milestone=milestone, size=size))
    chosen = choose_set(sets, options, exact)
    records = chosen.records if chosen else []
    rows = rank(records)
    others = others_line(milestone, size, chosen, sets)
    if fmt == "csv":
        return Report(format_csv(rows), others)
    if fmt == "json":
        return Report(format_json(rows, milestone, size, chosen, sets), others)
    excluded = sum(1 for r in records if not valid(r))
    return Report(format_table(rows, milestone, size, excluded, chosen, others), others)
