// half.cuh: what the half-precision versions (v21, v22) share: float16/bfloat16 kept as their 16 bits,
// the conversions, and the two packing kernels their launch runs where the caller's data is not in the
// layout their convolution kernels read (channels-last x, filter-major weights with the channels last).
//
// Data: x is B x H x W x C (NHWC, torch.channels_last) and the weights M x KH x KW x C/G ("KRSC"), so a
// GEMM row of the implicit GEMM (a position's window) is KH*KW runs of C/G contiguous channels. A caller
// with NCHW x (or NCHW weights of a window wider than 1x1) gets them packed into a workspace first
// (``pack_input``, ``pack_weights``); a one-group layer whose channels are odd (a network's first layer:
// RGB) gets its channels padded with zeros to a multiple of 4 there too, so every copy moves 8 or 16 bytes.
// The products run on the tensor cores in the data's type, the sums in float32 (as cuDNN's half-precision
// convolutions); y is written in the data's type, NHWC or NCHW (the caller's layout).
//
// Halves are kept as their bits (unsigned short; a pair as unsigned int, the lower element in the low 16
// bits) and converted with the PTX instructions cuda_fp16.h's and cuda_bf16.h's intrinsics compile to
// (including those headers would make every build parse them: NVRTC ships no copy of them).
#pragma once
#include "common.cuh"

#ifndef HALF_BF16
#define HALF_BF16 0        // 1: bfloat16 data, 0: float16
#endif

typedef unsigned short half_t;

__device__ __forceinline__ float half_to_float(half_t h)
{
#if HALF_BF16
    return __uint_as_float((unsigned)h << 16);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#endif
}

__device__ __forceinline__ half_t float_to_half(float v)
{
    half_t h;
#if HALF_BF16
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
#else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
#endif
    return h;
}

// (lo, hi) rounded to a pair of halves, lo in the low 16 bits (the element at the lower address).
__device__ __forceinline__ unsigned floats_to_halves(float lo, float hi)
{
    unsigned r;
#if HALF_BF16
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}

__device__ __forceinline__ float low_half(unsigned pair) { return half_to_float((half_t)(pair & 0xffffu)); }
__device__ __forceinline__ float high_half(unsigned pair) { return half_to_float((half_t)(pair >> 16)); }

// An asynchronous copy of BYTES (16, 8 or 4) into shared memory, zero-filled where !ok (then gmem is
// only a valid address, not read). 16 bytes bypass L1 (x and the weights are staged, not re-read there).
template <int BYTES>
__device__ __forceinline__ void cp_async_zfill(void* smem, const void* gmem, bool ok)
{
    static_assert(BYTES == 16 || BYTES == 8 || BYTES == 4, "cp.async copies 4, 8 or 16 bytes");
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    if (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(gmem), "r"(ok ? 16 : 0));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" :: "r"(dst), "l"(gmem), "n"(BYTES),
                     "r"(ok ? BYTES : 0));
}

// x (B images of C channels, NCHW where `nchw`, else NHWC) into xp, NHWC with CP >= C channels (the
// channels past C zero). NCHW goes through a 32 x 32 tile of shared memory (reads along positions, writes
// along channels, both coalesced). Grid (ceil(HW / 32), ceil(CP / 32), B), block (32, 8).
extern "C" __global__ void pack_input(half_t* __restrict__ xp, const half_t* __restrict__ x, int C, int HW, int CP,
                                      int nchw)
{
    __shared__ half_t tile[32][34];
    const int s0 = blockIdx.x * 32, c0 = blockIdx.y * 32, b = blockIdx.z;
    const long long in_image = (long long)b * C * HW, out_image = (long long)b * CP * HW;
    if (!nchw) {                       // NHWC: the channels padded, position by position
        for (int i = threadIdx.y; i < 32; i += 8) {
            const int s = s0 + i, c = c0 + threadIdx.x;
            if (s < HW && c < CP)
                xp[out_image + (long long)s * CP + c] = c < C ? x[in_image + (long long)s * C + c] : (half_t)0;
        }
        return;
    }
    for (int i = threadIdx.y; i < 32; i += 8) {
        const int c = c0 + i, s = s0 + threadIdx.x;
        tile[i][threadIdx.x] = c < C && s < HW ? x[in_image + (long long)c * HW + s] : (half_t)0;
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) {
        const int s = s0 + i, c = c0 + threadIdx.x;
        if (s < HW && c < CP) xp[out_image + (long long)s * CP + c] = tile[threadIdx.x][i];
    }
}

// The weights (M filters of CG channels and KHKW taps; KCRS: M x CG x KH x KW where `kcrs`, else KRSC)
// into wp, KRSC with CGP >= CG channels (the channels past CG zero). One thread per element of wp.
extern "C" __global__ void pack_weights(half_t* __restrict__ wp, const half_t* __restrict__ w, int M, int CG, int KHKW,
                                        int CGP, int kcrs)
{
    const long long total = (long long)M * KHKW * CGP;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const int c = (int)(e % CGP);
        const long long t = e / CGP;
        const int pq = (int)(t % KHKW), m = (int)(t / KHKW);
        wp[e] = c >= CG ? (half_t)0 : kcrs ? w[((long long)m * CG + c) * KHKW + pq] : w[((long long)m * KHKW + pq) * CG + c];
    }
}
