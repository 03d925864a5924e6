// v20_wgmma.cu: v20, v9's 3xTF32 on Hopper's warpgroup MMA (built for sm_90a).
//
//   v20 wgmma    like v9 (3xTF32), but on Hopper's warpgroup MMA (wgmma.mma_async, sm_90a only): a
//                warpgroup multiplies 64 positions x 64 or 128 filters per instruction, x gathered
//                into its registers, the weights split once per call and staged by 16-byte copies.
//                H100, at batch 64 (VGG 32): ResNet-18's 3x3 stride-1 28x28 layer 0.157 ms (v9 0.323,
//                cuDNN fp32 0.207), VGG-16's 512-channel 28x28 0.99 ms (v9 2.52, cuDNN 1.46)
//
//                The layer's sizes are a kernel argument (CONV_DYNAMIC, common.cuh: ConvDims): one module per
//                tile serves every layer (the k table and the tap masks are computed once per block either way).
//
// Build it alone: nvcc -arch=sm_90a -cubin ece408_op/kernels/versions/v20_wgmma.cu (its defaults are the
// launcher's for the course layer: a test checks it; for sm_90 its entry point only traps).
#ifndef CONV_DYNAMIC
#define CONV_DYNAMIC 1
#endif
#include "common.cuh"
#include "gemm.cuh"
#include "tf32.cuh"

// ------------------------------------------------------------------ v20 wgmma: Hopper's warpgroup MMA
// v9's 3xTF32 scheme on sm_90a's asynchronous warpgroup MMA (wgmma.mma_async m64nNk8): a warpgroup
// of 4 warps multiplies 64 positions x V20_BN filters per instruction. The x operand (positions x k)
// is gathered straight from x into registers in wgmma's A fragment layout (rows gid, gid + 8 of each
// warp's 16; columns tig, tig + 4) and split there; the weight operand comes from shared memory, split
// once per call by wgmma_weights into hi and lo halves laid out as the shared-memory stages, so a stage
// is one contiguous 16-byte cp.async copy. Three wgmma per k-step of 8: lo*hi', hi*lo', hi*hi'.
#ifndef V20_BN
#define V20_BN 64          // v20: filters per block (wgmma's N: 64 or 128)
#endif
#ifndef V20_WG
#define V20_WG 1           // v20: warpgroups per block, 64 positions each
#endif
#ifndef V20_BK
#define V20_BK 32          // v20: k per stage (a multiple of 8)
#endif
#ifndef V20_STAGES
#define V20_STAGES 2       // v20: weight stages in shared memory
#endif
#ifndef V20_MINB
#define V20_MINB 2         // v20: blocks per SM the registers are capped for (__launch_bounds__)
#endif
#ifndef V20_INLINE
#define V20_INLINE 0       // v20: 1: the kernel stages the raw weights and splits them (one launch, no
#endif                     // wgmma_weights pass: small layers, where the call waits on the host)
#define V20_THREADS (128 * V20_WG)
#define V20_BM (64 * V20_WG)
#define V20_KT ((CONV_GKK + V20_BK - 1) / V20_BK)
#define V20_FTILES ((CONV_M + V20_BN - 1) / V20_BN)

// A weight stage: [hi, lo][k-step of 8][V20_BN filters x 8 k] with wgmma's canonical K-major layout
// without swizzling: core matrix (n / 8, k / 4), 8 filters x 4 k in 16-byte rows, at byte
// (k / 4) * 128 + (n / 8) * 256 (so LBO, between core matrices along k, is 128; SBO, along n, 256).
// Filters past M and k past GKK are zeros. One thread per element of the split weights.
extern "C" __global__ void wgmma_weights(float* __restrict__ w2, const float* __restrict__ k CONV_DIMS_PARAM)
{
    constexpr int STEP = V20_BN * 8, STEPS = V20_BK / 8;
    const long long total = (long long)V20_FTILES * V20_KT * 2 * V20_BK * V20_BN;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
        const int i = (int)(e % STEP);
        unsigned r = (unsigned)(e / STEP);             // (filter tile, k tile, half, k-step): 32-bit (weights)
        const int step = (int)(r % STEPS);
        r /= STEPS;
        const int half = (int)(r % 2);
        r /= 2;
        const unsigned kts = V20_KT;
        const int ft = (int)(r / kts), kt = (int)(r - ft * kts);
        const int n = (i / 64) * 8 + (i % 32) / 4, kk = ((i % 64) / 32) * 4 + i % 4;
        const int f = ft * V20_BN + n, col = kt * V20_BK + step * 8 + kk;
        const float v = f < CONV_M && col < CONV_GKK ? k[(long long)f * CONV_GKK + col] : 0.f;
        unsigned hi, lo;
        split_tf32(v, hi, lo);
        w2[e] = __uint_as_float(half ? lo : hi);
    }
}

__device__ __forceinline__ unsigned long long wgmma_desc(const float* smem)
{
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    return (unsigned long long)((addr & 0x3ffff) >> 4) | (128ull >> 4) << 16 | (256ull >> 4) << 32;   // LBO, SBO
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void fence_registers(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void wgmma_tf32(float (&d)[32], const unsigned (&a)[4], unsigned long long desc)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "{%32, %33, %34, %35}, %36, 1, 1, 1;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}
__device__ __forceinline__ void wgmma_tf32(float (&d)[64], const unsigned (&a)[4], unsigned long long desc)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "{%64, %65, %66, %67}, %68, 1, 1, 1;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}
#endif

// Built for sm_90a only (wgmma); elsewhere the entry point exists and traps (the version refuses
// devices other than compute capability 9.0 before it launches).
extern "C" __global__ void __launch_bounds__(V20_THREADS, V20_MINB)
conv_forward_v20(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ w2,
                 const float* __restrict__ bias, int B CONV_DIMS_PARAM)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(V20_BK % 8 == 0 && (V20_BN == 64 || V20_BN == 128), "v20 tile");
    constexpr int STEPS = V20_BK / 8, HALF = V20_BK * V20_BN, STAGE = 2 * HALF;
    const int KPAD = V20_KT * V20_BK;
    float* ws = reinterpret_cast<float*>(gemm_smem);                  // V20_STAGES stages of (hi, lo)
    int* koff = reinterpret_cast<int*>(ws + V20_STAGES * STAGE);      // k -> (x offset << 6) | tap
    const int ft = blockIdx.y, tid = threadIdx.x;
    const long long n0 = (long long)blockIdx.x * V20_BM, npos = (long long)B * CONV_HOWO;
    const int wrow = (tid / 32) * 16, lane = tid % 32, gid = lane / 4, tig = lane % 4;

    for (int r = tid; r < KPAD; r += V20_THREADS) {
        int packed = 63;                               // past GKK: tap 63, never in a mask (zeros)
        if (r < CONV_GKK) {
            const int c = (int)CONV_UDIV(r, KHKW), pq = r - c * CONV_KHKW, p = (int)CONV_UDIV(pq, KW), q = pq - p * CONV_KW;
            packed = ((c * CONV_HW + p * CONV_DH * CONV_W + q * CONV_DW) << 6) | pq;
        }
        koff[r] = packed;
    }
    int corner[2];                     // this thread's rows gid and gid + 8: window corners, in-bounds taps
    unsigned long long taps[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const long long n = n0 + wrow + gid + 8 * h;
        const bool in = n < npos;
        const int b = in ? (int)pos_image(n CONV_DIMS_ARG) : 0, s = in ? (int)(n - (long long)b * CONV_HOWO) : 0;
        const int oh = (int)CONV_UDIV(s, WO), ow = s - oh * CONV_WO;
        const int ih0 = oh * CONV_SH - CONV_PH, iw0 = ow * CONV_SW - CONV_PW;
        corner[h] = b * (CONV_C * CONV_HW) + ih0 * CONV_W + iw0;
        unsigned long long bits = 0;
#pragma unroll
        for (int p = 0; p < CONV_KH; ++p)
#pragma unroll
            for (int q = 0; q < CONV_KW; ++q) {
                const int hh = ih0 + p * CONV_DH, ww = iw0 + q * CONV_DW;
                if (in && hh >= 0 && hh < CONV_H && ww >= 0 && ww < CONV_W) bits |= 1ull << (p * CONV_KW + q);
            }
        taps[h] = bits;
    }
#if V20_INLINE
    // The raw weights (w2 is k itself) copied 4 bytes at a time into the hi half, in the stage layout:
    // element e of a stage is filter n, column kk with lane = n % 8 + 8 * (kk % 4) (conflict-free stores).
    constexpr int PER = HALF / V20_THREADS;
    static_assert(HALF % V20_THREADS == 0, "v20: a stage's weights do not divide among the threads");
    auto place = [&](int e, int& n, int& kk) {         // -> the element's offset in a half stage
        n = e % 8 + 8 * ((e / 32) % (V20_BN / 8));
        kk = (e / 8) % 4 + 4 * ((e / 32) / (V20_BN / 8));
        return (kk / 8) * 8 * V20_BN + ((kk % 8) / 4) * 32 + (n / 8) * 64 + (n % 8) * 4 + kk % 4;
    };
    auto load_stage = [&](int kt) {
        float* dst = ws + (kt % V20_STAGES) * STAGE;
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            int n, kk;
            const int at = place(tid + i * V20_THREADS, n, kk), f = ft * V20_BN + n, col = kt * V20_BK + kk;
            const bool ok = f < CONV_M && col < CONV_GKK;
            cp_async4(dst + at, w2 + (ok ? f * CONV_GKK + col : 0), ok);
        }
    };
    auto split_stage = [&](int kt) {                   // lo = w - (w truncated to TF32): the tensor cores
        float* hi = ws + (kt % V20_STAGES) * STAGE;    // read hi's top 19 bits, its truncation
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            int n, kk;
            const int at = place(tid + i * V20_THREADS, n, kk);
            const float v = hi[at];
            hi[HALF + at] = v - __uint_as_float(__float_as_uint(v) & 0xffffe000u);
        }
    };
#else
    const float* wsrc = w2 + (long long)ft * V20_KT * STAGE;
    auto load_stage = [&](int kt) {
        float* dst = ws + (kt % V20_STAGES) * STAGE;
        const float* src = wsrc + (long long)kt * STAGE;
#pragma unroll
        for (int i = tid * 4; i < (TF32_PASSES == 3 ? STAGE : HALF); i += V20_THREADS * 4) cp_async16(dst + i, src + i);
    };
#endif
    float raw[STEPS][4];               // the next k tile's x values: a0 (gid, tig), a1 (gid+8, tig), a2, a3 (tig+4)
    auto gather = [&](int kt) {
#pragma unroll
        for (int s = 0; s < STEPS; ++s)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int e = koff[kt * V20_BK + s * 8 + tig + 4 * j], off = e >> 6, tap = e & 63;
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    raw[s][2 * j + h] = (taps[h] >> tap) & 1 ? __ldg(x + (corner[h] + off)) : 0.f;
            }
    };
    float acc[V20_BN / 2];
#pragma unroll
    for (int i = 0; i < V20_BN / 2; ++i) acc[i] = 0.f;

#pragma unroll
    for (int s = 0; s < V20_STAGES - 1; ++s) {
        if (s < V20_KT) load_stage(s);
        cp_async_commit();
    }
    __syncthreads();                   // the k table
    gather(0);
#pragma unroll 1
    for (int kt = 0; kt < V20_KT; ++kt) {
        cp_async_wait<V20_STAGES - 2>();               // stage kt has landed (this thread's copies) ...
#if V20_INLINE
        if (TF32_PASSES == 3) split_stage(kt);         // (each thread splits the values it copied)
#endif
        fence_proxy_async();                           // ... visible to the tensor cores' async proxy ...
        __syncthreads();                               // ... for every thread; stage kt-1 is no longer read
        if (kt + V20_STAGES - 1 < V20_KT) load_stage(kt + V20_STAGES - 1);
        cp_async_commit();
        unsigned ahi[STEPS][4], alo[STEPS][4];
#pragma unroll
        for (int s = 0; s < STEPS; ++s)
#pragma unroll
            for (int e = 0; e < 4; ++e) split_tf32(raw[s][e], ahi[s][e], alo[s][e]);
        if (kt + 1 < V20_KT) gather(kt + 1);
        const float* st = ws + (kt % V20_STAGES) * STAGE;
        fence_registers(acc);
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < STEPS; ++s) {
            const unsigned long long hi = wgmma_desc(st + s * 8 * V20_BN), lo = wgmma_desc(st + HALF + s * 8 * V20_BN);
            if (TF32_PASSES == 3) {
                wgmma_tf32(acc, alo[s], hi);           // the small products first
                wgmma_tf32(acc, ahi[s], lo);
            }
            wgmma_tf32(acc, ahi[s], hi);
        }
        wgmma_commit();
        wgmma_wait_all();
        fence_registers(acc);
    }
    cp_async_wait<0>();

    // Accumulator 4i + 2h + e: position row gid + 8h, filter column 8i + 2 tig + e.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const long long n = n0 + wrow + gid + 8 * h;
        if (n >= npos) continue;
        const long long b = pos_image(n CONV_DIMS_ARG);
        float* out = y + b * CONV_M * CONV_HOWO + (n - b * CONV_HOWO);
#pragma unroll
        for (int i = 0; i < V20_BN / 8; ++i)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int f = ft * V20_BN + 8 * i + 2 * tig + e;
                if (f >= CONV_M) continue;
                gemm_store(out + (long long)f * CONV_HOWO, acc[4 * i + 2 * h + e] + (CONV_BIAS ? __ldg(&bias[f]) : 0.f));
            }
    }
#else
    __trap();
#endif
}
