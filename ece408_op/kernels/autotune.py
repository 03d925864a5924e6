"""Autotuning for layers the measured table (defaults.json) does not name, as MXNet does for cuDNN
(``MXNET_CUDNN_AUTOTUNE_DEFAULT``): on a layer shape's first call, time the candidates (``candidates``:
each version with a ``tune_rank``, in that order, with its ``tune_tiles``, where it runs the layer, is allowed
under the precision and may win there, ``worth_timing``) on scratch data of the layer's size, keep the
fastest (``pick``), and store it per device, shape class, batch class and precision, so that a second
process starts tuned.

    $ECE408_GPU_CACHE (default $XDG_CACHE_HOME/ece408_op, ~/.cache/ece408_op)/autotune/<device name>.json
    ECE408_AUTOTUNE=0            no tuning: the table, then the fallback order (choice.fallback_order)
    ECE408_AUTOTUNE_SECONDS=1.0  timing budget per layer (candidates not reached stay untimed)

The constants below are the cost model, the two timing passes, the tie rule and the cache's writes; what
each does and why its value: docs/gpu-dropin.md ("Autotuning" and "The first call").
"""
import atexit
import datetime
import json
import math
import os
import re
import statistics
import sys
import threading
import time

from ..base.files import atomic_write
from ..errors import GpuError
from . import cudadrv
from .build import gpu_cache_dir, precompile, sources_digest
from .choice import DEFAULT_PRECISION, allowed, parse_precision, precision_overrides, shape_key
from .plans import module_spec, plan_for
from .versions import VERSIONS
from .versions.registry import in_order

ENV = "ECE408_AUTOTUNE"
SECONDS_ENV = "ECE408_AUTOTUNE_SECONDS"
BUDGET_S = 1.0                 # timing budget per layer (compiles not counted: they are cached on disk)
NOTE_S = 1.0                   # a tuning longer than this prints one line
REPEATS = (2, 10)              # timed repeats per candidate: at least, at most (a layer's tuning in about 40 ms)
MIN_REPEAT_S = 0.3e-3          # a repeat times at least this much work (several launches of a small layer)
MAX_CALLS = 50
CONTENDERS = 1.2               # candidates within this of the best median get the repeats beyond REPEATS[0] (a
                               # second pass: in one, a long list, v20's eight tiles first, left the last untimed)
EARLY_OUT = 2.0                # a candidate whose first call took this times the best first call: no repeats
PER_SHAPE_MAX_CKK = 32         # v7, v10, v11 (a module per layer shape) only where C*KH*KW is at most this
PER_SHAPE_MIN_PLANE = 16 * 16  # and HO*WO at least this (the course layers: 24x24 and more)
PRIOR_KEEP, PRIOR_MAX = 1.5, 3  # a new batch class of a known shape: the candidates within 1.5x of the best there
PRIOR_BUDGET_S = 0.012         # and this much timing (DenseNet-121 tuned at batch 64, then at batch 1, on the
                               # H200: 1.66 s with the 6 best and the full budget)
WRITE_EVERY_S = 1.0            # the cache file is written at most this often (and at the end: TuneCache.put)
IDLE_S = 0.5                   # the GPU counts as idle (clocks down: WARM_S first) this long after a tuning
CALLER_HOST_S = 10e-6          # host time of a front-end's call besides the replay (ece408_op.torch.Conv2d on the
                               # H100 machine, 2026-11-24: forward 13.9 us, of which Recording.replay 5.1;
                               # docs/gpu-dropin.md); the course's path (Op Time: the GPU alone) loses at most this
HOST_TIE = 0.05                # figures within this of the fastest tie; the least GPU time among them is kept
WARM_S = 0.02                  # before the first candidate: this long of launches (clocks up)
SCRATCH = ("autotune x", "autotune k", "autotune bias", "autotune y")


_source_key = []


def source_key():
    """The first 16 hex digits of a hash of every version's CUDA files (a tuning names what it measured)."""
    if not _source_key:
        _source_key.append(sources_digest([version.source_path for version in VERSIONS.values()])[:16])
    return _source_key[0]


def enabled():
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "off", "false", "no")


def budget_s():
    try:
        return max(0.0, float(os.environ.get(SECONDS_ENV, BUDGET_S)))
    except ValueError:
        return BUDGET_S


def bucket(batch):
    """The batch class a tuning is kept for: the next power of two (100 and 128 share one)."""
    return 1 << max(0, int(batch) - 1).bit_length()


def cache_key(shape, batch, precision=DEFAULT_PRECISION):
    """The cache's key: the shape class and the batch class (and the precision, where not the default)."""
    key = f"{shape_key(shape)} B{bucket(batch)}"
    return key if precision == DEFAULT_PRECISION else f"{key} {precision}"


def worth_timing(version, shape):
    """The cost model: False where ``version`` cannot win on ``shape`` and would cost a compile of its own
    (a module per layer shape on a layer of more than PER_SHAPE_MAX_CKK input values per output)."""
    return version.dynamic or shape.CKK <= PER_SHAPE_MAX_CKK and shape.HO * shape.WO >= PER_SHAPE_MIN_PLANE


def prior_candidates(cache, shape, batch, precision, options):
    """``options`` cut to those within PRIOR_KEEP of the best figure of the nearest other batch class of
    ``shape`` in ``cache`` (at most PRIOR_MAX, the fastest first; the batch class of the entry kept); all of
    them where the shape was not tuned before."""
    want = bucket(batch)
    entries = cache.entries()
    prior = None
    for other in sorted((1 << i for i in range(20)), key=lambda b: abs(b.bit_length() - want.bit_length())):
        if other != want:
            prior = entries.get(cache_key(shape, other, precision))
            if prior and prior.get("source") == source_key() and prior.get("timings"):
                break
            prior = None
    if prior is None:
        return options
    figures = {name: ms for name, ms, *_ in prior["timings"] if ms is not None}
    if not figures:
        return options
    best = min(figures.values())
    ranked = sorted((figures[describe(n, o)], i) for i, (n, o) in enumerate(options)
                    if figures.get(describe(n, o)) is not None and figures[describe(n, o)] <= PRIOR_KEEP * best)
    kept = [options[i] for _, i in ranked[:PRIOR_MAX]]
    single = [options[i] for _, i in ranked if _one_launch(shape, *options[i])]
    if single and single[0] not in kept:
        kept.append(single[0])
    return kept or options


def _one_launch(shape, number, overrides):
    version = VERSIONS[number]
    return version.general and version.launches(module_spec(number, version.inner(shape), overrides).define_dict()) == 1


def tune_order():
    """The version numbers the autotuner may time, in the order it times them (their ``tune_rank``)."""
    return in_order("tune_rank")


def candidates(shape, arch=None, precision=DEFAULT_PRECISION):
    """[(version, overrides)] to time on ``shape``: each version of ``tune_order()`` that runs it (on a
    device of ``arch``, default the default device's) under ``precision`` and may win there
    (``worth_timing``), with its ``tune_tiles`` (tiles that do not divide or fit the layer dropped, and tiles
    equal to another one)."""
    out, seen = [], set()
    for number in tune_order():
        version = VERSIONS[number]
        missing = version.available() if arch is None else version.arch_reason(arch)
        if missing is not None or not allowed(number, precision) or not worth_timing(version, shape):
            continue
        for tile in version.tune_tiles:
            overrides = {**precision_overrides(number, precision), **tile}
            try:
                if version.unsupported(shape, overrides):
                    continue
                key = (number, module_spec(number, version.inner(shape), overrides))
            except ValueError:
                continue
            if key not in seen:
                seen.add(key)
                out.append((number, dict(overrides)))
    return out


# Layers standing for every kind a network has, for ``shared_modules``: 1x1, 3x3 and 7x7/2 layers of few
# and many filters on large and small planes, and depthwise windows 3x3, 5x5 (stride 1 and 2) and 7x7
_SHARED_LAYERS = [dict(C=64, H=h, W=h, M=m, KH=k, SH=s, SW=s, PH=k // 2, PW=k // 2)
                  for h in (56, 14) for m in (16, 24, 32, 48, 64, 128, 256) for k, s in ((1, 1), (3, 1), (7, 2))] + [
                  dict(C=c, H=28, W=28, M=c, KH=k, SH=s, SW=s, PH=k // 2, PW=k // 2, G=c)
                  for c in (32, 96) for k, s in ((3, 1), (3, 2), (5, 1), (5, 2), (7, 1))]


def shared_modules(arch, precision=DEFAULT_PRECISION, dtype="float32", layouts=(0, 0)):
    """The modules that the candidates of most layers load (those whose modules take the sizes at run time:
    one per tile, and per window for v13), for a device of ``arch`` and data of element type ``dtype`` and
    layouts (x, weights; 1: channels-last): what ``warmup --gpu`` builds ahead."""
    from .shape import ConvShape
    specs = []
    for values in _SHARED_LAYERS:
        shape = ConvShape(**values, DTYPE=dtype, XL=layouts[0], WL=layouts[1])
        specs += [module_spec(n, VERSIONS[n].inner(shape), o) for n, o in candidates(shape, arch, precision)
                  if VERSIONS[n].dynamic]
    return sorted(set(specs), key=lambda spec: (str(spec.source), spec.defines))


_shared_built = set()


def _shared_once(arch, precision, shape):
    """``shared_modules`` the first time a process builds modules for (arch, precision) and data like
    ``shape``'s (element type, layouts), else []: one parallel build of what most layers load, instead of a
    few modules at each layer that needs one."""
    key = (arch, precision, shape.DTYPE, shape.XL, shape.WL)
    if key in _shared_built:
        return []
    _shared_built.add(key)
    return shared_modules(arch, precision, shape.DTYPE, (shape.XL, shape.WL))


def describe(number, overrides):
    tile = " ".join(f"{k}={v}" for k, v in sorted((overrides or {}).items()))
    return f"v{number}" + (f" ({tile})" if tile else "")


def _warn(message):
    print(f"ece408_op: {message}", file=sys.stderr, flush=True)


class TuneCache:
    """One device's tunings on disk: {"device", "entries": {cache key: {"version", "overrides", ...}}}."""

    def __init__(self, device_name, path=None):
        self.device_name = device_name
        safe = re.sub(r"[^\w.+-]+", "_", device_name).strip("_") or "device"
        self.path = path or gpu_cache_dir("autotune", f"{safe}.json")
        self._entries = None
        self._written = None          # the file's (mtime, size) as this process last wrote it
        self._dirty, self._last_write, self._exit_flush = False, float("-inf"), False
        self._lock = threading.Lock()

    def _read(self, warn):
        """The file's entries ({} where it is missing; where it is not a cache, {} and one warning)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
                raise ValueError("not an autotune cache (no 'entries' table)")
            return data["entries"]
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            if warn:
                _warn(f"ignoring the autotune cache {self.path} ({str(exc).splitlines()[0]}); it will be rewritten")
            return {}

    def entries(self):
        with self._lock:
            if self._entries is None:
                self._entries = self._read(warn=True)
            return self._entries

    def get(self, shape, batch, precision=DEFAULT_PRECISION):
        """(version, overrides) stored for ``shape`` at ``batch``'s class, if still valid here, else None."""
        entry = self.entries().get(cache_key(shape, batch, precision))
        try:
            number, overrides = int(entry["version"]), dict(entry.get("overrides") or {})
            if entry.get("source") != source_key() or number not in VERSIONS or not allowed(number, precision):
                return None
            version = VERSIONS[number]
            if not version.defaultable or version.unsupported(shape, overrides):
                return None
            module_spec(number, version.inner(shape), overrides)
        except (TypeError, KeyError, ValueError, AttributeError):
            return None
        return number, overrides

    def _stamp(self):
        try:
            info = self.path.stat()
            return info.st_mtime_ns, info.st_size
        except OSError:
            return None

    def put(self, shape, batch, entry, precision=DEFAULT_PRECISION):
        """Store ``entry`` (merged into what is on disk now: other processes' tunings are kept; the file is
        read again only where it changed since this process last read or wrote it). Written at once where
        the last write is WRITE_EVERY_S old, else at the next such put, ``flush`` or the process's end (a
        first forward tunes layer after layer: one write of the whole file each cost 3-7 ms)."""
        with self._lock:
            if self._entries is None or self._stamp() != self._written:
                self._entries = {**(self._entries or {}), **self._read(warn=False)}
            self._entries[cache_key(shape, batch, precision)] = entry
            self._dirty = True
            if time.monotonic() - self._last_write >= WRITE_EVERY_S:
                self._write()
            elif not self._exit_flush:
                self._exit_flush = True
                atexit.register(self.flush)

    def flush(self):
        """Write what ``put`` kept back, if anything."""
        with self._lock:
            if self._dirty:
                if self._stamp() != self._written:          # another process wrote since: keep its entries
                    self._entries = {**self._read(warn=False), **self._entries}
                self._write()

    def _write(self):
        data = {"device": self.device_name, "entries": dict(sorted(self._entries.items()))}
        self._dirty, self._last_write = False, time.monotonic()
        try:
            atomic_write(self.path, (json.dumps(data, indent=1) + "\n").encode())
            self._written = self._stamp()
        except OSError as exc:
            _warn(f"cannot write the autotune cache {self.path} ({exc}); tuning is kept for this process only")


_caches = {}
_caches_lock = threading.Lock()


def cache_for(device_name):
    with _caches_lock:
        if device_name not in _caches:
            _caches[device_name] = TuneCache(device_name)
        return _caches[device_name]


def forget_caches():
    """Drop the in-process copies, written out first (a test's fresh process)."""
    with _caches_lock:
        for cache in _caches.values():
            cache.flush()
        _caches.clear()


def pick(timings):
    """The fastest of [(version, overrides, seconds[, GPU seconds])] (seconds None: not timed). Among those
    within HOST_TIE of the fastest, the one of least GPU time: where the host's floor sets the figure
    (a small layer), every one-launch candidate ties there, and the choice goes to the fastest kernel
    (what a layer whose input is not in L2 waits for) instead of to the noise."""
    timed = [t for t in timings if t[2] is not None]
    if not timed:
        return None
    best = min(t[2] for t in timed)
    tied = [t for t in timed if t[2] <= best * (1 + HOST_TIE)]
    return min(tied, key=lambda t: (_seconds(t)[1], t[2]))


def _seconds(timing):
    """(figure, GPU seconds) of one timing; a timing without a GPU figure: its figure twice."""
    return timing[2], timing[3] if len(timing) > 3 and timing[3] is not None else timing[2]


def choose(dev, shape, batch, measure=None, log=_warn, precision=None):
    """(version, overrides) for ``shape`` at ``batch`` on ``dev`` under ``precision``: the cached tuning, else
    tuned now (and cached), else None (tuning off, or no candidate). ``measure(dev, shape, batch,
    candidates, budget)`` returns [(version, overrides, seconds)]; default ``measure_on_device``."""
    if not enabled():
        return None
    precision = parse_precision(precision)
    cache = cache_for(dev.name)
    stored = cache.get(shape, batch, precision)
    if stored is not None:
        return stored
    every = candidates(shape, dev.arch, precision)
    options = prior_candidates(cache, shape, batch, precision, every)
    if not options:
        return None
    start = time.perf_counter()
    budget = budget_s() if len(options) == len(every) else min(budget_s(), PRIOR_BUDGET_S)
    timings = (measure or measure_on_device)(dev, shape, batch, options, budget)
    best = pick(timings)
    if best is None:
        return None
    seconds = time.perf_counter() - start
    cache.put(shape, batch, {
        "version": best[0], "overrides": best[1], "ms": round(best[2] * 1e3, 4), "batch": int(batch),
        "source": source_key(), "date": datetime.date.today().isoformat(), "seconds": round(seconds, 2),
        "timings": [[describe(t[0], t[1])] + [None if v is None else round(v * 1e3, 4) for v in _seconds(t)]
                    for t in timings]}, precision)
    if seconds > NOTE_S and log is not None:
        log(f"autotuned {cache_key(shape, batch, precision)} in {seconds:.1f} s: {describe(best[0], best[1])} "
            f"{best[2] * 1e3:.3f} ms (kernel {_seconds(best)[1] * 1e3:.3f}), chosen of "
            f"{sum(t[2] is not None for t in timings)}; cached in {cache.path}")
    return best[0], best[1]


def _median(repeats, which=0):
    return statistics.median(r[which] for r in repeats)


_last_tuned = [0.0]               # perf_counter when the last tuning ended (the GPU busy until then)
SCRATCH_KEEP_BYTES = 256 << 20   # scratch kept for the next layer's tuning up to this much (a first forward
                                 # tunes layer after layer: no free and allocation between them)


def measure_on_device(dev, shape, batch, options, budget):
    """Time each of ``options`` on scratch data of the layer's size (on the legacy default stream, with
    the caller's stream set aside); [(version, overrides, median seconds, median GPU seconds)], the
    seconds None where not timed."""
    modules = [module_spec(n, VERSIONS[n].inner(shape), o) for n, o in options]
    try:
        missing = [m for m in modules if not dev.has_module(m)]
        if missing:                  # nvcc in parallel, before any timing; the first time, with the modules most
            precision = "fp32" if all(VERSIONS[n].exact for n, _ in options) else "tf32" if any(      # layers
                o.get("TF32_PASSES") == 1 for _, o in options) else DEFAULT_PRECISION                  # share
            precompile(missing + _shared_once(dev.arch, precision, shape), dev.arch)
    except GpuError:                                         # one that does not build (v20 with an nvcc
        built = []                                           # without sm_90a): the others are timed
        for option, module in zip(options, modules):
            try:
                precompile([module], dev.arch)
                built.append(option)
            except GpuError as exc:
                _warn(f"not tuning {describe(*option)}: {str(exc).splitlines()[0]}")
        timings = measure_on_device(dev, shape, batch, built, budget) if built else []
        return timings + [(n, o, None, None) for n, o in options if (n, o) not in built]
    spent = 0.0
    sizes = (batch * shape.C * shape.H * shape.W, shape.M * shape.CKK, shape.M, shape.outputs(batch))
    previous = cudadrv.set_stream(0)
    try:
        with dev.active():
            x, k, bias, y = (dev.buffer(name, 4 * n) for name, n in zip(SCRATCH, sizes))
            for pointer, count in ((x, sizes[0]), (k, sizes[1]), (bias, sizes[2])):
                cudadrv.memset_d32_async(pointer, 0x3F000000, count)        # 0.5f: finite sums
            start, end = dev.cuda.Event(), dev.cuda.Event()

            def timed(run, calls):
                """(the cost of one call: the GPU's time, or where the launches' host time plus a front-end's
                (CALLER_HOST_S) is longer, that: a small layer called back to back waits on the host;
                the GPU's time)."""
                start.record()
                began = time.perf_counter()
                for _ in range(calls):
                    run()
                host = (time.perf_counter() - began) / calls
                end.record()
                end.synchronize()
                gpu = start.time_till(end) / 1e3 / calls
                return max(gpu, host + CALLER_HOST_S), gpu

            def recorded(plan):
                """(run: a replay of the plan's launches, recorded once untimed, as a network call does;
                the device's workspace generation it was recorded in)."""
                with cudadrv.Recording(()) as recording:
                    plan.launch(int(y), int(x), int(k), int(bias) if shape.BIAS else 0, batch)
                return (lambda: recording.replay((), 0)), dev.generation

            # Pass 1: each candidate set up and timed REPEATS[0] times, while the budget lasts.
            plans, times, first_best = [], [], float("inf")
            for index, (number, overrides) in enumerate(options):
                if spent > budget:
                    plans.append(None)
                    times.append([])
                    continue
                plan = plan_for(dev, shape, number, overrides)
                run, generation = recorded(plan)
                began = time.perf_counter()
                if index == 0 and began - _last_tuned[0] > IDLE_S:    # raise the clocks first (WARM_S of it)
                    while time.perf_counter() - began < WARM_S:
                        timed(run, 4)
                # each repeat times enough back-to-back launches for MIN_REPEAT_S of work: the launches'
                # host cost stays out of a small layer's figure
                first = timed(run, 1)
                first_best = min(first_best, first[0])
                calls = max(1, min(MAX_CALLS, math.ceil(MIN_REPEAT_S / max(first[0], 1e-7))))
                if first[0] > EARLY_OUT * first_best:        # cannot win: its one call is its figure
                    times.append([first])
                else:
                    times.append([timed(run, calls) for _ in range(REPEATS[0])])
                plans.append([plan, run, generation, calls])
                spent += time.perf_counter() - began
            # Pass 2: the rest of the budget on the contenders (within CONTENDERS of the best median so far),
            # a repeat each in turn, up to REPEATS[1]: the precision goes where the choice is made.
            while spent < budget:
                timed_ones = [_median(t) for t in times if t]
                if not timed_ones:
                    break
                best = min(timed_ones)
                todo = [i for i, t in enumerate(times)
                        if t and len(t) < REPEATS[1] and _median(t) <= CONTENDERS * best]
                if not todo:
                    break
                began = time.perf_counter()
                for i in todo:
                    plan, run, generation, calls = plans[i]
                    if generation != dev.generation:     # a workspace it replays into was reallocated since
                        run, generation = recorded(plan)
                        plans[i][1:3] = run, generation
                    times[i].append(timed(run, calls))
                spent += time.perf_counter() - began
            out = [(number, overrides, _median(t), _median(t, 1)) if t else (number, overrides, None, None)
                   for (number, overrides), t in zip(options, times)]
    finally:
        if sum(sizes) * 4 > SCRATCH_KEEP_BYTES:
            for name in SCRATCH:
                dev.free_buffer(name)
        cudadrv.set_stream(previous)
        _last_tuned[0] = time.perf_counter()
    return out
