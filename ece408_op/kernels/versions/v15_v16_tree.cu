// v15_v16_tree.cu: v15 and v16, one template (channel_slices) adding the channels' partial sums by a tree
// or by atomics.
//
//   v15 tree     like v14, but the input channels split among the block's z-slices, their partial sums
//                added by a tree in shared memory (the course's input-channel reduction)
//                x v14's time on the course layers (high, 2018-1, 2018-2, 2019-1, 2019-2; course map of
//                2026-11-24, docs/course-map.md): 0.94, 1.04, 1.80, 1.03, 1.42
//   v16 atomics  like v15, but the partial sums added by atomicAdd into y (zeroed first)
//                x v14's time: 1.01, 1.19, 1.80, 1.15, 1.40 (same run)
//
// The rest of the course's list (v14-v19): the optimisations the course's later project pages
// (2021-2025) gave points for and the ladder does not show as a step of its own; docs/course-map.md
// maps every item of that list to a version.
//
// Build it alone: nvcc -arch=sm_90 -cubin ece408_op/kernels/versions/v15_v16_tree.cu (its defaults are the
// course layer's, as the launcher passes them: a test checks it).
#include "common.cuh"
#include "tiles.cuh"

// ------------------------------------------------------------------ v15 tree, v16 atomics: channels in parallel
// v14 with the input channels split among V15_CZ slices of the block (threadIdx.z): slice z sums the
// channels z, z + CZ, ... of its output tile from its own shared tile, then the CZ partial sums are
// added by a tree in shared memory (v15) or by atomicAdd into y, zeroed first by the launcher (v16).
// Grid: (tiles of the output plane, M, min(B, 65535)), block (TILE, TILE, V15_CZ).
#ifndef V15_CZ
#define V15_CZ 1           // v15, v16: channel slices per block, a power of two (the largest <= min(C, 4))
#endif
template <bool ATOMIC>
__device__ __forceinline__ void channel_slices(float* __restrict__ y, const float* __restrict__ x, int B)
{
    __shared__ float tile[V15_CZ][V4_SPAN * V4_SPAN];
    __shared__ float part[ATOMIC ? 1 : V15_CZ][TILE * TILE];
    const int tiles_w = (CONV_WO + TILE - 1) / TILE;
    const int h0 = (blockIdx.x / tiles_w) * TILE, w0 = (blockIdx.x % tiles_w) * TILE;
    const int m = blockIdx.y, z = threadIdx.z, ty = threadIdx.y, tx = threadIdx.x, t = ty * TILE + tx;
    const int h = h0 + ty, w = w0 + tx;
    const bool live = h < CONV_HO && w < CONV_WO;
    for (long long b = blockIdx.z; b < B; b += gridDim.z) {
        float acc = 0.f;
#pragma unroll 1
        for (int c0 = 0; c0 < CONV_C; c0 += V15_CZ) {      // every slice takes every trip (the barriers)
            const int c = c0 + z;
            if (c < CONV_C) {
                const float* xc = x + (b * CONV_C + c) * (CONV_H * CONV_W);
                for (int i = t; i < V4_SPAN * V4_SPAN; i += TILE * TILE) {
                    const int hh = h0 + i / V4_SPAN, ww = w0 + i % V4_SPAN;
                    tile[z][i] = (hh < CONV_H && ww < CONV_W) ? __ldg(&xc[hh * CONV_W + ww]) : 0.f;
                }
            }
            __syncthreads();
            if (live && c < CONV_C) {
                const float* kc = c_weights + m * CONV_CKK + c * CONV_KK;
#pragma unroll
                for (int p = 0; p < CONV_K; ++p)
#pragma unroll
                    for (int q = 0; q < CONV_K; ++q)
                        acc = fmaf(tile[z][(ty + p) * V4_SPAN + tx + q], kc[p * CONV_K + q], acc);
            }
            __syncthreads();
        }
        float* out = y + ((b * CONV_M + m) * CONV_HO + h) * CONV_WO + w;
        if constexpr (ATOMIC) {
            if (live) atomicAdd(out, acc);
        } else {
            part[z][t] = acc;
            __syncthreads();
#pragma unroll
            for (int s = V15_CZ / 2; s > 0; s >>= 1) {     // the tree: slice z adds slice z + s
                if (z < s) part[z][t] += part[z + s][t];
                __syncthreads();
            }
            if (z == 0 && live) *out = part[0][t];
        }
    }
}

extern "C" __global__ void __launch_bounds__(TILE * TILE * V15_CZ)
conv_forward_v15(float* __restrict__ y, const float* __restrict__ x, int B)
{
    channel_slices<false>(y, x, B);
}

extern "C" __global__ void __launch_bounds__(TILE * TILE * V15_CZ)
conv_forward_v16(float* __restrict__ y, const float* __restrict__ x, int B)
{
    channel_slices<true>(y, x, B);
}
