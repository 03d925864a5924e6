// v21_hmma.cu: v21, the implicit GEMM in half precision (float16 or bfloat16) on the tensor cores.
//
//   v21 hmma     half-precision data (float16 or bfloat16, as PyTorch's .half(), .bfloat16() and autocast
//                hand it), channels-last: the implicit GEMM of v9 with the GEMM's depth ordered (p, q, c),
//                so a row of a stage is runs of contiguous channels copied 16 bytes at a time (cp.async,
//                STAGES deep), the fragments read by ldmatrix and multiplied by mma.sync m16n8k16 with
//                float32 accumulators; y in the data's type. Any layer whose channels per group are even
//                (one group: any; the launch pads odd channels), NCHW data packed first (half.cuh).
//
//                The layer's sizes are a kernel argument (CONV_DYNAMIC, common.cuh: ConvDims): one module per
//                tile, type and output layout serves every layer.
//
// Build it alone: nvcc -arch=sm_90 -cubin ece408_op/kernels/versions/v21_hmma.cu (sm_80 and later; its defaults
// are the launcher's for the course layer's shape, a test checks it).
#ifndef CONV_DYNAMIC
#define CONV_DYNAMIC 1
#endif
#include "common.cuh"
#include "gemm.cuh"
#include "half.cuh"

// ------------------------------------------------------------------ v21 hmma
// Per group g: Y (positions x filters) = X (positions x GKK) . W_g^T, where a GEMM row r = (p, q, c) of
// position n is x[b][oh*SH - PH + p*DH][ow*SW - PW + q*DW][g*CG + c] (zero in the padding) and W_g is the
// group's filters in KRSC order. A block computes BM positions x BN filters, WM x WN warps of (BM/WM) x
// (BN/WN); its k-loop stages BK columns of both operands per stage, row-major with the k contiguous:
//     As[stage][BM][BK + 8], Bs[stage][BN][BK + 8]   (halves; 16 bytes of padding per row: ldmatrix's
//                                                      eight 16-byte rows fall on distinct banks)
// A thread copies VEC halves (VEC | CG: a copy never straddles two taps) of column `col` of the rows
// `row + i * RSTEP`; each row's window (its corner's offset, the window rows and columns inside x: bits p
// and 16 + q) is computed once per block, each column's tap (p, q, c) once per stage.
// Grid: (ceil(B*HO*WO / BM), G * ceil(MG / BN)); dynamic shared memory STAGES * (BM + BN) * (BK + 8) * 2.
#ifndef V21_BM
#define V21_BM 128         // v21: positions per block
#endif
#ifndef V21_BN
#define V21_BN 64          // v21: filters per block
#endif
#ifndef V21_WM
#define V21_WM 4           // v21: warps along positions
#endif
#ifndef V21_WN
#define V21_WN 2           // v21: warps along filters
#endif
#ifndef V21_BK
#define V21_BK 32          // v21: GEMM depth per stage (a multiple of 16)
#endif
#ifndef V21_STAGES
#define V21_STAGES 4       // v21: shared-memory stages
#endif
#ifndef V21_VEC
#define V21_VEC 4          // v21: halves per copy (8, 4 or 2; dividing the channels per group)
#endif
#ifndef V21_YNCHW
#define V21_YNCHW 1        // v21: 1: y is NCHW, 0: NHWC
#endif
#ifndef V21_MINB
#define V21_MINB 1         // v21: blocks per SM the registers are capped for (__launch_bounds__)
#endif

#define V21_THREADS (32 * V21_WM * V21_WN)
#define V21_PITCH (V21_BK + 8)
#define V21_MI (V21_BM / V21_WM / 16)
#define V21_NI (V21_BN / V21_WN / 8)

#if CONV_DYNAMIC
#define V21_DIV_CG(k) ((int)CONV_UDIV(k, CG))
#else
#define V21_DIV_CG(k) ((int)((unsigned)(k) / (unsigned)CONV_CG))
#endif

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const half_t* smem)
{
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

__device__ __forceinline__ void ldmatrix_x2(unsigned& r0, unsigned& r1, const half_t* smem)
{
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(a));
}

__device__ __forceinline__ void mma_half(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
#if HALF_BF16
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
#else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
#endif
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

extern "C" __global__ void __launch_bounds__(V21_THREADS, V21_MINB)
conv_forward_v21(half_t* __restrict__ y, const half_t* __restrict__ x, const half_t* __restrict__ w,
                 const half_t* __restrict__ bias, int B CONV_DIMS_PARAM)
{
    constexpr int CH = V21_BK / V21_VEC;                 // copies per stage row
    constexpr int RSTEP = V21_THREADS / CH;              // stage rows one pass of the block's threads copies
    constexpr int AROWS = V21_BM / RSTEP, BROWS = (V21_BN + RSTEP - 1) / RSTEP;
    constexpr int A_STAGE = V21_BM * V21_PITCH, B_STAGE = V21_BN * V21_PITCH;
    static_assert(V21_BK % 16 == 0 && V21_BK % V21_VEC == 0 && V21_THREADS % CH == 0 && V21_BM % RSTEP == 0,
                  "v21: the stage does not divide among the threads");
    static_assert(V21_BM % (16 * V21_WM) == 0 && V21_BN % (8 * V21_WN) == 0, "v21: the warps' tiles");
    half_t* As = reinterpret_cast<half_t*>(gemm_smem);
    half_t* Bs = As + V21_STAGES * A_STAGE;

    const int tiles_f = (CONV_MG + V21_BN - 1) / V21_BN;
    const int g = blockIdx.y / tiles_f, f0 = (blockIdx.y - g * tiles_f) * V21_BN;
    const long long n0 = (long long)blockIdx.x * V21_BM, npos = (long long)B * CONV_HOWO;
    const int tid = threadIdx.x, col = tid % CH, row = tid / CH;

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
        corner[i] = ((b * CONV_H + ih0) * CONV_W + iw0) * CONV_C + g * CONV_CG;
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
    const half_t* wg = w + (long long)(g * CONV_MG + f0) * CONV_GKK;

    auto load = [&](int stage, int k0) {
        const int k = k0 + col * V21_VEC;
        const bool kok = k < CONV_GKK;
        int p = 0, q = 0, c = 0;
        if (kok) {
            const int pq = V21_DIV_CG(k);
            c = k - pq * CONV_CG;
            p = (int)CONV_UDIV(pq, KW);
            q = pq - p * CONV_KW;
        }
        const int offset = (p * CONV_DH * CONV_W + q * CONV_DW) * CONV_C + c;
        half_t* a = As + stage * A_STAGE + row * V21_PITCH + col * V21_VEC;
#pragma unroll
        for (int i = 0; i < AROWS; ++i) {
            const bool ok = kok && ((inside[i] >> p) & (inside[i] >> (16 + q)) & 1u);
            cp_async_zfill<2 * V21_VEC>(a + i * RSTEP * V21_PITCH, x + (ok ? corner[i] + offset : 0), ok);
        }
        half_t* bs = Bs + stage * B_STAGE + row * V21_PITCH + col * V21_VEC;
#pragma unroll
        for (int i = 0; i < BROWS; ++i) {
            const int f = row + i * RSTEP;
            if (V21_BN % RSTEP == 0 || f < V21_BN) {
                const bool ok = kok && f0 + f < CONV_MG;
                cp_async_zfill<2 * V21_VEC>(bs + i * RSTEP * V21_PITCH, wg + (ok ? f * CONV_GKK + k : 0), ok);
            }
        }
    };

    const int warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
    const int p0 = (warp % V21_WM) * (V21_BM / V21_WM), q0 = (warp / V21_WM) * (V21_BN / V21_WN);
    // ldmatrix's row addresses: A (16 x 16 per x4): row lane % 16, columns (lane / 16) * 8; B (two 8-filter
    // fragments per x4): filter lane % 8 + (lane / 16) * 8, columns ((lane / 8) % 2) * 8
    const int a_off = (p0 + lane % 16) * V21_PITCH + (lane / 16) * 8;
    const int b_off = (q0 + lane % 8 + (lane / 16) * 8) * V21_PITCH + ((lane / 8) % 2) * 8;
    float acc[V21_MI][V21_NI][4];
#pragma unroll
    for (int i = 0; i < V21_MI; ++i)
#pragma unroll
        for (int j = 0; j < V21_NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    const int KT = (CONV_GKK + V21_BK - 1) / V21_BK;
#pragma unroll
    for (int s = 0; s < V21_STAGES - 1; ++s) {
        if (s < KT) load(s, s * V21_BK);
        cp_async_commit();
    }
#pragma unroll 1
    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<V21_STAGES - 2>();     // stage kt has landed (this thread's copies) ...
        __syncthreads();                     // ... every thread's, and stage kt-1 is no longer read
        const int next = kt + V21_STAGES - 1;
        if (next < KT) load(next % V21_STAGES, next * V21_BK);
        cp_async_commit();                   // (an empty group past the end keeps the count uniform)
        const half_t* A = As + (kt % V21_STAGES) * A_STAGE + a_off;
        const half_t* Bm = Bs + (kt % V21_STAGES) * B_STAGE + b_off;
#pragma unroll
        for (int kk = 0; kk < V21_BK; kk += 16) {
            unsigned a[V21_MI][4], b[V21_NI][2];
#pragma unroll
            for (int i = 0; i < V21_MI; ++i) ldmatrix_x4(a[i], A + i * 16 * V21_PITCH + kk);
#pragma unroll
            for (int j = 0; j + 1 < V21_NI; j += 2) {
                unsigned r[4];
                ldmatrix_x4(r, Bm + j * 8 * V21_PITCH + kk);
                b[j][0] = r[0];
                b[j][1] = r[1];
                b[j + 1][0] = r[2];
                b[j + 1][1] = r[3];
            }
            if (V21_NI % 2) ldmatrix_x2(b[V21_NI - 1][0], b[V21_NI - 1][1], Bm + (V21_NI - 1) * 8 * V21_PITCH + kk);
#pragma unroll
            for (int i = 0; i < V21_MI; ++i)
#pragma unroll
                for (int j = 0; j < V21_NI; ++j) mma_half(acc[i][j], a[i], b[j][0], b[j][1]);
        }
    }
    cp_async_wait<0>();

    // Accumulator e of fragment (i, j): position row gid (+8 for e >= 2), filter column 2*tig (+1 for odd e).
    float bias_of[V21_NI][2];
#pragma unroll
    for (int j = 0; j < V21_NI; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int f = f0 + q0 + j * 8 + 2 * tig + e;
            bias_of[j][e] = CONV_BIAS && f < CONV_MG ? half_to_float(bias[g * CONV_MG + f]) : 0.f;
        }
#pragma unroll
    for (int i = 0; i < V21_MI; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const long long n = n0 + p0 + i * 16 + gid + h * 8;
            if (n >= npos) continue;
#if V21_YNCHW
            const long long b = pos_image(n CONV_DIMS_ARG);
            half_t* out = y + (b * CONV_M + g * CONV_MG) * CONV_HOWO + (n - b * CONV_HOWO);
#pragma unroll
            for (int j = 0; j < V21_NI; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int f = f0 + q0 + j * 8 + 2 * tig + e;
                    if (f < CONV_MG) out[(long long)f * CONV_HOWO] = float_to_half(acc[i][j][2 * h + e] + bias_of[j][e]);
                }
#else
            half_t* out = y + n * CONV_M + g * CONV_MG;
#pragma unroll
            for (int j = 0; j < V21_NI; ++j) {
                const int f = f0 + q0 + j * 8 + 2 * tig;
                const float v0 = acc[i][j][2 * h] + bias_of[j][0], v1 = acc[i][j][2 * h + 1] + bias_of[j][1];
                if (f + 1 < CONV_MG && CONV_MG % 2 == 0)      // (an even MG: the pair is 4-byte aligned)
                    *reinterpret_cast<unsigned*>(out + f) = floats_to_halves(v0, v1);
                else {
                    if (f < CONV_MG) out[f] = float_to_half(v0);
                    if (f + 1 < CONV_MG) out[f + 1] = float_to_half(v1);
                }
            }
#endif
        }
}
