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


@njit(parallel=True, fastmath=FASTMATH, nogil=True)
def input_transform(v, x, PH, PW):
    """v[b, p*C + c, ti, tj] = (B^T d B)[p // 6, p % 6], d the 6x6 tile of the padded x at (4ti, 4tj)."""
    B, C, H, W = x.shape
    TH, TW = v.shape[2], v.shape[3]
    for unit in prange(B * C):
        b = unit // C
        c = unit % C
        d = np.empty((6, 6), np.float32)
        t = np.empty((6, 6), np.float32)
        for ti in range(TH):
            for tj in range(TW):
                for i in range(6):
                    r = 4 * ti + i - PH
                    for j in range(6):
                        s = 4 * tj + j - PW
                        d[i, j] = x[b, c, r, s] if 0 <= r < H and 0 <= s < W else np.float32(0)
                for i in range(6):
                    for j in range(6):
                        acc = np.float32(0)
                        for e in range(6):
                            acc += BT[i, e] * d[e, j]
                        t[i, j] = acc
                for i in range(6):
                    for j in range(6):
                        acc = np.float32(0)
                        for e in range(6):
                            acc += t[i, e] * BT[j, e]
                        v[b, (i * 6 + j) * C + c, ti, tj] = acc


@njit(parallel=True, fastmath=FASTMATH, nogil=True)
def output_transform(y, prod, bias, add):
    """y[b, m, 4ti + r, 4tj + s] (=|+=) bias[m] + (A^T P A)[r, s], P[i, j] = prod[b, (i*6 + j)*M + m, ti, tj]."""
    B, M, HO, WO = y.shape
    TH, TW = prod.shape[2], prod.shape[3]
    for unit in prange(B * M):
        b = unit // M
        m = unit % M
        p = np.empty((6, 6), np.float32)
        t = np.empty((4, 6), np.float32)
        for ti in range(TH):
            for tj in range(TW):
                for i in range(6):
                    for j in range(6):
                        p[i, j] = prod[b, (i * 6 + j) * M + m, ti, tj]
                for i in range(4):
                    for j in range(6):
                        acc = np.float32(0)
                        for e in range(6):
                            acc += AT[i, e] * p[e, j]
                        t[i, j] = acc
                for i in range(4):
                    r = 4 * ti + i
                    if r >= HO:
                        break
                    for j in range(4):
                        s = 4 * tj + j
                        if s >= WO:
                            break
                        acc = bias[m]
                        for e in range(6):
                            acc += t[i, e] * AT[j, e]
                        if add:
                            y[b, m, r, s] += acc
                        else:
                            y[b, m, r, s] = acc
