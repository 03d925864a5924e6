// v08_gemm.cu: v8, the register-tiled implicit GEMM in FP32 (any layer).
//
//   v8 gemm      like v6, but register-tiled: a block computes BP output positions (taken across the
//                whole batch) x BF filters, each thread a TP x TF micro-tile from 16-byte shared-memory
//                reads; the x and weight tiles arrive by cp.async, STAGES tiles deep (any layer, FP32).
//                H100: 2018 conv2 1.28 ms (v6 4.37, v7 2.55), ResNet 3x3 C=64 at B=64 0.44 ms (v6 1.88)
//
//                The layer's sizes are a kernel argument (CONV_DYNAMIC, common.cuh: ConvDims): one module per
//                tile serves every layer.
//
// Build it alone: nvcc -arch=sm_90 -cubin ece408_op/kernels/versions/v08_gemm.cu (its defaults are the
// launcher's for the course layer: a test checks it).
#ifndef CONV_DYNAMIC
#define CONV_DYNAMIC 1
#endif
#include "common.cuh"
#include "gemm.cuh"

#ifndef V8_BP
#define V8_BP 128          // v8: positions per block (V8_BP / V8_TP threads along them)
#endif
#ifndef V8_BF
#define V8_BF 64           // v8: filters per block (V8_BF / V8_TF threads along them)
#endif
#ifndef V8_TP
#define V8_TP 8            // v8: positions per thread (chunks of 4, 4 * V8_BP / V8_TP apart)
#endif
#ifndef V8_TF
#define V8_TF 4            // v8: filters per thread (adjacent)
#endif
#ifndef V8_BK
#define V8_BK 8            // v8: GEMM rows per stage
#endif
#ifndef V8_STAGES
#define V8_STAGES 3        // v8: shared-memory stages of the cp.async pipeline
#endif
#ifndef V8_ACOLS
#define V8_ACOLS 4         // v8: columns of the x tile each thread copies (sharing one row decomposition)
#endif

#define V8_THREADS ((V8_BP / V8_TP) * (V8_BF / V8_TF))

// v8: FP32 FFMA; each thread a V8_TP x V8_TF micro-tile (4-wide shared-memory reads on positions).
extern "C" __global__ void __launch_bounds__(V8_THREADS)
conv_forward_v8(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ k,
                const float* __restrict__ bias, int B CONV_DIMS_PARAM)
{
    constexpr int SA = gemm_stride(V8_BP), SB = gemm_stride(V8_BF), TXP = V8_BP / V8_TP;
    const int tiles_f = (CONV_MG + V8_BF - 1) / V8_BF;
    static_assert(V8_TP % 4 == 0 && V8_BP % V8_TP == 0 && V8_BF % V8_TF == 0, "v8 tile");
    const int g = blockIdx.y / tiles_f, f0 = (blockIdx.y % tiles_f) * V8_BF;
    const long long n0 = (long long)blockIdx.x * V8_BP, npos = (long long)B * CONV_HOWO;
    const int tx = threadIdx.x % TXP, ty = threadIdx.x / TXP;
    float acc[V8_TF][V8_TP];
#pragma unroll
    for (int i = 0; i < V8_TF; ++i)
#pragma unroll
        for (int j = 0; j < V8_TP; ++j) acc[i][j] = 0.f;

    gemm_mainloop<V8_BP, V8_BF, V8_BK, V8_STAGES, V8_THREADS, V8_ACOLS>(
        reinterpret_cast<float*>(gemm_smem), x + (long long)g * CONV_CG * CONV_HW, k + (long long)g * CONV_MG * CONV_GKK,
        n0, f0, npos, [&](const float* As, const float* Bs) {
#pragma unroll
            for (int kk = 0; kk < V8_BK; ++kk) {
                float a[V8_TP], w[V8_TF];
#pragma unroll
                for (int j = 0; j < V8_TP; j += 4) {
                    const float4 v = *reinterpret_cast<const float4*>(As + kk * SA + tx * 4 + j * TXP);
                    a[j] = v.x; a[j + 1] = v.y; a[j + 2] = v.z; a[j + 3] = v.w;
                }
#pragma unroll
                for (int i = 0; i < V8_TF; ++i) w[i] = Bs[kk * SB + ty * V8_TF + i];
#pragma unroll
                for (int i = 0; i < V8_TF; ++i)
#pragma unroll
                    for (int j = 0; j < V8_TP; ++j) acc[i][j] = fmaf(a[j], w[i], acc[i][j]);
            }
        } CONV_DIMS_ARG);

    // Position chunk j/4 of this thread: 4 adjacent positions, one 16-byte store where they lie in one image.
#pragma unroll
    for (int j = 0; j < V8_TP; j += 4) {
        const long long n = n0 + tx * 4 + j * TXP;
#pragma unroll
        for (int i = 0; i < V8_TF; ++i) {
            const int f = f0 + ty * V8_TF + i;
            if (f >= CONV_MG) continue;
            const int m = g * CONV_MG + f;
            const float add = CONV_BIAS ? __ldg(&bias[m]) : 0.f;
            if (CONV_HOWO % 4 == 0 && n < npos) {          // npos is a multiple of 4: all four exist
                const long long b = pos_image(n CONV_DIMS_ARG);
                float* out = y + (b * CONV_M + m) * CONV_HOWO + (n - b * CONV_HOWO);
                __stcs(reinterpret_cast<float4*>(out),
                       make_float4(acc[i][j] + add, acc[i][j + 1] + add, acc[i][j + 2] + add, acc[i][j + 3] + add));
            } else if (CONV_HOWO % 4 != 0) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    if (n + e >= npos) break;
                    const long long b = pos_image(n + e CONV_DIMS_ARG);
                    gemm_store(y + (b * CONV_M + m) * CONV_HOWO + (n + e - b * CONV_HOWO), acc[i][j + e] + add);
                }
            }
        }
    }
}
