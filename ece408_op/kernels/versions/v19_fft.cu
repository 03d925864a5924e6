// v19_fft.cu: v19, FFT overlap-add with cuFFT (the launcher calls cuFFT between these kernels).
//
//   v19 fft      not the direct sum: FFT overlap-add with cuFFT (tiles of x zero-padded to F x F, R2C,
//                a product summed over channels per frequency, C2R, the tile outputs added into y);
//                norm-wise error, its own model; refused where libcufft is not found; never a default
//                x the default's time on the course layers (high, 2018-1, 2018-2, 2019-1, 2019-2; course
//                map of 2026-11-24, docs/course-map.md): 14.3, 25.2, 10.9, 12.3, 6.2 (slower)
//
// Build it alone: nvcc -arch=sm_90 -cubin ece408_op/kernels/versions/v19_fft.cu (its defaults are the
// course layer's, as the launcher passes them: a test checks it).
#include "common.cuh"

// ------------------------------------------------------------------ v19 fft: overlap-add with cuFFT
// Not the direct sum: x is cut into FFT_T x FFT_T tiles, each zero-padded to V19_F x V19_F (F = T + K - 1,
// so the tile's full linear convolution with the flipped filter fits the transform without wrapping);
// cuFFT (called by the launcher) transforms the tiles and the filters (R2C), fft_multiply sums the
// products over the channels at each frequency, cuFFT transforms back (C2R), and fft_overlap_add adds
// the overlapping tile outputs into y (at most 2 x 2 per output), scaled by 1 / F^2. Its rounding error
// is norm-wise (each output carries error of its tiles' whole energy), measured against its own model.
#ifndef V19_F
#define V19_F 32           // v19: transform size; tiles of x are V19_F - K + 1 square
#endif
#ifndef V19_CHUNK_MB
#define V19_CHUNK_MB 1024  // v19: workspace per chunk of images in MB (read by the launcher, not here)
#endif
#define FFT_T (V19_F - CONV_K + 1)
#define FFT_TH ((CONV_H + FFT_T - 1) / FFT_T)
#define FFT_TW ((CONV_W + FFT_T - 1) / FFT_T)
#define FFT_NT (FFT_TH * FFT_TW)
#define FFT_NF (V19_F * (V19_F / 2 + 1))   // complex points of one real F x F transform

// xt[b][c][t] (F x F each): tile t of image b's channel c, zero outside the tile and outside x.
extern "C" __global__ void fft_tiles(float* __restrict__ xt, const float* __restrict__ x, int n)
{
    const long long total = (long long)n * CONV_C * FFT_NT * V19_F * V19_F;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
        const int j = (int)(e % V19_F);
        long long r = e / V19_F;
        const int i = (int)(r % V19_F);
        r /= V19_F;
        const int t = (int)(r % FFT_NT);
        const long long bc = r / FFT_NT;               // b * C + c
        const int row = (t / FFT_TW) * FFT_T + i, col = (t % FFT_TW) * FFT_T + j;
        xt[e] = (i < FFT_T && j < FFT_T && row < CONV_H && col < CONV_W) ? __ldg(&x[(bc * CONV_H + row) * CONV_W + col]) : 0.f;
    }
}

// kt[m][c] (F x F each): the filter flipped (the transform's product is a convolution, the layer a
// correlation) and zero-padded.
extern "C" __global__ void fft_weights(float* __restrict__ kt, const float* __restrict__ k)
{
    const long long total = (long long)CONV_M * CONV_C * V19_F * V19_F;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
        const int j = (int)(e % V19_F), i = (int)(e / V19_F % V19_F);
        const long long mc = e / (V19_F * V19_F);      // m * C + c
        kt[e] = (i < CONV_K && j < CONV_K) ? __ldg(&k[(mc * CONV_K + CONV_K - 1 - i) * CONV_K + CONV_K - 1 - j]) : 0.f;
    }
}

// yh[b][m][t][f] = sum over c of xh[b][c][t][f] * kh[m][c][f] (complex): one thread per (b, m, t, f).
extern "C" __global__ void fft_multiply(float2* __restrict__ yh, const float2* __restrict__ xh,
                                        const float2* __restrict__ kh, int n)
{
    const long long total = (long long)n * CONV_M * FFT_NT * FFT_NF;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
        const int f = (int)(e % FFT_NF);
        long long r = e / FFT_NF;
        const int t = (int)(r % FFT_NT);
        r /= FFT_NT;
        const int m = (int)(r % CONV_M);
        const long long b = r / CONV_M;
        const float2* xp = xh + (b * CONV_C * FFT_NT + t) * FFT_NF + f;      // channel c: + c * NT * NF
        const float2* kp = kh + (long long)m * CONV_C * FFT_NF + f;           // channel c: + c * NF
        float re = 0.f, im = 0.f;
        for (int c = 0; c < CONV_C; ++c) {
            const float2 a = __ldg(xp + (long long)c * FFT_NT * FFT_NF), w = __ldg(kp + (long long)c * FFT_NF);
            re = fmaf(a.x, w.x, fmaf(-a.y, w.y, re));
            im = fmaf(a.x, w.y, fmaf(a.y, w.x, im));
        }
        yh[e] = make_float2(re, im);
    }
}

// y[b][m][h][w] = (1 / F^2) * the sum, over the tiles whose full output covers (h + K - 1, w + K - 1),
// of that output (tile rows h / T .. (h + K - 1) / T, the same for columns). One thread per element of y.
extern "C" __global__ void fft_overlap_add(float* __restrict__ y, const float* __restrict__ z, int n)
{
    const long long total = (long long)n * CONV_M * CONV_HOWO;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
        const int w = (int)(e % CONV_WO);
        const long long r = e / CONV_WO;
        const int h = (int)(r % CONV_HO);
        const long long bm = r / CONV_HO;              // b * M + m
        const int u = h + CONV_K - 1, v = w + CONV_K - 1;
        const int ty1 = min(FFT_TH - 1, u / FFT_T), tx1 = min(FFT_TW - 1, v / FFT_T);
        float s = 0.f;
        for (int ty = h / FFT_T; ty <= ty1; ++ty)
            for (int tx = w / FFT_T; tx <= tx1; ++tx)
                s += __ldg(&z[((bm * FFT_NT + ty * FFT_TW + tx) * V19_F + u - ty * FFT_T) * V19_F + v - tx * FFT_T]);
        y[e] = s * (1.f / (V19_F * V19_F));
    }
}
