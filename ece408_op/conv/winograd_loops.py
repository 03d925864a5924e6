"""Winograd F(4x4, 3x3)'s transforms as plain loops compiled by Numba (Lavin and Gray's matrices):
U = G k G^T (filters), V = B^T d B (6x6 input tiles at stride 4), y = A^T M A (4x4 outputs)."""
import numpy as np

from . import numba_env

numba_env.load()                        # NUMBA_SLP_VECTORIZE set before Numba's first import
from numba import prange  # noqa: E402

njit = numba_env.njit
FASTMATH = {"contract", "nnan", "ninf", "nsz", "arcp", "afn"}

BT = np.array([[4, 0, -5, 0, 1, 0],
               [0, -4, -4, 1, 1, 0],
               [0, 4, -4, -1, 1, 0],
               [0, -2, -1, 2, 1, 0],
               [0, 2, -1, -2, 1, 0],
               [0, 4, 0, -5, 0, 1]], np.float32)
G = np.array([[1 / 4, 0, 0],
              [-1 / 6, -1 / 6, -1 / 6],
              [-1 / 6, 1 / 6, -1 / 6],
              [1 / 24, 1 / 12, 1 / 6],
              [1 / 24, -1 / 12, 1 / 6],
              [0, 0, 1]], np.float32)
AT = np.array([[1, 1, 1, 1, 1, 0],
               [0, 1, -1, 2, -2, 0],
               [0, 1, 1, 4, 4, 0],
               [0, 1, -1, 8, -8, 1]], np.float32)


@njit(nogil=True)
def filter_transform(u, k):
    """u[p*M + m, c, 0, 0] = (G k[m, c] G^T)[p // 6, p % 6]."""
    M, C = k.shape[0], k.shape[1]
    t = np.empty((6, 3), np.float32)
    for m in range(M):
        for c in range(C):
            for i in range(6):
                for j in range(3):
                    t[i, j] = G[i, 0] * k[m, c, 0, j] + G[i, 1] * k[m, c, 1, j] + G[i, 2] * k[m, c, 2, j]
            for i in range(6):
                for j in range(6):
                    u[(i * 6 + j) * M + m, c, 0, 0] = t[i, 0] * G[j, 0] + t[i, 1] * G[j, 1] + t[i, 2] * G[j, 2]


@njit(inline="always")
def _bt(d0, d1, d2, d3, d4, d5):
    """B^T applied to one column (d0..d5): the six transformed values (Lavin's B^T, written out)."""
    return (4 * d0 - 5 * d2 + d4, -4 * d1 - 4 * d2 + d3 + d4, 4 * d1 - 4 * d2 - d3 + d4,
            -2 * d1 - d2 + 2 * d3 + d4, 2 * d1 - d2 - 2 * d3 + d4, 4 * d1 - 5 * d3 + d5)


@njit(inline="always")
def _at(m0, m1, m2, m3, m4, m5):
    """A^T applied to one column (m0..m5): the four outputs."""
    return (m0 + m1 + m2 + m3 + m4, m1 - m2 + 2 * (m3 - m4), m1 + m2 + 4 * (m3 + m4), m1 - m2 + 8 * (m3 - m4) + m5)


@njit(parallel=True, fastmath=FASTMATH, nogil=True)
def input_transform(v, x, PH, PW):
    """v[b, p*C + c, ti, tj] = (B^T d B)[p // 6, p % 6], d the 6x6 tile of the padded x at (4ti, 4tj):
    a row of tiles at a time, B^T down the columns (vectorised over them), then B across each tile."""
    B, C, H, W = x.shape
    TH, TW = v.shape[2], v.shape[3]
    width = 4 * TW + 2
    for unit in prange(B * C):
        b = unit // C
        c = unit % C
        rows = np.zeros((6, width), np.float32)
        t = np.empty((6, width), np.float32)
        n = min(W, width - PW)
        for ti in range(TH):
            for e in range(6):
                r = 4 * ti + e - PH
                if 0 <= r < H:
                    rows[e, PW:PW + n] = x[b, c, r, :n]
                else:
                    rows[e, PW:PW + n] = 0
            for col in range(width):
                t[0, col], t[1, col], t[2, col], t[3, col], t[4, col], t[5, col] = _bt(
                    rows[0, col], rows[1, col], rows[2, col], rows[3, col], rows[4, col], rows[5, col])
            for i in range(6):
                ti_row = t[i]
                o0 = v[b, (i * 6) * C + c, ti]
                o1 = v[b, (i * 6 + 1) * C + c, ti]
                o2 = v[b, (i * 6 + 2) * C + c, ti]
                o3 = v[b, (i * 6 + 3) * C + c, ti]
                o4 = v[b, (i * 6 + 4) * C + c, ti]
                o5 = v[b, (i * 6 + 5) * C + c, ti]
                for tj in range(TW):
                    q = 4 * tj
                    o0[tj], o1[tj], o2[tj], o3[tj], o4[tj], o5[tj] = _bt(
                        ti_row[q], ti_row[q + 1], ti_row[q + 2], ti_row[q + 3], ti_row[q + 4], ti_row[q + 5])


@njit(parallel=True, fastmath=FASTMATH, nogil=True)
def output_transform(y, prod, bias, add):
    """y[b, m, 4ti + r, 4tj + s] (=|+=) bias[m] + (A^T P A)[r, s], P[i, j] = prod[b, (i*6 + j)*M + m, ti, tj]:
    a row of tiles at a time, A^T down (vectorised over the tiles), then A across into output rows."""
    B, M, HO, WO = y.shape
    TH, TW = prod.shape[2], prod.shape[3]
    for unit in prange(B * M):
        b = unit // M
        m = unit % M
        t = np.empty((4, 6, TW), np.float32)
        line = np.empty((4, 4 * TW), np.float32)
        bb = bias[m]
        for ti in range(TH):
            for j in range(6):
                p0 = prod[b, j * M + m, ti]
                p1 = prod[b, (6 + j) * M + m, ti]
                p2 = prod[b, (12 + j) * M + m, ti]
                p3 = prod[b, (18 + j) * M + m, ti]
                p4 = prod[b, (24 + j) * M + m, ti]
                p5 = prod[b, (30 + j) * M + m, ti]
                for tj in range(TW):
                    t[0, j, tj], t[1, j, tj], t[2, j, tj], t[3, j, tj] = _at(p0[tj], p1[tj], p2[tj], p3[tj],
                                                                             p4[tj], p5[tj])
            for i in range(4):
                for tj in range(TW):
                    q = 4 * tj
                    a0, a1, a2, a3 = _at(t[i, 0, tj], t[i, 1, tj], t[i, 2, tj], t[i, 3, tj], t[i, 4, tj], t[i, 5, tj])
                    line[i, q] = a0 + bb
                    line[i, q + 1] = a1 + bb
                    line[i, q + 2] = a2 + bb
                    line[i, q + 3] = a3 + bb
            for i in range(min(4, HO - 4 * ti)):
                yr = y[b, m, 4 * ti + i]
                if add:
                    for s in range(WO):
                        yr[s] += line[i, s]
                else:
                    yr[:] = line[i, :WO]
