// v12_winograd.cu: v12, Winograd F(4x4, 3x3): the transforms around 36 GEMMs (v8's or v9's module).
//
//   v12 winograd unlike the others, not the direct sum: Winograd F(4x4, 3x3) for 3x3 stride-1 layers
//                (36 products per 4x4 outputs instead of 144), input and output transforms around 36
//                GEMMs that v8 or v9 computes; never a default (its error follows 6x6 tiles, not each
//                output's window). H100, ResNet-18's 3x3 stride-1 layers at B=64: 0.167-0.247 ms
//                (v9 0.319-0.446), 0.38-0.92x cuDNN fp32
//
// Build it alone: nvcc -arch=sm_90 -cubin ece408_op/kernels/versions/v12_winograd.cu (its defaults are the
// course layer's, as the launcher passes them: a test checks it).
#include "common.cuh"

// ------------------------------------------------------------------ v12 winograd: F(4x4, 3x3)
// A 3x3, stride-1 layer (any padding, a bias) computed as Lavin and Gray's Winograd F(4x4, 3x3): each
// 4x4 output tile of a (b, m) plane is A^T [sum over c of (G g G^T) . (B^T d B)] A, d the 6x6 input
// tile of channel c (rows 4i-PH .. 4i-PH+5; outside x: zero), g the filter's 3x3 weights, "." the
// element-wise product at each of the 36 transform points. Per point that sum is a GEMM over c:
// 36 GEMMs of M x C by C x tiles, 2.25 multiplications per output instead of 9. Three passes here and
// the GEMMs in between by v8's or v9's kernel (V12_GEMM), as a grouped 1x1 convolution of 36 groups
// (group p: point p's C channels -> its M filters) on planes of TH x TW tiles:
//   wino_filter: U[p][m][c]                   (36 x M x C: the 1x1 convolution's weights)
//   wino_input:  V[b][p][c][tile]             (its input: B images of 36*C planes of TH x TW)
//   wino_output: y from Mh[b][p][m][tile]     (its output: 36*M planes), plus the bias
// Float32 arithmetic throughout, but not the direct sum's: the transforms mix the whole 6x6 tile, so
// an output's error scales with its tile's magnitude, not its own 3x3 window's (docs/kernel-notes.md).
#ifndef V12_GEMM
#define V12_GEMM 0         // v12: the version computing its 36 GEMMs (8, 9; 0: by the layer) and the
#endif                     // transformed images per chunk in MB (both read by the launcher, not here)
#ifndef V12_CHUNK_MB
#define V12_CHUNK_MB 1024
#endif
#define WINO_TH ((CONV_HO + 3) / 4)
#define WINO_TW ((CONV_WO + 3) / 4)
#define WINO_TT (WINO_TH * WINO_TW)

// B^T v: 6 -> 6.
__device__ __forceinline__ void wino_bt(const float* v, float* out)
{
    out[0] = fmaf(4.f, v[0], fmaf(-5.f, v[2], v[4]));
    out[1] = fmaf(-4.f, v[1] + v[2], v[3] + v[4]);
    out[2] = fmaf(4.f, v[1] - v[2], v[4] - v[3]);
    out[3] = fmaf(2.f, v[3] - v[1], v[4] - v[2]);
    out[4] = fmaf(2.f, v[1] - v[3], v[4] - v[2]);
    out[5] = fmaf(4.f, v[1], fmaf(-5.f, v[3], v[5]));
}

// A^T v: 6 -> 4.
__device__ __forceinline__ void wino_at(const float* v, float* out)
{
    const float a = v[1] + v[2], b = v[1] - v[2], c = v[3] + v[4], d = v[3] - v[4];
    out[0] = v[0] + a + c;
    out[1] = fmaf(2.f, d, b);
    out[2] = fmaf(4.f, c, a);
    out[3] = fmaf(8.f, d, b) + v[5];
}

// G v: 3 -> 6.
__device__ __forceinline__ void wino_g(const float* v, float* out)
{
    const float s = v[0] + v[2];
    out[0] = 0.25f * v[0];
    out[1] = (s + v[1]) * (-1.f / 6.f);
    out[2] = (s - v[1]) * (-1.f / 6.f);
    out[3] = fmaf(1.f / 24.f, v[0], fmaf(1.f / 12.f, v[1], (1.f / 6.f) * v[2]));
    out[4] = fmaf(1.f / 24.f, v[0], fmaf(-1.f / 12.f, v[1], (1.f / 6.f) * v[2]));
    out[5] = v[2];
}

// One thread per (m, c): U[p][m][c] = (G g G^T)[p], p = 6i + j.
extern "C" __global__ void wino_filter(float* __restrict__ U, const float* __restrict__ k)
{
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= CONV_M * CONV_C) return;
    float g[9], t[6][3], col[3], out[6];
#pragma unroll
    for (int i = 0; i < 9; ++i) g[i] = __ldg(k + (long long)e * 9 + i);
#pragma unroll
    for (int j = 0; j < 3; ++j) {                  // t = G g: each column of g
        col[0] = g[j]; col[1] = g[3 + j]; col[2] = g[6 + j];
        wino_g(col, out);
#pragma unroll
        for (int i = 0; i < 6; ++i) t[i][j] = out[i];
    }
#pragma unroll
    for (int i = 0; i < 6; ++i) {                  // U = t G^T: each row of t
        wino_g(t[i], out);
#pragma unroll
        for (int j = 0; j < 6; ++j) U[(6 * i + j) * CONV_M * CONV_C + e] = out[j];
    }
}

// One thread per (b, c, tile) of `n` images: V[b][p][c][tile] = (B^T d B)[p].
extern "C" __global__ void wino_input(float* __restrict__ V, const float* __restrict__ x, int n)
{
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long long)n * CONV_C * WINO_TT) return;
    const int tile = (int)(e % WINO_TT);
    const long long bc = e / WINO_TT;                 // b * C + c
    const int r0 = (tile / WINO_TW) * 4 - CONV_PH, c0 = (tile % WINO_TW) * 4 - CONV_PW;
    const float* xc = x + bc * (CONV_H * CONV_W);
    float d[6][6], t[6][6], col[6], out[6];
#pragma unroll
    for (int i = 0; i < 6; ++i)
#pragma unroll
        for (int j = 0; j < 6; ++j) {
            const int r = r0 + i, c = c0 + j;
            d[i][j] = (r >= 0 && r < CONV_H && c >= 0 && c < CONV_W) ? __ldg(xc + r * CONV_W + c) : 0.f;
        }
#pragma unroll
    for (int j = 0; j < 6; ++j) {                  // t = B^T d: each column
#pragma unroll
        for (int i = 0; i < 6; ++i) col[i] = d[i][j];
        wino_bt(col, out);
#pragma unroll
        for (int i = 0; i < 6; ++i) t[i][j] = out[i];
    }
    const long long b = bc / CONV_C, c = bc - b * CONV_C;
    float* v = V + (b * 36 * CONV_C + c) * WINO_TT + tile;
#pragma unroll
    for (int i = 0; i < 6; ++i) {                  // V = t B: each row
        wino_bt(t[i], out);
#pragma unroll
        for (int j = 0; j < 6; ++j) v[(long long)(6 * i + j) * CONV_C * WINO_TT] = out[j];
    }
}

// One thread per (b, m, tile) of `n` images: the 4x4 tile A^T Mh A (+ bias) into y.
extern "C" __global__ void wino_output(float* __restrict__ y, const float* __restrict__ Mh, const float* __restrict__ bias,
                                       int n)
{
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long long)n * CONV_M * WINO_TT) return;
    const int tile = (int)(e % WINO_TT);
    const long long bm = e / WINO_TT;                 // b * M + m
    const long long b = bm / CONV_M, m = bm - b * CONV_M;
    const float* src = Mh + (b * 36 * CONV_M + m) * WINO_TT + tile;
    float t[4][6], row[6], out[4];
#pragma unroll
    for (int j = 0; j < 6; ++j) {                  // t = A^T Mh: each column
#pragma unroll
        for (int i = 0; i < 6; ++i) row[i] = __ldcs(src + (long long)(6 * i + j) * CONV_M * WINO_TT);
        wino_at(row, out);
#pragma unroll
        for (int i = 0; i < 4; ++i) t[i][j] = out[i];
    }
    const float add = CONV_BIAS ? __ldg(bias + m) : 0.f;
    const int oy = (tile / WINO_TW) * 4, ox = (tile % WINO_TW) * 4;
    float* yp = y + bm * CONV_HOWO + oy * CONV_WO + ox;
#pragma unroll
    for (int i = 0; i < 4; ++i) {                  // y = t A: each row
        if (oy + i >= CONV_HO) break;
        wino_at(t[i], out);
        if (CONV_WO % 4 == 0) {
            __stcs(reinterpret_cast<float4*>(yp + i * CONV_WO), make_float4(out[0] + add, out[1] + add, out[2] + add, out[3] + add));
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (ox + j < CONV_WO) __stcs(yp + i * CONV_WO + j, out[j] + add);
        }
    }
}
