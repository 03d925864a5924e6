// v23_hgmma.cu: v23, v21's half-precision implicit GEMM on Hopper's warpgroup MMA (built for sm_90a).
//
//   v23 hgmma    like v21 (float16 or bfloat16 data, channels-last, the GEMM's depth ordered (p, q, c), float32
//                sums, y in the data's type), but on Hopper's warpgroup MMA (wgmma.mma_async m64nNk16, sm_90a
//                only, HGMMA in SASS): both operands read by the tensor cores straight from shared memory
//                (no ldmatrix, no fragments in registers), one wgmma group kept in flight while the next
//                stages land (cp.async, STAGES deep). One group, channels a multiple of 4 (a one-group layer's
//                odd channels are padded by the launch, half.cuh); other layers stay on v21/v22.
//                H200, batch 64, float16 channels-last, TFLOP/s: VGG-16's 512-channel 28x28 layer 421 (v21 285,
//                cuDNN 609), ResNet-50's 128-channel 28x28 3x3 272 (v21 186, cuDNN 327) (docs/gpu-dropin.md)
//
//                The layer's sizes are a kernel argument (CONV_DYNAMIC, common.cuh: ConvDims): one module per
//                tile, type and output layout serves every layer.
//
// Build it alone: nvcc -gencode=arch=compute_90a,code=sm_90a -cubin ece408_op/kernels/versions/v23_hgmma.cu
// (its defaults are the launcher's for the course layer's shape: a test checks it; for sm_90 its entry
// point only traps).
#ifndef CONV_DYNAMIC
#define CONV_DYNAMIC 1
#endif
#include "common.cuh"
#include "gemm.cuh"
#include "half.cuh"

// ------------------------------------------------------------------ v23 hgmma
// Y (positions x filters) = X (positions x GKK) . W^T as in v21 (GEMM row r = (p, q, c) of position n is
// x[b][oh*SH - PH + p*DH][ow*SW - PW + q*DW][c], zero in the padding; W is KRSC). A block is WG warpgroups
// along the positions, each MI x 64 positions by BN filters (wgmma's N: 64, 128 or 256); BM = 64*MI*WG.
// A stage holds BK = 64 of the depth of both operands (128 bytes a row) in wgmma's K-major layout with the
// 128-byte swizzle (as the copy engine's SWIZZLE_128B writes it): the 16-byte piece j of row r at byte
// r * 128 + ((j ^ r % 8) * 16), 8 rows (1024 bytes, 1024-aligned) an atom, so that the descriptor's SBO
// (between 8-row groups) is 1024 and a k-step of 16 starts 32 bytes further. (The same tiles unswizzled,
// core matrices of 8 rows x 16 bytes, ran at 100-150 TFLOP/s: the tensor cores' reads of 8 rows of one
// k-range then fall on the same banks.) A thread copies VEC halves (VEC | C: a copy never straddles two
// taps) of column `col` of the rows row + i * RSTEP, eight consecutive threads eight consecutive rows (their
// pieces on distinct banks through the swizzle). Byte arithmetic: a 64 x 128 x 16 wgmma reads 2 KB of A and 4 KB of B
// from shared memory for 131072 multiply-adds (64 clocks of an SM's tensor cores: 96 of its 128 bytes per
// clock); N 256 reads 80 per clock.
// Pipeline, per k tile kt: wait for stage kt (cp.async), barrier (every thread has then also waited for
// wgmma group kt-2), issue group kt, copy stage kt + STAGES - 2 into the slot group kt-2 read, wait for
// group kt-1. Channels-last y goes out through shared memory in 16-byte rows. Grid: (ceil(B*HO*WO / BM),
// ceil(M / BN)); dynamic shared memory STAGES * (BM + BN) * BK * 2 + 1024 (the alignment).
#ifndef V23_BN
#define V23_BN 64          // v23: filters per block (wgmma's N: 64, 128 or 256)
#endif
#ifndef V23_MI
#define V23_MI 1           // v23: 64-position tiles per warpgroup (1 or 2)
#endif
#ifndef V23_WG
#define V23_WG 2           // v23: warpgroups per block (1 or 2)
#endif
#ifndef V23_BK
#define V23_BK 64          // v23: GEMM depth per stage (64: one 128-byte swizzle atom a row)
#endif
#ifndef V23_STAGES
#define V23_STAGES 4       // v23: shared-memory stages (4 or more)
#endif
#ifndef V23_VEC
#define V23_VEC 4          // v23: halves per copy (8 or 4, dividing the channels)
#endif
#ifndef V23_YNCHW
#define V23_YNCHW 1        // v23: 1: y is NCHW, 0: NHWC
#endif
#ifndef V23_MINB
#define V23_MINB 1         // v23: blocks per SM the registers are capped for (__launch_bounds__)
#endif

#define V23_THREADS (128 * V23_WG)
#define V23_BM (64 * V23_MI * V23_WG)
#define V23_ACC (V23_BN / 2)
#if HALF_BF16
#define V23_TYPE "bf16"
#else
#define V23_TYPE "f16"
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// A shared-memory matrix descriptor: start address, LBO 16 (unused by a swizzled K-major operand), SBO 1024
// (8 rows of 128 bytes), the 128-byte swizzle (layout type 1, bits 62-63).
__device__ __forceinline__ unsigned long long hgmma_desc(const half_t* smem)
{
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    return (unsigned long long)((addr & 0x3ffff) >> 4) | 1ull << 16 | (1024ull >> 4) << 32 | 1ull << 62;
}
__device__ __forceinline__ void hgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void hgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void hgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }
__device__ __forceinline__ void hgmma_fence_proxy() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void hgmma_fence_acc(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}

// d (64 x N, float32) += A (64 x 16, descriptor a) . B (N x 16, descriptor b)^T, both K-major halves.
__device__ __forceinline__ void wgmma_half(float (&d)[32], unsigned long long a, unsigned long long b)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32." V23_TYPE "." V23_TYPE " "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, 1, 1, 1, 0, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(a), "l"(b));
}
__device__ __forceinline__ void wgmma_half(float (&d)[64], unsigned long long a, unsigned long long b)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32." V23_TYPE "." V23_TYPE " "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, 1, 1, 1, 0, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(a), "l"(b));
}
__device__ __forceinline__ void wgmma_half(float (&d)[128], unsigned long long a, unsigned long long b)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32." V23_TYPE "." V23_TYPE " "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
                 "%128, %129, 1, 1, 1, 0, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
                   "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
                   "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
                   "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
                   "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                   "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
                   "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(a), "l"(b));
}

#endif

// Built for sm_90a only (wgmma); elsewhere the entry point exists and traps (the version refuses
// devices other than compute capability 9.0 before it launches).
extern "C" __global__ void __launch_bounds__(V23_THREADS, V23_MINB)
conv_forward_v23(half_t* __restrict__ y, const half_t* __restrict__ x, const half_t* __restrict__ w,
                 const half_t* __restrict__ bias, int B CONV_DIMS_PARAM)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int CPR = V23_BK / V23_VEC;                // copies per stage row
    constexpr int RSTEP = V23_THREADS / CPR;             // stage rows one pass of the block's threads copies
    constexpr int AROWS = V23_BM / RSTEP, BROWS = (V23_BN + RSTEP - 1) / RSTEP;
    constexpr int A_STAGE = V23_BM * V23_BK, B_STAGE = V23_BN * V23_BK;     // halves
    static_assert(V23_BK == 64 && V23_BK % V23_VEC == 0 && V23_THREADS % (8 * CPR) == 0 && V23_BM % RSTEP == 0,
                  "v23: the stage does not divide among the threads");
    static_assert(V23_BN == 64 || V23_BN == 128 || V23_BN == 256, "v23: wgmma's N");
    // (3 would do: one stage computed, one read by the wgmma group in flight, one landing; but ptxas
    // serialised the wgmma there in one build, C7515, and at 6 and 8: the tiles keep to 4 and 5)
    static_assert(V23_STAGES >= 4, "v23: 4 or more stages");
    half_t* As = reinterpret_cast<half_t*>(((unsigned long long)gemm_smem + 1023) & ~1023ull);  // (atoms: 1024-aligned)
    half_t* Bs = As + V23_STAGES * A_STAGE;

    const int f0 = blockIdx.y * V23_BN;
    const long long n0 = (long long)blockIdx.x * V23_BM, npos = (long long)B * CONV_HOWO;
    const int tid = threadIdx.x, col = (tid / 8) % CPR, row = tid % 8 + 8 * (tid / (8 * CPR));

    int corner[AROWS];                 // x offset of the window's corner (may lie in the padding)
    unsigned inside[AROWS];            // bit p: window row p inside x; bit 16 + q: window column q
#pragma unroll
    for (int i = 0; i < AROWS; ++i) {
        const long long n = n0 + row + i * RSTEP;
        const bool in = n < npos;
        const int b = in ? (int)pos_image(n CONV_DIMS_ARG) : 0;
        const int s = in ? (int)(n - (long long)b * CONV_HOWO) : 0;
        const int oh = (int)CONV_UDIV(s, WO), ow = s - oh * CONV_WO;
        const int ih0 = oh * CONV_SH - CONV_PH, iw0 = ow * CONV_SW - CONV_PW;
        corner[i] = ((b * CONV_H + ih0) * CONV_W + iw0) * CONV_C;
        unsigned bits = 0;
        for (int p = 0; p < CONV_KH; ++p) {
            const int h = ih0 + p * CONV_DH;
            if (in && h >= 0 && h < CONV_H) bits |= 1u << p;
        }
        for (int q = 0; q < CONV_KW; ++q) {
            const int v = iw0 + q * CONV_DW;
            if (in && v >= 0 && v < CONV_W) bits |= 1u << (16 + q);
        }
        inside[i] = bits;
    }
    const half_t* wf = w + (long long)f0 * CONV_GKK;
    // this thread's element offset in a stage: its row's 64 halves, its 16-byte piece swizzled by the row (RSTEP
    // is a multiple of 8: the same for all its rows), its copy's place in the piece; RSTEP rows on: RSTEP * 64
    const int at = row * 64 + (((col * V23_VEC) / 8) ^ (row % 8)) * 8 + (col * V23_VEC) % 8;

    auto load = [&](int stage, int k0) {
        const int k = k0 + col * V23_VEC;
        const bool kok = k < CONV_GKK;
        int p = 0, q = 0, c = 0;
        if (kok) {
            const int pq = (int)CONV_UDIV(k, CG);
            c = k - pq * CONV_CG;
            p = (int)CONV_UDIV(pq, KW);
            q = pq - p * CONV_KW;
        }
        const int offset = (p * CONV_DH * CONV_W + q * CONV_DW) * CONV_C + c;
        half_t* a = As + stage * A_STAGE + at;
#pragma unroll
        for (int i = 0; i < AROWS; ++i) {
            const bool ok = kok && ((inside[i] >> p) & (inside[i] >> (16 + q)) & 1u);
            cp_async_zfill<2 * V23_VEC>(a + i * RSTEP * 64, x + (ok ? corner[i] + offset : 0), ok);
        }
        half_t* bs = Bs + stage * B_STAGE + at;
#pragma unroll
        for (int i = 0; i < BROWS; ++i) {
            const int f = row + i * RSTEP;
            if (V23_BN % RSTEP == 0 || f < V23_BN) {
                const bool ok = kok && f0 + f < CONV_M;
                cp_async_zfill<2 * V23_VEC>(bs + i * RSTEP * 64, wf + (ok ? f * CONV_GKK + k : 0), ok);
            }
        }
    };

    const int wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
    float acc[V23_MI][V23_ACC];
#pragma unroll
    for (int m = 0; m < V23_MI; ++m)
#pragma unroll
        for (int i = 0; i < V23_ACC; ++i) acc[m][i] = 0.f;

    const int KT = (CONV_GKK + V23_BK - 1) / V23_BK;
#pragma unroll
    for (int s = 0; s < V23_STAGES - 2; ++s) {
        if (s < KT) load(s, s * V23_BK);
        cp_async_commit();
    }
#pragma unroll 1
    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<V23_STAGES - 3>();     // stage kt has landed (this thread's copies) ...
        hgmma_fence_proxy();                 // ... visible to the tensor cores' async proxy ...
        __syncthreads();                     // ... for every thread; wgmma group kt-2 done in every warpgroup
        const int slot = kt % V23_STAGES;
        const half_t* A = As + slot * A_STAGE + wg * V23_MI * 64 * 64;
        const half_t* Bm = Bs + slot * B_STAGE;
#pragma unroll
        for (int m = 0; m < V23_MI; ++m) hgmma_fence_acc(acc[m]);
        hgmma_fence();
#pragma unroll
        for (int s = 0; s < V23_BK / 16; ++s) {
            const unsigned long long bd = hgmma_desc(Bm + 16 * s);
#pragma unroll
            for (int m = 0; m < V23_MI; ++m)
                wgmma_half(acc[m], hgmma_desc(A + 16 * s + m * 64 * 64), bd);
        }
        hgmma_commit();
        const int next = kt + V23_STAGES - 2;
        if (next < KT) load(next % V23_STAGES, next * V23_BK);
        cp_async_commit();                   // (an empty group past the end keeps the count uniform)
        hgmma_wait<1>();                     // group kt-1 done (its slot is reloaded after the next barrier)
    }
    hgmma_wait<0>();
#pragma unroll
    for (int m = 0; m < V23_MI; ++m) hgmma_fence_acc(acc[m]);
    cp_async_wait<0>();

    // Accumulator 4i + 2h + e of tile m: position row 16 warp + gid + 8h, filter column 8i + 2 tig + e.
#if V23_YNCHW
    float bias_of[V23_BN / 8][2];
#pragma unroll
    for (int i = 0; i < V23_BN / 8; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int f = f0 + 8 * i + 2 * tig + e;
            bias_of[i][e] = CONV_BIAS && f < CONV_M ? half_to_float(bias[f]) : 0.f;
        }
#pragma unroll
    for (int m = 0; m < V23_MI; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const long long n = n0 + (wg * V23_MI + m) * 64 + warp * 16 + gid + 8 * h;
            if (n >= npos) continue;
            const long long b = pos_image(n CONV_DIMS_ARG);
            half_t* out = y + b * CONV_M * CONV_HOWO + (n - b * CONV_HOWO);
#pragma unroll
            for (int i = 0; i < V23_BN / 8; ++i)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int f = f0 + 8 * i + 2 * tig + e;
                    if (f < CONV_M) out[(long long)f * CONV_HOWO] = float_to_half(acc[m][4 * i + 2 * h + e] + bias_of[i][e]);
                }
        }
#else
    // y channels-last: the block's tile through shared memory (the stages are free once every warpgroup's
    // wgmma is done), then written a position's 8 filters (16 bytes) per thread, consecutive threads
    // consecutive 16 bytes of a position's row (a thread's own pairs of filters are 4 bytes of 8 rows apart)
    constexpr int CP = V23_BN + 8;                      // pitch (halves): (gid, tig)'s 4-byte stores on 32 banks
    constexpr int RC = V23_BN / 8;                      // 16-byte pieces of a position's row
    static_assert(V23_BM * CP <= V23_STAGES * (A_STAGE + B_STAGE), "v23: the output tile fits the stages");
    __syncthreads();
    half_t* Cs = As;
#pragma unroll
    for (int m = 0; m < V23_MI; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = (wg * V23_MI + m) * 64 + warp * 16 + gid + 8 * h;
#pragma unroll
            for (int i = 0; i < V23_BN / 8; ++i) {
                const int c = 8 * i + 2 * tig, f = f0 + c;
                const float b0 = CONV_BIAS && f < CONV_M ? half_to_float(bias[f]) : 0.f;
                const float b1 = CONV_BIAS && f + 1 < CONV_M ? half_to_float(bias[f + 1]) : 0.f;
                *reinterpret_cast<unsigned*>(Cs + r * CP + c) = floats_to_halves(acc[m][4 * i + 2 * h] + b0,
                                                                                 acc[m][4 * i + 2 * h + 1] + b1);
            }
        }
    __syncthreads();
#pragma unroll 4
    for (int e = tid; e < V23_BM * RC; e += V23_THREADS) {
        const int r = e / RC, j = e % RC, f = f0 + 8 * j;
        const long long n = n0 + r;
        if (n >= npos || f >= CONV_M) continue;
        const half_t* src = Cs + r * CP + 8 * j;
        half_t* dst = y + n * CONV_M + f;
        if (CONV_M % 8 == 0)                            // (f + 8 <= M, and the 16 bytes aligned)
            *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
        else
            for (int t = 0; t < 8 && f + t < CONV_M; ++t) dst[t] = src[t];
    }
#endif
#else
    __trap();
#endif
}
