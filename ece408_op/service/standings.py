"""The ranking as the pages show it, by the rules of ``ranking`` (grading/ranking.py, through
runs.py): per milestone and size, a table per device kind; in each, the records fall into option
sets, the newest set is ranked, each team once with its fastest valid total Op Time (ties to the
earlier run).

What differs from ``ranking`` is only how the rows are read and named:

- records are read without their transcripts (``light_records``): a ranking of 10,000 runs
  reads their numbers, not their megabytes of output;
- a board (grading's ``Board``: one ``Table`` of ranked rows per device kind) is computed once
  and then named for each viewer (``named``): the instructor sees every name; a team sees its own
  name and, where the instructor chose so, pseudonyms for the others (choices.py);
- the instructor's CSV (``graded_csv``) is one kind's table, with every team of the class without
  a valid run on that kind and, as an option, the course's grade rule: full credit at or below one
  Op Time, none at or above another, linear in between, by the kind the instructor chose for the
  grade. Its cells are neutralised as ``ranking --csv`` does (``csv_cell``).
"""
import csv
import io
import json
import math
from dataclasses import dataclass, replace

from ..base.names import printable, shown
from .grading_door import RECORD_COLUMNS, Record, csv_cell, format_board, format_csv, make_board, mark_ties, only

LIGHT = ", ".join("'' AS transcript" if c == "transcript" else c for c in RECORD_COLUMNS)


def record_teams(team):
    """The names a service team's records carry: exactly its stored name (the worker's record is
    refused unless its team is the job's), as a list for ``IN (...)`` queries."""
    return [team]


def light_records(db, milestone=None, size=None, team=None, ids=None):
    """The records (``Record``, transcript left out) of a milestone, size and team, or those of
    ``ids``; oldest first. A row that cannot be read is skipped, as the store skips it."""
    where, params = [], []
    for column, value in (("milestone", milestone), ("size", size), ("team", team)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if ids is not None:
        ids = list(ids)
        if not ids:
            return []
        where.append(f"id IN ({', '.join('?' * len(ids))})")
        params += ids
    sql = f"SELECT {LIGHT} FROM runs" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY created_at, id"
    with db.transaction(write=False) as tx:
        rows = tx.all(sql, params)
    out = []
    for row in rows:
        try:
            out.append(Record.from_row(row))
        except (ValueError, TypeError, KeyError):
            continue
    return out


def boards(db):
    """[(milestone, size, runs)] that have records, the newest board first."""
    with db.transaction(write=False) as tx:
        rows = tx.all("SELECT milestone, size, COUNT(*), MAX(created_at) FROM runs GROUP BY milestone, size "
                      "ORDER BY MAX(created_at) DESC, milestone, size")
    return [(m, int(s), int(n)) for m, s, n, _ in rows]


def team_boards(db, team):
    """[(milestone, size, runs)] of the boards where ``team`` has records (under the names
    ``record_teams`` gives), by milestone and size."""
    names = record_teams(team)
    with db.transaction(write=False) as tx:
        rows = tx.all(f"SELECT milestone, size, COUNT(*) FROM runs WHERE team IN ({', '.join('?' * len(names))}) "
                      "GROUP BY milestone, size ORDER BY milestone, size", tuple(names))
    return [(m, int(s), int(n)) for m, s, n in rows]


RANKED = ("id", "created_at", "team", "milestone", "size", "status", "op_time", "correct", "device", "options_key")


def ranking_records(db, milestone, size, known=None):
    """The records of a board with what ranking them reads (``RANKED``: no JSON column, so nothing
    to decode), in the store's order (created_at, id); their models, files and options are left
    empty (``standing`` fills what it shows). A row whose Op Time or size is not of its type is
    skipped, as the store skips it. ``known`` {id: Record}, kept by the caller between calls: only
    the rows not in it are read (records are never changed once stored)."""
    known = {} if known is None else known
    with db.transaction(write=False) as tx:
        if not known:                                           # the first time: the board in one read
            rows = tx.all(f"SELECT {', '.join(RANKED)} FROM runs WHERE milestone = ? AND size = ?", (milestone, size))
            ids = [r[0] for r in rows]
        else:
            ids = [r[0] for r in tx.all("SELECT id FROM runs WHERE milestone = ? AND size = ?", (milestone, size))]
            new = [i for i in ids if i not in known]
            rows = []
            for start in range(0, len(new), 500):
                part = new[start:start + 500]
                rows += tx.all(f"SELECT {', '.join(RANKED)} FROM runs WHERE id IN ({', '.join('?' * len(part))})",
                               part)
    for record in _ranked(rows):
        known[record.id] = record
    present = set(ids)
    return sorted((r for i, r in known.items() if i in present), key=lambda r: (r.created_at, r.id))


def _ranked(rows):
    out = []
    for row in rows:
        values = dict(zip(RANKED, row))
        op_time = values["op_time"]
        if op_time is not None and (not isinstance(op_time, (int, float)) or not math.isfinite(op_time)):
            continue
        if not isinstance(values["size"], int) or not isinstance(values["team"], str):
            continue
        values["correct"] = bool(values["correct"])
        out.append(Record(**values))
    return out


def _decoded(text, kind):
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return value if isinstance(value, kind) else None


def board(db, milestone, size, known=None):
    """The Board of ``milestone`` on ``size`` images (grading's: a Table per device kind, each its
    kind's newest option set), ranked by grading's own steps; the options of each set and the
    models and files of the ranked runs are read here (a few hundred rows, not the board's
    thousands). ``known``: see ``ranking_records``."""
    records = ranking_records(db, milestone, size, known)
    unread = {}
    for record in records:
        if record.options_key and record.options is None:
            unread.setdefault(record.options_key, []).append(record)
    with db.transaction(write=False) as tx:
        for group in unread.values():
            options = _decoded(tx.value("SELECT options FROM runs WHERE id = ?", (group[0].id,)), dict)
            for record in group:
                record.options = options
    found = make_board(records, milestone, size)
    rows = [row for table in found.tables for row in table.rows]
    ids = [r.record_id for r in rows]
    read = {}
    with db.transaction(write=False) as tx:
        for i in range(0, len(ids), 500):
            part = ids[i:i + 500]
            read.update((rid, (models, files)) for rid, models, files in tx.all(
                f"SELECT id, models, team_files FROM runs WHERE id IN ({', '.join('?' * len(part))})", part))
    for row in rows:
        models, files = read.get(row.record_id, (None, None))
        row.models = [m for m in _decoded(models, list) or [] if isinstance(m, dict)]
        row.team_files = _decoded(files, list) or []
    for table in found.tables:
        mark_ties(table.rows)                   # the spreads are in the models just read
    return found


def table_of(found, kind=None):
    """The Table of ``found`` whose device kind is ``kind`` (a page's default: the kind chosen for
    the milestone's grade), else its first."""
    for table in found.tables:
        if table.device == kind:
            return table
    return found.tables[0]


@dataclass
class Layers:
    """One model of a run: its Op Time per layer, their total, its Correctness and the expected one."""
    model: str
    times: list
    total: float
    correctness: float
    expected: float

    @property
    def correct(self):
        return self.correctness is not None and self.correctness == self.expected


@dataclass
class Shown:
    """A row as one viewer sees it."""
    row: object                      # grading's Row, its team as shown to this viewer
    own: bool                        # the viewer's own team
    layers: list                     # [Layers] of its models
    cells: list = None               # its Layers under each of the table's model columns (None: none)


def class_names(roster):
    """{a record's team: the class's name of that team}: records carry the stored names, so none
    differ (kept for callers that map names)."""
    return {}


def named(rows, viewer=None, pseudonyms=None, names=None):
    """[Shown] of ``rows`` for ``viewer`` (a team's name; None: the instructor): each team under its
    name in the class (``names``: ``class_names``; escaped by ``shown``), or its pseudonym from
    ``pseudonyms`` {record's team: pseudonym} for every team but the viewer's."""
    out = []
    mine = set(record_teams(viewer)) if viewer is not None else set()
    names = names or {}
    for row in rows:
        own = row.team in mine
        name = names.get(row.team, row.team) if own or not pseudonyms else pseudonyms.get(row.team, "Team ?")
        out.append(Shown(replace(row, team=shown(name)), own, layers_of(row.models)))
    return out


def layers_of(models):
    """[Layers] of a record's ``models`` (what a team's run stored; numbers checked, names escaped)."""
    def number(v):
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    out = []
    for m in models or []:
        if not isinstance(m, dict):
            continue
        raw = m.get("op_times")
        times = [t for t in raw if number(t) is not None] if isinstance(raw, list) else []
        total = number(m.get("op_time"))
        out.append(Layers(printable(m.get("model"), 40), times, total if total is not None else
                          (sum(times) if times else None), number(m.get("correctness")), number(m.get("expected"))))
    return out


def team_table(found, team, preferred=None):
    """The Table a team's plot of the board draws: that of the kind ``preferred`` (the kind its
    grade counts) where the team ran on it, else that of the kind of the team's newest run, else
    the board's first."""
    names = set(record_teams(team))
    ran = [t for t in found.tables if t.chosen and any(r.team in names for r in t.chosen.records)]
    for table in ran:
        if table.device == preferred:
            return table
    if ran:
        return max(ran, key=lambda t: max(r.created_at for r in t.chosen.records if r.team in names))
    return found.tables[0]


def report(found, fmt, viewer=None, pseudonyms=None, device=None):
    """The ranking as ``ranking`` prints it (``fmt`` table, csv or json; ``device``: one kind's
    table, as ``ranking --device`` picks it), named for ``viewer``."""
    if device is not None:
        found = only(found, device)
    if pseudonyms:
        found = replace(found, tables=[replace(t, rows=[s.row for s in named(t.rows, viewer, pseudonyms)])
                                       for t in found.tables])
    return format_board(found, fmt)


def grade(op_time, full, zero):
    """The course's rule, in percent: 100 at or below ``full`` seconds, 0 at or above ``zero``,
    linear in between; 0 without a valid run."""
    if op_time is None:
        return 0.0
    if op_time <= full:
        return 100.0
    if op_time >= zero:
        return 0.0
    return round(100.0 * (zero - op_time) / (zero - full), 2)


def graded_csv(st, roster, full=None, zero=None):
    """The instructor's export of one device kind's Table ``st``: ``ranking --csv``'s columns, then
    every team of ``roster`` without a valid run on it (rank and Op Time empty); with ``full`` and
    ``zero`` (seconds) a last column, the grade in percent by the course's linear rule. Every cell
    neutralised by ``csv_cell``."""
    rule = full is not None and zero is not None
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    head = next(csv.reader(io.StringIO(format_csv([]))))
    writer.writerow(head + (["grade_percent"] if rule else []))
    names = class_names(roster)
    rows = [replace(r, team=names.get(r.team, r.team)) for r in st.rows]
    body = list(csv.reader(io.StringIO(format_csv(rows))))[1:]
    for row, line in zip(rows, body):
        writer.writerow(line + ([csv_cell(f"{grade(row.op_time, full, zero):.2f}")] if rule else []))
    ranked = {r.team for r in rows}
    for team in sorted(set(roster) - ranked):
        cells = ["", shown(team)] + [""] * (len(head) - 2)
        writer.writerow([csv_cell(c) for c in cells] + ([csv_cell(f"{0.0:.2f}")] if rule else []))
    return out.getvalue()
