"""The convolution's backward on the GPU: the data gradient (data.cu), the weight and bias gradients
(weight.cu), each a plain version (one output element a thread, the course's style) and a fast one (a
shared-memory tiled implicit GEMM, 64 or 128 square tiles, FFMA for float32 and the tensor cores for
halves; for dw split over the long N*HO*WO depth, float32 atomics):

    call = backward_call(x_shape, w_shape, stride, padding, dilation, groups, "float16")
    call.data(dx_ptr, dy_ptr, w_ptr, stream)      # dx in the data's type
    call.weight(dw_ptr, dy_ptr, x_ptr, stream)    # dw in float32, zeroed by the caller (split-K adds into it)
    call.bias(db_ptr, dy_ptr, stream)             # db in the data's type

Device pointers of NCHW data (ints), queued on ``stream`` (a CUstream handle; PyTorch's current one from
the front-end, torch/backward.py) without synchronisation. Sums are float32 for every type. Which
version runs (``versions``: per gradient 'plain', the fast one's name, or None): $ECE408_BACKWARD
('plain', 'fast'), else the rule of ``choose`` (and ``tiles``; $ECE408_BACKWARD_TILE 64 or 128 forces one).
One module per source file, element type and tile, the sizes a kernel argument (BwdDims), built through
the forward's cache (build.py).
"""
import math
import os
from pathlib import Path

import numpy as np

from ...errors import ShapeError
from .. import cudadrv
from ..build import ModuleSpec
from ..device import GpuDevice
from ..versions.version import fast_div

FOLDER = Path(__file__).parent
SOURCES = {"data": FOLDER / "data.cu", "weight": FOLDER / "weight.cu"}
ELEMS = {"float32": 0, "float16": 1, "bfloat16": 2}
BACKWARD_ENV = "ECE408_BACKWARD"        # 'plain': the plain versions everywhere; 'fast': the fast ones
TILE_ENV = "ECE408_BACKWARD_TILE"       # 64 or 128: the fast versions' tile everywhere (tests)
VERSIONS = {"data": ("plain", "gemm"), "weight": ("plain", "splitk"), "bias": ("plain", "block")}
KERNELS = {("data", "plain"): "bwd_data_plain", ("data", "gemm"): "bwd_data_gemm",
           ("weight", "plain"): "bwd_weight_plain", ("weight", "splitk"): "bwd_weight_splitk",
           ("bias", "plain"): "bwd_bias_plain", ("bias", "block"): "bwd_bias_block"}
TILES, DEPTH, THREADS = (64, 128), 16, 256     # backward.cuh's TILE (BM = BN), BK and THREADS
MAX_INDEX = 2**31 - 1                   # the kernels index x, dy and the weights in 32 bits
DIMS_FIELDS = ("N", "C", "H", "W", "M", "KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW", "G", "HO", "WO", "CG",
               "MG", "KK", "SPLIT", "CHUNK", "PA", "PB", "HA", "WB", "P0", "PSTEP", "PCOUNT", "Q0", "QSTEP", "QCOUNT")
DIMS_DIVISORS = ("W", "H", "WO", "HO", "MG", "KW", "KK", "SH", "SW", "WB", "HA", "QCOUNT")


def layer_sizes(x_shape, w_shape, stride, padding, dilation, groups):
    """The layer's sizes (a dict of DIMS_FIELDS but SPLIT and CHUNK), or a ShapeError where the kernels
    cannot take it (the front-end then falls back)."""
    n, c, h, w = map(int, x_shape)
    m, cg, kh, kw = map(int, w_shape)
    (sh, sw), (ph, pw), (dh, dw), g = stride, padding, dilation, int(groups)
    ho, wo = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if c != cg * g or m % g or ho < 1 or wo < 1 or n < 1:
        raise ShapeError(f"not a convolution: x {tuple(x_shape)}, weights {tuple(w_shape)}, groups {g}")
    if max(n * c * h * w, n * m * ho * wo, m * cg * kh * kw) > MAX_INDEX:
        raise ShapeError("a tensor of 2^31 elements or more (the backward kernels index in 32 bits)")
    return dict(N=n, C=c, H=h, W=w, M=m, KH=kh, KW=kw, SH=sh, SW=sw, PH=ph, PW=pw, DH=dh, DW=dw, G=g, HO=ho,
                WO=wo, CG=cg, MG=m // g, KK=kh * kw)


def taps(phase, pad, dilation, stride, kernel):
    """(first, step, count) of the window taps p whose rows of dx in ``phase`` (h = phase mod stride) read dy:
    p dilation = phase + pad (mod stride); evenly spaced (every stride / gcd(stride, dilation))."""
    hits = [p for p in range(kernel) if (phase + pad - p * dilation) % stride == 0]
    if not hits:
        return 0, 1, 0
    return hits[0], (hits[1] - hits[0] if len(hits) > 1 else 1), len(hits)


def phases(sizes):
    """bwd_data_gemm's launches: one phase (PA, PB and its taps, a dict) per (h mod SH, w mod SW)."""
    s = sizes
    out = []
    for a in range(min(s["SH"], s["H"])):
        p0, pstep, pcount = taps(a, s["PH"], s["DH"], s["SH"], s["KH"])
        for b in range(min(s["SW"], s["W"])):
            q0, qstep, qcount = taps(b, s["PW"], s["DW"], s["SW"], s["KW"])
            out.append(dict(PA=a, PB=b, P0=p0, PSTEP=pstep, PCOUNT=pcount, Q0=q0, QSTEP=qstep, QCOUNT=qcount))
    return out


def pack_dims(sizes, split=1, chunk=0, phase=None):
    """backward.cuh's BwdDims as kernel arguments (int32 fields, then a FastDiv (uint32, int32) a divisor)."""
    values = dict(sizes, SPLIT=split, CHUNK=chunk, HA=-(-sizes["H"] // sizes["SH"]), WB=-(-sizes["W"] // sizes["SW"]),
                  **(phase or dict(PA=0, PB=0, P0=0, PSTEP=1, PCOUNT=sizes["KH"], Q0=0, QSTEP=1, QCOUNT=sizes["KW"])))
    args = [np.int32(values[name]) for name in DIMS_FIELDS]
    for name in DIMS_DIVISORS:
        mult, shift = fast_div(max(1, values[name]))
        args += [np.uint32(mult), np.int32(shift)]
    return tuple(args)


def choose(gradient, sizes, asked=None):
    """The version of ``gradient`` ('data', 'weight', 'bias') for the layer: ``asked`` ('plain', 'fast' or a
    name of VERSIONS), else $ECE408_BACKWARD, else the rule: the fast one, but the plain dx where a group
    has fewer than 16 input channels (depthwise and narrow groups: the GEMM's 64-wide column tile would
    be mostly empty, and the plain sum is short)."""
    asked = asked or os.environ.get(BACKWARD_ENV, "").strip() or None
    plain, fast = VERSIONS[gradient]
    if asked in (None, "auto"):
        return plain if gradient == "data" and sizes["CG"] < 16 else fast
    if asked == "fast":
        return fast
    if asked not in VERSIONS[gradient]:
        raise ShapeError(f"no {gradient}-gradient version {asked!r} (choose from plain, fast, "
                         f"{', '.join(VERSIONS[gradient])})")
    return asked


def tiles(sizes, sms):
    """(dx's TILE, dw's TILE): 128 x 128 blocks (half the loads per product of 64 x 64) where the GEMM's
    columns (C/G for dx; M/G and C/G*KH*KW for dw) fill them and, for dx, the layer still makes two blocks
    a multiprocessor (dw's split-K makes its own); else 64 x 64."""
    forced = os.environ.get(TILE_ENV, "").strip()
    if forced:
        if forced not in ("64", "128"):
            raise ShapeError(f"${TILE_ENV} is {forced!r}: 64 or 128")
        return int(forced), int(forced)
    s = sizes
    rows = s["N"] * -(-s["H"] // s["SH"]) * -(-s["W"] // s["SW"])
    data = 128 if s["CG"] >= 128 and math.ceil(rows / 128) * math.ceil(s["CG"] / 128) * s["G"] >= 2 * sms else 64
    weight = 128 if s["MG"] >= 128 and s["CG"] * s["KK"] >= 128 else 64
    return data, weight


def split_k(sizes, sms, tile=64):
    """(SPLIT, CHUNK) of the split-K dw: enough blocks for about 4 per multiprocessor, each block's share of
    the N*HO*WO depth a multiple of the step (16) and at least 256 deep, at most 65535 blocks in z."""
    depth = sizes["N"] * sizes["HO"] * sizes["WO"]
    tiles = math.ceil(sizes["MG"] / tile) * math.ceil(sizes["CG"] * sizes["KK"] / tile) * sizes["G"]
    split = max(1, min(math.ceil(4 * sms / tiles), depth // 256, 65535 // sizes["G"]))
    chunk = math.ceil(math.ceil(depth / split) / DEPTH) * DEPTH
    return math.ceil(depth / chunk), chunk


class BackwardCall:
    """One layer's backward on one device: its versions, kernels, packed sizes and grids."""

    def __init__(self, device, sizes, dtype, versions=None):
        self.device, self.sizes, self.dtype = device, sizes, dtype
        versions = versions or {}
        self.versions = {g: choose(g, sizes, versions.get(g)) for g in VERSIONS}
        with device.active():
            sms = device.device.get_attribute(device.cuda.device_attribute.MULTIPROCESSOR_COUNT)
            dt, wt = self.tiles = tiles(sizes, sms)
            tile = {"data": dt if self.versions["data"] == "gemm" else 64,
                    "weight": wt if self.versions["weight"] == "splitk" else 64, "bias": 64}
            self.kernels = {}
            for g, v in self.versions.items():
                spec = ModuleSpec(SOURCES["data" if g == "data" else "weight"],
                                  (("ELEM", ELEMS[dtype]), ("TILE", tile[g])))
                self.kernels[g] = device.module(spec).get_function(KERNELS[g, v])
        s = sizes
        self.dims = pack_dims(s)
        self.split = split_k(s, sms, wt) if self.versions["weight"] == "splitk" else (1, 0)
        self.weight_dims = pack_dims(s, *self.split)
        phase_rows = s["N"] * -(-s["H"] // s["SH"]) * -(-s["W"] // s["SW"])
        grids = {
            ("data", "plain"): (math.ceil(s["N"] * s["C"] * s["H"] * s["W"] / THREADS), 1, 1),
            ("data", "gemm"): (math.ceil(phase_rows / dt), math.ceil(s["CG"] / dt), s["G"]),
            ("weight", "plain"): (math.ceil(s["M"] * s["CG"] * s["KK"] / THREADS), 1, 1),
            ("weight", "splitk"): (math.ceil(s["MG"] / wt), math.ceil(s["CG"] * s["KK"] / wt), s["G"] * self.split[0]),
            ("bias", "plain"): (math.ceil(s["M"] / THREADS), 1, 1),
            ("bias", "block"): (s["M"], 1, 1)}
        # per gradient, its launches: (packed sizes, grid); the GEMM dx one per stride phase
        self.launches = {g: [(self.weight_dims if g == "weight" else self.dims, grids[g, v])]
                         for g, v in self.versions.items()}
        if self.versions["data"] == "gemm":
            self.launches["data"] = [(pack_dims(s, phase=phase), grids["data", "gemm"]) for phase in phases(s)]

    def _launch(self, gradient, stream, *pointers):
        kernel = self.kernels[gradient]
        with self.device.active():
            previous = cudadrv.set_stream(stream)
            try:
                for dims, grid in self.launches[gradient]:
                    kernel(*pointers, *dims, block=(THREADS, 1, 1), grid=grid)
            finally:
                cudadrv.set_stream(previous)

    def data(self, dx, dy, w, stream=0):
        """Queue dx (N x C x H x W, the data's type) from dy and the weights."""
        self._launch("data", stream, dx, dy, w)

    def weight(self, dw, dy, x, stream=0):
        """Queue dw (M x C/G x KH x KW, float32, zeroed by the caller) from dy and x."""
        self._launch("weight", stream, dw, dy, x)

    def bias(self, db, dy, stream=0):
        """Queue db (M, the data's type) from dy."""
        self._launch("bias", stream, db, dy)


_calls = {}


def backward_call(x_shape, w_shape, stride, padding, dilation, groups, dtype="float32", device=None, versions=None):
    """The BackwardCall of this layer (cached by its shapes, type, device, versions asked and
    $ECE408_BACKWARD); a ShapeError where the kernels cannot run it. ``versions``: {gradient: version}."""
    key = (tuple(x_shape), tuple(w_shape), tuple(stride), tuple(padding), tuple(dilation), int(groups), dtype,
           device, tuple(sorted((versions or {}).items())), os.environ.get(BACKWARD_ENV), os.environ.get(TILE_ENV))
    call = _calls.get(key)
    if call is None:
        if dtype not in ELEMS:
            raise ShapeError(f"the backward kernels compute on float32, float16 or bfloat16 data, not {dtype}")
        sizes = layer_sizes(x_shape, w_shape, tuple(stride), tuple(padding), tuple(dilation), groups)
        call = _calls[key] = BackwardCall(GpuDevice.get(device), sizes, dtype, versions)
    return call
