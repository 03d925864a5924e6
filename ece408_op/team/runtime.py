"""The team a milestone runs: its compiled kernels (GPU) or its CPU forward, behind the two entry
points the ``ece408_conv`` operator calls when its ``team`` attribute is set:

    forward_cpu(out, x, k, spec)      -> Op Time (seconds)      x, k, out: host arrays
    forward_gpu(out, x, k, spec)      -> Op Time (seconds)      the same; the copies are untimed

Every layer call, on either path:
  1. a warm-up on a fresh input (untimed: Numba compiles, modules load; a result kept from it is
     of no use later, no later input being derived from it);
  2. ``repeats`` timed runs, each on a new fresh input (a ranked run: at least one; final: 5);
  3. the timed run on the network's own input; its output goes on through the network
     (Correctness).
After every timed run its output is checked against the grader's float64 reference of the
harness's OWN copies of x and k (``checks.check_output``; on the GPU the grader's kernel checks
every value): whatever a team wrote into the buffers it was given changes nothing. Fresh inputs
and what is checked come from the operating system's secret randomness, drawn independently
each time (``checks.py``). Op Time is the median of the fresh runs where there are any, else the
network-input run: the course's printed ``Op Time`` line. A time below the layer's physical
floor is refused. ``layers`` keeps every figure for the record.

A ranked run then times the model (``time_model``, inside ``held``, after the milestone): repeats
of every layer call of the network, each on a new fresh input, checked as above, until the rule
of ``team/repeats.py`` stops them (the standard error of the median under 1% of it, at least 3, at
most 1,000, a time cap, the job's time limit). Each repeat's total and its layers' times go to the record; nothing of it
is printed.

``on_fresh_run(what, i, n)``: called before each timed run on a fresh input (``what``: the
layer; ``i``: its number, from 1; ``n``: how many are planned, None where the loop decides as it
goes), so that a live view shows where the run is (a ranked run's measuring process sends it on).

``lease``: a context manager held while any of the team's code runs (its import, its plan, the
warm-up, the timed runs and their checks): a ranked run's measuring process gets one from the
runner (``grading/channel.py``), so that no other team's code runs meanwhile on the machine.
"""
import contextlib
import statistics
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from . import repeats as rule
from .checks import (CheckError, Peaks, check_floor, check_output, course_layer, fill_fresh, fresh_input,
                     mismatch_line)
from .harness import DEFAULT_TIME_LIMIT, TeamProcess

_current = None
_lock = threading.Lock()
CPU_WARMUP_IMAGES = 4


def activate(runtime):
    """Make ``runtime`` the one the operator uses (None: none); returns the previous one."""
    global _current
    with _lock:
        previous, _current = _current, runtime
    return previous


def current():
    from ..errors import Ece408Error
    if _current is None:
        raise Ece408Error("ece408_conv team=1 runs a team's forward, and none is loaded: run a milestone "
                          "with --team DIR (or from a team project folder)")
    return _current


class TeamRuntime:
    """A team project's forwards for one milestone run.

    ``team_dir``: the folder holding new-forward.py / launch.py (a ranked run: the copies taken);
    ``image``: the compiled new-forward.cu (bytes) for the GPU; ``grader_image``: the grader's
    check kernels (bytes; None: built here, ``kernels.team.grader_cubin``); ``repeats``: fresh
    timed runs per layer call; ``stdout``: where the team process writes (the transcript);
    ``time_limit``: seconds one answer of the team process may take; ``lease``: see the module
    docstring."""

    def __init__(self, team_dir, image=None, repeats=0, stdout=None, cpu_peaks=None, numba_cache=None,
                 grader_image=None, time_limit=DEFAULT_TIME_LIMIT, lease=None, on_fresh_run=None):
        self.team_dir = Path(team_dir)
        self.image = image
        self.grader_image = grader_image
        self.repeats = int(repeats)
        self.stdout = stdout
        self.cpu_peaks = cpu_peaks
        self.numba_cache = numba_cache
        self.time_limit = time_limit
        self.lease = lease or contextlib.nullcontext
        self.on_fresh_run = on_fresh_run
        self.workers = {}
        self.modules = {}
        self.graders = {}
        self.plans = {}
        self.warm = set()
        self.layers = []              # one dict per layer call, for the record
        self.calls = []               # (path, layer, the layer's weights, device) of each layer call
        self._held = 0
        self._lock = threading.Lock()

    def close(self):
        if self._held:
            return                    # ``held``: closed when its block ends
        for worker in self.workers.values():
            worker.close()
        self.workers.clear()

    def __enter__(self):
        activate(self)
        return self

    def __exit__(self, *exc):
        activate(None)
        self.close()

    @contextlib.contextmanager
    def held(self):
        """A block in which leaving the runtime (the milestone's ``with``) keeps the team's processes,
        for ``time_model`` after the milestone; they are stopped when the block ends."""
        self._held += 1
        try:
            yield self
        finally:
            self._held -= 1
            self.close()

    def time_model(self, stop=rule.stop_reason, clock=time.monotonic):
        """The repeats of the model just run: each times every layer call of the network once more
        on a new fresh input (checked), until ``stop(totals, timed seconds, wall seconds)`` gives
        a reason. Returns {"totals": [seconds a repeat], "stopped": reason, "window": [start, end]};
        each layer's entry of ``layers`` gets its times a repeat (``repeats``)."""
        totals = []
        for entry in self.layers:
            entry["repeats"] = []
        with self._lock, self._team_window() as window:
            start, reason = clock(), None
            while True:
                reason = stop(totals, sum(totals), clock() - start)
                if reason is not None or not self.calls:
                    break
                total = 0.0
                for index, (path, layer, k, device) in enumerate(self.calls):
                    what = f"layer {index + 1} ({layer.M} x {layer.C} x {layer.K} x {layer.K})"
                    label = f"{what}, repeat {len(totals) + 1}"
                    if self.on_fresh_run is not None:
                        self.on_fresh_run(f"{what} (the model's timing)", len(totals) + 1, None)
                    seconds = (self._repeat_cpu(layer, k, what, label) if path == "cpu"
                               else self._repeat_gpu(layer, k, device, what, label))
                    self.layers[index]["repeats"].append(seconds)
                    total += seconds
                totals.append(total)
        return {"totals": totals, "stopped": reason or "no layers", "window": window}

    def _repeat_cpu(self, layer, k, what, label):
        scratch = np.empty(layer.y_shape, np.float32)
        return self._fresh_cpu(self.worker("cpu"), scratch, layer, k, what, label, self.cpu_peaks or cpu_peaks())

    def _fresh_cpu(self, worker, scratch, layer, k, what, label, peaks):
        """One timed run on a fresh input (the harness's own copy), checked: its seconds."""
        x_fresh = fresh_input(layer.x_shape)
        seconds = worker.forward(scratch, x_fresh, k)
        check_output(scratch, x_fresh, k, layer, label)
        check_floor(seconds, layer, peaks, what)
        return seconds

    def _repeat_gpu(self, layer, k, device, what, label):
        from ..kernels import GpuDevice
        dev = GpuDevice.get(device)
        with dev.active():
            run, verify, grader, peaks = self._gpu_parts(dev, layer, k)
            count = layer.B * layer.C * layer.H * layer.W
            return self._fresh_gpu(run, verify, grader, count, layer, peaks, what, label)

    @staticmethod
    def _fresh_gpu(run, verify, grader, count, layer, peaks, what, label):
        """One timed run on a fresh input the grader's kernel draws on the device, checked: its seconds."""
        keys = []
        seconds = run(lambda buf: keys.append(grader.fill(int(buf), count)))
        verify(lambda buf: grader.fill_with(int(buf), count, keys[0]), label)
        check_floor(seconds, layer, peaks, what)
        return seconds

    def worker(self, part):
        if part not in self.workers:
            self.workers[part] = TeamProcess(self.team_dir, part, self.numba_cache, self.stdout,
                                            self.time_limit).start()
        return self.workers[part]

    def _finish(self, layer, path, fresh, real, checked, window):
        op_time = statistics.median(fresh) if fresh else real
        self.layers.append({"layer": layer.as_dict(), "path": path, "op_time": op_time, "fresh": fresh,
                            "input": real, "checked": checked, "window": window})
        return op_time

    def _fresh_run(self, what, number):
        if self.on_fresh_run is not None:
            self.on_fresh_run(what, number, self.repeats)

    @contextlib.contextmanager
    def _team_window(self):
        """The lease, and the wall-clock window it was held (UTC seconds), for the record."""
        with self.lease():
            window = [time.time(), None]
            try:
                yield window
            finally:
                window[1] = time.time()

    # ---------------------------------------------------------------- CPU (m2)
    def forward_cpu(self, out, x, k, spec=None):
        with self._lock:
            return self._forward_cpu(out, np.asarray(x, np.float32), np.asarray(k, np.float32), spec)

    def _forward_cpu(self, out, x, k, spec):
        layer = course_layer(x.shape, k.shape, spec)
        peaks = self.cpu_peaks or cpu_peaks()
        what = f"layer {len(self.layers) + 1} ({layer.M} x {layer.C} x {layer.K} x {layer.K})"
        key = ("cpu", layer.C, layer.K, layer.M)
        with self._team_window() as window:
            worker = self.worker("cpu")
            if key not in self.warm:
                small = replace(layer, B=min(layer.B, CPU_WARMUP_IMAGES))
                worker.forward(np.empty(small.y_shape, np.float32), None, k, fill_x=(small.x_shape, fill_fresh))
                self.warm.add(key)
            scratch = np.empty(layer.y_shape, np.float32) if self.repeats else None
            fresh = []
            for r in range(self.repeats):
                self._fresh_run(what, r + 1)
                fresh.append(self._fresh_cpu(worker, scratch, layer, k, what, f"{what}, fresh run {r + 1}", peaks))
            seconds = worker.forward(out, x, k)
            check_output(out, x, k, layer, what)
            check_floor(seconds, layer, peaks, what)
        self.calls.append(("cpu", layer, k.copy(), None))
        return self._finish(layer, "cpu", fresh, seconds, _checked_cpu(layer), window)

    # ---------------------------------------------------------------- GPU (m3, final)
    def forward_gpu(self, out, x, k, spec=None, device=None):
        with self._lock:
            return self._forward_gpu(out, np.ascontiguousarray(x, np.float32), np.ascontiguousarray(k, np.float32),
                                     spec, device)

    def _bound_plan(self, dev, layer):
        from ..kernels.team import TeamModule, TeamPlan
        if dev.index not in self.modules:
            if self.image is None:
                from ..errors import GpuError
                raise GpuError("no compiled kernels for the team (new-forward.cu was not built)")
            self.modules[dev.index] = TeamModule(dev, self.image)
        key = (dev.index, layer)
        if key not in self.plans:
            plan = self.worker("gpu").plan(layer.as_dict())
            self.plans[key] = TeamPlan(self.modules[dev.index], plan, layer, key=len(self.plans))
        return self.modules[dev.index], self.plans[key]

    def grader(self, dev):
        """The grader's kernels on ``dev`` (loaded before any of the team's code runs there)."""
        from ..kernels.team import GraderKernels, grader_cubin
        if dev.index not in self.graders:
            with dev.active():
                self.graders[dev.index] = GraderKernels(dev, self.grader_image or grader_cubin(dev.arch))
        return self.graders[dev.index]

    def _gpu_parts(self, dev, layer, k):
        """(run, verify, the grader's kernels, the device's peaks) of ``layer`` on ``dev`` (active):
        ``run(fill)`` writes the weights and, through ``fill``, the team's input, and times the
        team's plan; ``verify(fill_reference, label)`` checks every value of its output against
        the grader's copies (``fill_reference`` writes the grader's input)."""
        from ..kernels.team import device_peaks
        cuda = dev.cuda
        grader = self.grader(dev)
        _, plan = self._bound_plan(dev, layer)
        peaks = Peaks(*device_peaks(dev))
        nbytes = 4 * layer.B * layer.C * layer.H * layer.W
        xd, kd = dev.buffer("team-x", nbytes), dev.buffer("team-k", k.nbytes)
        yd = dev.buffer("team-y", plan.sizes["y"])
        xr, kr = dev.buffer("grader-x", nbytes), dev.buffer("grader-k", k.nbytes)
        result = dev.buffer("grader-result", 16)

        def run(fill):
            cuda.memcpy_htod(kd, k)              # the weights again, whatever a kernel wrote before
            fill(xd)
            return plan.run(yd, xd, kd)

        def verify(fill_reference, label):
            fill_reference(xr)                    # the grader's copies, written after the team's run
            cuda.memcpy_htod(kr, k)
            bad, first = grader.check(int(yd), int(xr), int(kr), layer, result)
            if bad:
                raise CheckError(self._gpu_mismatch(dev, yd, xr, k, layer, first, bad, label))
        run.yd = yd
        return run, verify, grader, peaks

    def _forward_gpu(self, out, x, k, spec, device):
        from ..kernels import GpuDevice
        layer = course_layer(x.shape, k.shape, spec)
        dev = GpuDevice.get(device)
        cuda = dev.cuda
        self.grader(dev)                              # loaded before any of the team's code runs there
        what = f"layer {len(self.layers) + 1} ({layer.M} x {layer.C} x {layer.K} x {layer.K})"
        with dev.active(), self._team_window() as window:
            run, verify, grader, peaks = self._gpu_parts(dev, layer, k)
            count = x.size
            if (dev.index, layer) not in self.warm:
                run(lambda buf: grader.fill(int(buf), count))
                self.warm.add((dev.index, layer))
            fresh = []
            for r in range(self.repeats):
                self._fresh_run(what, r + 1)
                fresh.append(self._fresh_gpu(run, verify, grader, count, layer, peaks, what,
                                             f"{what}, fresh run {r + 1}"))
            seconds = run(lambda buf: cuda.memcpy_htod(buf, x))
            verify(lambda buf: cuda.memcpy_htod(buf, x), what)
            check_floor(seconds, layer, peaks, what)
            cuda.memcpy_dtoh(out, run.yd)
        self.calls.append(("gpu", layer, k.copy(), device))
        return self._finish(layer, "gpu", fresh, seconds, "all", window)

    @staticmethod
    def _gpu_mismatch(dev, yd, xr, k, layer, flat, bad, label):
        """The one line of a GPU check that failed: the first wrong value and its reference (computed
        here in float64 from the grader's copy of that value's image)."""
        b, m, h, w = (int(v) for v in np.unravel_index(flat, layer.y_shape))
        got = np.empty(1, np.float32)
        dev.cuda.memcpy_dtoh(got, int(yd) + 4 * flat)
        image = np.empty((layer.C, layer.H, layer.W), np.float32)
        dev.cuda.memcpy_dtoh(image, int(xr) + 4 * b * image.size)
        patch = image[:, h:h + layer.K, w:w + layer.K].astype(np.float64)
        want = float((patch * k[m].astype(np.float64)).sum())
        return mismatch_line(label, layer, flat, float(got[0]), want, bad, layer.B * layer.M * layer.HO * layer.WO)


def _checked_cpu(layer):
    from .checks import SAMPLED_VALUES, WHOLE_CHECK_MACS
    count = layer.B * layer.M * layer.HO * layer.WO
    return "all" if count * layer.C * layer.K * layer.K <= WHOLE_CHECK_MACS else SAMPLED_VALUES


def cpu_peaks():
    """Peaks no CPU forward can beat here, on the cores this process may use: 200 GB/s of memory
    traffic per core, and two FMA units per core of the widest vectors the CPU has (64 float32
    FLOP per cycle with AVX-512, 32 with AVX2, 16 otherwise) at 5 GHz."""
    import os
    cores = len(os.sched_getaffinity(0))
    try:
        flags = next((line for line in open("/proc/cpuinfo") if line.startswith("flags")), "").split()
    except OSError:
        flags = []
    per_cycle = 64 if "avx512f" in flags else 32 if "avx2" in flags else 16
    if not flags:
        per_cycle = 64
    return Peaks(200e9 * cores, per_cycle * 5e9 * cores)


__all__ = ["TeamRuntime", "activate", "current", "CheckError"]
