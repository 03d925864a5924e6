"""A team's Op Time over its runs, drawn on the server by matplotlib as an SVG (no chart code in
the browser). matplotlib is optional: where it is missing, ``available()`` is False and the team
page says so instead of a plot; the service runs on without it.

One figure a milestone and size: the team's runs in the order they were made (the x axis counts
them), its valid runs' total Op Time as dots joined by a line, its runs that are not valid but
have a time as crosses, and the class's best and median (the median of the teams' best runs) as
horizontal lines. Text is kept as text (``svg.fonttype
none``), ids are fixed (``svg.hashsalt``), so the same data gives the same bytes.
"""
import importlib.util
import io
import threading
from datetime import datetime, timezone

_lock = threading.Lock()                  # matplotlib's font and text caches are not thread-safe
_available = None


def available():
    """Whether matplotlib is here (looked up once, without importing it; a plot that then cannot
    import it marks it missing: ``missing``)."""
    global _available
    if _available is None:
        try:
            _available = importlib.util.find_spec("matplotlib") is not None
        except (ImportError, ValueError):
            _available = False
    return _available


def missing():
    global _available
    _available = False


def when(text):
    """A record's ``created_at`` (ISO 8601, UTC) as a datetime; None where it is not one."""
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def op_time_svg(runs, best=None, median=None, title="", label="your valid runs"):
    """The SVG (text) of ``runs`` [(created_at, total Op Time or None, valid)] against the class's
    ``best`` and ``median`` (seconds, or None); ``label`` names the valid runs in the legend
    (``this team's valid runs`` where the instructor looks)."""
    import matplotlib
    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    ordered = sorted(runs, key=lambda run: when(run[0]) or datetime.min.replace(tzinfo=timezone.utc))
    points = [(n, t, ok) for n, (_, t, ok) in enumerate(ordered, start=1) if isinstance(t, (int, float))]
    good = [(x, t) for x, t, ok in points if ok]
    bad = [(x, t) for x, t, ok in points if not ok]
    with _lock, matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "ece408", "font.size": 9,
                                       "axes.spines.top": False, "axes.spines.right": False}):
        fig = Figure(figsize=(6.4, 2.8), layout="constrained")
        ax = fig.add_subplot()
        if good:
            ax.plot([x for x, _ in good], [t for _, t in good], "o-", color="#1f5fa8", ms=4, lw=1.2,
                    label=label)
        if bad:
            ax.plot([x for x, _ in bad], [t for _, t in bad], "x", color="#b3261e", ms=6, label="not valid")
        if best is not None:
            ax.axhline(best, color="#2e7d32", ls="--", lw=1, label=f"class best {best:.6f} s")
        if median is not None:
            ax.axhline(median, color="#777777", ls=":", lw=1.2, label=f"class median {median:.6f} s")
        ax.set_ylabel("total Op Time (s)")
        ax.set_xlabel("run (oldest first)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))   # runs are counted: 1, 2...
        if ordered:
            ax.set_xlim(0.5, len(ordered) + 0.5)
        ax.set_title(title, loc="left", fontsize=10)
        times = [t for _, t, _ in points] + [v for v in (best, median) if v is not None]
        if times and min(times) > 0 and max(times) / min(times) > 30:
            ax.set_yscale("log")
        elif times:
            ax.set_ylim(bottom=0)
        if points or best is not None:
            ax.legend(loc="best", fontsize=8, frameon=False)
        else:
            ax.text(0.5, 0.5, "no timed run yet", transform=ax.transAxes, ha="center", color="#777777")
        out = io.StringIO()
        fig.savefig(out, format="svg", metadata={"Date": None})
    return out.getvalue()
