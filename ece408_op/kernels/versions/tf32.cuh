// tf32.cuh: the error-compensated 3xTF32 products on the tensor cores (v9, v11, v20).
#pragma once
#include "common.cuh"

#ifndef TF32_PASSES
#define TF32_PASSES 3      // 3: the error-compensated 3xTF32 products (float32 accuracy); 1: hi*hi' alone, one
#endif                     // TF32 product per pair (precision 'tf32', as cuDNN's convolutions with TF32 allowed)

// v9: tensor cores, mma.sync m16n8k8 TF32 in the error-compensated "3xTF32" scheme: each operand
// v = hi + lo, hi = v rounded to TF32 (10 mantissa bits), lo = v - hi (exact in float32);
// acc += lo*hi' + hi*lo' + hi*hi' in fp32 (the dropped lo*lo' term is below float32's rounding).
// The tensor cores read the top 19 bits of a TF32 operand, so hi is rounded by integer arithmetic
// (add half a TF32 ulp, clear the low 13 bits: ties away from zero, as cvt.rna does, in 2 instructions
// where sm_90's cvt.rna.tf32.f32 takes more) and lo goes in as it is (its extra low bits are truncated:
// a relative error of 2^-11 of lo, 2^-22 of v). Positions are the MMA's 16 rows, filters its 8 columns:
// a warp computes V9_MI x V9_NI such fragments.
__device__ __forceinline__ void split_tf32(float v, unsigned& hi, unsigned& lo)
{
    hi = (__float_as_uint(v) + 0x1000u) & 0xffffe000u;
    lo = __float_as_uint(v - __uint_as_float(hi));
}

// The accumulators of MI x NI fragments (v9, v11), zeroed.
template <int MI, int NI>
__device__ __forceinline__ void zero_fragments(float (&acc)[MI][NI][4])
{
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// acc[i][j] += a[i] . b[j] for every fragment pair (v11).
template <int MI, int NI>
__device__ __forceinline__ void mma_tf32_all(float (&acc)[MI][NI][4], const unsigned (&a)[MI][4], const unsigned (&b)[NI][2])
{
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) mma_tf32(acc[i][j], a[i], b[j]);
}
