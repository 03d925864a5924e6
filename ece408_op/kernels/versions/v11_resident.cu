// v11_resident.cu: v11, 3xTF32 tensor cores on whole images held in shared memory.
//
//   v11 resident like v9 (3xTF32 tensor cores), but a block keeps whole images in shared memory and
//                reads the x operand straight from them, at tap offsets from each position's window
//                corner (no gather); weights split once per block. Small multi-channel layers.
//                H100: 2018 conv2 0.59 ms (v8 1.30), 2019 conv2 1.94 ms (v9 4.13): 0.49x, 0.34x cuDNN
//
// Build it alone: nvcc -arch=sm_90 -cubin ece408_op/kernels/versions/v11_resident.cu (its defaults are the
// course layer's, as the launcher passes them: a test checks it).
#include "common.cuh"
#include "gemm.cuh"
#include "tf32.cuh"

// ------------------------------------------------------------------ v11 resident: tensor cores on images in shared memory
// v9 gathers an x tile for every k-step of its GEMM; on the course's multi-channel layers (C*K*K = 150,
// 300; 16-24 filters) that gather costs more than the tensor-core products it feeds. v11 keeps whole
// images in shared memory (the next one arriving by cp.async while the block computes the current one)
// and reads the MMA's x operand straight from them: a thread finds the window corners of its two
// positions (GEMM rows gid, gid+8) of each fragment once, and a tap (c, p, q) lies c*H*W + p*W + q
// from a corner, so each k-step reads one tap pair per thread (a small table: a thread's taps depend
// on its lane) and then every x value of MT fragments with one address addition each.
// The taps run along the GEMM's k in the order the launcher passes (versions.tap_order: groups of 4
// whose reads fall in distinct shared-memory banks; -1 pads the last k-step). Weights are split into
// TF32 high and low parts once per block, stored in fragment order (one 16-byte read per 8 filters and
// k-step). Same 3xTF32 products as v9. Any course-style layer whose image and
// split weights fit in shared memory, at most 64 filters and C*K*K <= 512 (a fully unrolled k-loop).
#ifndef V11_WARPS
#define V11_WARPS 8        // v11: warps per block
#endif
#ifndef V11_MT
#define V11_MT 2           // v11: 16-position fragments per warp (sharing each k-step's weight fragments)
#endif
#ifndef V11_BUFFERS
#define V11_BUFFERS 1      // v11: image buffers per block (2: the next image's copy overlaps the arithmetic)
#endif
#ifndef V11_ENABLED
#define V11_ENABLED 1      // v11: 0 where the layer is not v11's kind (the launcher refuses v11)
#endif
#define V11_KS ((CONV_CKK + 7) / 8)                          // k-steps of 8 taps
#define V11_NT ((CONV_M + 7) / 8)                            // 8-filter fragments
#define V11_TILES ((CONV_HOWO + 15) / 16)                   // 16-position fragments of one plane
#define V11_IMAGE (CONV_C * CONV_HW)
#define V11_XBUF ((V11_IMAGE + 3) / 4 * 4)                   // floats per image buffer (16-byte aligned)

#if V11_ENABLED
// Offset in bytes of tap r = (c, p, q) from a window corner; the k-padding taps (r = -1) read the corner.
__device__ __forceinline__ int v11_tap(int r)
{
    return r >= 0 ? 4 * ((r / CONV_KK) * CONV_HW + ((r % CONV_KK) / CONV_K) * CONV_W + r % CONV_K) : 0;
}

// A float at a shared-memory address (one addition per operand: address = corner + tap, both in bytes).
__device__ __forceinline__ float lds_f32(unsigned address)
{
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(address));
    return v;
}

__device__ __forceinline__ void v11_load_image(float* xs, const float* __restrict__ xb)
{
    constexpr int THREADS = 32 * V11_WARPS;
    if (V11_IMAGE % 4 == 0) {     // 16-byte copies (the launcher passes a 16-byte-aligned x)
        for (int e = threadIdx.x * 4; e < V11_IMAGE; e += THREADS * 4) {
            cp_async16(xs + e, xb + e);
        }
    } else {
        for (int e = threadIdx.x; e < V11_IMAGE; e += THREADS) cp_async4(xs + e, xb + e, true);
    }
}

// N consecutive fragments t0 .. t0+N-1 of one image: y planes of the image (yb) from its x (xb).
template <int N>
__device__ __forceinline__ void v11_fragments(float* __restrict__ yb, const float* xb, const float4* ws, const int2* koff,
                                              int t0, int lane)
{
    const int gid = lane / 4, tig = lane % 4;
    const bool ok0 = (V11_KS - 1) * 8 + tig < CONV_CKK, ok1 = (V11_KS - 1) * 8 + tig + 4 < CONV_CKK;
    float acc[N][V11_NT][4];
    zero_fragments(acc);
    unsigned row[N][2];                               // rows gid and gid+8 of fragment i: their window corners
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            int n = (t0 + i) * 16 + gid + half * 8;
            n = n < CONV_HOWO ? n : 0;                    // past the plane: computed, not stored
            row[i][half] = static_cast<unsigned>(__cvta_generic_to_shared(xb + (n / CONV_WO) * CONV_W + n % CONV_WO));
        }
#pragma unroll
    for (int ks = 0; ks < V11_KS; ++ks) {
        const int2 o = koff[ks * 4 + tig];            // A (16 x 8): rows gid, gid+8; taps tig, tig+4
    unsigned ahi[N][4], alo[N][4], bhi[V11_NT][2], blo[V11_NT][2];
#pragma unroll
        for (int i = 0; i < N; ++i) {
            float v[4] = {lds_f32(row[i][0] + o.x), lds_f32(row[i][1] + o.x), lds_f32(row[i][0] + o.y), lds_f32(row[i][1] + o.y)};
            if (CONV_CKK % 8 != 0 && ks == V11_KS - 1) {     // the k-padding taps count as zero
                if (!ok0) v[0] = v[1] = 0.f;
                if (!ok1) v[2] = v[3] = 0.f;
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) split_tf32(v[e], ahi[i][e], alo[i][e]);
        }
#pragma unroll
        for (int j = 0; j < V11_NT; ++j) {             // B (8 x 8): taps tig, tig+4; filter gid (pre-split)
            const float4 w = ws[(ks * V11_NT + j) * 32 + lane];
            bhi[j][0] = __float_as_uint(w.x); bhi[j][1] = __float_as_uint(w.y);
            blo[j][0] = __float_as_uint(w.z); blo[j][1] = __float_as_uint(w.w);
        }
        if (TF32_PASSES == 3) {
            mma_tf32_all(acc, alo, bhi);               // each product over every fragment in turn: the
            mma_tf32_all(acc, ahi, blo);               // small ones first, MT x NT independent chains
        }
        mma_tf32_all(acc, ahi, bhi);
    }
    // Accumulator e of fragment (i, j): position row gid (+8 for e >= 2), filter 2*tig (+1 for odd e).
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int n = (t0 + i) * 16 + gid + half * 8;
            if (n >= CONV_HOWO) continue;
            float* out = yb + n;
#pragma unroll
            for (int j = 0; j < V11_NT; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int f = j * 8 + 2 * tig + e;
                    if (CONV_M % 8 == 0 || f < CONV_M) gemm_store(out + f * CONV_HOWO, acc[i][j][half * 2 + e]);
                }
        }
}

// The last n < N fragments of a warp's share (a fully unrolled body per count).
template <int N>
__device__ __forceinline__ void v11_rest(int n, float* __restrict__ yb, const float* xb, const float4* ws, const int2* koff,
                                         int t0, int lane)
{
    if constexpr (N > 0) {
        if (n == N) v11_fragments<N>(yb, xb, ws, koff, t0, lane);
        else v11_rest<N - 1>(n, yb, xb, ws, koff, t0, lane);
    }
}

// One image: warp w takes fragments [w*T/WARPS, (w+1)*T/WARPS) of the T, MT at a time (shares differ by
// at most one fragment, so the block waits little at the next image).
__device__ __forceinline__ void v11_image(float* __restrict__ yb, const float* xb, const float4* ws, const int2* koff,
                                          int warp, int lane)
{
    const int end = (warp + 1) * V11_TILES / V11_WARPS;
    int t0 = warp * V11_TILES / V11_WARPS;
#pragma unroll 1
    for (; t0 + V11_MT <= end; t0 += V11_MT) v11_fragments<V11_MT>(yb, xb, ws, koff, t0, lane);
    v11_rest<V11_MT - 1>(end - t0, yb, xb, ws, koff, t0, lane);
}
#endif

// Grid: any number of blocks (the launcher: as many as fit on the device at once, at most B); block
// b' computes images b', b' + gridDim.x, ... Dynamic shared memory: split weights, tap table, image buffers.
extern "C" __global__ void __launch_bounds__(32 * V11_WARPS, 1)
conv_forward_v11(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ k,
                 const int* __restrict__ order, int B)
{
#if V11_ENABLED
    constexpr int THREADS = 32 * V11_WARPS, FRAGS = V11_KS * V11_NT * 32;
    float4* ws = gemm_smem;
    int2* koff = reinterpret_cast<int2*>(ws + FRAGS);
    float* xs = reinterpret_cast<float*>(koff + V11_KS * 4);       // 16-byte aligned: V11_KS * 32 bytes before
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int b = blockIdx.x;
    if (b < B) v11_load_image(xs, x + (long long)b * V11_IMAGE);
    cp_async_commit();
    for (int e = threadIdx.x; e < FRAGS; e += THREADS) {          // weights -> fragment order, split
        const int l = e % 32, f = e / 32, n = (f % V11_NT) * 8 + l / 4;
        const int slot = (f / V11_NT) * 8 + l % 4, r0 = __ldg(order + slot), r1 = __ldg(order + slot + 4);
        const float w0 = (n < CONV_M && r0 >= 0) ? __ldg(k + n * CONV_CKK + r0) : 0.f;
        const float w1 = (n < CONV_M && r1 >= 0) ? __ldg(k + n * CONV_CKK + r1) : 0.f;
        unsigned h0, l0, h1, l1;
        split_tf32(w0, h0, l0);
        split_tf32(w1, h1, l1);
        ws[e] = make_float4(__uint_as_float(h0), __uint_as_float(h1), __uint_as_float(l0), __uint_as_float(l1));
    }
    for (int e = threadIdx.x; e < V11_KS * 4; e += THREADS) {
        const int slot = (e / 4) * 8 + e % 4;
        koff[e] = make_int2(v11_tap(__ldg(order + slot)), v11_tap(__ldg(order + slot + 4)));
    }
#pragma unroll 1
    for (int it = 0; b < B; b += gridDim.x, ++it) {
        if (V11_BUFFERS == 2) {              // the next image arrives while this one is computed
            const int next = b + gridDim.x;
            if (next < B) v11_load_image(xs + ((it + 1) & 1) * V11_XBUF, x + (long long)next * V11_IMAGE);
            cp_async_commit();
            cp_async_wait<1>();              // image b has landed (for this thread) ...
        } else {                             // one buffer: other blocks on the SM compute meanwhile
            if (it > 0) {
                v11_load_image(xs, x + (long long)b * V11_IMAGE);
                cp_async_commit();
            }
            cp_async_wait<0>();
        }
        __syncthreads();                     // ... for every thread
        v11_image(y + (long long)b * CONV_M * CONV_HOWO, xs + (V11_BUFFERS == 2 ? (it & 1) * V11_XBUF : 0), ws, koff,
                  warp, lane);
        __syncthreads();                     // its buffer is free for the image after next (or the next)
    }
    cp_async_wait<0>();
#endif
}
