// fused.cu: not a convolution version: conv + bias + tanh + 2x2 max-pool in one pass (v7's register
// strips over two rows; kernels.fused_forward_gpu), the course models' block.
//                H100: 0.33 ms on the course layer, 0.29x cuDNN's convolution alone
//
// Build it alone: nvcc -arch=sm_90 -cubin ece408_op/kernels/versions/fused.cu (its defaults are the
// course layer's, as the launcher passes them: a test checks it).
#include "common.cuh"
#include "strips.cuh"

// ------------------------------------------------------------------ fused: conv + bias + tanh + 2x2 max-pool
// The course models' conv -> tanh -> maxpool(2, 2) in one pass (kernels.fused_forward_gpu). Like v7,
// but a thread computes a 2 x 2*FUSE_PV block of the convolution (two rows) for every filter from a
// (K+1) x (2*FUSE_PV+K-1) input strip per channel in registers, takes the 2x2 maxima, adds the bias and
// applies tanh once per pooled output (tanh is increasing, so tanh(max) = max(tanh)): y is
// B x M x HO/2 x WO/2, 4x smaller than the convolution's output (an odd last row/column is dropped,
// as the pooling does). One thread per (b, pooled row, strip of FUSE_PV pooled outputs).
#ifndef FUSE_PV
#define FUSE_PV 4          // fused: pooled outputs per thread along a row
#endif
#ifndef FUSE_THREADS
#define FUSE_THREADS 256   // fused: threads per block
#endif
#ifndef FUSE_UNROLL_M
#define FUSE_UNROLL_M 5    // fused: unroll factor of the filter loop
#endif
#ifndef FUSE_ENABLED
#define FUSE_ENABLED 1     // fused: 0 where the strips do not fit in registers (the launcher falls back)
#endif
#define FUSE_VEC (2 * FUSE_PV)
#define FUSE_STRIP (FUSE_VEC + CONV_K - 1)
#define FUSE_PHO (CONV_HO / 2)
#define FUSE_PWO (CONV_WO / 2)
#define FUSE_STRIPS ((FUSE_PWO + FUSE_PV - 1) / FUSE_PV)
#define FUSE_EXACT (FUSE_PWO % FUSE_PV == 0)
#define FUSE_VEC4_IN (FUSE_EXACT && CONV_W % 4 == 0 && FUSE_VEC % 4 == 0 && FUSE_STRIP % 4 == 0)

extern "C" __global__ void __launch_bounds__(FUSE_THREADS)
fused_forward(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ bias, int B)
{
#if FUSE_ENABLED
    constexpr int kUnrollM = FUSE_UNROLL_M;
    const long long t = (long long)blockIdx.x * FUSE_THREADS + threadIdx.x;
    if (t >= (long long)B * FUSE_PHO * FUSE_STRIPS) return;
    const int j0 = (int)(t % FUSE_STRIPS) * FUSE_PV;
    const long long r = t / FUSE_STRIPS;
    const int ph = (int)(r % FUSE_PHO);
    const long long b = r / FUSE_PHO;
    const int w0 = 2 * j0;
    const float* xb = x + b * (CONV_C * CONV_H * CONV_W) + 2 * ph * CONV_W + w0;
    float in[CONV_C][CONV_K + 1][FUSE_STRIP];
#pragma unroll
    for (int c = 0; c < CONV_C; ++c) load_strip<CONV_K + 1, FUSE_STRIP, FUSE_EXACT, FUSE_VEC4_IN>(in[c], xb, c, w0);

    float* yb = y + b * CONV_M * (FUSE_PHO * FUSE_PWO) + ph * FUSE_PWO + j0;
#pragma unroll kUnrollM
    for (int m = 0; m < CONV_M; ++m) {
        float top[FUSE_VEC], bottom[FUSE_VEC];
#pragma unroll
        for (int v = 0; v < FUSE_VEC; ++v) top[v] = bottom[v] = 0.f;
#pragma unroll
        for (int c = 0; c < CONV_C; ++c)
#pragma unroll
            for (int p = 0; p < CONV_K; ++p)
#pragma unroll
                for (int q = 0; q < CONV_K; ++q) {
                    const float kv = c_weights[m * CONV_CKK + c * CONV_KK + p * CONV_K + q];
#pragma unroll
                    for (int v = 0; v < FUSE_VEC; ++v) {
                        top[v] = fmaf(in[c][p][q + v], kv, top[v]);
                        bottom[v] = fmaf(in[c][p + 1][q + v], kv, bottom[v]);
                    }
                }
        const float add = bias ? __ldg(&bias[m]) : 0.f;
        float pooled[FUSE_PV];
#pragma unroll
        for (int j = 0; j < FUSE_PV; ++j)
            pooled[j] = tanhf(fmaxf(fmaxf(top[2 * j], top[2 * j + 1]), fmaxf(bottom[2 * j], bottom[2 * j + 1])) + add);
        float* out = yb + (long long)m * (FUSE_PHO * FUSE_PWO);
        if (FUSE_EXACT && FUSE_PV == 2 && FUSE_PWO % 2 == 0)
            __stcs(reinterpret_cast<float2*>(out), make_float2(pooled[0], pooled[FUSE_PV - 1]));
        else
            store_strip<FUSE_PV, FUSE_EXACT, FUSE_PWO>(out, pooled, j0);
    }
#endif  // FUSE_ENABLED
}
