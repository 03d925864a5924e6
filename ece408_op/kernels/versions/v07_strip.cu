// v07_strip.cu: v7, the course layer's kernel.
//
//   v7 strip     like v4 without shared memory: a thread keeps a K x (VEC+K-1) input strip of each
//                channel in registers (one channel at a time where C is large) and computes VEC
//                adjacent outputs for every filter; weights are constant-bank operands of the
//                FMAs; VEC-wide streaming stores
//                x v4's time on the course layers (high, 2018-1, 2018-2, 2019-1, 2019-2; suite of
//                2026-11-22, docs/course-map.md): 0.25, 0.30, 0.47, 0.89, 0.66
//
// Why v7 wins on the course layer (B=10000, C=1, M=50, 28x28, K=5): y is 1152 MB and x 31 MB,
// so the layer is bound by writing y (0.39 ms at the 3.0 TB/s copy rate measured on the H100)
// while its 7.2 G FMAs take about 0.22 ms at its fp32 rate, if nearly every instruction is an
// FMA. v7 issues 25 FMAs per output with the weight in a uniform register (fully unrolled filter
// loop: 5000 of its 6552 instructions are FFMA), no shared-memory traffic, and one 16-byte
// evict-first store per 4 outputs, so both limits overlap: 0.43-0.45 ms, 1.09-1.13x the floor in
// separate runs (docs/kernel-notes.md has the measurements).
//
// Build it alone: nvcc -arch=sm_90 -cubin ece408_op/kernels/versions/v07_strip.cu (its defaults are the
// course layer's, as the launcher passes them: a test checks it).
// Its defaults are v7's tuned values (kernels/tuning.json), so that build is the tuned course kernel.
#include "common.cuh"
#include "strips.cuh"

#ifndef VEC
#define VEC 4              // v7: adjacent outputs per thread
#endif
#ifndef V7_THREADS
#define V7_THREADS 256     // v7: threads per block
#endif
#ifndef V7_UNROLL_M
#define V7_UNROLL_M 16     // v7: unroll factor of the filter loop (CONV_M: fully; weights are operands either way)
#endif
#ifndef V7_STREAM
#define V7_STREAM 0        // v7: 1: streaming (evict-first) stores for y, which nothing here reads again
#endif
#ifndef V7_ENABLED
#define V7_ENABLED 1       // v7: 0 where even one channel's strip does not fit (the launcher refuses v7)
#endif
#ifndef V7_ALL_CHANNELS
#define V7_ALL_CHANNELS 1  // v7: keep all channels' strips in registers (else one channel at a time)
#endif

// ------------------------------------------------------------------ v7 strip
// One thread per (b, h, strip of VEC outputs along w): B * HO * ceil(WO / VEC) threads.
#define V7_STRIP (VEC + CONV_K - 1)
#define V7_EXACT (CONV_WO % VEC == 0)               // every strip lies inside the row
#define V7_VEC4_IO (VEC % 4 == 0 && V7_EXACT && CONV_W % 4 == 0 && V7_STRIP % 4 == 0)

__device__ __forceinline__ void v7_load_channel(float (&in)[CONV_K][V7_STRIP], const float* __restrict__ xb,
                                                int c, int w0)
{
    load_strip<CONV_K, V7_STRIP, V7_EXACT, V7_VEC4_IO>(in, xb, c, w0);
}

extern "C" __global__ void __launch_bounds__(V7_THREADS)
conv_forward_v7(float* __restrict__ y, const float* __restrict__ x, int B)
{
#if V7_ENABLED
    constexpr int kV7UnrollM = V7_UNROLL_M;
    long long b;
    int h, w0;
    if (!strip_of<VEC>((long long)blockIdx.x * V7_THREADS + threadIdx.x, B, b, h, w0)) return;
    const float* xb = strip_input(x, b, h, w0);
#if V7_ALL_CHANNELS            // every channel's strip stays in registers across the filters
    float in[CONV_C][CONV_K][V7_STRIP];
#pragma unroll
    for (int c = 0; c < CONV_C; ++c) v7_load_channel(in[c], xb, c, w0);
#endif

    float* yb = y + b * CONV_M * CONV_HOWO + h * CONV_WO + w0;
#pragma unroll kV7UnrollM
    for (int m = 0; m < CONV_M; ++m) {
        float acc[VEC];
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[v] = CONV_BIAS ? c_weights[CONV_M * CONV_CKK + m] : 0.f;   // bias after
#if V7_ALL_CHANNELS                                                                                   // the weights
#pragma unroll
        for (int c = 0; c < CONV_C; ++c) accumulate<VEC>(acc, in[c], m, c);
#else                          // too many channels: reload each channel's strip (from L1) per filter
#pragma unroll 1
        for (int c = 0; c < CONV_C; ++c) {
            float in[CONV_K][V7_STRIP];
            v7_load_channel(in, xb, c, w0);
            accumulate<VEC>(acc, in, m, c);
        }
#endif
        store_strip<VEC, V7_EXACT, CONV_WO, V7_STREAM != 0>(yb + (long long)m * CONV_HOWO, acc, w0);
    }
#endif  // V7_ENABLED
}
