"""A ranked run's repeats (team/repeats.py, TeamRuntime.time_model) and how the ranking reads them:
the stopping rule on synthetic samples, the repeats a runtime times (fresh inputs, every one
checked), and the ranking's spread and ties within noise from records in a SQLite store, old
records without repeats among them."""
import json
import math
from statistics import median as statistics_median

import numpy as np
import pytest

from teams import PLAIN, REPLAY, cli, team_project

from ece408_op.grading.options import describe_options, options_key, run_options
from ece408_op.grading.ranking import board, format_board, rank
from ece408_op.grading.store import Record, open_store
from ece408_op.grading.transcript import ModelResult
from ece408_op.team import repeats
from ece408_op.team.checks import CheckError
from ece408_op.team.runtime import TeamRuntime


# ---------------------------------------------------------------------------- the stopping rule

def test_the_rule_never_stops_before_the_minimum():
    assert repeats.MIN_REPEATS == 3
    for n in range(repeats.MIN_REPEATS):
        assert repeats.stop_reason([0.05] * n, timed_s=1e6, wall_s=1e6) is None      # not even past the caps
    assert repeats.stop_reason([0.05] * 3, timed_s=repeats.MIN_TIMED_S) == "bound"   # identical: no error
    assert repeats.stop_reason([0.05] * 3, timed_s=repeats.MIN_TIMED_S - 0.01) is None   # not before 2 s of work


def test_the_rule_stops_under_the_bound_and_goes_on_above_it():
    noisy = [0.04, 0.06, 0.05]                                        # RSE 11.5%
    assert repeats.relative_error(noisy) > repeats.TARGET_RSE and repeats.stop_reason(noisy) is None
    steady = [0.050, 0.0501, 0.0499, 0.0502]                          # RSE 0.2%
    assert repeats.relative_error(steady) < repeats.TARGET_RSE and repeats.stop_reason(steady, timed_s=repeats.MIN_TIMED_S) == "bound"
    just_over = [1.0, 1.0 + 2 * math.sqrt(3) * 0.0101]                # two samples: never read
    assert repeats.stop_reason(just_over) is None


def test_the_rule_stops_at_the_maximum_and_at_the_caps():
    alternating = [0.04 if i % 2 else 0.06 for i in range(repeats.MAX_REPEATS)]   # the median's RSE 10%: never under
    assert repeats.relative_error(alternating) > repeats.TARGET_RSE
    assert repeats.stop_reason(alternating[:-1]) is None
    assert repeats.stop_reason(alternating) == "max"
    assert repeats.stop_reason(alternating[:5], timed_s=repeats.TIME_CAP_S) == "cap"
    assert repeats.stop_reason(alternating[:5], timed_s=repeats.TIME_CAP_S - 0.1) is None
    assert repeats.stop_reason(alternating[:5], wall_s=repeats.WALL_CAP_S) == "wall"
    assert (repeats.MAX_REPEATS, repeats.TIME_CAP_S, repeats.TARGET_RSE) == (1000, 10.0, 0.01)


def test_an_interrupted_repeat_moves_neither_the_figure_nor_the_bound():
    """The median and its order-statistic error: three repeats in a hundred that the scheduler
    stretched tenfold leave the figure and the stop where they were; the mean would move by 27%."""
    rng = np.random.default_rng(7)
    quiet = list(0.010 * (1 + 0.01 * rng.standard_normal(100)))
    spiked = quiet[:97] + [0.1, 0.1, 0.1]
    assert statistics_median(spiked) == pytest.approx(statistics_median(quiet), rel=0.002)
    assert sum(spiked) / 100 > 1.25 * sum(quiet) / 100
    assert repeats.relative_error(spiked) < repeats.TARGET_RSE and repeats.stop_reason(spiked, timed_s=repeats.MIN_TIMED_S) == "bound"
    se = repeats.median_error(quiet)
    assert 0.4 * 1.25e-5 < se < 2.5 * 1.25e-5            # about 1.25 sigma / sqrt(n) for a normal sample
    assert repeats.median_error([0.05, 0.05]) == math.inf and repeats.median_error([0.05] * 3) == 0.0


def test_the_rule_stops_inside_the_jobs_time_limit():
    alternating = [0.04, 0.06] * 3
    assert repeats.stop_reason(alternating, wall_s=4.0, budget_s=4.0) == "limit"
    assert repeats.stop_reason(alternating, wall_s=3.9, budget_s=4.0) is None
    assert repeats.stop_reason(alternating[:2], wall_s=1e6, budget_s=0.0) is None      # the minimum, whatever the budget
    assert repeats.budget(None, 3, 10.0) == math.inf                                   # no limit: the caps alone
    # 40 s left, one model after this one, which took 5 s: 90% of 40 - 3 (margin) - 2 x 5 reserved, shared by two
    share, margin = repeats.LIMIT_SHARE, repeats.LIMIT_MARGIN_S
    assert repeats.budget(40.0, 1, 5.0) == pytest.approx((share * 40.0 - margin - 10.0) / 2)
    assert repeats.budget(40.0, 0, 5.0) == pytest.approx(share * 40.0 - margin)         # the last model: all of it
    assert repeats.budget(5.0, 2, 5.0) == 0.0                                          # nothing to spare: never negative


def test_spread_and_noise_of_synthetic_totals():
    models = [{"repeats": [0.02, 0.021, 0.019]}, {"repeats": [0.03, 0.03, 0.03, 0.03]}]
    mean, se, counts = repeats.spread(models)
    assert mean == pytest.approx(0.05) and se == pytest.approx(0.002 / (2 * repeats.CI_Z)) and counts == [3, 4]
    # a record timed under the earlier rule (the mean): its own figure and error
    assert repeats.spread(models, "mean") == (pytest.approx(0.05), pytest.approx(0.001 / math.sqrt(3)), [3, 4])
    assert repeats.spread([{"op_times": [0.05]}]) is None                     # a record from before the repeats
    assert repeats.spread([{"repeats": ["0.1", 0.2]}]) is None                # not numbers: unread, never a crash
    assert repeats.spread([{"repeats": [0.05]}, {"repeats": [0.02, 0.03]}]) == (pytest.approx(0.075), None, [1, 2])
    assert repeats.within_noise(0.050, 0.051, 0.0004, 0.0004) and not repeats.within_noise(0.050, 0.053, 0.0004, 0.0004)
    assert not repeats.within_noise(0.050, 0.050, None, 0.0004)               # unknown noise: never a tie


def test_a_model_s_figure_is_the_mean_of_its_repeats():
    result = ModelResult("ece408-high", [0.02, 0.03], 0.9, 0.9, repeats=[0.05, 0.06, 0.07], stopped="bound")
    assert result.op_time == pytest.approx(0.06) and result.to_dict()["repeats"] == [0.05, 0.06, 0.07]
    assert ModelResult("ece408-high", [0.02, 0.03], 0.9, 0.9).op_time == pytest.approx(0.05)     # none: the sum


def test_the_rule_is_in_the_options_of_a_ranked_run():
    options = run_options("m2", 100, engine="bubblewrap")
    assert options["timing"] == repeats.rule()
    assert describe_options(options).endswith(", ranked by the median of 3-1000 repeats (to 1% relative error or 10 s)")
    older = {k: v for k, v in options.items() if k != "timing"}
    assert options_key(older) != options_key(options) and "ranked by" not in describe_options(older)


# ---------------------------------------------------------------------------- the runtime's repeats

def _two_layers(team, stop=repeats.stop_reason, **kwargs):
    rng = np.random.default_rng(1)
    calls = [((6, 2, 9, 10), (3, 2, 3, 3)), ((6, 3, 7, 8), (4, 3, 2, 2))]
    runtime = TeamRuntime(team, repeats=1, **kwargs)
    with runtime.held():
        with runtime:
            for x_shape, k_shape in calls:
                x = rng.random(x_shape, dtype=np.float32)
                k = rng.standard_normal(k_shape).astype(np.float32)
                out = np.empty((x_shape[0], k_shape[0], x_shape[2] - k_shape[2] + 1, x_shape[3] - k_shape[3] + 1),
                               np.float32)
                runtime.forward_cpu(out, x, k)
        assert runtime.workers                                    # kept past the milestone's block
        timing = runtime.time_model(stop=stop)
    assert not runtime.workers                                    # stopped when the held block ends
    return timing, runtime.layers


def test_the_runtime_repeats_every_layer_on_fresh_inputs_until_the_rule_stops(tmp_path):
    team = team_project(tmp_path / "team", cpu=PLAIN)
    asked = []

    def five(totals, timed, wall):
        asked.append((list(totals), timed))
        return "five" if len(totals) == 5 else None
    timing, layers = _two_layers(team, stop=five)
    assert timing["stopped"] == "five" and len(timing["totals"]) == 5
    assert [len(a[0]) for a in asked] == [0, 1, 2, 3, 4, 5] and asked[-1][1] == pytest.approx(sum(timing["totals"]))
    assert all(len(layer["repeats"]) == 5 and len(layer["fresh"]) == 1 for layer in layers)
    for i, total in enumerate(timing["totals"]):
        assert total == pytest.approx(sum(layer["repeats"][i] for layer in layers))
    start, end = timing["window"]
    assert start <= end and end - start < 600


def test_the_default_rule_times_at_least_the_minimum(tmp_path):
    team = team_project(tmp_path / "team", cpu=PLAIN)
    timing, layers = _two_layers(team)
    assert repeats.MIN_REPEATS <= len(timing["totals"]) <= repeats.MAX_REPEATS
    assert timing["stopped"] in ("bound", "cap", "wall", "max", "limit")
    assert timing["stopped"] != "bound" or repeats.relative_error(timing["totals"]) < repeats.TARGET_RSE


# honest for its first three calls (the untimed warm-up, the fresh run, the network's input), then idle
LATE_CHEAT = PLAIN.replace("def forward(y, x, k):\n", """CALLS = [0]


def forward(y, x, k):
    CALLS[0] += 1
    if CALLS[0] > 3:
        return
""")


def test_a_repeat_is_checked_like_every_timed_run(tmp_path):
    """A forward that passes the course's runs and stops computing afterwards is caught in the
    repeat where it stops; a replayed output too."""
    assert LATE_CHEAT != PLAIN
    team = team_project(tmp_path / "late", cpu=LATE_CHEAT)
    rng = np.random.default_rng(1)
    x = rng.random((6, 2, 9, 10), dtype=np.float32)
    k = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    runtime = TeamRuntime(team, repeats=1)
    with runtime.held():
        with runtime:
            runtime.forward_cpu(np.empty((6, 3, 7, 8), np.float32), x, k)    # passes its checks
        with pytest.raises(CheckError, match=r"layer 1 \(3 x 2 x 3 x 3\), repeat 1: the output differs from the"):
            runtime.time_model()
    with pytest.raises(CheckError, match="the output differs from the reference"):
        _two_layers(team_project(tmp_path / "replay", cpu=REPLAY))


# ---------------------------------------------------------------------------- the ranking's spread and ties

def _record(team, totals, at, rid=None):
    """A valid m2 record whose two models were timed by ``totals`` (per model: its repeat totals;
    None: a record from before the repeats, its figure the sum of its Op Times)."""
    models = []
    for name, ts in zip(("ece408-high", "ece408-low"), totals):
        result = ModelResult(name, [0.02], 0.9, 0.9, repeats=ts)
        models.append(result.to_dict())
    op_time = sum(m["op_time"] for m in models)
    options = run_options("m2", 100, engine="bubblewrap")
    return Record(rid or f"{team}-{at}", at, team, "m2", 100, "ok", 0, op_time, True, models, device="cpu",
                  transcript="...", options=options, options_key=options_key(options))


def _store(tmp_path):
    db = tmp_path / "r.db"
    with open_store(str(db)) as store:
        store.add(_record("alpha", ([0.0200, 0.0201, 0.0199], [0.0300, 0.0301, 0.0299]), "2026-12-01T00:00:01"))
        store.add(_record("bravo", ([0.0201, 0.0202, 0.0200], [0.0300, 0.0301, 0.0302]), "2026-12-01T00:00:02"))
        store.add(_record("charlie", ([0.0300, 0.0301, 0.0299], [0.0300, 0.0300, 0.0300, 0.0300]),
                          "2026-12-01T00:00:03"))
        old = _record("delta", ([0.1], [0.1]), "2026-12-01T00:00:04")   # as stored before the repeats
        for m in old.models:
            del m["repeats"], m["stopped"]
        store.add(old)
    return db


def test_the_ranking_shows_the_spread_and_marks_a_tie_within_noise(tmp_path):
    db = _store(tmp_path)
    with open_store(str(db)) as store:
        rows = rank(store.records(milestone="m2", size=100))
    assert [(r.team, r.tie) for r in rows] == [("alpha", False), ("bravo", True), ("charlie", False),
                                               ("delta", False)]
    assert rows[0].shown_time() == f"{rows[0].op_time:.6f} ± {rows[0].spread[0]:.6f} (n=3)"
    assert rows[2].shown_time().endswith("(n=3-4)") and rows[3].shown_time() == "0.200000 (n=1)"
    table = cli("ranking", "--db", db, "--milestone", "m2", "--size", 100)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("rank"))
    assert "total Op Time (s, median ± s.e.)" in lines[head]
    body = [line.split() for line in lines[head + 1:head + 5]]
    assert [b[:2] for b in body] == [["1", "alpha"], ["2", "≈"], ["3", "charlie"], ["4", "delta"]]
    assert body[1][2] == "bravo" and body[0][3] == "±" and body[0][5] == "(n=3)"
    assert body[3][2:4] == ["0.200000", "(n=1)"]
    assert lines[-1].startswith("≈: within the noise of the team above")
    csv = cli("ranking", "--db", db, "--milestone", "m2", "--size", 100, "--csv").stdout.splitlines()
    assert csv[0].endswith(",std_error,repeats_per_model,within_noise_of_above")
    assert [c.split(",")[-1] for c in csv[1:]] == ["0", "1", "0", "0"] and csv[-1].split(",")[-3:-1] == ["", "1"]
    data = json.loads(cli("ranking", "--db", db, "--milestone", "m2", "--size", 100, "--json").stdout)
    ranked = data["ranking"]
    assert [r["within_noise_of_above"] for r in ranked] == [False, True, False, False]
    assert ranked[0]["statistic"] == "median" and ranked[0]["repeats_per_model"] == [3, 3] and ranked[0]["std_error"] > 0
    assert ranked[3]["std_error"] is None and ranked[3]["repeats_per_model"] == [1] and ranked[3]["statistic"] is None


def test_old_records_without_repeats_still_rank(tmp_path):
    """Records stored before the repeats (no ``repeats``, no ``timing`` in their options) rank in
    their own option set, each total alone (n=1), never a tie, never a crash."""
    old = []
    for team, t in (("old-a", 0.05), ("old-b", 0.0501)):
        record = _record(team, ([t / 2], [t / 2]), "2026-11-01T00:00:00")
        for m in record.models:
            del m["repeats"], m["stopped"]
        record.options = {k: v for k, v in record.options.items() if k != "timing"}
        record.options_key = options_key(record.options)
        old.append(record)
    unrecorded = _record("older", ([0.04], [0.04]), "2026-10-01T00:00:00")
    unrecorded.options = unrecorded.options_key = None
    for m in unrecorded.models:
        del m["repeats"], m["stopped"]
    found = board(old + [unrecorded], "m2", 100)
    (table,) = found.tables
    assert [(r.team, r.tie, r.spread) for r in table.rows] == [("old-a", False, (None, [1])),
                                                               ("old-b", False, (None, [1]))]
    text = format_board(found, "table")
    assert "0.050000 (n=1)" in text and "≈" not in text and "unrecorded" in text
    assert json.loads(format_board(board(old + [unrecorded], "m2", 100, options="unrecorded"), "json"))["ranking"][0][
        "repeats_per_model"] == [1]
