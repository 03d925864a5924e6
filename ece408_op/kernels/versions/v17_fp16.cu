// v17_fp16.cu: v17, v14 in half precision.
//
//   v17 fp16     like v14 in half precision: x and the weights converted to half, two outputs per thread
//                in one f16x2 accumulator (fma.rn.f16x2); its error has its own model; never a default
//                x v14's time on the course layers (high, 2018-1, 2018-2, 2019-1, 2019-2; course map of
//                2026-11-24, docs/course-map.md): 0.77, 0.91, 0.70, 0.80, 0.61; error 56-706x the
//                float32 bound
//
// Build it alone: nvcc -arch=sm_90 -cubin ece408_op/kernels/versions/v17_fp16.cu (its defaults are the
// course layer's, as the launcher passes them: a test checks it).
#include "common.cuh"
#include "tiles.cuh"

// ------------------------------------------------------------------ v17 fp16
// v14 in half precision: x converted to half (round to nearest) by a pre-pass, each weight stored in its
// 4-byte constant-bank slot as the pair (k, k); a thread computes two adjacent outputs in one f16x2
// accumulator, one paired FMA per tap (half the FMA instructions of v14). Products and sums are rounded
// to 11 significant bits (u = 2^-11, 8192x float32's) and |partial sums| must stay below 65504: its
// error is measured against its own model (conv/bounds.py), never the float32 bound. Opt-in only.
// Halves are kept as their bits (unsigned short; a pair as unsigned int, low half first) and computed
// with the PTX instructions that cuda_fp16.h's __float2half_rn, __hfma2 and __half2float compile to:
// including that header would make PyCUDA run nvcc's preprocessor on every module load (to hash it).
// Grid: (tiles of the output plane, M, min(B, 65535)), block (TILE/2, TILE).
__device__ __forceinline__ unsigned short f32_to_f16(float v)
{
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}

__device__ __forceinline__ float f16_to_f32(unsigned short h)
{
    float v;
    asm("cvt.f32.f16 %0, %1;" : "=f"(v) : "h"(h));
    return v;
}

__device__ __forceinline__ unsigned fma_f16x2(unsigned a, unsigned b, unsigned c)
{
    unsigned d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

extern "C" __global__ void half_input(unsigned short* __restrict__ xh, const float* __restrict__ x, long long n)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        xh[i] = f32_to_f16(x[i]);
}

extern "C" __global__ void half_weights(unsigned* __restrict__ kh, const float* __restrict__ k, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const unsigned h = f32_to_f16(k[i]);
        kh[i] = h | (h << 16);
    }
}

extern "C" __global__ void __launch_bounds__(TILE * TILE / 2)
conv_forward_v17(float* __restrict__ y, const unsigned short* __restrict__ x, int B)
{
    __shared__ unsigned short tile[V4_SPAN * V4_SPAN];
    const int tiles_w = (CONV_WO + TILE - 1) / TILE;
    const int h0 = (blockIdx.x / tiles_w) * TILE, w0 = (blockIdx.x % tiles_w) * TILE;
    const int m = blockIdx.y, ty = threadIdx.y, tx = threadIdx.x, t = ty * (TILE / 2) + tx;
    const int h = h0 + ty, w = w0 + 2 * tx;
    for (long long b = blockIdx.z; b < B; b += gridDim.z) {
        unsigned acc = 0;                                   // two half zeros
#pragma unroll 1
        for (int c = 0; c < CONV_C; ++c) {
            const unsigned short* xc = x + (b * CONV_C + c) * (CONV_H * CONV_W);
            for (int i = t; i < V4_SPAN * V4_SPAN; i += TILE * TILE / 2) {
                const int hh = h0 + i / V4_SPAN, ww = w0 + i % V4_SPAN;
                tile[i] = (hh < CONV_H && ww < CONV_W) ? xc[hh * CONV_W + ww] : (unsigned short)0;
            }
            __syncthreads();
            const int kbase = m * CONV_CKK + c * CONV_KK;
#pragma unroll
            for (int p = 0; p < CONV_K; ++p)
#pragma unroll
                for (int q = 0; q < CONV_K; ++q) {
                    const unsigned short* s = tile + (ty + p) * V4_SPAN + 2 * tx + q;
                    acc = fma_f16x2(s[0] | ((unsigned)s[1] << 16), __float_as_uint(c_weights[kbase + p * CONV_K + q]), acc);
                }
            __syncthreads();
        }
        float* out = y + ((b * CONV_M + m) * CONV_HO + h) * CONV_WO + w;
        if (h < CONV_HO && w < CONV_WO) out[0] = f16_to_f32((unsigned short)(acc & 0xffffu));
        if (h < CONV_HO && w + 1 < CONV_WO) out[1] = f16_to_f32((unsigned short)(acc >> 16));
    }
}
