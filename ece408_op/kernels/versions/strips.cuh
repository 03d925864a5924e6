// strips.cuh: a thread's strip of adjacent outputs in registers: where it lies, its inputs loaded
// into registers, its stores (v7, v10, v13 and the fused kernel).
#pragma once
#include "common.cuh"

// Stores of y, which nothing here reads again: streaming (evict-first) where STREAM, else plain.
template <bool STREAM>
__device__ __forceinline__ void v7_store(float* p, float v)
{
    if (STREAM) __stcs(p, v);
    else *p = v;
}

template <bool STREAM>
__device__ __forceinline__ void v7_store4(float* p, float a, float b, float c, float d)
{
    if (STREAM) __stcs(reinterpret_cast<float4*>(p), make_float4(a, b, c, d));
    else *reinterpret_cast<float4*>(p) = make_float4(a, b, c, d);
}

// store_strip with the row's width at run time (v13 with its sizes a kernel argument): 16-byte stores
// where N is a multiple of 4 and rows are a multiple of N wide (then every strip is inside its row and
// 16-byte aligned), else the outputs left of column width.
template <int N, bool STREAM>
__device__ __forceinline__ void store_strip_rt(float* out, const float (&v)[N], int w0, int width)
{
    if (N % 4 == 0 && width % N == 0) {
#pragma unroll
        for (int i = 0; i < N; i += 4)
            v7_store4<STREAM>(out + i, v[i], v[(i + 1) % N], v[(i + 2) % N], v[(i + 3) % N]);
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i)
            if (w0 + i < width) v7_store<STREAM>(out + i, v[i]);
    }
}

#if !CONV_DYNAMIC       // (v7, v10: the sizes are #defines)
// Where thread t's strip of VEC_ outputs lies (v7, v10): image b, output row h, first column w0;
// false for a thread past the batch.
template <int VEC_>
__device__ __forceinline__ bool strip_of(long long t, int B, long long& b, int& h, int& w0)
{
    constexpr int strips = (CONV_WO + VEC_ - 1) / VEC_;
    if (t >= (long long)B * CONV_HO * strips) return false;
    w0 = (int)(t % strips) * VEC_;
    const long long r = t / strips;
    h = (int)(r % CONV_HO);
    b = r / CONV_HO;
    return true;
}

// x at channel 0, row h, column w0 of image b (the corner of a thread's strips).
__device__ __forceinline__ const float* strip_input(const float* x, long long b, int h, int w0)
{
    return x + b * (CONV_C * CONV_H * CONV_W) + h * CONV_W + w0;
}

// A thread's N adjacent outputs from column w0 of one output row (LIMIT columns wide): 16-byte
// stores where N is a multiple of 4, every strip lies inside the row (EXACT) and rows are a
// multiple of 4 wide (so every strip starts 16-byte aligned in an aligned y), else the ones left
// of column LIMIT (every one where EXACT). v10 and the fused kernel stream them always; v7 as
// tuned (V7_STREAM; the launcher streams the one-float stores: plain ones cost v7 40% on 2019 conv1).
template <int N, bool EXACT, int LIMIT, bool STREAM = true>
__device__ __forceinline__ void store_strip(float* out, const float (&v)[N], int w0)
{
    constexpr bool kWide = N % 4 == 0 && EXACT && LIMIT % 4 == 0;
    if (kWide) {
#pragma unroll
        for (int i = 0; i < N; i += 4)
            v7_store4<STREAM>(out + i, v[i], v[(i + 1) % N], v[(i + 2) % N], v[(i + 3) % N]);
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i)
            if (EXACT || w0 + i < LIMIT) v7_store<STREAM>(out + i, v[i]);
    }
}

// The ROWS x COLS inputs of channel c under a thread's outputs (xb: its first row and column in
// channel 0), into registers; EXACT: every strip lies inside the row, else columns past W read 0.
template <int ROWS, int COLS, bool EXACT, bool VEC4>
__device__ __forceinline__ void load_strip(float (&in)[ROWS][COLS], const float* __restrict__ xb, int c, int w0)
{
#pragma unroll
    for (int p = 0; p < ROWS; ++p) {
        const float* row = xb + (c * CONV_H + p) * CONV_W;
        if (VEC4) {
#pragma unroll
            for (int j = 0; j < COLS; j += 4) {
                const float4 v = __ldg(reinterpret_cast<const float4*>(row + j));
                in[p][j] = v.x; in[p][j + 1] = v.y; in[p][j + 2] = v.z; in[p][j + 3] = v.w;
            }
        } else {
#pragma unroll
            for (int j = 0; j < COLS; ++j)
                in[p][j] = (EXACT || w0 + j < CONV_W) ? __ldg(row + j) : 0.f;
        }
    }
}

// acc[v] += channel c's contribution to filter m (weights from constant memory); v7, v10.
template <int VEC_>
__device__ __forceinline__ void accumulate(float (&acc)[VEC_], const float (&in)[CONV_K][VEC_ + CONV_K - 1], int m, int c)
{
#pragma unroll
    for (int p = 0; p < CONV_K; ++p)
#pragma unroll
        for (int q = 0; q < CONV_K; ++q) {
            const float kv = c_weights[m * CONV_CKK + c * CONV_KK + p * CONV_K + q];
#pragma unroll
            for (int v = 0; v < VEC_; ++v) acc[v] = fmaf(in[p][q + v], kv, acc[v]);
        }
}
#endif  // !CONV_DYNAMIC
