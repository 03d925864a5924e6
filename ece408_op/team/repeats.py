"""How a ranked run times a model, and how the ranking reads it: the rule's constants, in one place.

After the milestone (whose ``Op Time`` lines are the course's, unchanged), the grader repeats the
model's timed forward: each repeat runs every custom layer of the model once more, on a fresh input
from the OS's secret randomness, checked against the reference like every timed run; the repeat's
total is the sum of its layers' times (``team/runtime.py``: ``TeamRuntime.time_model``). Repeats go
on until ``stop_reason`` says why not: under 1% relative standard error of the statistic once 2 s
of timed work were done, at least 3 and at most 1,000 runs, a 10 s cap of timed work (gpu-mode/reference-kernels' evaluator stops
at 1% too, with at most 100 runs: on this project's 2-core CPU machine 100 repeats of m2 at 100
images left the mean at about 2%, docs/benchmarks.md), and never past what the job's time limit
leaves (``budget``). Only these constants and the measured times decide the count: nothing a team sets.

The statistic that ranks is the MEDIAN of a model's repeat totals, summed over the models: on a
shared machine a repeat the scheduler interrupted is noise, not kernel, and the mean follows such
outliers (five submissions of one file, 2026-12-02: the mean's totals spread 1.4% stdev/mean, the
medians' 0.5%). Its spread is the median's standard error, from the order statistics around it
(``median_error``: distribution-free, no normal assumption), combined over the models as
independent errors. Two teams are within the noise of one another where their difference is at
most ``NOISE_Z`` combined standard errors (``within_noise``).
"""
import math
import statistics

TARGET_RSE = 0.01        # stop once the standard error of the median is under 1% of the median ...
MIN_REPEATS = 3          # ... and at least this many repeats were timed (the bound is not read before)
MIN_TIMED_S = 2.0        # ... and this many seconds of timed work (a few dozen repeats of a 6 ms model, each
                         # within its own 1%, still drifted 4% from one submission to the next: 2026-12-02)
MAX_REPEATS = 1000       # never more
TIME_CAP_S = 10.0        # or once this many seconds of timed work were spent on the model (past MIN_REPEATS)
WALL_CAP_S = 10.0        # or this many seconds of wall clock (checks included; past MIN_REPEATS)
LIMIT_MARGIN_S = 3.0     # and never so long that the job's own time limit would stop it (``budget``):
LIMIT_SHARE = 0.9        # at most this share of the time left, less the margin (the process's own end)
NOISE_Z = 2.0            # two means differ less than NOISE_Z combined standard errors: a tie within noise
STATISTIC = "median"     # what ranks: the median of the repeat totals (per model, then summed)
CI_Z = 1.96              # the order statistics of the median's 95% interval give its standard error


def rule():
    """The rule as the record's options keep it (a change of it is a new option set)."""
    return {"statistic": STATISTIC, "rse": TARGET_RSE, "min": MIN_REPEATS, "max": MAX_REPEATS,
            "cap_s": TIME_CAP_S, "min_timed_s": MIN_TIMED_S}


def median_error(samples):
    """The standard error of the median of ``samples``: half the distance between the order
    statistics bounding its distribution-free 95% interval (ranks n/2 -+ CI_Z sqrt(n)/2), over
    2 CI_Z; inf with under 3 samples."""
    n = len(samples)
    if n < MIN_REPEATS:
        return math.inf
    ordered = sorted(samples)
    half = CI_Z * math.sqrt(n) / 2
    low = max(0, math.floor(n / 2 - half))
    high = min(n - 1, math.ceil(n / 2 + half) - 1)
    return (ordered[high] - ordered[low]) / (2 * CI_Z)


def relative_error(samples):
    """The standard error of the median of ``samples`` over the median (inf with under 3 samples
    or a median not above 0)."""
    if len(samples) < MIN_REPEATS:
        return math.inf
    middle = statistics.median(samples)
    if not middle > 0:
        return math.inf
    return median_error(samples) / middle


def stop_reason(samples, timed_s=0.0, wall_s=0.0, budget_s=math.inf):
    """Why the repeats stop after ``samples`` (the repeat totals so far, ``timed_s`` their seconds
    of timed work, ``wall_s`` the wall clock spent), or None to time one more: under MIN_REPEATS
    never; ``max`` at MAX_REPEATS; ``bound`` under TARGET_RSE once MIN_TIMED_S of timed work were
    spent; ``cap`` past TIME_CAP_S of timed
    work; ``wall`` past WALL_CAP_S; ``limit`` past ``budget_s`` of wall clock (what the job's time
    limit leaves this model's repeats: ``budget``)."""
    n = len(samples)
    if n < MIN_REPEATS:
        return None
    if n >= MAX_REPEATS:
        return "max"
    if timed_s >= MIN_TIMED_S and relative_error(samples) < TARGET_RSE:
        return "bound"
    if timed_s >= TIME_CAP_S:
        return "cap"
    if wall_s >= WALL_CAP_S:
        return "wall"
    if wall_s >= budget_s:
        return "limit"
    return None


def budget(time_left, models_left, model_seconds):
    """The wall seconds a model's repeats may take so that the job ends inside its time limit:
    ``time_left`` the seconds the limit leaves now (None: no limit), ``models_left`` the models
    still to run after this one, ``model_seconds`` what this model's run took before its repeats
    (each model left is reserved twice that). The repeats share what remains of LIMIT_SHARE of the
    time left, less LIMIT_MARGIN_S, with the models left; never below 0 (MIN_REPEATS are timed
    whatever the budget)."""
    if time_left is None:
        return math.inf
    spare = LIMIT_SHARE * time_left - LIMIT_MARGIN_S - 2.0 * model_seconds * models_left
    return max(0.0, spare / (models_left + 1))


def _numbers(value):
    if not isinstance(value, list):
        return None
    out = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    return out if len(out) == len(value) and out else None


def spread(models, statistic=STATISTIC):
    """(total of the models' medians, standard error, [repeats per model]) of a record's ``models``
    (the dicts a record keeps, each with its ``repeats``: the repeat totals); the error None where
    a model has under MIN_REPEATS repeats; None where a model has no usable repeats (a record from
    before the repeats: its total stands alone, n=1). ``statistic="mean"``: the means and their
    standard errors (records timed under the earlier rule)."""
    if statistic == "mean":
        figure = statistics.fmean
        error = lambda ts: statistics.stdev(ts) / math.sqrt(len(ts)) if len(ts) > 1 else None    # noqa: E731
    else:
        figure = statistics.median
        error = lambda ts: median_error(ts) if len(ts) >= MIN_REPEATS else None                 # noqa: E731
    figures, errors, counts = [], [], []
    for m in models or []:
        totals = _numbers(m.get("repeats")) if isinstance(m, dict) else None
        if totals is None:
            return None
        figures.append(figure(totals))
        errors.append(error(totals))
        counts.append(len(totals))
    if not figures:
        return None
    known = None not in errors
    return sum(figures), (math.sqrt(sum(e * e for e in errors)) if known else None), counts


def within_noise(a, b, se_a, se_b):
    """Whether totals ``a`` and ``b`` (standard errors ``se_a``, ``se_b``; None: unknown) differ by
    no more than NOISE_Z combined standard errors; False where either error is unknown."""
    if se_a is None or se_b is None or not (math.isfinite(se_a) and math.isfinite(se_b)):
        return False
    return abs(a - b) <= NOISE_Z * math.sqrt(se_a * se_a + se_b * se_b)
