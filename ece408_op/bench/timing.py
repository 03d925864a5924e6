"""How every benchmark here times: on the GPU, CUDA events (PyTorch's), a warm-up, L2 flushed before each
repeat, the entries taking turns within each repeat (a, b, a, b, ...: clocks, temperature and the host's
state drift over all of them alike); on the host, the same turns on the host clock; medians (with min,
max and the number of repeats: ``summary``).

    torch = cuda_torch()                        # PyTorch with TF32 off (cuDNN fp32 is the baseline)
    flush = l2_flush(torch)
    entry = time_events(torch, fn, repeats=30, flush=flush)      # {"median_s", "min_s", "max_s", "repeats"}
"""
import statistics
import time


def cuda_torch():
    """PyTorch for the GPU benchmarks: TF32 off (cuDNN and cuBLAS in fp32), cuDNN's autotuner on."""
    import torch
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    return torch


def l2_flush(torch):
    """A device tensor of four L2 caches (at least 256 MB): zeroing it evicts everything else from L2."""
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    return torch.empty(max(4 * l2, 256 << 20) // 4, device="cuda")


def summary(times):
    """{"median_s", "min_s", "max_s", "repeats"} of a list of seconds."""
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "repeats": len(times)}


def time_events(torch, fn, repeats, warmup=3, flush=None, calls=1):
    """``summary`` of ``fn``'s seconds between CUDA events, L2 flushed before each repeat (``flush``: a
    tensor to zero); ``calls`` > 1: each repeat times that many consecutive calls and counts their mean
    (back to back, as in a network)."""
    return time_interleaved(torch, [fn], repeats, warmup, flush, calls)[0]


def time_interleaved(torch, fns, repeats, warmup=3, flush=None, calls=1):
    """``time_events`` of several callables measured in turn within each repeat; one summary per callable."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, times):
            if flush is not None:
                flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / 1e3 / calls)
    return [summary(t) for t in times]


def host_interleaved(fns, repeats, warmup=1):
    """{name: [seconds]} of ``fns`` ({name: callable}) on the host clock, in turn within each round; the
    first ``warmup`` rounds are not kept."""
    times = {name: [] for name in fns}
    for round_ in range(warmup + repeats):
        for name, fn in fns.items():
            begin = time.perf_counter()
            fn()
            if round_ >= warmup:
                times[name].append(time.perf_counter() - begin)
    return times


def host_us(fn, torch, calls=200, rounds=9):
    """Median over ``rounds`` of the host microseconds per call of ``calls`` calls in a row, each round queued
    behind a GPU sleep longer than itself: the figure is the host's alone (without the sleep, a kernel
    longer than the host's part fills the launch queue and the loop runs at the GPU's pace)."""
    out = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        torch.cuda._sleep(20_000_000)                       # ~10 ms of GPU work ahead
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - start) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(out)


class Timer:
    """A network benchmark's two ways of timing whole calls: L2 flushed before each (``flushed``) and
    back to back (``back_to_back``: the mean of consecutive calls, as in a network)."""

    def __init__(self, torch, repeats):
        self.torch, self.repeats = torch, repeats
        self.flush = l2_flush(torch)

    def spin(self):
        """Keep the SMs busy for ~20 ms first: after the host-only work between measurements (the float64
        check) the clocks have dropped, and a few warm-up calls of a small layer do not raise them."""
        sleep = getattr(self.torch.cuda, "_sleep", None)
        if sleep is not None:
            sleep(40_000_000)

    def flushed(self, *fns):
        """Median seconds of each of ``fns`` between CUDA events, L2 flushed before each call, the callables
        taking turns within each repeat."""
        self.spin()
        return [r["median_s"] for r in time_interleaved(self.torch, fns, self.repeats, warmup=2, flush=self.flush)]

    def back_to_back(self, *fns, calls=10):
        """Median over the repeats of the mean seconds per call of ``calls`` consecutive calls (no flush),
        for each of ``fns`` in turn within each repeat."""
        self.spin()
        return [r["median_s"] for r in time_interleaved(self.torch, fns, max(3, self.repeats // 2), warmup=2,
                                                        calls=calls)]
