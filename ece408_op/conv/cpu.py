"""CPU fast path for any ConvSpec: padding, stride, dilation, rectangular kernels, groups
(depthwise included), bias; float32.

Every layer whose output planes hold at least one block of positions runs on the direct kernels
compiled by Numba (``direct.py``). This file's im2col + OpenBLAS tiles are the fallback, with these
reasons: Numba is not installed or is disabled (``ECE408_NUMBA=0``), or the output planes are
smaller than one register block (16-32 positions: a 1x1 or 3x3 output, where the im2col products
are a few microseconds anyway).

A layer is cut into tiles (a block of images, or a block of output rows of one image), each
sized so that its working set stays in cache and its matrix products stay fast (``PANEL_BYTES``);
runs of tiles go to the shared thread pool with BLAS single-threaded inside it
(``parallel.run_parallel``). Each tile writes its part of y straight into ``out`` (MXNet's
memory), bias included, so y is written once: no zeroing pass, no second copy. Two kinds of tile:

* ``gemm``: im2col of the tile into a per-thread buffer (the padded input rows copied into a
  per-thread buffer first where there is padding), then one BLAS product per image and group,
  written into y's rows. A 1x1 kernel with stride 1 and no padding skips im2col: x is already
  the matrix.
* ``depthwise``: one input channel per group: multiply-add of the KH*KW shifted windows,
  vectorised over the channels (a matrix product would be a matrix-vector one per channel).

Plans (unit sizes, kinds) are computed once per layer shape and cached.
"""
import functools
import os
import threading
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..errors import ShapeError
from . import direct, winograd
from .parallel import pool_size, run_parallel
from .spec import ConvSpec

# Sizes that keep BLAS fast (measured with OpenBLAS on this project's CI machine, one thread):
# a product's right-hand matrix (C*KH*KW x columns) of at most PANEL_BYTES runs at 80-100 GFLOP/s,
# a 7 MB one at 30 (it no longer fits the core's L2 cache). A tile (a block of images, or a block
# of output rows of one image) is sized so that each product stays under PANEL_BYTES and the
# tile's whole im2col matrix under TILE_BYTES (72 images of the course layer).
PANEL_BYTES = 512 << 10
TILE_BYTES = 4 << 20
GEMM_PANEL_BYTES = 128 << 10   # one BLAS product's right-hand panel (see _products)
GEMM_MIN_COLUMNS = 112
GEMM_PANEL_MAX_ROWS = 32       # measured: panels help products of 16 and 24 rows, not of 64
UNITS_PER_THREAD = 4       # tiles are grouped into about this many units of work per pool thread
_local = threading.local()


def _scratch(name, size):
    """A float32 buffer of ``size`` elements owned by this thread, reused across calls."""
    buffers = _local.__dict__.setdefault("buffers", {})
    buffer = buffers.get(name)
    if buffer is None or buffer.size < size:
        buffer = buffers[name] = np.empty(max(size, 1), np.float32)
    return buffer[:size]


@dataclass(frozen=True)
class CpuPlan:
    """How one layer shape runs: the kind of tile and the tiles' sizes."""
    kind: str                  # 'gemm' or 'depthwise'
    spec: ConvSpec
    x_shape: tuple
    y_shape: tuple
    images: int                # images per tile
    rows: int                  # output rows per tile (HO: whole images)
    direct: bool               # gemm on x itself (1x1, stride 1, no padding)
    _units: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    def tiles(self, batch):
        ho = self.y_shape[2]
        return [(b0, min(self.images, batch - b0), r0, min(ho, r0 + self.rows))
                for b0 in range(0, batch, self.images) for r0 in range(0, ho, self.rows)]

    def units(self, batch):
        """The tiles, grouped into runs of consecutive tiles: the pool's units of work (cached)."""
        units = self._units.get(batch)
        if units is None:
            tiles = self.tiles(batch)
            per_unit = max(1, len(tiles) // (UNITS_PER_THREAD * pool_size()))
            units = self._units[batch] = [tiles[i:i + per_unit] for i in range(0, len(tiles), per_unit)]
        return units

    def input_rows(self, r0, r1):
        """(first input row, number of rows) of the padded input that output rows r0:r1 read."""
        (sh, _), (ph, _), (dh, _) = self.spec.stride, self.spec.pad, self.spec.dilate
        kh = self.spec.kernel[0]
        return r0 * sh - ph, (r1 - r0 - 1) * sh + dh * (kh - 1) + 1


@functools.lru_cache(maxsize=256)
def plan_for(x_shape, k_shape, spec):
    """The plan of a layer (cached per shape and spec); raises ShapeError where they don't fit."""
    y_shape = spec.check(x_shape, k_shape, None if spec.no_bias else (spec.num_filter,))
    _, _, _, _ = x_shape
    _, cg, kh, kw = k_shape
    _, m, ho, wo = y_shape
    groups = spec.num_group
    depthwise = cg == 1 and groups > 1
    direct = (kh, kw) == (1, 1) and spec.stride == (1, 1) and spec.pad == (0, 0)
    if depthwise:                                        # y's rows, a product and the windows
        panel_row = tile_row = m * wo * 4 * 3
    else:                                                # the im2col rows (x itself when direct)
        panel_row = cg * kh * kw * wo * 4
        tile_row = 0 if direct else panel_row
    rows = ho if panel_row * ho <= PANEL_BYTES else max(1, PANEL_BYTES // panel_row)
    images = 1 if rows < ho else max(1, min(TILE_BYTES // max(1, tile_row * ho), PANEL_BYTES * 8 // (panel_row * ho)))
    return CpuPlan("depthwise" if depthwise else "gemm", spec, tuple(x_shape), y_shape, images, rows, direct)


CPU_KERNELS = ("auto", "fast", "blas")
KERNEL_ENV = "ECE408_CPU_KERNEL"


def parse_cpu_kernel(text):
    """'auto' (or empty/None: then $ECE408_CPU_KERNEL, else auto), 'fast' or 'blas'; ShapeError otherwise."""
    choice = "" if text is None else str(text).strip().lower()
    if choice in ("", "auto"):
        choice = os.environ.get(KERNEL_ENV, "").strip().lower() or "auto"
        if choice not in CPU_KERNELS:
            raise ShapeError(f"{KERNEL_ENV}={choice!r} is not one of {', '.join(CPU_KERNELS)}")
    if choice not in CPU_KERNELS:
        raise ShapeError(f"cpu_kernel={text!r} is not one of {', '.join(CPU_KERNELS)} (auto: the direct "
                         "kernels compiled by Numba; fast: Winograd on 3x3 stride-1 layers, else auto; blas: im2col)")
    return choice


def prepare_cpu(x, k, bias=None, spec=None, out=None, accumulate=False, kernel=None):
    """Compile (or load from the cache) the kernels ``conv2d_forward_cpu`` would run with these
    arguments, without running them: for callers that time the forward (Op Time). A no-op on the BLAS
    path, and cheap once done (each kernel is compiled once per process)."""
    if direct.available():
        with direct.compile_only():
            conv2d_forward_cpu(x, k, bias, spec, out, accumulate, kernel)


def conv2d_forward_cpu(x, k, bias=None, spec=None, out=None, accumulate=False, kernel=None):
    """y = conv(x, k) (+ bias) for any ConvSpec (None: the course's layer), float32.

    ``out``: C-contiguous float32 array of y's shape to write into (e.g. MXNet's output memory);
    ``accumulate`` adds to it instead (req='add'). Returns ``out`` (or a new array).
    ``kernel``: 'auto' (default, or $ECE408_CPU_KERNEL): the direct kernels compiled by Numba where
    they run the layer, else im2col + BLAS; 'fast': Winograd F(4x4, 3x3) on the layers it runs
    (opt-in: its error follows the 6x6 tile, see winograd.py), else auto; 'blas': im2col + BLAS.
    """
    choice = parse_cpu_kernel(kernel)
    if spec is None:
        if len(k.shape) != 4:
            raise ShapeError(f"weight must be 4-D (M, C, K, K), got shape {tuple(k.shape)}")
        spec = ConvSpec.course(k.shape).with_(no_bias=bias is None)
    if spec.no_bias != (bias is None):
        raise ShapeError("bias given to a layer with no_bias=True" if bias is not None
                         else "the layer has a bias (no_bias=False) but none was given")
    plan = plan_for(tuple(x.shape), tuple(k.shape), spec)
    x = np.ascontiguousarray(x, dtype=np.float32)
    k = np.ascontiguousarray(k, dtype=np.float32)
    if bias is not None:
        bias = np.ascontiguousarray(bias, dtype=np.float32).reshape(-1)
    if out is None:
        out = np.zeros(plan.y_shape, np.float32) if accumulate else np.empty(plan.y_shape, np.float32)
    elif out.shape != plan.y_shape or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ShapeError(f"out must be a C-contiguous float32 array of shape {plan.y_shape}")
    batch = x.shape[0]
    if batch == 0 or out.size == 0:
        return out
    if choice == "fast" and winograd.unsupported(plan.x_shape, tuple(k.shape), spec) is None:
        winograd.conv2d_forward_winograd(x, k, bias, spec, out, accumulate)
        return out
    if choice != "blas" and direct.unsupported(plan.x_shape, tuple(k.shape), spec) is None:
        direct.conv2d_forward_direct(x, k, bias, spec, out, accumulate)
        return out
    if direct.compiling_only():
        return out
    tile = _depthwise_tile if plan.kind == "depthwise" else _gemm_tile

    def unit(tiles):
        for t in tiles:
            tile(plan, x, k, bias, out, accumulate, *t)
    run_parallel(unit, plan.units(batch))
    return out


def _store(target, value, accumulate):
    if accumulate:
        np.add(target, value, out=target)
    elif value is not target:
        np.copyto(target, value)


def _padded_rows(plan, x, b0, n, c0, c1, r0, r1):
    """The input rows that output rows r0:r1 read, channels c0:c1, images b0:b0+n, padded:
    a view of x where no padding is involved, else a per-thread copy with zeroed borders."""
    _, _, h, w = x.shape
    (ph, pw) = plan.spec.pad
    top, count = plan.input_rows(r0, r1)
    if pw == 0 and top >= 0 and top + count <= h:
        return x[b0:b0 + n, c0:c1, top:top + count, :]
    wp = w + 2 * pw
    xp = _scratch("padded", n * (c1 - c0) * count * wp).reshape(n, c1 - c0, count, wp)
    v0, v1 = max(0, -top), min(count, h - top)         # rows of xp that hold real input rows
    if pw:
        xp[:, :, :, :pw] = 0
        xp[:, :, :, pw + w:] = 0
    if v0 > 0:
        xp[:, :, :v0, :] = 0
    if v1 < count:
        xp[:, :, max(v1, 0):, :] = 0
    if v1 > v0:
        xp[:, :, v0:v1, pw:pw + w] = x[b0:b0 + n, c0:c1, top + v0:top + v1, :]
    return xp


def _windows(plan, xp, r0, r1):
    """(n, C, KH, KW, R, WO) view of padded rows: the input under each kernel tap, per output."""
    (sh, sw), (dh, dw) = plan.spec.stride, plan.spec.dilate
    kh, kw = plan.spec.kernel
    wo = plan.y_shape[3]
    sn, sc, sr, sq = xp.strides
    return as_strided(xp, shape=xp.shape[:2] + (kh, kw, r1 - r0, wo),
                      strides=(sn, sc, dh * sr, dw * sq, sh * sr, sw * sq), writeable=False)


def _gemm_tile(plan, x, k, bias, out, accumulate, b0, n, r0, r1):
    groups = plan.spec.num_group
    m, cg, kh, kw = k.shape
    mg, ckk, hwo = m // groups, cg * kh * kw, (r1 - r0) * plan.y_shape[3]
    for g in range(groups):
        kmat = k[g * mg:(g + 1) * mg].reshape(mg, ckk)
        # y rows r0:r1 of these images and filters, as (n, mg, R*WO): a view (rows are contiguous)
        target = out[b0:b0 + n, g * mg:(g + 1) * mg, r0:r1, :].reshape(n, mg, hwo)
        if plan.direct:
            cols = x[b0:b0 + n, g * cg:(g + 1) * cg, r0:r1, :].reshape(n, cg, hwo)
        else:
            windows = _windows(plan, _padded_rows(plan, x, b0, n, g * cg, (g + 1) * cg, r0, r1), r0, r1)
            cols = _scratch("cols", n * ckk * hwo).reshape(windows.shape)
            np.copyto(cols, windows)
            cols = cols.reshape(n, ckk, hwo)             # rows ordered (c, p, q) like kmat's columns
        product = _scratch("product", n * mg * hwo).reshape(n, mg, hwo) if accumulate else target
        _products(kmat, cols, product)
        if bias is not None:
            np.add(product, bias[g * mg:(g + 1) * mg, None], out=product)
        _store(target, product, accumulate)


def _products(kmat, cols, out):
    """out[i] = kmat @ cols[i] for every image i; where kmat has few rows, as BLAS products on
    column panels of at most GEMM_PANEL_BYTES of cols (measured, one thread, CPU time: the course's
    C=6 and C=12 layers 25% faster, layers of 64 filters 0-10% slower);
    the panels are strided views, looped over by NumPy's matmul in C (one call per tile)."""
    n, ckk, hwo = cols.shape
    width = max(GEMM_MIN_COLUMNS, GEMM_PANEL_BYTES // (4 * ckk))
    panels = hwo // width
    if panels < 2 or kmat.shape[0] > GEMM_PANEL_MAX_ROWS:
        np.matmul(kmat, cols, out=out)
        return
    split = panels * width
    # (n, ckk, panels*width) -> (n, panels, ckk, width): panel j is columns j*width:(j+1)*width
    np.matmul(kmat, cols[:, :, :split].reshape(n, ckk, panels, width).transpose(0, 2, 1, 3),
              out=out[:, :, :split].reshape(n, out.shape[1], panels, width).transpose(0, 2, 1, 3))
    if split < hwo:
        np.matmul(kmat, cols[:, :, split:], out=out[:, :, split:])


def _depthwise_tile(plan, x, k, bias, out, accumulate, b0, n, r0, r1):
    """One input channel per group, ``mult`` filters each: y[:, c*mult + j] = sum over taps of
    k[c*mult + j, 0, p, q] * window(p, q)[:, c]."""
    m, _, kh, kw = k.shape
    channels = plan.x_shape[1]
    mult = m // channels
    windows = _windows(plan, _padded_rows(plan, x, b0, n, 0, channels, r0, r1), r0, r1)
    shape = (n, channels, r1 - r0, plan.y_shape[3])
    acc = _scratch("acc", int(np.prod(shape))).reshape(shape)
    term = _scratch("term", int(np.prod(shape))).reshape(shape)
    for j in range(mult):
        taps = k[j::mult, 0]                             # (channels, KH, KW): filter c*mult + j
        for p in range(kh):
            for q in range(kw):
                weight = taps[:, p, q].reshape(1, channels, 1, 1)
                if p == 0 and q == 0:
                    np.multiply(windows[:, :, p, q], weight, out=acc)
                else:
                    np.multiply(windows[:, :, p, q], weight, out=term)
                    np.add(acc, term, out=acc)
        if bias is not None:
            np.add(acc, bias[j::mult].reshape(1, channels, 1, 1), out=acc)
        _store(out[b0:b0 + n, j::mult, r0:r1, :], acc, accumulate)
