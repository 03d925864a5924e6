// gemm.cuh: the implicit GEMM's pipeline (v8, v9): the x and weight tiles staged by cp.async, the
// k-loop, the stores; v11 and v20 use its copies and stores.
#pragma once
#include "common.cuh"

// ------------------------------------------------------------------ v8 gemm, v9 tensor: implicit GEMM
// Per group g: Y (positions x filters) = X (positions x GKK) . Kmat_g^T (GKK x filters), where the
// positions n = b * HO*WO + ho * WO + wo run over the whole batch (full tiles even for 7x7 planes) and
// the GKK rows r = (c, p, q) over a group's channels and the kernel window (padding reads as zero).
// A block computes BP positions x BF filters. Its k-loop stages BK rows of both operands in shared
// memory with 4-byte cp.async copies (zero-filled at padding and at the edges of the matrices), STAGES
// tiles deep, so the loads of later tiles overlap the arithmetic on the current one:
//     As[stage][k][BP + pad] (position-contiguous: consecutive threads read consecutive columns of x)
//     Bs[stage][k][BF + pad]
// A row stride of 8 (mod 16) floats makes the tensor cores' fragment loads conflict-free.
// Grid: (ceil(B*HO*WO / BP), G * ceil(MG / BF)); dynamic shared memory STAGES*BK*(SA+SB) floats.

// A shared-memory row of n floats, padded to a stride of 8 (mod 16).
__host__ __device__ constexpr int gemm_stride(int n) { return n + (24 - n % 16) % 16; }

// r / D for 0 <= r < 2^16 and a constant 0 < D < 2^16: one multiply-high (exact in that range, where
// the compiler's general division by a constant takes 64-bit arithmetic). The launcher keeps GKK < 2^16.
template <unsigned D>
__device__ __forceinline__ int div_small(int r) { return D == 1 ? r : (int)__umulhi((unsigned)r, 0xffffffffu / D + 1u); }
#if CONV_DYNAMIC
#define CONV_DIV_SMALL(r, NAME) ((int)CONV_UDIV(r, NAME))                  // (a size known at launch)
#else
#define CONV_DIV_SMALL(r, NAME) div_small<CONV_##NAME>(r)
#endif

// A position n of the batch (0 <= n < B*HO*WO) as (image, offset in its HO x WO plane): 32-bit where the
// sizes are a kernel argument (the launcher keeps a launch's positions under 2^31).
__device__ __forceinline__ long long pos_image(long long n CONV_DIMS_DECL)
{
#if CONV_DYNAMIC
    return (long long)CONV_UDIV(n, HOWO);
#else
    return n / CONV_HOWO;
#endif
}

__device__ __forceinline__ void cp_async4(float* smem, const float* gmem, bool ok)
{
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(dst), "l"(gmem), "r"(ok ? 4 : 0));
}
// 16 bytes (both addresses 16-byte aligned), bypassing L1 (v11's images are read once).
__device__ __forceinline__ void cp_async16(float* smem, const float* gmem)
{
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

// The x tile: BK rows (r) x BP columns (positions). Thread t copies the columns t % TC + j * TC
// (j < COLS) of the rows t / TC + i * TR: each row's (c, p, q) is decomposed once for COLS columns.
// Offsets are 32-bit, from the group's first channel of image 0 (the launcher keeps a launch's x
// under 2^31 elements); with padding a column's in-bounds window taps are a bit mask (always where the
// sizes are a kernel argument: one module for padded and unpadded layers).
#if CONV_DYNAMIC
#define GEMM_PADDED 1
#elif CONV_PH > 0 || CONV_PW > 0
#define GEMM_PADDED 1
#else
#define GEMM_PADDED 0
#endif
#if GEMM_PADDED
typedef unsigned long long gemm_mask_t;     // one bit per tap (p, q): KH*KW <= 64
#endif

template <int BP, int BK, int THREADS, int COLS>
struct XTileLoader {
    static constexpr int TC = BP / COLS, TR = THREADS / TC, ROWS = BK / TR, SA = gemm_stride(BP);
    static_assert(BP % COLS == 0 && THREADS % TC == 0 && BK % TR == 0, "x tile does not divide among the threads");
#if CONV_DYNAMIC
    const ConvDims& conv_dims; // the layer's sizes (a kernel argument)
#endif
    int corner[COLS];          // offset of the window's corner (row ih0, column iw0; may lie in the padding)
#if GEMM_PADDED
    gemm_mask_t taps[COLS];    // bit p*KW+q: that tap lies inside x (none for a column past the batch)
#else
    bool live[COLS];           // the column is a position of the batch
#endif
    int col, row;
    const float* xg;

    __device__ __forceinline__ XTileLoader(const float* __restrict__ xg_, long long n0, long long npos CONV_DIMS_DECL)
        :
#if CONV_DYNAMIC
          conv_dims(conv_dims),
#endif
          col(threadIdx.x % TC), row(threadIdx.x / TC), xg(xg_)
    {
#pragma unroll
        for (int j = 0; j < COLS; ++j) {
            const long long n = n0 + col + j * TC;
            const bool in = n < npos;
            const int b = in ? (int)pos_image(n CONV_DIMS_ARG) : 0;
            const int s = in ? (int)(n - (long long)b * CONV_HOWO) : 0;
            const int oh = (int)CONV_UDIV(s, WO), ow = s - oh * CONV_WO;
            const int ih0 = oh * CONV_SH - CONV_PH, iw0 = ow * CONV_SW - CONV_PW;
            corner[j] = b * (CONV_C * CONV_HW) + ih0 * CONV_W + iw0;
#if GEMM_PADDED
            gemm_mask_t bits = 0;
#pragma unroll
            for (int p = 0; p < CONV_KH; ++p)
#pragma unroll
                for (int q = 0; q < CONV_KW; ++q) {
                    const int h = ih0 + p * CONV_DH, w = iw0 + q * CONV_DW;
                    if (in && h >= 0 && h < CONV_H && w >= 0 && w < CONV_W) bits |= (gemm_mask_t)1 << (p * CONV_KW + q);
                }
            taps[j] = bits;
#else
            live[j] = in;
#endif
        }
    }

    __device__ __forceinline__ void load(float* As, int k0) const
    {
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            const int k = row + i * TR, r = k0 + k;
            const int c = CONV_DIV_SMALL(r, KHKW), pq = r - c * CONV_KHKW;
            const int p = CONV_DIV_SMALL(pq, KW), q = pq - p * CONV_KW;
            const int offset = c * CONV_HW + p * CONV_DH * CONV_W + q * CONV_DW;
            const bool rok = CONV_GKK % BK == 0 || r < CONV_GKK;    // (no partial last tile: always)
#pragma unroll
            for (int j = 0; j < COLS; ++j) {
#if GEMM_PADDED
                const bool ok = rok && ((taps[j] >> pq) & 1);
#else
                const bool ok = rok && live[j];
#endif
                cp_async4(As + k * SA + col + j * TC, xg + (ok ? (unsigned)(corner[j] + offset) : 0u), ok);
            }
        }
    }
};

// The weight tile: BK rows (r) x BF filters of group g, from Kmat_g (MG x GKK, r contiguous).
template <int BF, int BK, int THREADS>
__device__ __forceinline__ void load_weight_tile(float* Bs, const float* __restrict__ kg, int f0, int k0 CONV_DIMS_DECL)
{
    constexpr int SB = gemm_stride(BF), COUNT = BF * BK, PER = (COUNT + THREADS - 1) / THREADS;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        const int e = threadIdx.x + i * THREADS;
        const int f = div_small<BK>(e), k = e - f * BK, r = k0 + k;   // consecutive threads: consecutive r
        const bool ok = e < COUNT && (CONV_MG % BF == 0 || f0 + f < CONV_MG) && (CONV_GKK % BK == 0 || r < CONV_GKK);
        if (e < COUNT) cp_async4(Bs + k * SB + f, kg + (ok ? (unsigned)((f0 + f) * CONV_GKK + r) : 0u), ok);
    }
}

// The k-loop: stages tiles through the pipeline and calls compute(As, Bs) on each in turn.
template <int BP, int BF, int BK, int STAGES, int THREADS, int COLS, class Compute>
__device__ __forceinline__ void gemm_mainloop(float* smem, const float* __restrict__ xg, const float* __restrict__ kg,
                                              long long n0, int f0, long long npos, Compute&& compute CONV_DIMS_DECL)
{
    constexpr int A_STAGE = BK * gemm_stride(BP), B_STAGE = BK * gemm_stride(BF);
    const int KT = (CONV_GKK + BK - 1) / BK;
    float* As = smem;
    float* Bs = smem + STAGES * A_STAGE;
    const XTileLoader<BP, BK, THREADS, COLS> xtile(xg, n0, npos CONV_DIMS_ARG);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) {
            xtile.load(As + s * A_STAGE, s * BK);
            load_weight_tile<BF, BK, THREADS>(Bs + s * B_STAGE, kg, f0, s * BK CONV_DIMS_ARG);
        }
        cp_async_commit();
    }
#pragma unroll 1
    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<STAGES - 2>();         // tile kt has landed (for this thread) ...
        __syncthreads();                     // ... for every thread, and tile kt-1 is no longer read
        const int next = kt + STAGES - 1;
        if (next < KT) {
            const int st = next % STAGES;
            xtile.load(As + st * A_STAGE, next * BK);
            load_weight_tile<BF, BK, THREADS>(Bs + st * B_STAGE, kg, f0, next * BK CONV_DIMS_ARG);
        }
        cp_async_commit();                   // (an empty group past the end keeps the count uniform)
        const int st = kt % STAGES;
        compute(As + st * A_STAGE, Bs + st * B_STAGE);
    }
    cp_async_wait<0>();
}

__device__ __forceinline__ void gemm_store(float* __restrict__ y, float v)
{
    __stcs(y, v);                            // y is not read again here: evict-first
}

extern __shared__ float4 gemm_smem[];      // float4: 16-byte aligned
