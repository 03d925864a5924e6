"""``--profile``'s account of where a milestone's wall time went (host clock).

The milestone marks each step as it ends (``Breakdown.mark``); the custom layers' own
timings come from ``kernels.hostcopy.records`` (the GPU path with MXNet's arrays in host
memory), so the inference splits into the layers' copies, their Op Time, the rest of their
calls, and the rest of the network (MXNet's own layers and its data copy). The second table
sets each custom layer's wall time against the time its x and y take over the host link at
the bandwidth of page-locked copies measured after the run (the target: at most 2x), and
against the time this machine takes to map y's bytes of fresh memory (MXNet's output is a new
allocation: its pages fault in on first touch), measured after the run too: no call that
writes y there can take less.
"""
import os
import time

START_UP = "start-up: Python and ece408_op (before the command ran)"


def process_age():
    """Seconds since this process started (Linux /proc), or None elsewhere."""
    try:
        with open("/proc/self/stat") as handle:
            start_ticks = float(handle.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


class Breakdown:
    """Named steps of a run, each the host-clock time since the previous mark."""

    def __init__(self):
        self.parts = []
        age = process_age()
        if age is not None:
            self.parts.append((START_UP, age))
        self.last = time.perf_counter()

    def mark(self, name):
        now = time.perf_counter()
        self.parts.append((name, now - self.last))
        self.last = now

    def report(self, layers, device):
        """``table`` with this machine's host link and fresh-memory rates measured now (after the
        run): what --profile prints for the custom layers' hostcopy Records ``layers``."""
        if not layers:
            return self.table(layers)
        from ..bench.memory import measure_fresh_memory, measure_link
        return self.table(layers, measure_link(device.index), measure_fresh_memory())

    def table(self, layers=(), link=None, fresh=None):
        """The two tables as text; ``layers`` are hostcopy Records of the inference step (the
        last mark), ``link`` (HtoD, DtoH) GB/s or None, ``fresh`` (fault-in, host copy) GB/s of
        fresh memory (``bench.memory.measure_fresh_memory``) or None."""
        lines = ["Wall time of the run (host clock):", f"{'seconds':>9}  {'share':>6}  part"]
        total = sum(seconds for _, seconds in self.parts) or 1.0
        for i, (name, seconds) in enumerate(self.parts):
            lines.append(f"{seconds:9.4f}  {100 * seconds / total:5.1f}%  {name}")
            if i == len(self.parts) - 1 and layers:
                lines += [f"{s:9.4f}  {100 * s / total:5.1f}%    {n}" for n, s in _inference_split(seconds, layers)]
        lines.append(f"{sum(s for _, s in self.parts):9.4f}  100.0%  total")
        if layers:
            lines += ["", _layer_table(layers, link, fresh)]
        return "\n".join(lines)


def _inference_split(seconds, layers):
    copies = sum(r.copy_in + r.copy_out for r in layers)
    op_time = sum(r.op_time for r in layers)
    walls = sum(r.wall for r in layers)
    return [("custom layers: copies (x, k in; y out into MXNet's memory)", copies),
            ("custom layers: Op Time (the kernels)", op_time),
            ("custom layers: the rest of their calls (set-up, first compile, zeroing y, syncs)",
             max(0.0, walls - copies - op_time)),
            ("the rest of the network (MXNet's layers, its data copy)", max(0.0, seconds - walls))]


def link_seconds(record, link):
    """Time x in and y out take over the link at (HtoD, DtoH) GB/s."""
    return record.x_bytes / (link[0] * 1e9) + record.y_bytes / (link[1] * 1e9)


def pages_seconds(record, fresh):
    """Time y's bytes of fresh memory take to fault in at ``fresh[0]`` GB/s."""
    return record.y_bytes / (fresh[0] * 1e9)


def _layer_table(layers, link, fresh=None):
    head = ("Custom layers against the host link"
            + (f" (page-locked copies measured after the run: HtoD {link[0]:.1f} GB/s, DtoH {link[1]:.1f} GB/s)"
               if link else " (link not measured)")
            + (f" and fresh host memory (measured after the run: faulted in at {fresh[0]:.1f} GB/s, "
               f"copied into at {fresh[1]:.1f} GB/s; pages = y's bytes at the first rate)" if fresh else "") + ":")
    cols = f"{'layer':>5}  {'op':5}  {'copy':10}  {'x MB':>7}  {'y MB':>7}  {'wall ms':>8}  {'in ms':>7}  " \
           f"{'kernel ms':>9}  {'Op Time ms':>10}  {'out ms':>7}  {'link ms':>7}  wall/link" \
           + (f"  {'pages ms':>8}" if fresh else "")
    lines = [head, cols]
    for i, r in enumerate(layers, 1):
        ideal = link_seconds(r, link) if link else None
        lines.append(f"{i:5d}  {r.op:5}  {r.mode:10}  {r.x_bytes / 1e6:7.1f}  {r.y_bytes / 1e6:7.1f}  "
                     f"{r.wall * 1e3:8.2f}  {r.copy_in * 1e3:7.2f}  {r.kernel_call * 1e3:9.2f}  "
                     f"{r.op_time * 1e3:10.3f}  {r.copy_out * 1e3:7.2f}  "
                     + (f"{ideal * 1e3:7.2f}  {r.wall / ideal:8.2f}x" if ideal else f"{'-':>7}  {'-':>9}")
                     + (f"  {pages_seconds(r, fresh) * 1e3:8.2f}" if fresh else "")
                     + ("  (" + "; ".join(r.notes) + ")" if r.notes else ""))
    return "\n".join(lines)
