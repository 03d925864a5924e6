"""The course's ranking: teams by their fastest valid total Op Time.

The total that ranks is the record's ``op_time``: for a run timed by the repeats rule
(``team/repeats.py``), the median of each model's repeat totals, summed over the models (an
option set timed under the earlier rule: the mean, as its options say); each row shows it with
its spread (``0.045100 ± 0.000400 (n=7)``: the standard error of that statistic, the repeats per
model), and a row whose total is within the noise of the row ranked above it
(``repeats.within_noise``: at most 2 combined standard errors apart) is marked ``≈``. A record
from before the repeats has no spread: ``(n=1)``, never marked.

A run is valid when its build succeeded and every model's Correctness equals the value the
reference run (MXNet's built-in Convolution, m1, same model, same N images, same image or host)
gave. Each team appears once, with its best valid run; ties go to the earlier run.

Only runs measured with the same options are compared (``options_key``: the models, the hidden
model, the repeats, the engine; grading/options.py): a total over three models is not a total
over two. Within a milestone and size, the records fall into option sets; one set is ranked (the
newest by default, or the one asked for) and one line names the others and how to choose one.
Records from before options were kept form their own set, ``unrecorded``.

Only runs on the same kind of device are compared (grading/kinds.py: the device's reported name):
a board has one table per kind, each ranked as above on its own (its own newest option set); a
team may appear in several. Runs that reached no device (files refused, a run stopped before it
started) join the table of the board's only kind, or where there are several kinds, no table (a
line counts them). ``device`` picks one kind's table.
"""
import csv
import io
import json
import statistics
from dataclasses import dataclass, replace

from ..errors import Ece408Error
from ..team import repeats as timing
from .kinds import kind_of, resolve
from ..base.names import printable, shown
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
    tie: bool = False               # within the noise of the row ranked above (``mark_ties``)
    statistic: str = timing.STATISTIC   # what op_time is (``statistic_of`` its options)

    @property
    def spread(self):
        """(the standard error of the total, [repeats per model]), or (None, [1]) for a record
        without repeats: from the models, so that rows whose models are read later have it too."""
        found = timing.spread(self.models, self.statistic)
        return (found[1], found[2]) if found else (None, [1])

    def shown_time(self):
        """The total with its spread: ``0.045100 ± 0.000400 (n=7)``; ``n=3-7`` where the models'
        counts differ; ``(n=1)`` without repeats."""
        se, counts = self.spread
        n = str(min(counts)) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"
        return f"{self.op_time:.6f}" + (f" ± {se:.6f}" if se is not None else "") + f" (n={n})"

    def to_dict(self):
        se, counts = self.spread
        return {"rank": self.rank, "team": self.team, "op_time": self.op_time,
                "op_times": {str(m.get("model")): m.get("op_time") for m in self.models},
                "correctness": {str(m.get("model")): m.get("correctness") for m in self.models},
                "submitted_at": self.submitted_at, "device": self.device, "team_files": self.team_files,
                "record_id": self.record_id, "runs": self.runs,
                "statistic": self.statistic if se is not None else None, "std_error": se,
                "repeats_per_model": counts, "within_noise_of_above": self.tie}


def mark_ties(rows):
    """``rows`` (ranked), each marked ``tie`` where its total is within the noise of the row above."""
    previous = None
    for row in rows:
        se = row.spread[0]
        row.tie = previous is not None and timing.within_noise(previous[0], row.op_time, previous[1], se)
        previous = (row.op_time, se)
    return rows


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


def statistic_of(options):
    """The statistic an option set's totals were ranked by (its ``timing`` rule), ``total`` where
    none is recorded."""
    rule = (options or {}).get("timing") if isinstance(options, dict) else None
    found = rule.get("statistic") if isinstance(rule, dict) else None
    return found if found in ("mean", "median") else "total"


@dataclass
class Table:
    """One device kind's ranking of a board (a milestone and size): the option set ranked and its rows."""
    device: str                     # the kind (None: runs that reached no device, or no runs)
    sets: list                      # every OptionSet of this kind's runs
    chosen: OptionSet               # the set ranked (None: no runs)
    rows: list                      # [Row]
    excluded: int                   # runs of the chosen set that are not valid
    others: str                     # the line naming this kind's other option sets, or None

    @property
    def statistic(self):
        """What the ranked set's totals are: its options' statistic (``median``, ``mean`` for sets
        timed under the earlier rule), ``total`` for sets from before the repeats."""
        return statistic_of(self.chosen.options if self.chosen is not None else None)

    @property
    def options(self):
        """The ranked set's options in words, or None (not recorded, or no runs)."""
        return describe_options(self.chosen.options) if self.chosen is not None and self.chosen.options else None

    def best_and_median(self):
        """(the best total Op Time of the table, the median of its teams' best), or (None, None)."""
        times = [r.op_time for r in self.rows]
        return (min(times), statistics.median(times)) if times else (None, None)


@dataclass
class Board:
    """The tables of a milestone and size, one per device kind (``kinds``: every kind of its runs,
    in name order; the tables may be fewer: one kind asked, or an option set some kinds lack)."""
    milestone: str
    size: int
    tables: list
    kinds: list
    loose: int = 0                  # runs that reached no device and are in no table

    @property
    def others(self):
        """The tables' lines naming their other option sets, one a line (None where there are none)."""
        return "\n".join(t.others for t in self.tables if t.others) or None


@dataclass
class Report:
    """The ranking as text, and the lines naming the other option sets (None where there are none)."""
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
    return mark_ties([Row(i, r.team, r.op_time, r.models, r.created_at, r.device, r.team_files, r.id, counts[r.team],
                          statistic=statistic_of(r.options))
                      for i, r in enumerate(ordered, start=1)])


def by_kind(records):
    """([(kind, records)] in the kinds' name order, the kinds, the records in no table) of a
    board's records: runs that reached no device join the only kind's records, else are left out
    (where one of them is valid, which no runner writes, they make a table of their own, last)."""
    groups = {}
    for record in records:
        groups.setdefault(kind_of(record.device), []).append(record)
    loose = groups.pop(None, [])
    kinds = sorted(groups)
    if not kinds:
        return ([(None, loose)] if loose else []), kinds, []
    if len(kinds) == 1 and not any(valid(r) for r in loose):
        merged = sorted(groups[kinds[0]] + loose, key=lambda r: (r.created_at, r.id))
        return [(kinds[0], merged)], kinds, []
    pairs = [(k, groups[k]) for k in kinds]
    if any(valid(r) for r in loose):
        return pairs + [(None, loose)], kinds, []
    return pairs, kinds, loose


def board(records, milestone, size, options=None, exact=False, device=None):
    """The Board of ``records`` (one milestone and size): a table per device kind (only the kind
    ``device`` names, by grading/kinds.py's rule), each ranking its kind's newest option set, or
    the set ``options`` names (a key or its prefix, among the whole board's sets, so that every
    table ranks the same set; kinds without runs of it have no table). ``exact``: ``options`` is
    a whole key, and where no run has it one empty table. RankingError (KindError) where
    ``options`` (``device``) names none or several."""
    groups, kinds, loose = by_kind(records)
    key = None
    if options is not None:
        key = choose_set(option_sets([r for _, rs in groups for r in rs]), options, exact).key
    tables = []
    for kind, rs in groups:
        sets = option_sets(rs)
        chosen = choose_set(sets) if key is None else next((s for s in sets if s.key == key), None)
        if chosen is None:
            continue
        tables.append(Table(kind, sets, chosen, rank(chosen.records), sum(1 for r in chosen.records if not valid(r)),
                            others_line(milestone, size, chosen, sets)))
    if not tables:
        chosen = OptionSet(key, None, []) if key is not None else None
        tables = [Table(None, [], chosen, [], 0, None)]
    found = Board(milestone, size, tables, kinds, len(loose))
    return found if device is None else only(found, device)


def only(found, device):
    """``found`` with the table of the kind ``device`` names only (KindError where it names none
    or several of the board's kinds; an empty table where that kind has no run of the set ranked)."""
    kind = resolve(device, found.kinds)
    tables = [t for t in found.tables if t.device == kind] or [Table(kind, [], None, [], 0, None)]
    return replace(found, tables=tables, loose=0)


def others_line(milestone, size, chosen, sets):
    """One line naming the option sets not shown, or None."""
    others = [s for s in sets if chosen is None or s.key != chosen.key]
    if not others:
        return None
    return (f"Other option sets of {milestone} on {size} images, not compared with these: "
            f"{'; '.join(s.describe() for s in others)}; choose one with: ranking --options KEY")


def format_table(rows, milestone, size, excluded, chosen=None, others=None, device=None):
    """One table as text: its header names the device kind (where there is one) and, for a table
    of no kind, each row its device."""
    lines = []
    if chosen is not None and chosen.options is not None:
        lines.append(f"Options: {describe_options(chosen.options)} (--options {chosen.key})")
    if others:
        lines.append(others)
    where = f" on {printable(device, 80)}" if device else ""
    if not rows:
        return "\n".join([f"No valid {milestone} run on {size} images{where} yet ({excluded} run(s) not valid)."]
                         + lines)
    models = list(dict.fromkeys(printable(m.get("model"), 40) for row in rows for m in row.models))
    column = [] if device else ["device"]
    statistic = statistic_of(chosen.options if chosen is not None else None)
    head = ["rank", "", "team", "total Op Time (s)" if statistic == "total" else f"total Op Time (s, {statistic} ± s.e.)", *[f"{m} (s)" for m in models], *column,
            "submitted (UTC)"]
    body = []
    for row in mark_ties(rows):
        times = {printable(m.get("model"), 40): m.get("op_time") for m in row.models}
        body.append([str(row.rank), "≈" if row.tie else "", shown(row.team), row.shown_time(),
                     *[f"{times[m]:.6f}" if isinstance(times.get(m), (int, float)) else "-" for m in models],
                     *([] if device else [printable(row.device or "-", 60)]),
                     printable(str(row.submitted_at)[:19].replace("T", " "))])
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = [f"Ranking: {milestone}, {size} images{where} ({len(rows)} team(s); {excluded} run(s) not valid)",
             *lines, "  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in body]
    if any(row.tie for row in rows):
        lines.append(f"≈: within the noise of the team above ({timing.NOISE_Z:g} combined standard errors)")
    return "\n".join(line.rstrip() for line in lines)


def format_tables(found):
    """A Board's tables as text, one after the other, and the line counting its runs in no table."""
    blocks = [format_table(t.rows, found.milestone, found.size, t.excluded, t.chosen, t.others, t.device)
              for t in found.tables]
    if found.loose:
        blocks.append(f"{found.loose} run(s) reached no device (files refused, or stopped before the run): not "
                      "valid, in no table")
    return "\n\n".join(blocks)


def csv_cell(value):
    """``value`` as a CSV cell a spreadsheet reads as text: a leading ``= + - @``, tab or carriage
    return (a formula) gets a single quote before it."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def format_csv(rows):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["rank", "team", "op_time", "op_times", "correctness", "submitted_at", "device",
                     "team_files", "record_id", "runs", "std_error", "repeats_per_model", "within_noise_of_above"])
    for row in rows:
        d = row.to_dict()
        writer.writerow([csv_cell(c) for c in (
            d["rank"], shown(d["team"]), f"{d['op_time']:.6f}", json.dumps(d["op_times"]),
            json.dumps(d["correctness"]), d["submitted_at"], printable(d["device"] or ""),
            " ".join(f"{f.get('name')}:{f.get('sha256')}" for f in d["team_files"] or []), d["record_id"], d["runs"],
            "" if d["std_error"] is None else f"{d['std_error']:.6f}", " ".join(map(str, d["repeats_per_model"])),
            int(d["within_noise_of_above"]))])
    return out.getvalue().rstrip("\n")


def table_json(table):
    def entry(s):
        return {"key": s.key, "options": s.options, "runs": len(s.records)}
    chosen = table.chosen
    return {"device": table.device, "options_key": chosen.key if chosen else None,
            "options": chosen.options if chosen else None,
            "other_options": [entry(s) for s in table.sets if chosen is None or s.key != chosen.key],
            "ranking": [r.to_dict() for r in mark_ties(table.rows)]}


def format_json(found):
    """A Board as JSON: ``devices`` (every kind of its runs), ``tables`` (one a kind shown); where
    one table is shown, its fields at the top level too (a class of one kind reads as a single ranking)."""
    tables = [table_json(t) for t in found.tables]
    data = {"milestone": found.milestone, "size": found.size, **(tables[0] if len(tables) == 1 else {}),
            "devices": found.kinds, "tables": tables}
    if found.loose:
        data["runs_without_device"] = found.loose
    return json.dumps(data, indent=2)


def format_board(found, fmt):
    """A Board as ``ranking`` prints it: ``fmt`` table, csv (the tables' rows one after the other,
    ranks counted per kind, the device column telling them apart) or json."""
    if fmt == "csv":
        return format_csv([row for t in found.tables for row in mark_ties(t.rows)])
    if fmt == "json":
        return format_json(found)
    return format_tables(found)


NO_RECORDS = "No records yet: run 'python -m ece408_op submit --submit m2' first."


def no_records(fmt):
    """What the ranking says before the first record: its line, or as JSON (``fmt`` json) an empty
    board holding that line (``note``), so that a reader of the JSON form always gets JSON."""
    if fmt == "json":
        return json.dumps({"milestone": None, "size": None, "devices": [], "tables": [], "note": NO_RECORDS}, indent=2)
    return NO_RECORDS


def ranking_report(store, milestone=None, size=None, fmt="table", options=None, exact=False, device=None):
    """The Report of ``milestone`` on ``size`` images (default: those of the newest record), one
    table per device kind (``device``: that kind's only), each of the option set ``options`` (a
    key or its prefix; default: each kind's newest set): ``fmt`` table, csv or json. ``exact``:
    ``options`` is a whole key (grade's own)."""
    if milestone is None or size is None:
        latest = store.latest()
        if latest is None:
            return Report(no_records(fmt))
        milestone = milestone or latest[0]
        size = size or latest[1]
    found = board(store.records(milestone=milestone, size=size), milestone, size, options, exact, device)
    return Report(format_board(found, fmt), found.others)
