"""An nvprof-style summary of the kernels and copies of a run (``--profile``)."""


class Profile:
    """Named timings (seconds), printed like nvprof's summary table."""

    def __init__(self):
        self.samples = {}

    def add(self, name, seconds):
        self.samples.setdefault(name, []).append(seconds)

    def table(self):
        total = sum(sum(v) for v in self.samples.values()) or 1.0
        rows = [f"{'Time(%)':>8}  {'Time':>10}  {'Calls':>5}  {'Avg':>10}  {'Min':>10}  {'Max':>10}  Name"]
        for name, values in sorted(self.samples.items(), key=lambda kv: -sum(kv[1])):
            rows.append(f"{100 * sum(values) / total:7.2f}%  {_fmt(sum(values))}  {len(values):5d}  "
                        f"{_fmt(sum(values) / len(values))}  {_fmt(min(values))}  {_fmt(max(values))}  {name}")
        return "\n".join(rows)


def _fmt(seconds):
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale or unit == "us":
            return f"{seconds / scale:8.3f}{unit:>2}"
