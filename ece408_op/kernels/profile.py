"""An nvprof-style summary of the kernels and copies of a run (``--profile``), which answers the
course's question at once: which kernels (and copies) together take more than 90% of the GPU time.

The rows timed on the GPU (CUDA events: kernels, copies, memsets) come first, heaviest first, each
with its share of their time and the running (cumulative) share; the fewest rows whose times
together pass MARK_SHARE of it are marked ``*``, and a last line names how many (how many of them
kernels: as in nvprof, a copy or memset is named in brackets, ``[CUDA memcpy HtoD] x, k``) and
what share.
Rows timed with the host clock (``host=True``: a copy between host buffers) follow, outside the GPU
time.
"""

MARK_SHARE = 0.9


def heaviest(totals, share=MARK_SHARE):
    """The names of the fewest of ``totals`` ({name: seconds}), heaviest first, whose times
    together pass ``share`` of their sum (strictly more); [] where they sum to nothing."""
    whole = sum(totals.values())
    chosen, running = [], 0.0
    for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
        if whole <= 0 or running > share * whole:
            break
        chosen.append(name)
        running += seconds
    return chosen


class Profile:
    """Named timings (seconds), printed like nvprof's summary table."""

    def __init__(self):
        self.samples = {}
        self.host = set()                           # names timed with the host clock

    def add(self, name, seconds, host=False):
        self.samples.setdefault(name, []).append(seconds)
        if host:
            self.host.add(name)

    def table(self):
        totals = {name: sum(values) for name, values in self.samples.items()}
        gpu = {name: t for name, t in totals.items() if name not in self.host}
        whole = sum(gpu.values()) or 1.0
        marked = set(heaviest(gpu))
        rows = [f"{'Time(%)':>8}  {'Cum(%)':>7}     {'Time':>10}  {'Calls':>5}  {'Avg':>10}  {'Min':>10}  "
                f"{'Max':>10}  Name"]
        running = 0.0
        for name in sorted(gpu, key=lambda n: -gpu[n]):
            running += gpu[name]
            mark = "*" if name in marked else " "
            rows.append(f"{100 * gpu[name] / whole:7.2f}%  {100 * running / whole:6.2f}%  {mark}  "
                        + _stats(self.samples[name]) + f"  {name}")
        for name in sorted(self.host, key=lambda n: -totals[n]):
            rows.append(f"{'host':>8}  {'-':>7}     " + _stats(self.samples[name]) + f"  {name}")
        if marked:
            kernels = sum(1 for name in marked if not name.startswith("["))
            share = 100 * sum(gpu[name] for name in marked) / whole
            rows.append(f"* the {len(marked)} row(s) ({kernels} kernel(s)) that together take {share:.1f}% of the GPU "
                        f"time: the fewest past {100 * MARK_SHARE:.0f}%")
        return "\n".join(rows)


def _stats(values):
    return (f"{_fmt(sum(values))}  {len(values):5d}  {_fmt(sum(values) / len(values))}  {_fmt(min(values))}  "
            f"{_fmt(max(values))}")


def _fmt(seconds):
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale or unit == "us":
            return f"{seconds / scale:8.3f}{unit:>2}"
