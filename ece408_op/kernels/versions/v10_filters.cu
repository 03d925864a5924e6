// v10_filters.cu: v10, v7's loops swapped for several channels.
//
//   v10 filters  like v7, but its loops swapped for several channels: one channel's strip in registers
//                at a time, the VEC accumulators of every filter kept across the channels. H100: 2019
//                conv1 1.39 ms (v7 2.02); with several channels slower than v8 (2018 conv2 1.57 ms)
//
// Build it alone: nvcc -arch=sm_90 -cubin ece408_op/kernels/versions/v10_filters.cu (its defaults are the
// course layer's, as the launcher passes them: a test checks it).
#include "common.cuh"
#include "strips.cuh"

// ------------------------------------------------------------------ v10 filters
// v7 with its loops swapped, for layers with several channels (the course models' second layers):
// a thread keeps one channel's K x (VEC+K-1) input strip in registers at a time and the VEC
// accumulators of every filter across all channels, so each strip is loaded once (v7 reloads it
// for every filter where the channels' strips do not all fit) and nearly every instruction is an
// FMA on a constant-bank weight. One thread per (b, h, strip of V10_VEC outputs along w).
#ifndef V10_VEC
#define V10_VEC 2          // v10: adjacent outputs per thread (M * V10_VEC accumulators)
#endif
#ifndef V10_THREADS
#define V10_THREADS 128    // v10: threads per block
#endif
#ifndef V10_UNROLL_C
#define V10_UNROLL_C 1     // v10: unroll factor of the channel loop
#endif
#ifndef V10_ENABLED
#define V10_ENABLED 1      // v10: 0 where the accumulators do not fit in registers (the launcher refuses v10)
#endif
#define V10_STRIP (V10_VEC + CONV_K - 1)
#define V10_EXACT (CONV_WO % V10_VEC == 0)
#define V10_VEC4_IO (V10_VEC % 4 == 0 && V10_EXACT && CONV_W % 4 == 0 && V10_STRIP % 4 == 0)

extern "C" __global__ void __launch_bounds__(V10_THREADS)
conv_forward_v10(float* __restrict__ y, const float* __restrict__ x, int B)
{
#if V10_ENABLED
    constexpr int kUnrollC = V10_UNROLL_C;
    long long b;
    int h, w0;
    if (!strip_of<V10_VEC>((long long)blockIdx.x * V10_THREADS + threadIdx.x, B, b, h, w0)) return;
    const float* xb = strip_input(x, b, h, w0);
    float acc[CONV_M][V10_VEC];
#pragma unroll
    for (int m = 0; m < CONV_M; ++m)
#pragma unroll
        for (int v = 0; v < V10_VEC; ++v) acc[m][v] = 0.f;
#pragma unroll kUnrollC
    for (int c = 0; c < CONV_C; ++c) {
        float in[CONV_K][V10_STRIP];
        load_strip<CONV_K, V10_STRIP, V10_EXACT, V10_VEC4_IO>(in, xb, c, w0);
#pragma unroll
        for (int m = 0; m < CONV_M; ++m) accumulate<V10_VEC>(acc[m], in, m, c);
    }
    float* yb = y + b * CONV_M * CONV_HOWO + h * CONV_WO + w0;
#pragma unroll
    for (int m = 0; m < CONV_M; ++m)
        store_strip<V10_VEC, V10_EXACT, CONV_WO>(yb + (long long)m * CONV_HOWO, acc[m], w0);
#endif  // V10_ENABLED
}
