"""Direct convolution compiled by Numba: the CPU path for any ConvSpec (padding, stride, dilation,
groups, depthwise, rectangular kernels, bias), float32, written straight into ``out``.

How a layer runs (``DirectPlan``):

1. **x re-laid out as phase planes** (``direct_loops.relayout``): for strides SH x SW the padded input
   becomes SH*SW planes per channel, plane (rh, rw) holding rows rh, rh+SH, ... and columns
   rw, rw+SW, ... (Hq x Wq each). A strided, dilated convolution is then a stride-1 one over the
   planes: tap (c, p, q) reads plane ((p*DH) % SH, (q*DW) % SW) of channel c, shifted by
   ((p*DH) // SH) rows and ((q*DW) // SW) columns (its offset: ``DirectPlan.toff``). A 1x1 stride-1
   layer without padding reads x as it is; a strided 1x1 layer, its one plane.
2. **Output positions in flat blocks**: output (i, j) is virtual position v = i*Wq + j, and tap t
   reads the planes at v + offset[t]: WB consecutive positions read WB consecutive floats, whatever
   the stride, dilation or padding. A block that crosses a row end computes Wq - WO positions that
   are not outputs (3% of a ResNet 56x56 layer, 14% of the course's 28x28 K5 layer) and does not
   store them; the last block ends at the last output (it overlaps the one before).
3. **Register blocking** (the generated ``flat_MB_WB`` and ``rows_MB_WB`` kernels, ``kernel_source``:
   ``rows`` keeps blocks inside output rows, for layers of few taps): MB output channels x WB positions
   accumulate in MB*WB scalars that LLVM's SLP vectoriser packs into MB*WB/8 AVX2 registers; each
   tap loads WB/8 vectors of x and broadcasts MB weights (weights re-laid out per call as
   [group, channel block, tap, MB], zero rows past the last filter). The reduction over taps is one
   loop over a table of offsets. ``fastmath`` allows contraction into FMAs but not reassociation:
   with reassociation LLVM vectorises the tap loop itself (a horizontal reduction per accumulator)
   and spills (measured 1-4 GFLOP/s instead of 45 per core).
4. Work units (image, group, chunk of positions) run under ``prange``; each unit loops over its
   filter blocks inside its position blocks, so a block's inputs stay in L1 across them (measured:
   the 1x1 C=256 layer 32 -> 46 GFLOP/s per core against the other order), and a chunk's in L2.

5. Depthwise layers: ``direct_loops.depthwise``, one long loop per tap over each phase plane; 3x3 stride-1
   ones ``direct_loops.depthwise3x3``: each (image, channel) re-laid out by its own unit, in cache, and
   each output row one loop of the nine taps.

Tiles: ``tile_for`` and ``row_tile_for`` (small tables measured here: MB from the group's filter count,
WB from MB). Kernels are generated per (MB, WB) and compiled once per machine (``numba_env``: cache
folder, first-compile note). Where Numba is unavailable, ``conv/cpu.py`` keeps its im2col + OpenBLAS
path; ``winograd.py`` (opt-in) runs its products on these kernels.
"""
import functools
import threading
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError
from . import numba_env
from .parallel import pool_size

FASTMATH = '{"contract", "nnan", "ninf", "nsz", "arcp", "afn"}'     # everything but reassociation
CHUNK_TARGET = 4            # position chunks: about this many work units per thread at least
CHUNK_BYTES = 256 << 10     # the input rows one chunk of positions reads, all channels: kept in L2 (512 KB)
_kernels = {}
_kernels_lock = threading.Lock()


def available():
    return numba_env.load() is not None


# ---------------------------------------------------------------- generated kernels

def _header(name, mb, wb, rows):
    """The generated function's start, up to the top of its loop over blocks (``k``)."""
    extra = "" if rows else "add, "
    return [
        f"@numba_env.njit(parallel=True, fastmath={FASTMATH}, nogil=True)",
        f"def {name}(y, xs, wt, toff, bias, {extra}Cplane, Wq, HO, WO, Mg, G, chunks):",
        f'    """y[b, g*Mg + m, i, j] {"=" if rows else "(=|+=)"} bias + sum over taps of wt * xs: blocks of {mb} '
        f'filters x {wb} positions',
        f'    ({"within a row" if rows else "flat"}; one work unit: an image, a group, a chunk of blocks)."""',
        "    B = y.shape[0]",
        "    nmb = wt.shape[1]",
        "    T = toff.shape[0]",
        "    HW = HO * WO",
        "    vmax = (HO - 1) * Wq + WO",
        f"    nj = (WO + {wb - 1}) // {wb}" if rows else "    nj = 1",
        "    nblk = HO * nj" if rows else f"    nblk = (vmax + {wb - 1}) // {wb}",
        "    per = (nblk + chunks - 1) // chunks",
        f"    UMB = np.uint64({mb})",
        "    yv = y.reshape(B, y.shape[1], HW)",
        "    for unit in prange(B * G * chunks):",
        "        b = unit // (G * chunks)",
        "        g = (unit // chunks) % G",
        "        k0 = (unit % chunks) * per",
        "        k1 = min(nblk, k0 + per)",
        "        xb = xs[b]",
        "        gbase = np.uint64(g * Cplane)",
        f"        acc = np.empty(({mb}, {wb}), np.float32)",
        "        for k in range(k0, k1):",
        "            for mb in range(nmb):         # a block's inputs stay in L1 across the filter blocks",
        "                wb = wt[g, mb]",
        f"                m0 = g * Mg + mb * {mb}",
        f"                mcount = min({mb}, Mg - mb * {mb})",
    ]


def _accumulate(mb, wb):
    """The register block: MB x WB scalar accumulators over every tap (base: the block's first input)."""
    lines = [f"                a_{m}_{j} = np.float32(0)" for m in range(mb) for j in range(wb)]
    lines += ["                s = U0",
              "                for t in range(T):",
              "                    o = base + toff[t]"]
    lines += [f"                    x_{j} = xb[o + U{j}]" for j in range(wb)]
    lines += [f"                    w_{m} = wb[s + U{m}]" for m in range(mb)]
    lines += [f"                    a_{m}_{j} += w_{m} * x_{j}" for m in range(mb) for j in range(wb)]
    lines += ["                    s += UMB"]
    return lines


def kernel_source(mb, wb):
    """Python source of the (MB, WB) kernels (see the module docstring, step 3): ``flat_MB_WB`` (blocks
    of consecutive virtual positions, any layer, req 'write' or 'add') and ``rows_MB_WB`` (blocks inside
    output rows, the last one of a row overlapping the one before: every store a contiguous one; for
    layers with few taps, where the flat kernel's row-crossing stores cost as much as the taps)."""
    c = [f"U{n} = np.uint64({n})" for n in range(max(mb, wb) + 1)]
    lines = ["import numpy as np", "from ece408_op.conv import numba_env", "from numba import prange", ""] + c + ["", ""]
    lines += _header(f"flat_{mb}_{wb}", mb, wb, rows=False)
    lines += [f"                v0 = min(k * {wb}, vmax - {wb})",
              "                base = gbase + np.uint64(v0)"]
    lines += _accumulate(mb, wb)
    lines += ["                i = v0 // Wq",
              "                j = v0 - i * Wq",
              f"                if (Wq == WO or j + {wb} <= WO) and (not add or v0 == k * {wb}):",
              "                    # the block's outputs are contiguous in y: stores from the registers (a block",
              "                    # overlapping the one before stores its outputs again, the same values)"]
    for m in range(mb):
        lines += [f"                    if {m} < mcount:",
                  f"                        bb = bias[m0 + {m}]",
                  f"                        ys = yv[b, m0 + {m}, i * WO + j:i * WO + j + {wb}]",
                  "                        if add:"]
        lines += [f"                            ys[{j}] += a_{m}_{j} + bb" for j in range(wb)]
        lines += ["                        else:"]
        lines += [f"                            ys[{j}] = a_{m}_{j} + bb" for j in range(wb)]
    lines += ["                    continue"]
    lines += [f"                acc[{m}, {j}] = a_{m}_{j}" for m in range(mb) for j in range(wb)]
    lines += [
        f"                lane = k * {wb} - v0               # lanes the block before stored (the last block overlaps it)",
        "                v = v0 + lane",
        "                i = v // Wq",
        "                j = v - i * Wq",
        f"                while lane < {wb}:                 # row segments of the block, contiguous stores",
        "                    if j >= WO:                    # positions past a row's last output: not outputs",
        "                        lane += Wq - j",
        "                        i += 1",
        "                        j = 0",
        "                        continue",
        f"                    n = min({wb} - lane, WO - j)",
        "                    for m in range(mcount):",
        "                        bb = bias[m0 + m]",
        "                        ys = yv[b, m0 + m, i * WO + j:i * WO + j + n]",
        "                        am = acc[m, lane:lane + n]",
        "                        if add:",
        "                            for e in range(n):",
        "                                ys[e] += am[e] + bb",
        "                        else:",
        "                            for e in range(n):",
        "                                ys[e] = am[e] + bb",
        "                    lane += n",
        "                    j += n",
        "",
        "",
    ]
    lines += _header(f"rows_{mb}_{wb}", mb, wb, rows=True)
    lines += ["                i = k // nj",
              f"                j0 = min((k - i * nj) * {wb}, WO - {wb})",
              "                base = gbase + np.uint64(i * Wq + j0)"]
    lines += _accumulate(mb, wb)
    for m in range(mb):
        lines += [f"                if {m} < mcount:",
                  f"                    bb = bias[m0 + {m}]",
                  f"                    ys = yv[b, m0 + {m}, i * WO + j0:i * WO + j0 + {wb}]"]
        lines += [f"                    ys[{j}] = a_{m}_{j} + bb" for j in range(wb)]
    return "\n".join(lines) + "\n"


def kernel(mb, wb, rows=False):
    """The compiled (MB, WB) kernel's dispatcher, ``rows_`` or ``flat_`` (generated and imported once
    per process; each compiled on its first call)."""
    key = (mb, wb)
    if key not in _kernels:
        with _kernels_lock:
            if key not in _kernels:
                _kernels[key] = numba_env.load_source(f"conv_{mb}_{wb}", kernel_source(mb, wb))
    return getattr(_kernels[key], f"{'rows' if rows else 'flat'}_{mb}_{wb}")


# ---------------------------------------------------------------- the layout kernels

def helpers():
    """The plain-loop kernels of ``direct_loops`` (imported, so compiled or loaded, on first use)."""
    from . import direct_loops
    return direct_loops


# ---------------------------------------------------------------- plans

# MB (filters per block) -> WB (positions per block). Measured here (2026-11-23, one thread, CPU time,
# useful GFLOP/s on the ResNet 3x3 layer B1 / the 2019 conv2 layer B100): (4, 16) 66 / 59, (6, 16) 55 / 57,
# (12, 8) 44 / 43, (8, 8) 44 / 39, (2, 48) 31 / 28, (3, 32) 26 / 25 (12 x 4 accumulators: spills);
# (4, 24) 27 in a first prototype (a 24-wide block packs badly).
TILES = {6: 16, 4: 16, 3: 16, 2: 32, 1: 32}


def tile_for(filters_per_group):
    """(MB, WB) for a group of ``filters_per_group`` filters: 4 filters a block, 6 where 6 divides the
    count and 4 does not (2018 conv1's M = 6: no padded filters), all of them where the group has fewer."""
    mg = filters_per_group
    if mg < 4:
        mb = mg
    elif mg % 4 and mg % 6 == 0:
        mb = 6
    else:
        mb = 4
    return mb, TILES[mb]


# The rows kernels serve layers of at most ROWS_MAX_TAPS taps (the course's layers: 25 to 300), where
# the flat kernel's row-crossing stores cost a good part of the taps' time; the flat one serves layers
# with more taps (a ResNet 3x3: 576), where its 3% of non-output positions cost less than a row's
# overlapping last block (12% at 56 columns). Measured here (2026-11-23, one thread, CPU time, useful
# GFLOP/s, 100 images of each course layer, machine load 5 on 2 cores: +-30%), flat (4, 16) / rows
# (4, 16) / rows (8, 8) / rows (6, 16): 2017 (M=50) 22 / 31 / 26 / 24 (an earlier run: 30 / 34 / 48 / -);
# 2018 conv1 (M=6) 44 / 34 / 30 / 35; 2018 conv2 (C=6) 46 / 63 / 46 / 39; 2019 conv1 (M=12) 33 / 40 / 33
# / 36; 2019 conv2 (C=12) 45 / 55 / 40 / 37. Among ROW_TILES the one computing the fewest padded filters
# x padded columns wins (ties: the first).
ROWS_MAX_TAPS = 320
ROW_TILES = ((4, 16), (8, 8), (6, 16))


def row_tile_for(filters_per_group, wo):
    """The rows kernel's (MB, WB) for a group's filter count and output width (None: none fits)."""
    fits = [(mb, wb) for mb, wb in ROW_TILES if wb <= wo]
    if not fits:
        return None
    return min(fits, key=lambda t: (-(-filters_per_group // t[0]) * t[0]) * (-(-wo // t[1]) * t[1]))


@dataclass(frozen=True)
class DirectPlan:
    x_shape: tuple
    k_shape: tuple
    y_shape: tuple
    stride: tuple
    pad: tuple
    dilate: tuple
    groups: int
    mb: int
    wb: int
    hq: int
    wq: int
    direct: bool              # x read as it is (1x1, stride 1, no padding)
    depthwise: bool           # one input channel per group: the ``depthwise`` loop kernel
    row_tile: tuple           # (MB, WB) of the rows kernel where it serves the layer (req 'write'), else None
    toff: np.ndarray

    @property
    def xs_len(self):
        c = self.x_shape[1]
        return c * self.stride[0] * self.stride[1] * self.hq * self.wq + self.wq + self.wb


def unsupported(x_shape, k_shape, spec):
    """Why the direct kernels do not run this layer (None: they do)."""
    if not available():
        return f"Numba unavailable: {numba_env.unavailable()}"
    _, m, ho, wo = spec.output_shape(x_shape)
    mg = m // spec.num_group
    _, wb = tile_for(mg)
    sh, sw = spec.stride
    wq = -(-(x_shape[3] + 2 * spec.pad[1]) // sw)
    if (ho - 1) * wq + wo < wb:
        return f"an output plane of {ho}x{wo} is smaller than one block of {wb} positions"
    return None


@functools.lru_cache(maxsize=256)
def plan_for(x_shape, k_shape, spec):
    _, c, h, w = x_shape
    m, cg, kh, kw = k_shape
    (sh, sw), (ph, pw), (dh, dw), groups = spec.stride, spec.pad, spec.dilate, spec.num_group
    y_shape = spec.output_shape(x_shape)
    hq, wq = -(-(h + 2 * ph) // sh), -(-(w + 2 * pw) // sw)
    mb, wb = tile_for(m // groups)
    direct = (kh, kw) == (1, 1) and (sh, sw) == (1, 1) and (ph, pw) == (0, 0)
    plane = hq * wq
    toff = np.array([((cc * sh + (p * dh) % sh) * sw + (q * dw) % sw) * plane + ((p * dh) // sh) * wq
                     + (q * dw) // sw for cc in range(cg) for p in range(kh) for q in range(kw)], np.uint64)
    return DirectPlan(tuple(x_shape), tuple(k_shape), y_shape, (sh, sw), (ph, pw), (dh, dw), groups, mb, wb,
                      hq, wq, direct, cg == 1 and groups > 1,
                      row_tile_for(m // groups, y_shape[3]) if cg * kh * kw <= ROWS_MAX_TAPS else None, toff)


_local = threading.local()


def _scratch(name, shape):
    buffers = _local.__dict__.setdefault("buffers", {})
    size = int(np.prod(shape))
    buffer = buffers.get(name)
    if buffer is None or buffer.size < size:
        buffer = buffers[name] = np.empty(max(size, 1), np.float32)
    return buffer[:size].reshape(shape)


def chunks_for(plan, batch, threads, wb=None, rows=False):
    """Position chunks per (image, group): enough units for every thread, a chunk's input in cache."""
    _, _, ho, wo = plan.y_shape
    wb = wb or plan.wb
    blocks = ho * -(-wo // wb) if rows else -(-((ho - 1) * plan.wq + wo) // wb)
    units = batch * plan.groups
    cg, kh = plan.k_shape[1], plan.k_shape[2]
    row_bytes = cg * plan.stride[0] * plan.stride[1] * plan.wq * 4          # one row of every plane
    halo = (kh - 1) * plan.dilate[0] // plan.stride[0]
    out_rows = max(1, CHUNK_BYTES // row_bytes - halo)                      # output rows a chunk may hold
    per_chunk = max(1, out_rows * (-(-wo // wb) if rows else plan.wq // wb))
    want = max(1, -(-CHUNK_TARGET * threads // units), -(-blocks // per_chunk))
    return min(blocks, want)


def conv2d_forward_direct(x, k, bias, spec, out, accumulate=False, threads=None):
    """out (=|+=) conv(x, k) + bias with the compiled kernels; x, k, out C-contiguous float32."""
    if k.shape[2:] == (1, 1) and spec.pad == (0, 0) and spec.stride != (1, 1):
        # a strided 1x1 reads one phase plane of SH*SW: that plane alone, as a 1x1 stride-1 layer's x
        x = np.ascontiguousarray(x[:, :, ::spec.stride[0], ::spec.stride[1]])
        spec = spec.with_(stride=(1, 1))
    why = unsupported(tuple(x.shape), tuple(k.shape), spec)
    if why is not None:                   # the kernels would read outside x: never run them there
        raise ShapeError(f"the direct kernels cannot run this layer: {why}")
    plan = plan_for(tuple(x.shape), tuple(k.shape), spec)
    batch = x.shape[0]
    threads = numba_env.set_threads(threads or pool_size())
    loops = helpers()
    m, cg, kh, kw = k.shape
    bias_vec = bias if bias is not None and bias.flags.writeable else _bias(m, bias)
    _, _, ho, wo = plan.y_shape
    if plan.depthwise and kh * kw == 9 and plan.stride == (1, 1):
        # each unit re-lays its own channel out (in cache); a strided one stays on ``depthwise``
        # below, where this was not faster (8x128x56x56 stride 2, one thread: 6.8-8.7 ms against 7.1-7.6)
        local = plan.hq * plan.wq + plan.wq + plan.wb
        _call(loops.depthwise3x3, out, x, k, plan.toff, bias_vec, bool(accumulate), *plan.stride, *plan.pad,
              plan.hq, plan.wq, ho, wo, local)
        return out
    if plan.direct:
        xs = x.reshape(batch, -1)
    else:
        xs = _scratch("planes", (batch, plan.xs_len))
        relayout = loops.relayout if x.size > loops.PARALLEL_RELAYOUT else loops.relayout_serial
        _call(relayout, xs, x, *plan.stride, *plan.pad, plan.hq, plan.wq)
    cplane = cg * plan.stride[0] * plan.stride[1] * plan.hq * plan.wq
    if plan.depthwise:
        _call(loops.depthwise, out, xs, k, plan.toff, bias_vec, bool(accumulate), cplane, plan.wq, ho, wo)
        return out
    rows = plan.row_tile is not None and not accumulate
    mb, wb = plan.row_tile if rows else (plan.mb, plan.wb)
    nmb = -(-(m // plan.groups) // mb)
    wt = _scratch("weights", (plan.groups, nmb, cg * kh * kw * mb))
    _call(loops.weight_layout, wt, k, plan.groups, mb)
    chunks = chunks_for(plan, batch, threads, wb, rows)
    if rows:
        _call(kernel(mb, wb, rows=True), out, xs, wt, plan.toff, bias_vec, cplane, plan.wq, ho, wo,
              m // plan.groups, plan.groups, chunks)
    else:
        _call(kernel(mb, wb), out, xs, wt, plan.toff, bias_vec, bool(accumulate), cplane, plan.wq, ho, wo,
              m // plan.groups, plan.groups, chunks)
    return out


def _bias(m, bias):
    """The bias as a writable array (zeros without one): one argument type, one compilation."""
    held = _scratch("bias", (m,))
    held[:] = 0 if bias is None else bias
    return held


_compiled = set()
_mode = threading.local()


@contextmanager
def compile_only():
    """Inside the block the path's kernels are compiled (or loaded from the cache) but not run: a
    caller keeps compilation out of a timed region (Op Time) by going through the same call once
    inside it first."""
    _mode.compile_only = True
    try:
        yield
    finally:
        _mode.compile_only = False


def compiling_only():
    return getattr(_mode, "compile_only", False)


def _call(fn, *args):
    """fn(*args), compiled (or loaded from the cache) with the first-compile note on its first call
    for these argument kinds in this process (only compiled inside ``compile_only``)."""
    key = (fn, tuple(a.flags.writeable for a in args if isinstance(a, np.ndarray)))
    if key not in _compiled:
        numba_env.compile_for(fn, args)
        _compiled.add(key)
    if getattr(_mode, "compile_only", False):
        return None
    with numba_env.parallel_guard():
        return fn(*args)




# Layers whose kernels ``warm_up_kernels`` compiles: the course models' (one image each), then a padded
# 3x3, a strided depthwise one and a 3x3 stride-1 one (the networks' usual flat kernel and both
# depthwise loops).
WARM_LAYERS = [((1, 1, 28, 28), dict(num_filter=50, kernel=5)),           # 2017: rows (8, 8)
               ((1, 1, 64, 64), dict(num_filter=6, kernel=5)),            # 2018 conv1: rows (6, 16)
               ((1, 6, 30, 30), dict(num_filter=16, kernel=5)),           # 2018 conv2: flat (4, 16)
               ((1, 1, 70, 70), dict(num_filter=12, kernel=5)),           # 2019 conv1: rows (4, 16)
               ((1, 12, 33, 33), dict(num_filter=24, kernel=5)),          # 2019 conv2: flat (4, 16)
               ((1, 16, 12, 12), dict(num_filter=32, kernel=3, pad=1)),
               ((1, 8, 12, 12), dict(num_filter=8, kernel=3, pad=1, stride=2, num_group=8)),
               ((1, 8, 12, 12), dict(num_filter=8, kernel=3, pad=1, num_group=8))]    # depthwise3x3


def warm_up_kernels():
    """Compile (or load from the cache) the kernels of WARM_LAYERS, both re-layouts and req 'add';
    returns the layers run."""
    from .spec import ConvSpec
    done = []
    for x_shape, attrs in WARM_LAYERS:
        spec = ConvSpec.from_attrs(**{k: str(v) for k, v in attrs.items()})
        x = np.ones(x_shape, np.float32)
        k = np.ones(spec.weight_shape(x_shape[1]), np.float32)
        out = np.zeros(spec.output_shape(x_shape), np.float32)
        conv2d_forward_direct(x, k, None, spec, out)
        conv2d_forward_direct(x, k, None, spec, out, accumulate=True)
        done.append((x_shape, spec))
    loops = helpers()
    _call(loops.relayout, np.empty((1, 40), np.float32), np.ones((1, 1, 4, 4), np.float32), 1, 1, 1, 1, 6, 6)
    return done
