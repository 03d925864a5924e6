// v02_v03_shared.cu: v2 and v3, one template (tiled_plane) with the weights from global or constant memory.
//
//   v2 shared    like v1, but a block computes a TILE x TILE output tile of one (b, m) from an
//                input tile staged in shared memory, one channel at a time
//                x v1's time on the course layers (high, 2018-1, 2018-2, 2019-1, 2019-2; suite of
//                2026-11-22, docs/course-map.md): 0.83, 0.61, 0.84, 0.73, 0.76
//   v3 constant  like v2, weights in constant memory (one broadcast read per warp)
//                x v2's time: 0.97, 0.94, 0.95, 0.96, 0.92 (same run)
//
// Build it alone: nvcc -arch=sm_90 -cubin ece408_op/kernels/versions/v02_v03_shared.cu (its defaults are the
// course layer's, as the launcher passes them: a test checks it).
#include "common.cuh"
#include "tiles.cuh"

// ------------------------------------------------------------------ v2 shared, v3 constant
// Grid: (tiles of the output plane, M, min(B, 65535)); images beyond gridDim.z loop.
template <bool CONST_K>
__device__ __forceinline__ void tiled_plane(float* __restrict__ y, const float* __restrict__ x,
                                            const float* __restrict__ k,
                                            int B, int C, int H, int W, int M, int K)
{
    extern __shared__ float tile[];          // (TILE + K - 1)^2 floats
    const int HO = H - K + 1, WO = W - K + 1, span = TILE + K - 1;
    const int tiles_w = (WO + TILE - 1) / TILE;
    const int h0 = (blockIdx.x / tiles_w) * TILE, w0 = (blockIdx.x % tiles_w) * TILE;
    const int m = blockIdx.y, ty = threadIdx.y, tx = threadIdx.x;
    const int h = h0 + ty, w = w0 + tx;
    for (long long b = blockIdx.z; b < B; b += gridDim.z) {
        float acc = 0.f;
        for (int c = 0; c < C; ++c) {
            const float* xc = x + (b * C + c) * H * W;
            for (int i = ty * TILE + tx; i < span * span; i += TILE * TILE) {
                const int hh = h0 + i / span, ww = w0 + i % span;
                tile[i] = (hh < H && ww < W) ? xc[hh * W + ww] : 0.f;
            }
            __syncthreads();
            if (h < HO && w < WO) {
                const int kbase = (m * C + c) * K * K;
                for (int p = 0; p < K; ++p)
                    for (int q = 0; q < K; ++q)
                        acc += tile[(ty + p) * span + tx + q] *
                               (CONST_K ? c_weights[kbase + p * K + q] : k[kbase + p * K + q]);
            }
            __syncthreads();
        }
        if (h < HO && w < WO) y[((b * M + m) * HO + h) * WO + w] = acc;
    }
}

extern "C" __global__ void conv_forward_v2(float* __restrict__ y, const float* __restrict__ x,
                                           const float* __restrict__ k,
                                           int B, int C, int H, int W, int M, int K)
{
    tiled_plane<false>(y, x, k, B, C, H, W, M, K);
}

extern "C" __global__ void conv_forward_v3(float* __restrict__ y, const float* __restrict__ x,
                                           const float* __restrict__ k,
                                           int B, int C, int H, int W, int M, int K)
{
    tiled_plane<true>(y, x, k, B, C, H, W, M, K);
}
