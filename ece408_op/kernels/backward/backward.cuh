// backward.cuh: what the backward kernels (data.cu: dx, weight.cu: dw and the bias) share: the element
// type, the layer's sizes as a kernel argument, run-time division, and the shared-memory tiled GEMM both
// fast versions are built on.
//
// The layer is the forward's (ece408_op/kernels/versions/common.cuh): x N x C x H x W, weights M x C/G x
// KH x KW, dy N x M x HO x WO, stride SH x SW, zero padding PH x PW, dilation DH x DW, G groups; NCHW data.
// Sums are float32 whatever the data's type; dx and the bias gradient are written in the data's type,
// dw into float32 (the caller casts).
#pragma once

#ifndef ELEM
#define ELEM 0             // the data's type: 0 float32, 1 float16, 2 bfloat16
#endif

#if ELEM == 0
typedef float elem_t;
__device__ __forceinline__ float to_float(elem_t v) { return v; }
__device__ __forceinline__ elem_t from_float(float v) { return v; }
#else
typedef unsigned short elem_t;        // a half kept as its 16 bits (NVRTC ships no cuda_fp16.h)
__device__ __forceinline__ float to_float(elem_t h)
{
#if ELEM == 2
    return __uint_as_float((unsigned)h << 16);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#endif
}
__device__ __forceinline__ elem_t from_float(float v)
{
    elem_t h;
#if ELEM == 2
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
#else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
#endif
    return h;
}
#endif

// n / d for 0 <= n < 2^31 (m 0: d a power of two), the divisor's (m, s) from the host (version.py: fast_div).
struct FastDiv {
    unsigned m;
    int s;
};
__device__ __forceinline__ int udiv(int n, FastDiv d)
{
    return (int)(d.m ? __umulhi((unsigned)n, d.m) >> d.s : (unsigned)n >> d.s);
}

// The layer's sizes, packed by the launcher in this order (kernels/backward/__init__.py: DIMS_FIELDS).
// SPLIT, CHUNK: bwd_weight_splitk's split of the depth; the rest of the line: bwd_data_gemm's phase (its
// rows h = PA + SH i, w = PB + SW j of HA x WB, its taps p = P0 + PSTEP t (PCOUNT of them), q likewise).
struct BwdDims {
    int N, C, H, W, M, KH, KW, SH, SW, PH, PW, DH, DW, G, HO, WO, CG, MG, KK, SPLIT, CHUNK,
        PA, PB, HA, WB, P0, PSTEP, PCOUNT, Q0, QSTEP, QCOUNT;
    FastDiv div_W, div_H, div_WO, div_HO, div_MG, div_KW, div_KK, div_SH, div_SW, div_WB, div_HA, div_QCOUNT;
};

// ------------------------------------------------------------------ the tiled GEMM
// C (BM x BN, float32 in registers) += A (BM x K) B (K x BN) over k in [k_begin, k_end), A and B gathered
// from the layer by the kernel's ``Op`` (its ``load``: this thread's 4 elements of A and 4 of B for one
// BK-deep step, as they are in memory; its ``stage``: where they go in shared memory, through the Stage's
// ``a(k, row)`` and ``b(k, col)``). Two shared stages: the next step's global loads are in flight while the
// current one is multiplied (one barrier a step). A thread holds 16 sums, element e at the block's
// (tile_row(e), tile_col(e)); TILE * TILE / 256 of them (16 or 64).
//   float32 data: FFMA. Thread (tx, ty) = (tid % 16, tid / 16) computes rows 4 tx .. 4 tx + 3 (+ 64) and columns
//                 4 ty .. 4 ty + 3 (+ 64) (float4 reads of shared memory: 2 per 16 FMAs, so the FMA pipe is the
//                 limit; the 128 tile halves the global and shared loads per product).
//   half data:    the tensor cores (mma.sync m16n8k16, halves in, float32 sums, as cuDNN's half-precision
//                 convolutions): 8 warps of TILE/2 x TILE/4 (MI x NI tiles of 16 x 8 a warp); shared tiles
//                 row-major with the depth contiguous, rows of BK + 8 halves (fragment reads on distinct banks).
#ifndef TILE
#define TILE 64            // the block's rows and columns: 64 or 128 (the launcher's choice per layer)
#endif
#define BM TILE
#define BN TILE
#define BK 16
#define THREADS 256
#define LOADS (TILE * BK / THREADS)   // elements of A (and of B) a thread loads a step: 4 or 8
#define TPT (TILE / 16)    // FFMA: rows (and columns) a thread computes, float4 groups 64 apart: 4 or 8
#define PADDED (TILE + 4)  // a float32 shared row: 16-byte aligned rows
#define HPITCH 24          // a half shared row: BK + 8 halves
#define MI (TILE / 32)     // mma: a warp's 16-row tiles (its TILE/2 rows) and 8-column tiles (TILE/4 columns)
#define NI (TILE / 32)

#if ELEM == 0
struct Stage {
    float (*A)[PADDED];
    float (*B)[PADDED];
    __device__ float& a(int k, int r) const { return A[k][r]; }
    __device__ float& b(int k, int c) const { return B[k][c]; }
};

__device__ __forceinline__ int tile_row(int e) { return e / TPT / 4 * 64 + 4 * (threadIdx.x % 16) + e / TPT % 4; }
__device__ __forceinline__ int tile_col(int e) { return e % TPT / 4 * 64 + 4 * (threadIdx.x / 16) + e % 4; }

template <class Op>
__device__ __forceinline__ void tile_gemm(const Op& op, int k_begin, int k_end, float acc[TPT * TPT])
{
    __shared__ __align__(16) float As[2][BK][PADDED];
    __shared__ __align__(16) float Bs[2][BK][PADDED];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    elem_t ra[LOADS], rb[LOADS];
    op.load(k_begin, k_end, ra, rb);
    op.stage(Stage{As[0], Bs[0]}, ra, rb);
    __syncthreads();
    int buf = 0;
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
        const bool more = k0 + BK < k_end;
        if (more) op.load(k0 + BK, k_end, ra, rb);
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float av[TPT], bv[TPT];
#pragma unroll
            for (int h = 0; h < TPT / 4; ++h) {
                const float4 a = *reinterpret_cast<const float4*>(&As[buf][kk][64 * h + 4 * tx]);
                const float4 b = *reinterpret_cast<const float4*>(&Bs[buf][kk][64 * h + 4 * ty]);
                av[4 * h] = a.x, av[4 * h + 1] = a.y, av[4 * h + 2] = a.z, av[4 * h + 3] = a.w;
                bv[4 * h] = b.x, bv[4 * h + 1] = b.y, bv[4 * h + 2] = b.z, bv[4 * h + 3] = b.w;
            }
#pragma unroll
            for (int i = 0; i < TPT; ++i)
#pragma unroll
                for (int j = 0; j < TPT; ++j) acc[TPT * i + j] = fmaf(av[i], bv[j], acc[TPT * i + j]);
        }
        if (more) op.stage(Stage{As[buf ^ 1], Bs[buf ^ 1]}, ra, rb);
        __syncthreads();
        buf ^= 1;
    }
}
#else
struct Stage {
    elem_t (*A)[HPITCH];
    elem_t (*B)[HPITCH];
    __device__ elem_t& a(int k, int r) const { return A[r][k]; }
    __device__ elem_t& b(int k, int c) const { return B[c][k]; }
};

// element e = (NI i + j) * 4 + c: the warp's 16 x 8 tile (i, j), the accumulator c of mma's layout
__device__ __forceinline__ int tile_row(int e)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    return (warp % 2) * (TILE / 2) + (e / (4 * NI)) * 16 + lane / 4 + (e % 4 >= 2) * 8;
}
__device__ __forceinline__ int tile_col(int e)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    return (warp / 2) * (TILE / 4) + (e / 4 % NI) * 8 + (lane % 4) * 2 + (e % 2);
}

__device__ __forceinline__ void mma_16816(float* d, const unsigned a[4], unsigned b0, unsigned b1)
{
#if ELEM == 2
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
#else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
#endif
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <class Op>
__device__ __forceinline__ void tile_gemm(const Op& op, int k_begin, int k_end, float acc[MI * NI * 4])
{
    __shared__ __align__(16) elem_t As[2][BM][HPITCH];
    __shared__ __align__(16) elem_t Bs[2][BN][HPITCH];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wm = (warp % 2) * (TILE / 2), wn = (warp / 2) * (TILE / 4);
    elem_t ra[LOADS], rb[LOADS];
    op.load(k_begin, k_end, ra, rb);
    op.stage(Stage{As[0], Bs[0]}, ra, rb);
    __syncthreads();
    int buf = 0;
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
        const bool more = k0 + BK < k_end;
        if (more) op.load(k0 + BK, k_end, ra, rb);
        unsigned a[MI][4], b[NI][2];
#pragma unroll
        for (int i = 0; i < MI; ++i) {
            const elem_t* row = &As[buf][wm + 16 * i + g][2 * t];
            a[i][0] = *reinterpret_cast<const unsigned*>(row);
            a[i][1] = *reinterpret_cast<const unsigned*>(row + 8 * HPITCH);
            a[i][2] = *reinterpret_cast<const unsigned*>(row + 8);
            a[i][3] = *reinterpret_cast<const unsigned*>(row + 8 * HPITCH + 8);
        }
#pragma unroll
        for (int j = 0; j < NI; ++j) {
            const elem_t* col = &Bs[buf][wn + 8 * j + g][2 * t];
            b[j][0] = *reinterpret_cast<const unsigned*>(col);
            b[j][1] = *reinterpret_cast<const unsigned*>(col + 8);
        }
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j) mma_16816(&acc[(NI * i + j) * 4], a[i], b[j][0], b[j][1]);
        if (more) op.stage(Stage{As[buf ^ 1], Bs[buf ^ 1]}, ra, rb);
        __syncthreads();
        buf ^= 1;
    }
}
#endif

#define ACC (TILE * TILE / THREADS)   // the sums a thread holds: 16 or 64
