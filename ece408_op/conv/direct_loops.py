"""The direct path's plain-loop kernels (imported only where Numba is: ``direct.helpers()``): the
phase-plane re-layout of x, the weights' re-layout, and the fused layer's bias + tanh + 2x2 max-pool."""
import numpy as np

from . import numba_env

numba_env.load()                        # NUMBA_SLP_VECTORIZE set before Numba's first import
from numba import prange  # noqa: E402

njit = numba_env.njit


@njit(parallel=True, nogil=True)
def relayout(xs, x, SH, SW, PH, PW, Hq, Wq):
    """xs[b, ((c*SH + rh)*SW + rw)*Hq*Wq + hq*Wq + wq] = xpad[b, c, hq*SH + rh, wq*SW + rw] (zero in the
    padding and past the input); each image's tail past its planes (read by blocks ending a row) zeroed."""
    B, C, H, W = x.shape
    plane = Hq * Wq
    total = C * SH * SW * plane
    for unit in prange(B * C * SH):
        b = unit // (C * SH)
        c = (unit // SH) % C
        rh = unit % SH
        for rw in range(SW):
            start = ((c * SH + rh) * SW + rw) * plane
            for hq in range(Hq):
                h = hq * SH + rh - PH
                row = xs[b, start + hq * Wq:start + hq * Wq + Wq]
                if h < 0 or h >= H:
                    row[:] = 0
                    continue
                src = x[b, c, h]
                if SW == 1:
                    row[:PW] = 0
                    row[PW:PW + W] = src
                    row[PW + W:] = 0
                else:
                    lo = min(Wq, max(0, (PW - rw + SW - 1) // SW))      # first column inside the input
                    hi = max(lo, min(Wq, (W + PW - rw + SW - 1) // SW))  # past the last one
                    row[:lo] = 0
                    for wq in range(lo, hi):
                        row[wq] = src[wq * SW + rw - PW]
                    row[hi:] = 0
        if c == C - 1 and rh == SH - 1:
            xs[b, total:] = 0


@njit(nogil=True)
def weight_layout(wt, k, G, MB):
    """wt[g, mb, t*MB + m] = k[g*Mg + mb*MB + m, c, p, q] with t = (c, p, q); 0 past the group's filters."""
    M, Cg, KH, KW = k.shape
    Mg = M // G
    nmb = wt.shape[1]
    for g in range(G):
        for mb in range(nmb):
            for m in range(MB):
                f = mb * MB + m
                for c in range(Cg):
                    for p in range(KH):
                        for q in range(KW):
                            t = (c * KH + p) * KW + q
                            wt[g, mb, t * MB + m] = k[g * Mg + f, c, p, q] if f < Mg else np.float32(0)


@njit(parallel=True, fastmath={"contract", "nnan", "ninf", "nsz", "arcp", "afn"}, nogil=True)
def depthwise(y, xs, k, toff, bias, add, Cplane, Wq, HO, WO):
    """Depthwise (one input channel per group, ``mult`` filters each): y[b, f, i, j] (=|+=) bias[f] +
    sum over taps t of k[f, t] * xs[b, c*Cplane + toff[t] + i*Wq + j], c = f // mult; one output row
    accumulated in a buffer, the loop over its columns vectorised (a tap is one multiply-add per
    output: memory-bound, no register blocking to gain)."""
    B, M = y.shape[0], y.shape[1]
    C = xs.shape[1] // Cplane if Cplane else 1
    mult = M // C
    T = toff.shape[0]
    kf = k.reshape(M, T)
    for unit in prange(B * M):
        b = unit // M
        f = unit % M
        xb = xs[b, (f // mult) * Cplane:]
        row = np.empty(WO, np.float32)
        bb = bias[f]
        for i in range(HO):
            row[:] = bb
            for t in range(T):
                w = kf[f, t]
                start = toff[t] + i * Wq
                xr = xb[start:start + WO]
                for j in range(WO):
                    row[j] += w * xr[j]
            yr = y[b, f, i]
            if add:
                for j in range(WO):
                    yr[j] += row[j]
            else:
                yr[:] = row
