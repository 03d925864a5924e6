"""The team a milestone runs: its compiled kernels (GPU) or its CPU forward, behind the two entry
points the ``ece408_conv`` operator calls when its ``team`` attribute is set:

    forward_cpu(out, x, k, spec)                                    -> Op Time (seconds)
    forward_device(y_ptr, x_ptr, k_ptr, x_shape, k_shape, ...)      -> Op Time (seconds)
        (``kernels.conv2d_forward_device``'s signature: host copies go through hostcopy.forward_into)

Every layer call, on either path:
  1. a warm-up on a fresh random input (untimed: Numba compiles, modules load; never the
     network's own input, so a result kept from it is of no use later);
  2. ``repeats`` timed runs, each on a new fresh input (final: 5), each checked on images chosen
     at random after the run;
  3. the timed run on the network's own input, checked the same way; its output goes on through
     the network (Correctness).
Op Time is the median of the fresh runs where there are any, else the network-input run. A time
below the layer's physical floor is refused. ``layers`` keeps every figure for the record.
"""
import statistics
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np

from .checks import CheckError, check_floor, check_images, course_layer, fill_fresh, fresh_images, pick_images
from .client import TeamWorker

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
    ``image``: the compiled new-forward.cu (bytes) for the GPU; ``repeats``: fresh timed runs per
    layer call; ``seed``: where fresh inputs and checked images come from (the grader's secret in
    a ranked run); ``stdout``: where the team process writes (the transcript)."""

    def __init__(self, team_dir, image=None, repeats=0, seed=None, stdout=None, cpu_peaks=None, numba_cache=None):
        self.team_dir = Path(team_dir)
        self.image = image
        self.repeats = int(repeats)
        self.rng = np.random.default_rng(seed)
        self.stdout = stdout
        self.cpu_peaks = cpu_peaks
        self.numba_cache = numba_cache
        self.workers = {}
        self.modules = {}
        self.plans = {}
        self.warm = set()
        self.layers = []              # one dict per layer call, for the record
        self._lock = threading.Lock()

    def close(self):
        for worker in self.workers.values():
            worker.close()
        self.workers.clear()

    def __enter__(self):
        activate(self)
        return self

    def __exit__(self, *exc):
        activate(None)
        self.close()

    def worker(self, part):
        if part not in self.workers:
            self.workers[part] = TeamWorker(self.team_dir, part, self.numba_cache, self.stdout).start()
        return self.workers[part]

    def _seed(self):
        return int(self.rng.integers(1, 2 ** 32 - 1))

    def _finish(self, layer, path, fresh, real, images):
        op_time = statistics.median(fresh) if fresh else real
        self.layers.append({"layer": layer.as_dict(), "path": path, "op_time": op_time, "fresh": fresh,
                            "input": real, "checked_images": [int(i) for i in images]})
        return op_time

    # ---------------------------------------------------------------- CPU (m2)
    def forward_cpu(self, out, x, k, spec=None):
        with self._lock:
            return self._forward_cpu(out, x, k, spec)

    def _forward_cpu(self, out, x, k, spec):
        layer = course_layer(x.shape, k.shape, spec)
        worker = self.worker("cpu")
        bandwidth, flop_rate = self.cpu_peaks or cpu_peaks()
        what = f"layer {len(self.layers) + 1} ({layer.M} x {layer.C} x {layer.K} x {layer.K})"
        key = ("cpu", layer.C, layer.K, layer.M)
        if key not in self.warm:
            small = replace(layer, B=min(layer.B, CPU_WARMUP_IMAGES))
            seed = self._seed()
            worker.forward(np.empty(small.y_shape, np.float32), None, k,
                           fill_x=(small.x_shape, lambda xs: fill_fresh(xs, seed)))
            self.warm.add(key)
        fresh = []
        scratch = np.empty(layer.y_shape, np.float32) if self.repeats else None
        for r in range(self.repeats):
            seed = self._seed()
            seconds = worker.forward(scratch, None, k, fill_x=(layer.x_shape, lambda xs: fill_fresh(xs, seed)))
            images = pick_images(self.rng, layer.B)
            check_images(scratch[images], fresh_images(seed, layer, images), k, images,
                         f"{what}, fresh run {r + 1}")
            check_floor(seconds, layer, bandwidth, flop_rate, what)
            fresh.append(seconds)
        seconds = worker.forward(out, x, k)
        images = pick_images(self.rng, layer.B)
        check_images(out[images], x[images], k, images, what)
        check_floor(seconds, layer, bandwidth, flop_rate, what)
        return self._finish(layer, "cpu", fresh, seconds, images)

    # ---------------------------------------------------------------- GPU (m3, final)
    def forward_device(self, y_ptr, x_ptr, k_ptr, x_shape, k_shape, bias_ptr=None, spec=None, version=None,
                       accumulate=False, device=None):
        from ..errors import ShapeError
        if bias_ptr or accumulate:
            raise ShapeError("a team's forward computes the course's layer: no bias, output overwritten")
        with self._lock:
            return self._forward_device(int(y_ptr), int(x_ptr), int(k_ptr), x_shape, k_shape, spec, device)

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

    def _forward_device(self, y, x, k, x_shape, k_shape, spec, device):
        from ..kernels import GpuDevice
        from ..kernels.team import device_peaks
        layer = course_layer(x_shape, k_shape, spec)
        dev = GpuDevice.get(device)
        what = f"layer {len(self.layers) + 1} ({layer.M} x {layer.C} x {layer.K} x {layer.K})"
        with dev.active():
            module, plan = self._bound_plan(dev, layer)
            bandwidth, flop_rate = device_peaks(dev)
            count = layer.B * layer.C * layer.H * layer.W
            xf = int(dev.buffer("team-fresh-x", count * 4))
            yf = int(dev.buffer("team-fresh-y", plan.sizes["y"]))
            k_host = np.empty(layer.k_shape, np.float32)
            dev.cuda.memcpy_dtoh(k_host, k)
            if (dev.index, layer) not in self.warm:
                module.fill(xf, count, self._seed())
                plan.run(yf, xf, k)
                self.warm.add((dev.index, layer))
            fresh = []
            for r in range(self.repeats):
                seed = self._seed()
                module.fill(xf, count, seed)
                seconds = plan.run(yf, xf, k)
                images = pick_images(self.rng, layer.B)
                check_images(_images(dev, yf, layer.y_shape, images), fresh_images(seed, layer, images), k_host,
                             images, f"{what}, fresh run {r + 1}")
                check_floor(seconds, layer, bandwidth, flop_rate, what)
                fresh.append(seconds)
            seconds = plan.run(y, x, k)
            images = pick_images(self.rng, layer.B)
            check_images(_images(dev, y, layer.y_shape, images), _images(dev, x, layer.x_shape, images), k_host,
                         images, what)
            check_floor(seconds, layer, bandwidth, flop_rate, what)
        return self._finish(layer, "gpu", fresh, seconds, images)


def _images(dev, ptr, shape, images):
    """Images ``images`` of the B x ... array at device pointer ``ptr``, copied to the host."""
    per = int(np.prod(shape[1:]))
    out = np.empty((len(images),) + tuple(shape[1:]), np.float32)
    for j, i in enumerate(images):
        dev.cuda.memcpy_dtoh(out[j], ptr + int(i) * per * 4)
    return out


def cpu_peaks():
    """(bytes/s, FLOP/s) no CPU forward can beat here: 200 GB/s per core of memory traffic and
    64 FLOP per cycle per core (two 512-bit FMA units) at 5 GHz, on the cores this process may use."""
    import os
    cores = len(os.sched_getaffinity(0))
    return 200e9 * cores, 64 * 5e9 * cores


__all__ = ["TeamRuntime", "activate", "current", "CheckError"]
