"""The direct path's plain-loop kernels (imported only where Numba is: ``direct.helpers()``): the
phase-plane re-layout of x, the weights' re-layout, and the fused layer's bias + tanh + 2x2 max-pool."""
import numpy as np

from . import numba_env

numba_env.load()                        # NUMBA_SLP_VECTORIZE set before Numba's first import
from numba import prange  # noqa: E402

njit = numba_env.njit
PARALLEL_RELAYOUT = 4 << 20     # elements of x above which the re-layout runs on every thread (below: 3 ms or less)


@njit(nogil=True)
def _relayout_into(dst, x, b, c, SH, SW, PH, PW, Hq, Wq):
    """The SH*SW phase planes of image b's channel c (see ``relayout``) into dst[0:SH*SW*Hq*Wq]; element
    loops rather than slice assignments (a small slice copy costs a call)."""
    _, C, H, W = x.shape
    plane = Hq * Wq
    for rh in range(SH):
        for rw in range(SW):
            start = (rh * SW + rw) * plane
            lo = min(Wq, max(0, (PW - rw + SW - 1) // SW))      # first column inside the input
            hi = max(lo, min(Wq, (W + PW - rw + SW - 1) // SW))  # past the last one
            for hq in range(Hq):
                h = hq * SH + rh - PH
                o = start + hq * Wq
                if h < 0 or h >= H:
                    for wq in range(Wq):
                        dst[o + wq] = 0
                    continue
                src = x[b, c, h]
                for wq in range(lo):
                    dst[o + wq] = 0
                if SW == 1:                                      # contiguous: a vectorised copy
                    part = dst[o + lo:o + hi]
                    row = src[lo - PW:hi - PW]
                    for e in range(hi - lo):
                        part[e] = row[e]
                else:
                    for wq in range(lo, hi):
                        dst[o + wq] = src[wq * SW + rw - PW]
                for wq in range(hi, Wq):
                    dst[o + wq] = 0


@njit(nogil=True)
def _relayout_channel(xs, x, b, c, SH, SW, PH, PW, Hq, Wq):
    """Image b's channel c into its place in xs[b]; after the last channel, the image's tail zeroed."""
    C = x.shape[1]
    planes = SH * SW * Hq * Wq
    xb = xs[b]
    _relayout_into(xb[c * planes:], x, b, c, SH, SW, PH, PW, Hq, Wq)
    if c == C - 1:
        for e in range(C * planes, xb.shape[0]):
            xb[e] = 0


@njit(parallel=True, nogil=True)
def relayout(xs, x, SH, SW, PH, PW, Hq, Wq):
    """xs[b, ((c*SH + rh)*SW + rw)*Hq*Wq + hq*Wq + wq] = xpad[b, c, hq*SH + rh, wq*SW + rw] (zero in the
    padding and past the input); each image's tail past its planes (read by blocks ending a row) zeroed."""
    B, C = x.shape[0], x.shape[1]
    for unit in prange(B * C):
        _relayout_channel(xs, x, unit // C, unit % C, SH, SW, PH, PW, Hq, Wq)


@njit(nogil=True)
def relayout_serial(xs, x, SH, SW, PH, PW, Hq, Wq):
    """``relayout`` on the calling thread, for inputs of at most PARALLEL_RELAYOUT elements (a parallel
    region waits for a second thread: see weight_layout)."""
    B, C = x.shape[0], x.shape[1]
    for unit in range(B * C):
        _relayout_channel(xs, x, unit // C, unit % C, SH, SW, PH, PW, Hq, Wq)


@njit(nogil=True)
def weight_layout(wt, k, G, MB):
    """wt[g, mb, t*MB + m] = k[g*Mg + mb*MB + m, t] with t = (c, p, q); 0 past the group's filters.
    One thread: 1.7-2.3 ms for 512x512x3x3 weights; a parallel region waits for a second thread, which
    on a loaded machine is descheduled for up to a time slice (measured 7-12 ms, load 5 on 2 cores)."""
    M = k.shape[0]
    T = k.shape[1] * k.shape[2] * k.shape[3]
    kf = k.reshape(M, T)
    Mg = M // G
    nmb = wt.shape[1]
    for unit in range(G * nmb):
        g = unit // nmb
        mb = unit % nmb
        out = wt[g, mb]
        for m in range(MB):
            f = mb * MB + m
            if f < Mg:
                src = kf[g * Mg + f]
                for t in range(T):
                    out[t * MB + m] = src[t]
            else:
                for t in range(T):
                    out[t * MB + m] = 0


@njit(parallel=True, fastmath={"contract", "nnan", "ninf", "nsz", "arcp", "afn"}, nogil=True)
def depthwise(y, xs, k, toff, bias, add, Cplane, Wq, HO, WO):
    """Depthwise (one input channel per group, ``mult`` filters each) on the phase planes: y[b, f, i, j]
    (=|+=) bias[f] + sum over taps t of k[f, t] * xs[b, c*Cplane + toff[t] + i*Wq + j], c = f // mult.
    Each tap is one long loop over the whole plane of virtual positions (vectorised; the Wq - WO
    positions past each row's outputs are computed and dropped): per-row loops cost more to start
    than their 56 multiply-adds (measured 14 ms against 4 for 8x128x56x56, one thread)."""
    B, M = y.shape[0], y.shape[1]
    C = xs.shape[1] // Cplane
    mult = M // C
    T = toff.shape[0]
    kf = k.reshape(M, T)
    vmax = (HO - 1) * Wq + WO
    for unit in prange(B * M):
        b = unit // M
        f = unit % M
        xb = xs[b, (f // mult) * Cplane:]
        acc = np.empty(vmax, np.float32)
        bb = bias[f]
        for v in range(vmax):
            acc[v] = bb
        for t in range(T):
            w = kf[f, t]
            xt = xb[toff[t]:toff[t] + vmax]
            for v in range(vmax):
                acc[v] += w * xt[v]
        yf = y[b, f]
        for i in range(HO):
            yr = yf[i]
            ar = acc[i * Wq:i * Wq + WO]
            if add:
                for j in range(WO):
                    yr[j] += ar[j]
            else:
                for j in range(WO):
                    yr[j] = ar[j]


@njit(parallel=True, fastmath={"contract", "nnan", "ninf", "nsz", "arcp", "afn"}, nogil=True)
def depthwise3x3(y, x, k, toff, bias, add, SH, SW, PH, PW, Hq, Wq, HO, WO, local):
    """``depthwise`` for 3x3 kernels, x as it is: each unit (image, channel) re-lays its channel out into
    a buffer of its own (``local`` floats: one channel's planes and the tail; it stays in cache), then
    each output row is one loop of the nine taps' sum, written once. Against the re-layout pass over
    all of x and nine passes over an accumulator (8x128x56x56, stride 1, one thread): 3.7 ms against
    7.3-7.6; MXNet's MKLDNN 3.4 (2026-11-24)."""
    B, M = y.shape[0], y.shape[1]
    C = x.shape[1]
    mult = M // C
    kf = k.reshape(M, 9)
    o0, o1, o2, o3, o4, o5, o6, o7, o8 = (toff[0], toff[1], toff[2], toff[3], toff[4], toff[5], toff[6],
                                          toff[7], toff[8])
    planes = SH * SW * Hq * Wq
    for unit in prange(B * C):
        b = unit // C
        c = unit % C
        xb = np.empty(local, np.float32)
        _relayout_into(xb, x, b, c, SH, SW, PH, PW, Hq, Wq)
        for e in range(planes, local):
            xb[e] = 0
        for f in range(c * mult, (c + 1) * mult):
            w0, w1, w2, w3, w4, w5, w6, w7, w8 = (kf[f, 0], kf[f, 1], kf[f, 2], kf[f, 3], kf[f, 4], kf[f, 5],
                                                  kf[f, 6], kf[f, 7], kf[f, 8])
            bb = bias[f]
            yf = y[b, f]
            for i in range(HO):
                yr = yf[i]
                r = xb[i * Wq:]
                x0, x1, x2 = r[o0:o0 + WO], r[o1:o1 + WO], r[o2:o2 + WO]
                x3, x4, x5 = r[o3:o3 + WO], r[o4:o4 + WO], r[o5:o5 + WO]
                x6, x7, x8 = r[o6:o6 + WO], r[o7:o7 + WO], r[o8:o8 + WO]
                if add:
                    for j in range(WO):
                        yr[j] += (bb + w0 * x0[j] + w1 * x1[j] + w2 * x2[j] + w3 * x3[j] + w4 * x4[j]
                                  + w5 * x5[j] + w6 * x6[j] + w7 * x7[j] + w8 * x8[j])
                else:
                    for j in range(WO):
                        yr[j] = (bb + w0 * x0[j] + w1 * x1[j] + w2 * x2[j] + w3 * x3[j] + w4 * x4[j]
                                 + w5 * x5[j] + w6 * x6[j] + w7 * x7[j] + w8 * x8[j])
