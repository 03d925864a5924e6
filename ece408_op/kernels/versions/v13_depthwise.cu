// v13_depthwise.cu: v13, a direct kernel for depthwise layers.
//
//   v13 depthwise like v1 (any padding, stride, dilation, bias), but for depthwise layers (one input
//                channel per group): a thread computes V13_VEC adjacent outputs of one row of one
//                filter, every size at compile time, its filter's taps in registers, each input row
//                segment loaded once per tap row; 16-byte stores. Memory-bound, where v8's GEMM has a
//                depth of only KH*KW. MobileNetV2's 32-channel 112x112 layer at B=64 (H100): 0.107 ms
//                = 0.44x cuDNN, v8 0.341 ms (docs/kernel-notes.md)
//
//                The layer's sizes are a kernel argument (CONV_DYNAMIC, common.cuh: ConvDims), its window
//                (CONV_KH, CONV_KW, CONV_SW, CONV_DW: the registers' sizes) #defines: one module per window.
//
// Build it alone: nvcc -arch=sm_90 -cubin ece408_op/kernels/versions/v13_depthwise.cu (its defaults are the
// launcher's for the course layer: a test checks it).
#ifndef CONV_DYNAMIC
#define CONV_DYNAMIC 1
#endif
#ifndef CONV_KH
#define CONV_KH 5          // v13: the window, compile-time in every module (the taps and a row segment
#endif                     // live in registers); the course layer's by default
#ifndef CONV_KW
#define CONV_KW 5
#endif
#ifndef CONV_SW
#define CONV_SW 1
#endif
#ifndef CONV_DW
#define CONV_DW 1
#endif
#include "common.cuh"
#include "strips.cuh"

// ------------------------------------------------------------------ v13 depthwise
// A depthwise layer (C/G = 1: filter m reads channel m / (M/G) only) does KH*KW FMAs per output: an
// implicit GEMM (v8) has a k-depth of 9 there, and the layer is bound by moving x and y (MobileNetV2's
// 32-channel 112x112 layer at B=64: 103 MB each way, 0.068 ms at 3 TB/s; cuDNN 0.24 ms, v8 0.34 ms).
// One thread per (image, filter, output row, strip of V13_VEC outputs): its KH*KW taps in registers,
// for each tap row the V13_SPAN input values under its strip loaded once (L1 serves the neighbours'
// overlap), the bias first, then the taps in order (the float32 bound's summation).
#ifndef V13_VEC
#define V13_VEC 4          // v13: adjacent outputs per thread
#endif
#ifndef V13_THREADS
#define V13_THREADS 256    // v13: threads per block
#endif
#ifndef V13_ENABLED
#define V13_ENABLED 1      // v13: 0 where a group has several channels (the launcher refuses v13)
#endif
#define V13_SPAN ((V13_VEC - 1) * CONV_SW + (CONV_KW - 1) * CONV_DW + 1)
#define V13_STRIPS ((CONV_WO + V13_VEC - 1) / V13_VEC)

// strips: V13_STRIPS as a divisor (the sizes at run time; the launcher keeps B*M*HO*V13_STRIPS under 2^31)
extern "C" __global__ void __launch_bounds__(V13_THREADS)
conv_forward_v13(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ k,
                 const float* __restrict__ bias, int B CONV_DIMS_PARAM
#if CONV_DYNAMIC
                 , const FastDiv strips
#endif
                 )
{
#if V13_ENABLED
#if CONV_DYNAMIC
    const unsigned t = blockIdx.x * V13_THREADS + threadIdx.x;
    if (t >= (unsigned)B * CONV_M * CONV_HO * V13_STRIPS) return;
    unsigned r = fast_div(t, strips);
    const int strip = (int)(t - r * V13_STRIPS);
    unsigned q = CONV_UDIV(r, HO);
    const int ho = (int)(r - q * CONV_HO);
    const unsigned bq = CONV_UDIV(q, M);
    const int m = (int)(q - bq * CONV_M);
    const long long b = bq;
    const float* xc = x + (b * CONV_C + (int)CONV_UDIV(m, MG)) * (long long)(CONV_H * CONV_W);
#else
    const long long t = (long long)blockIdx.x * V13_THREADS + threadIdx.x;
    if (t >= (long long)B * CONV_M * CONV_HO * V13_STRIPS) return;
    const int strip = (int)(t % V13_STRIPS);
    long long r = t / V13_STRIPS;
    const int ho = (int)(r % CONV_HO);
    r /= CONV_HO;
    const int m = (int)(r % CONV_M);
    const long long b = r / CONV_M;
    const float* xc = x + (b * CONV_C + m / CONV_MG) * (long long)(CONV_H * CONV_W);
#endif
    float w[CONV_KH * CONV_KW];
#pragma unroll
    for (int i = 0; i < CONV_KH * CONV_KW; ++i) w[i] = __ldg(k + m * (CONV_KH * CONV_KW) + i);
    float acc[V13_VEC];
    const float b0 = CONV_BIAS ? __ldg(bias + m) : 0.f;
#pragma unroll
    for (int v = 0; v < V13_VEC; ++v) acc[v] = b0;
    const int wo0 = strip * V13_VEC;
    const int wi0 = wo0 * CONV_SW - CONV_PW;
#pragma unroll
    for (int p = 0; p < CONV_KH; ++p) {
        const int hi = ho * CONV_SH - CONV_PH + p * CONV_DH;
        if (hi < 0 || hi >= CONV_H) continue;
        const float* row = xc + hi * CONV_W;
        float seg[V13_SPAN];
#pragma unroll
        for (int j = 0; j < V13_SPAN; ++j) {
            const int wi = wi0 + j;
            seg[j] = (wi >= 0 && wi < CONV_W) ? __ldg(row + wi) : 0.f;
        }
#pragma unroll
        for (int q = 0; q < CONV_KW; ++q)
#pragma unroll
            for (int v = 0; v < V13_VEC; ++v)
                acc[v] = fmaf(seg[v * CONV_SW + q * CONV_DW], w[p * CONV_KW + q], acc[v]);
    }
#if CONV_DYNAMIC
    store_strip_rt<V13_VEC, false>(y + ((b * CONV_M + m) * CONV_HO + ho) * (long long)CONV_WO + wo0, acc, wo0, CONV_WO);
#else
    store_strip<V13_VEC, CONV_WO % V13_VEC == 0, CONV_WO, false>(
        y + ((b * CONV_M + m) * CONV_HO + ho) * (long long)CONV_WO + wo0, acc, wo0);
#endif
#endif  // V13_ENABLED
}
