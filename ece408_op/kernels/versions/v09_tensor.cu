// v09_tensor.cu: v9, v8 on the tensor cores (any layer).
//
//   v9 tensor    like v8, but on the tensor cores: warps of mma.sync m16n8k8 TF32 fragments in the
//                error-compensated 3xTF32 scheme (three products per fragment: float32 accuracy; TF32_PASSES 1:
//                one, precision 'tf32').
//                H100: 2019 conv2 4.13 ms (v8 4.78), ResNet 3x3 C=64 at B=64 0.32 ms (v8 0.44)
//
//                The layer's sizes are a kernel argument (CONV_DYNAMIC, common.cuh: ConvDims): one module per
//                tile serves every layer.
//
// Build it alone: nvcc -arch=sm_90 -cubin ece408_op/kernels/versions/v09_tensor.cu (its defaults are the
// launcher's for the course layer: a test checks it).
#ifndef CONV_DYNAMIC
#define CONV_DYNAMIC 1
#endif
#include "common.cuh"
#include "gemm.cuh"
#include "tf32.cuh"

#ifndef V9_MI
#define V9_MI 2            // v9: 16-position fragments per warp
#endif
#ifndef V9_NI
#define V9_NI 4            // v9: 8-filter fragments per warp
#endif
#ifndef V9_WP
#define V9_WP 4            // v9: warps along positions
#endif
#ifndef V9_WF
#define V9_WF 2            // v9: warps along filters
#endif
#ifndef V9_BK
#define V9_BK 16           // v9: GEMM rows per stage (a multiple of 8)
#endif
#ifndef V9_STAGES
#define V9_STAGES 3        // v9: shared-memory stages
#endif
#ifndef V9_ACOLS
#define V9_ACOLS 4         // v9: columns of the x tile each thread copies
#endif

#define V9_THREADS (32 * V9_WP * V9_WF)
#define V9_BP (V9_WP * V9_MI * 16)
#define V9_BF (V9_WF * V9_NI * 8)

extern "C" __global__ void __launch_bounds__(V9_THREADS)
conv_forward_v9(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ k,
                const float* __restrict__ bias, int B CONV_DIMS_PARAM)
{
    constexpr int SA = gemm_stride(V9_BP), SB = gemm_stride(V9_BF);
    const int tiles_f = (CONV_MG + V9_BF - 1) / V9_BF;
    static_assert(V9_BK % 8 == 0, "v9: BK must be a multiple of 8");
    const int g = blockIdx.y / tiles_f, f0 = (blockIdx.y % tiles_f) * V9_BF;
    const long long n0 = (long long)blockIdx.x * V9_BP, npos = (long long)B * CONV_HOWO;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
    const int p0 = (warp % V9_WP) * V9_MI * 16, q0 = (warp / V9_WP) * V9_NI * 8;   // the warp's corner
    float acc[V9_MI][V9_NI][4];
    zero_fragments(acc);

    gemm_mainloop<V9_BP, V9_BF, V9_BK, V9_STAGES, V9_THREADS, V9_ACOLS>(
        reinterpret_cast<float*>(gemm_smem), x + (long long)g * CONV_CG * CONV_HW, k + (long long)g * CONV_MG * CONV_GKK,
        n0, f0, npos, [&](const float* As, const float* Bs) {
#pragma unroll
            for (int k8 = 0; k8 < V9_BK; k8 += 8) {
                unsigned ahi[V9_MI][4], alo[V9_MI][4], bhi[V9_NI][2], blo[V9_NI][2];
#pragma unroll
                for (int i = 0; i < V9_MI; ++i) {     // A (16 x 8): rows gid, gid+8; columns tig, tig+4
                    const float* a = As + (k8 + tig) * SA + p0 + i * 16 + gid;
                    split_tf32(a[0], ahi[i][0], alo[i][0]);
                    split_tf32(a[8], ahi[i][1], alo[i][1]);
                    split_tf32(a[4 * SA], ahi[i][2], alo[i][2]);
                    split_tf32(a[4 * SA + 8], ahi[i][3], alo[i][3]);
                }
#pragma unroll
                for (int j = 0; j < V9_NI; ++j) {     // B (8 x 8): rows tig, tig+4; column gid
                    const float* b = Bs + (k8 + tig) * SB + q0 + j * 8 + gid;
                    split_tf32(b[0], bhi[j][0], blo[j][0]);
                    split_tf32(b[4 * SB], bhi[j][1], blo[j][1]);
                }
#pragma unroll
                for (int i = 0; i < V9_MI; ++i)
#pragma unroll
                    for (int j = 0; j < V9_NI; ++j) {  // the small products first
                        if (TF32_PASSES == 3) {
                            mma_tf32(acc[i][j], alo[i], bhi[j]);
                            mma_tf32(acc[i][j], ahi[i], blo[j]);
                        }
                        mma_tf32(acc[i][j], ahi[i], bhi[j]);
                    }
            }
        } CONV_DIMS_ARG);

    // Accumulator e of fragment (i, j): position row gid (+8 for e >= 2), filter column 2*tig (+1 for odd e).
#pragma unroll
    for (int i = 0; i < V9_MI; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const long long n = n0 + p0 + i * 16 + gid + half * 8;
            if (n >= npos) continue;
            const long long b = pos_image(n CONV_DIMS_ARG);
            float* out = y + b * CONV_M * CONV_HOWO + (n - b * CONV_HOWO);
#pragma unroll
            for (int j = 0; j < V9_NI; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int f = f0 + q0 + j * 8 + 2 * tig + e;
                    if (f >= CONV_MG) continue;
                    const int m = g * CONV_MG + f;
                    gemm_store(out + (long long)m * CONV_HOWO,
                               acc[i][j][half * 2 + e] + (CONV_BIAS ? __ldg(&bias[m]) : 0.f));
                }
        }
}
