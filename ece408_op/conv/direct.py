"""Direct convolution compiled by Numba: the CPU path for any ConvSpec (padding, stride, dilation,
groups, depthwise, rectangular kernels, bias), float32, written straight into ``out``.

How a layer runs (``DirectPlan``):

1. **x re-laid out as phase planes** (``relayout``, parallel): for strides SH x SW the padded input
   becomes SH*SW planes per channel, plane (rh, rw) holding rows rh, rh+SH, ... and columns
   rw, rw+SW, ... (Hq x Wq each). A strided, dilated convolution is then a stride-1 one over the
   planes: tap (c, p, q) reads plane ((p*DH) % SH, (q*DW) % SW) of channel c, shifted by
   ((p*DH) // SH) rows and ((q*DW) // SW) columns (its offset: ``tap_offsets``). A 1x1 stride-1
   layer without padding reads x as it is.
2. **Output positions in flat blocks**: output (i, j) is virtual position v = i*Wq + j, and tap t
   reads the planes at v + offset[t]: WB consecutive positions read WB consecutive floats, whatever
   the stride, dilation or padding. A block that crosses a row end computes Wq - WO positions that
   are not outputs (3% of a ResNet 56x56 layer, 14% of the course's 28x28 K5 layer) and does not
   store them; the last block ends at the last output (it overlaps the one before).
3. **Register blocking** (the generated ``conv_MB_WB`` kernels): MB output channels x WB positions
   accumulate in MB*WB scalars that LLVM's SLP vectoriser packs into MB*WB/8 AVX2 registers; each
   tap loads WB/8 vectors of x and broadcasts MB weights (weights re-laid out per call as
   [group, channel block, tap, MB], zero rows past the last filter). The reduction over taps is one
   loop over a table of offsets. ``fastmath`` allows contraction into FMAs but not reassociation:
   with reassociation LLVM vectorises the tap loop itself (a horizontal reduction per accumulator)
   and spills (measured 1-4 GFLOP/s instead of 45 per core).
4. Work units (image, group, chunk of positions) run under ``prange``; each unit loops over its
   channel blocks outside its position blocks, so a chunk's input stays in cache across them.

Tiles: ``tile_for`` (a small table: MB from the group's filter count, WB from MB). Kernels are
generated per (MB, WB) and compiled once per machine (``numba_env``: cache folder, first-compile
note). Where Numba is unavailable, ``conv/cpu.py`` keeps its im2col + OpenBLAS path.
"""
import functools
import threading
from dataclasses import dataclass

import numpy as np

from . import numba_env
from .parallel import pool_size

FASTMATH = '{"contract", "nnan", "ninf", "nsz", "arcp", "afn"}'     # everything but reassociation
CHUNK_TARGET = 4            # position chunks: about this many work units per thread at least
CHUNK_BLOCKS_MAX = 64       # at most this many blocks of positions per unit (a chunk's x stays in L2)
_kernels = {}
_kernels_lock = threading.Lock()


def available():
    return numba_env.load() is not None


# ---------------------------------------------------------------- generated kernels

def kernel_source(mb, wb):
    """Python source of the (MB, WB) kernel (see the module docstring, step 3)."""
    c = [f"U{n} = np.uint64({n})" for n in range(max(mb, wb) + 1)]
    lines = ["import numpy as np", "from numba import prange", "from ece408_op.conv import numba_env", ""] + c + [
        "",
        "",
        f"@numba_env.njit(parallel=True, fastmath={FASTMATH}, nogil=True)",
        f"def conv_{mb}_{wb}(y, xs, wt, toff, bias, add, Cplane, Wq, HO, WO, Mg, G, chunks):",
        f'    """y[b, g*Mg + m, i, j] (=|+=) bias + sum over taps of wt * xs: blocks of {mb} filters x {wb}',
        '    positions (one work unit: an image, a group, a chunk of position blocks)."""',
        "    B = y.shape[0]",
        "    nmb = wt.shape[1]",
        "    T = toff.shape[0]",
        "    HW = HO * WO",
        "    vmax = (HO - 1) * Wq + WO",
        f"    nblk = (vmax + {wb - 1}) // {wb}",
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
        "        for mb in range(nmb):",
        "            wb = wt[g, mb]",
        f"            m0 = g * Mg + mb * {mb}",
        f"            mcount = min({mb}, Mg - mb * {mb})",
        "            for k in range(k0, k1):",
        f"                v0 = min(k * {wb}, vmax - {wb})",
        "                base = gbase + np.uint64(v0)",
    ]
    lines += [f"                a_{m}_{j} = np.float32(0)" for m in range(mb) for j in range(wb)]
    lines += ["                s = U0",
              "                for t in range(T):",
              "                    o = base + toff[t]"]
    lines += [f"                    x_{j} = xb[o + U{j}]" for j in range(wb)]
    lines += [f"                    w_{m} = wb[s + U{m}]" for m in range(mb)]
    lines += [f"                    a_{m}_{j} += w_{m} * x_{j}" for m in range(mb) for j in range(wb)]
    lines += ["                    s += UMB"]
    lines += [f"                acc[{m}, {j}] = a_{m}_{j}" for m in range(mb) for j in range(wb)]
    lines += [
        f"                lane0 = k * {wb} - v0             # lanes the block before stored (the last block overlaps it)",
        "                v = v0 + lane0",
        "                i = v // Wq",
        "                j = v - i * Wq",
        f"                if j + {wb} - lane0 <= WO:         # all in one row: contiguous stores",
        "                    for m in range(mcount):",
        "                        bb = bias[m0 + m]",
        "                        ys = yv[b, m0 + m, i * WO + j:]",
        "                        am = acc[m]",
        "                        if add:",
        f"                            for lane in range(lane0, {wb}):",
        "                                ys[lane - lane0] += am[lane] + bb",
        "                        else:",
        f"                            for lane in range(lane0, {wb}):",
        "                                ys[lane - lane0] = am[lane] + bb",
        "                else:",
        f"                    for lane in range(lane0, {wb}):",
        "                        if j < WO:",
        "                            for m in range(mcount):",
        "                                if add:",
        "                                    yv[b, m0 + m, i * WO + j] += acc[m, lane] + bias[m0 + m]",
        "                                else:",
        "                                    yv[b, m0 + m, i * WO + j] = acc[m, lane] + bias[m0 + m]",
        "                        j += 1",
        "                        if j == Wq:",
        "                            j = 0",
        "                            i += 1",
    ]
    return "\n".join(lines) + "\n"


def kernel(mb, wb):
    """The compiled (MB, WB) kernel's dispatcher (generated and imported once per process)."""
    key = (mb, wb)
    if key not in _kernels:
        with _kernels_lock:
            if key not in _kernels:
                module = numba_env.load_source(f"conv_{mb}_{wb}", kernel_source(mb, wb))
                _kernels[key] = getattr(module, f"conv_{mb}_{wb}")
    return _kernels[key]


# ---------------------------------------------------------------- the layout kernels

def helpers():
    """The plain-loop kernels of ``direct_loops`` (imported, so compiled or loaded, on first use)."""
    from . import direct_loops
    return direct_loops


# ---------------------------------------------------------------- plans

# MB (filters per block) -> WB (positions per block): measured on the ResNet 3x3 layer, one thread:
# (4, 16) 45 GFLOP/s, (3, 32) 53, (2, 32) 47, (6, 16) 39 (spills), (4, 24) 27 (a 24-wide block packs badly)
TILES = {4: 16, 3: 32, 2: 32, 1: 32}


def tile_for(filters_per_group):
    """(MB, WB) for a group of ``filters_per_group`` filters: 4 filters a block unless 3 divides the
    count and 4 does not (M = 6: no padded filters), fewer where the group has fewer."""
    mg = filters_per_group
    if mg < 4:
        mb = mg
    elif mg % 4 and mg % 3 == 0:
        mb = 3
    else:
        mb = 4
    return mb, TILES[mb]


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
                      hq, wq, direct, toff)


_local = threading.local()


def _scratch(name, shape):
    buffers = _local.__dict__.setdefault("buffers", {})
    size = int(np.prod(shape))
    buffer = buffers.get(name)
    if buffer is None or buffer.size < size:
        buffer = buffers[name] = np.empty(max(size, 1), np.float32)
    return buffer[:size].reshape(shape)


def chunks_for(plan, batch, threads):
    """Position chunks per (image, group): enough units for every thread, a chunk's input in cache."""
    _, _, ho, wo = plan.y_shape
    blocks = -(-((ho - 1) * plan.wq + wo) // plan.wb)
    units = batch * plan.groups
    want = max(1, -(-CHUNK_TARGET * threads // units), -(-blocks // CHUNK_BLOCKS_MAX))
    return min(blocks, want)


def conv2d_forward_direct(x, k, bias, spec, out, accumulate=False, threads=None):
    """out (=|+=) conv(x, k) + bias with the compiled kernels; x, k, out C-contiguous float32."""
    plan = plan_for(tuple(x.shape), tuple(k.shape), spec)
    batch = x.shape[0]
    threads = numba_env.set_threads(threads or pool_size())
    loops = helpers()
    m, cg, kh, kw = k.shape
    nmb = -(-(m // plan.groups) // plan.mb)
    wt = _scratch("weights", (plan.groups, nmb, cg * kh * kw * plan.mb))
    _call(loops.weight_layout, wt, k, plan.groups, plan.mb)
    if plan.direct:
        xs = x.reshape(batch, -1)
    else:
        xs = _scratch("planes", (batch, plan.xs_len))
        _call(loops.relayout, xs, x, *plan.stride, *plan.pad, plan.hq, plan.wq)
    bias_vec = bias if bias is not None and bias.flags.writeable else _bias(m, bias)
    fn = kernel(plan.mb, plan.wb)
    _, _, ho, wo = plan.y_shape
    _call(fn, out, xs, wt, plan.toff, bias_vec, bool(accumulate), cg * plan.stride[0] * plan.stride[1]
                   * plan.hq * plan.wq, plan.wq, ho, wo, m // plan.groups, plan.groups,
                   chunks_for(plan, batch, threads))
    return out


def _bias(m, bias):
    """The bias as a writable array (zeros without one): one argument type, one compilation."""
    held = _scratch("bias", (m,))
    held[:] = 0 if bias is None else bias
    return held


_compiled = set()


def _call(fn, *args):
    """fn(*args), compiled (or loaded from the cache) with the first-compile note on its first call
    for these argument kinds in this process."""
    key = (fn, tuple(a.flags.writeable for a in args if isinstance(a, np.ndarray)))
    if key not in _compiled:
        numba_env.compile_for(fn, args)
        _compiled.add(key)
    return fn(*args)


