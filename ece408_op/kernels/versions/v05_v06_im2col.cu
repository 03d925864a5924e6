// v05_v06_im2col.cu: v5 and v6, one template (gemm_tile) reading the im2col matrix or x itself; v18 runs
// im2col_v5 from here before cuBLAS's GEMM (v18_cublas.py).
//
//   v5 im2col    unlike v4: unroll x into an im2col matrix (C/G*KH*KW x HO*WO per image and group,
//                in global memory, a chunk of images at a time), then a tiled shared-memory GEMM
//                x v1's time on the course layers (high, 2018-1, 2018-2, 2019-1, 2019-2; suite of
//                2026-11-22, docs/course-map.md): 0.40, 1.23, 0.56, 0.63, 0.56
//   v6 implicit  like v5, but the GEMM gathers its x tile straight from x: no im2col matrix
//                x v5's time: 0.84, 0.53, 0.51, 0.55, 0.65 (same run)
//   v18 cublas   like v5, but the GEMM is cuBLAS's (cublasSgemmStridedBatched, FP32, through ctypes);
//                refused in one line where libcublas is not found; never a default
//                x v5's time: 0.45, 0.74, 0.73, 0.75, 0.54 (course map of 2026-11-24)
//
// Build it alone: nvcc -arch=sm_90 -cubin ece408_op/kernels/versions/v05_v06_im2col.cu (its defaults are the
// course layer's, as the launcher passes them: a test checks it).
#include "common.cuh"

#ifndef GEMM_TILE
#define GEMM_TILE 16       // v5, v6: GEMM tile edge
#endif

// ------------------------------------------------------------------ v5 im2col, v6 implicit GEMM
// Per image b and group g: Y (MG x HO*WO) = Kmat_g (MG x CG*KH*KW) . X_bg (CG*KH*KW x HO*WO),
// row r of X = (c, p, q), column s = (h, w); padding reads as zeros.
// Grid: (ceil(HO*WO / GEMM_TILE), G * ceil(MG / GEMM_TILE), images of the launch).
__device__ __forceinline__ float unrolled_x(const float* __restrict__ xg, int r, int s)
{
    // xg: the first channel of group g in image b
    const int c = r / (CONV_KH * CONV_KW), p = (r / CONV_KW) % CONV_KH, q = r % CONV_KW;
    const int h = (s / CONV_WO) * CONV_SH + p * CONV_DH - CONV_PH;
    const int w = (s % CONV_WO) * CONV_SW + q * CONV_DW - CONV_PW;
#if CONV_PH > 0 || CONV_PW > 0            // without padding every output's window lies inside x
    if (h < 0 || h >= CONV_H || w < 0 || w >= CONV_W) return 0.f;
#endif
    return __ldg(&xg[(c * CONV_H + h) * CONV_W + w]);
}

template <bool IMPLICIT>
__device__ __forceinline__ void gemm_tile(float* __restrict__ y, const float* __restrict__ src,
                                          const float* __restrict__ k, const float* __restrict__ bias,
                                          long long b0, int n)
{
    __shared__ float ks[GEMM_TILE][GEMM_TILE];
    __shared__ float xs[GEMM_TILE][GEMM_TILE + 1];
    const int ty = threadIdx.y, tx = threadIdx.x;
    constexpr int tiles_m = (CONV_MG + GEMM_TILE - 1) / GEMM_TILE;
    const int g = blockIdx.y / tiles_m;
    const int mg = (blockIdx.y % tiles_m) * GEMM_TILE + ty, s = blockIdx.x * GEMM_TILE + tx;
    const float* kg = k + (long long)g * CONV_MG * CONV_GKK;
    for (int i = blockIdx.z; i < n; i += gridDim.z) {
        // IMPLICIT: src is x (offset to image b0 + i, group g); else src is the im2col chunk.
        const float* xb = IMPLICIT ? src + (b0 + i) * (CONV_C * CONV_H * CONV_W) + (long long)g * CONV_CG * CONV_H * CONV_W
                                   : src + ((long long)i * CONV_G + g) * CONV_GKK * CONV_HOWO;
        float acc = 0.f;
        for (int r0 = 0; r0 < CONV_GKK; r0 += GEMM_TILE) {
            const int kr = r0 + tx, xr = r0 + ty;
            ks[ty][tx] = (mg < CONV_MG && kr < CONV_GKK) ? __ldg(&kg[mg * CONV_GKK + kr]) : 0.f;
            float v = 0.f;
            if (xr < CONV_GKK && s < CONV_HOWO)
                v = IMPLICIT ? unrolled_x(xb, xr, s) : __ldg(&xb[(long long)xr * CONV_HOWO + s]);
            xs[ty][tx] = v;
            __syncthreads();
#pragma unroll
            for (int e = 0; e < GEMM_TILE; ++e) acc = fmaf(ks[ty][e], xs[e][tx], acc);
            __syncthreads();
        }
        if (mg < CONV_MG && s < CONV_HOWO) {
            const int m = g * CONV_MG + mg;
#if CONV_BIAS
            acc += __ldg(&bias[m]);
#endif
            y[((b0 + i) * CONV_M + m) * CONV_HOWO + s] = acc;
        }
    }
}

// cols[i][g][r][s] = x[b0 + i], group g, unrolled; one thread per element.
extern "C" __global__ void im2col_v5(float* __restrict__ cols, const float* __restrict__ x,
                                     long long b0, int n)
{
    const long long total = (long long)n * CONV_G * CONV_GKK * CONV_HOWO;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const int s = (int)(e % CONV_HOWO);
        long long t = e / CONV_HOWO;
        const int r = (int)(t % CONV_GKK); t /= CONV_GKK;
        const int g = (int)(t % CONV_G);
        const long long i = t / CONV_G;
        cols[e] = unrolled_x(x + (b0 + i) * (CONV_C * CONV_H * CONV_W) + (long long)g * CONV_CG * CONV_H * CONV_W, r, s);
    }
}

extern "C" __global__ void gemm_v5(float* __restrict__ y, const float* __restrict__ cols,
                                   const float* __restrict__ k, const float* __restrict__ bias, long long b0, int n)
{
    gemm_tile<false>(y, cols, k, bias, b0, n);
}

extern "C" __global__ void conv_forward_v6(float* __restrict__ y, const float* __restrict__ x,
                                           const float* __restrict__ k, const float* __restrict__ bias,
                                           long long b0, int n)
{
    gemm_tile<true>(y, x, k, bias, b0, n);
}

// ------------------------------------------------------------------ v18 cublas
// v5 with its GEMM replaced by cuBLAS (cublasSgemmStridedBatched, FP32, called by the launcher through
// ctypes): im2col_v5 above unrolls a chunk of images, one strided-batched SGEMM per group multiplies
// them (batch = images), add_bias adds the bias. No kernel of its own here.
