// conv_forward.cu: forward convolution kernels of ece408_conv, a ladder of versions.
//
//   The course's layer: y[b][m][h][w] = sum over c, p, q of x[b][c][h+p][w+q] * k[m][c][p][q]
//   x: B x C x H x W, k: M x C x K x K, y: B x M x HO x WO (HO = H-K+1, WO = W-K+1), float32
//   In general (conv/spec.py): stride SH x SW, zero padding PH x PW, dilation DH x DW, G groups
//   (k is M x C/G x KH x KW), an optional bias per filter; HO = (H + 2PH - DH(KH-1) - 1) / SH + 1.
//   v1, v5 and v6 compute the general layer; the others the course's kind (stride 1, no dilation,
//   one group, square kernel), the launcher padding x (pad_input) and adding the bias (add_bias).
//
// Versions (ece408_op/kernels/versions.py holds each one's capability check, #defines and grid;
// pick one with the operator attribute gpu_kernel=N, $ECE408_KERNEL=N or the scripts' --kernel N):
//   v1 naive     one thread per output, every operand from global memory, the layer at run time
//   v2 shared    like v1, but a block computes a TILE x TILE output tile of one (b, m) from an
//                input tile staged in shared memory, one channel at a time
//   v3 constant  like v2, weights in constant memory (one broadcast read per warp)
//   v4 register  like v3, shape fixed at compile time (loops unrolled) and each thread computes
//                MB filters from each shared input value (register blocking)
//   v5 im2col    unlike v4: unroll x into an im2col matrix (C/G*KH*KW x HO*WO per image and group,
//                in global memory, a chunk of images at a time), then a tiled shared-memory GEMM
//   v6 implicit  like v5, but the GEMM gathers its x tile straight from x: no im2col matrix
//   v7 strip     like v4 without shared memory: a thread keeps a K x (VEC+K-1) input strip of each
//                channel in registers (one channel at a time where C is large) and computes VEC
//                adjacent outputs for every filter; weights are constant-bank operands of the
//                FMAs; VEC-wide streaming stores
//
// Why v7 wins on the course layer (B=10000, C=1, M=50, 28x28, K=5): y is 1152 MB and x 31 MB,
// so the layer is bound by writing y (0.39 ms at the 3.0 TB/s copy rate measured on the H100)
// while its 7.2 G FMAs take about 0.22 ms at its fp32 rate, if nearly every instruction is an
// FMA. v7 issues 25 FMAs per output with the weight in a uniform register (fully unrolled filter
// loop: 5000 of its 6552 instructions are FFMA), no shared-memory traffic, and one 16-byte
// evict-first store per 4 outputs, so both limits overlap: 0.43 ms, 1.09x the floor
// (docs/kernel-notes.md has the measurements).
//
// The launcher passes #defines (CONV_C, CONV_H, CONV_W, CONV_M, CONV_K, TILE, MB, VEC, ...)
// computed by the same Python that sizes the grids (versions.module_defines). The defaults below
// are exactly what it passes for the course layer, v7's tuned values (kernels/tuning.json)
// included, so nvcc builds the tuned kernel from this file alone (a test checks it):
//     nvcc -arch=sm_90 -cubin ece408_op/kernels/conv_forward.cu

#ifndef CONV_C
#define CONV_C 1
#endif
#ifndef CONV_H
#define CONV_H 28
#endif
#ifndef CONV_W
#define CONV_W 28
#endif
#ifndef CONV_M
#define CONV_M 50
#endif
#ifndef CONV_K
#define CONV_K 5
#endif
#ifndef CONV_KH
#define CONV_KH 5          // general layer (v1, v5, v6): kernel height, width, stride, padding,
#endif                     // dilation, groups, bias; the course's values by default
#ifndef CONV_KW
#define CONV_KW 5
#endif
#ifndef CONV_SH
#define CONV_SH 1
#endif
#ifndef CONV_SW
#define CONV_SW 1
#endif
#ifndef CONV_PH
#define CONV_PH 0
#endif
#ifndef CONV_PW
#define CONV_PW 0
#endif
#ifndef CONV_DH
#define CONV_DH 1
#endif
#ifndef CONV_DW
#define CONV_DW 1
#endif
#ifndef CONV_G
#define CONV_G 1
#endif
#ifndef CONV_BIAS
#define CONV_BIAS 0
#endif
#ifndef TILE
#define TILE 16            // v2-v4: output tile edge (TILE x TILE threads)
#endif
#ifndef MB
#define MB 4               // v4: filters per thread
#endif
#ifndef GEMM_TILE
#define GEMM_TILE 16       // v5, v6: GEMM tile edge
#endif
#ifndef VEC
#define VEC 4              // v7: adjacent outputs per thread
#endif
#ifndef V7_THREADS
#define V7_THREADS 256     // v7: threads per block
#endif
#ifndef V7_UNROLL_M
#define V7_UNROLL_M CONV_M // v7: unroll factor of the filter loop (CONV_M: fully, weights as operands)
#endif
#ifndef V7_STREAM
#define V7_STREAM 1        // v7: streaming (evict-first) stores for y, which nothing here reads again
#endif
#ifndef V7_ENABLED
#define V7_ENABLED 1       // v7: 0 where even one channel's strip does not fit (the launcher refuses v7)
#endif
#ifndef V7_ALL_CHANNELS
#define V7_ALL_CHANNELS 1  // v7: keep all channels' strips in registers (else one channel at a time)
#endif
#ifndef CONST_WEIGHTS
#define CONST_WEIGHTS 16384   // floats of constant memory for weights (64 KB)
#endif

#define CONV_HO ((CONV_H + 2 * CONV_PH - CONV_DH * (CONV_KH - 1) - 1) / CONV_SH + 1)
#define CONV_WO ((CONV_W + 2 * CONV_PW - CONV_DW * (CONV_KW - 1) - 1) / CONV_SW + 1)
#define CONV_KK (CONV_K * CONV_K)            // the course's kind of layer (v2-v4, v7)
#define CONV_CKK (CONV_C * CONV_KK)
#define CONV_HOWO (CONV_HO * CONV_WO)
#define CONV_CG (CONV_C / CONV_G)            // the general layer (v5, v6): channels and filters of a
#define CONV_MG (CONV_M / CONV_G)            // group, and a group's GEMM depth
#define CONV_GKK (CONV_CG * CONV_KH * CONV_KW)

__constant__ float c_weights[CONST_WEIGHTS];

// ------------------------------------------------------------------ v1 naive
// Any layer (every size at run time); bias may be null.
extern "C" __global__ void conv_forward_v1(float* __restrict__ y, const float* __restrict__ x,
                                           const float* __restrict__ k, const float* __restrict__ bias,
                                           int B, int C, int H, int W, int M, int KH, int KW,
                                           int SH, int SW, int PH, int PW, int DH, int DW, int G)
{
    const int HO = (H + 2 * PH - DH * (KH - 1) - 1) / SH + 1, WO = (W + 2 * PW - DW * (KW - 1) - 1) / SW + 1;
    const long long total = (long long)B * M * HO * WO;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int w = (int)(i % WO);
    long long t = i / WO;
    const int h = (int)(t % HO); t /= HO;
    const int m = (int)(t % M);
    const long long b = t / M;
    const int CG = C / G, g = m / (M / G);
    float acc = 0.f;
    for (int c = 0; c < CG; ++c)
        for (int p = 0; p < KH; ++p) {
            const int r = h * SH + p * DH - PH;
            if (r < 0 || r >= H) continue;
            for (int q = 0; q < KW; ++q) {
                const int col = w * SW + q * DW - PW;
                if (col < 0 || col >= W) continue;
                acc += x[((b * C + g * CG + c) * H + r) * W + col] * k[((m * CG + c) * KH + p) * KW + q];
            }
        }
    if (bias) acc += bias[m];
    y[i] = acc;
}

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

// ------------------------------------------------------------------ v4 register
// Grid: (tiles of the output plane, ceil(M / MB), min(B, 65535)). Weights in constant memory; where
// M is not a multiple of MB, the last group reads past the M filters (still inside the bank, which
// the capability check ensures) and does not store those results.
#define V4_SPAN (TILE + CONV_K - 1)
extern "C" __global__ void __launch_bounds__(TILE * TILE)
conv_forward_v4(float* __restrict__ y, const float* __restrict__ x, int B)
{
    __shared__ float tile[V4_SPAN * V4_SPAN];
    const int tiles_w = (CONV_WO + TILE - 1) / TILE;
    const int h0 = (blockIdx.x / tiles_w) * TILE, w0 = (blockIdx.x % tiles_w) * TILE;
    const int m0 = blockIdx.y * MB, ty = threadIdx.y, tx = threadIdx.x;
    const int h = h0 + ty, w = w0 + tx;
    const bool live = h < CONV_HO && w < CONV_WO;
    for (long long b = blockIdx.z; b < B; b += gridDim.z) {
        float acc[MB];
#pragma unroll
        for (int j = 0; j < MB; ++j) acc[j] = 0.f;
#pragma unroll 1
        for (int c = 0; c < CONV_C; ++c) {
            const float* xc = x + (b * CONV_C + c) * (CONV_H * CONV_W);
            for (int i = ty * TILE + tx; i < V4_SPAN * V4_SPAN; i += TILE * TILE) {
                const int hh = h0 + i / V4_SPAN, ww = w0 + i % V4_SPAN;
                tile[i] = (hh < CONV_H && ww < CONV_W) ? __ldg(&xc[hh * CONV_W + ww]) : 0.f;
            }
            __syncthreads();
            if (live) {
                const float* kc = c_weights + m0 * CONV_CKK + c * CONV_KK;
#pragma unroll
                for (int p = 0; p < CONV_K; ++p)
#pragma unroll
                    for (int q = 0; q < CONV_K; ++q) {
                        const float v = tile[(ty + p) * V4_SPAN + tx + q];
#pragma unroll
                        for (int j = 0; j < MB; ++j)
                            acc[j] = fmaf(v, kc[j * CONV_CKK + p * CONV_K + q], acc[j]);
                    }
            }
            __syncthreads();
        }
        if (live) {
#pragma unroll
            for (int j = 0; j < MB; ++j)
                if (m0 + j < CONV_M)
                    y[((b * CONV_M + m0 + j) * CONV_HO + h) * CONV_WO + w] = acc[j];
        }
    }
}

// ------------------------------------------------------------------ v5 im2col, v6 implicit GEMM
// Per image b and group g: Y (MG x HO*WO) = Kmat_g (MG x CG*KH*KW) . X_bg (CG*KH*KW x HO*WO),
// row r of X = (c, p, q), column s = (h, w); padding reads as zeros.
// Grid: (ceil(HO*WO / GEMM_TILE), G * ceil(MG / GEMM_TILE), images of the launch).
__device__ __forceinline__ float unrolled_x(const float* __restrict__ xg, int r, int s)
{
    // xg: the first channel of group g in image b
    const int c = r / (CONV_KH * CONV_KW), p = (r / CONV_KW) % CONV_KH, q = r % CONV_KW;
    const int h = (s / CONV_WO) * CONV_SH + p * CONV_DH - CONV_PH;
    const int w = (s % CONV_WO) * CONV_SW + q * CONV_DW - CONV_PW;
#if CONV_PH > 0 || CONV_PW > 0            // without padding every output's window lies inside x
    if (h < 0 || h >= CONV_H || w < 0 || w >= CONV_W) return 0.f;
#endif
    return __ldg(&xg[(c * CONV_H + h) * CONV_W + w]);
}

template <bool IMPLICIT>
__device__ __forceinline__ void gemm_tile(float* __restrict__ y, const float* __restrict__ src,
                                          const float* __restrict__ k, const float* __restrict__ bias,
                                          long long b0, int n)
{
    __shared__ float ks[GEMM_TILE][GEMM_TILE];
    __shared__ float xs[GEMM_TILE][GEMM_TILE + 1];
    const int ty = threadIdx.y, tx = threadIdx.x;
    constexpr int tiles_m = (CONV_MG + GEMM_TILE - 1) / GEMM_TILE;
    const int g = blockIdx.y / tiles_m;
    const int mg = (blockIdx.y % tiles_m) * GEMM_TILE + ty, s = blockIdx.x * GEMM_TILE + tx;
    const float* kg = k + (long long)g * CONV_MG * CONV_GKK;
    for (int i = blockIdx.z; i < n; i += gridDim.z) {
        // IMPLICIT: src is x (offset to image b0 + i, group g); else src is the im2col chunk.
        const float* xb = IMPLICIT ? src + (b0 + i) * (CONV_C * CONV_H * CONV_W) + (long long)g * CONV_CG * CONV_H * CONV_W
                                   : src + ((long long)i * CONV_G + g) * CONV_GKK * CONV_HOWO;
        float acc = 0.f;
        for (int r0 = 0; r0 < CONV_GKK; r0 += GEMM_TILE) {
            const int kr = r0 + tx, xr = r0 + ty;
            ks[ty][tx] = (mg < CONV_MG && kr < CONV_GKK) ? __ldg(&kg[mg * CONV_GKK + kr]) : 0.f;
            float v = 0.f;
            if (xr < CONV_GKK && s < CONV_HOWO)
                v = IMPLICIT ? unrolled_x(xb, xr, s) : __ldg(&xb[(long long)xr * CONV_HOWO + s]);
            xs[ty][tx] = v;
            __syncthreads();
#pragma unroll
            for (int e = 0; e < GEMM_TILE; ++e) acc = fmaf(ks[ty][e], xs[e][tx], acc);
            __syncthreads();
        }
        if (mg < CONV_MG && s < CONV_HOWO) {
            const int m = g * CONV_MG + mg;
#if CONV_BIAS
            acc += __ldg(&bias[m]);
#endif
            y[((b0 + i) * CONV_M + m) * CONV_HOWO + s] = acc;
        }
    }
}

// cols[i][g][r][s] = x[b0 + i], group g, unrolled; one thread per element.
extern "C" __global__ void im2col_v5(float* __restrict__ cols, const float* __restrict__ x,
                                     long long b0, int n)
{
    const long long total = (long long)n * CONV_G * CONV_GKK * CONV_HOWO;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const int s = (int)(e % CONV_HOWO);
        long long t = e / CONV_HOWO;
        const int r = (int)(t % CONV_GKK); t /= CONV_GKK;
        const int g = (int)(t % CONV_G);
        const long long i = t / CONV_G;
        cols[e] = unrolled_x(x + (b0 + i) * (CONV_C * CONV_H * CONV_W) + (long long)g * CONV_CG * CONV_H * CONV_W, r, s);
    }
}

extern "C" __global__ void gemm_v5(float* __restrict__ y, const float* __restrict__ cols,
                                   const float* __restrict__ k, const float* __restrict__ bias, long long b0, int n)
{
    gemm_tile<false>(y, cols, k, bias, b0, n);
}

extern "C" __global__ void conv_forward_v6(float* __restrict__ y, const float* __restrict__ x,
                                           const float* __restrict__ k, const float* __restrict__ bias,
                                           long long b0, int n)
{
    gemm_tile<true>(y, x, k, bias, b0, n);
}

// ------------------------------------------------------------------ v7 strip
// One thread per (b, h, strip of VEC outputs along w): B * HO * ceil(WO / VEC) threads.
#define V7_STRIP (VEC + CONV_K - 1)
#define V7_STRIPS ((CONV_WO + VEC - 1) / VEC)
#define V7_EXACT (CONV_WO % VEC == 0)               // every strip lies inside the row
#define V7_VEC4_IO (VEC % 4 == 0 && V7_EXACT && CONV_W % 4 == 0 && V7_STRIP % 4 == 0)

__device__ __forceinline__ void v7_store(float* p, float v)
{
#if V7_STREAM
    __stcs(p, v);
#else
    *p = v;
#endif
}

__device__ __forceinline__ void v7_store4(float* p, float a, float b, float c, float d)
{
#if V7_STREAM
    __stcs(reinterpret_cast<float4*>(p), make_float4(a, b, c, d));
#else
    *reinterpret_cast<float4*>(p) = make_float4(a, b, c, d);
#endif
}

// The K x V7_STRIP inputs of channel c under this thread's outputs, into registers.
__device__ __forceinline__ void v7_load_channel(float (&in)[CONV_K][V7_STRIP], const float* __restrict__ xb,
                                                int c, int w0)
{
#pragma unroll
    for (int p = 0; p < CONV_K; ++p) {
        const float* row = xb + (c * CONV_H + p) * CONV_W;
#if V7_VEC4_IO
#pragma unroll
        for (int j = 0; j < V7_STRIP; j += 4) {
            const float4 v = __ldg(reinterpret_cast<const float4*>(row + j));
            in[p][j] = v.x; in[p][j + 1] = v.y; in[p][j + 2] = v.z; in[p][j + 3] = v.w;
        }
#else
#pragma unroll
        for (int j = 0; j < V7_STRIP; ++j)
            in[p][j] = (V7_EXACT || w0 + j < CONV_W) ? __ldg(row + j) : 0.f;
#endif
    }
}

// acc[v] += channel c's contribution to filter m (weights from constant memory).
__device__ __forceinline__ void v7_accumulate(float (&acc)[VEC], const float (&in)[CONV_K][V7_STRIP], int m, int c)
{
#pragma unroll
    for (int p = 0; p < CONV_K; ++p)
#pragma unroll
        for (int q = 0; q < CONV_K; ++q) {
            const float kv = c_weights[m * CONV_CKK + c * CONV_KK + p * CONV_K + q];
#pragma unroll
            for (int v = 0; v < VEC; ++v) acc[v] = fmaf(in[p][q + v], kv, acc[v]);
        }
}

extern "C" __global__ void __launch_bounds__(V7_THREADS)
conv_forward_v7(float* __restrict__ y, const float* __restrict__ x, int B)
{
#if V7_ENABLED
    constexpr int kV7UnrollM = V7_UNROLL_M;
    const long long t = (long long)blockIdx.x * V7_THREADS + threadIdx.x;
    if (t >= (long long)B * CONV_HO * V7_STRIPS) return;
    const int w0 = (int)(t % V7_STRIPS) * VEC;
    const long long r = t / V7_STRIPS;
    const int h = (int)(r % CONV_HO);
    const long long b = r / CONV_HO;
    const float* xb = x + b * (CONV_C * CONV_H * CONV_W) + h * CONV_W + w0;
#if V7_ALL_CHANNELS            // every channel's strip stays in registers across the filters
    float in[CONV_C][CONV_K][V7_STRIP];
#pragma unroll
    for (int c = 0; c < CONV_C; ++c) v7_load_channel(in[c], xb, c, w0);
#endif

    float* yb = y + b * CONV_M * CONV_HOWO + h * CONV_WO + w0;
#pragma unroll kV7UnrollM
    for (int m = 0; m < CONV_M; ++m) {
        float acc[VEC];
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[v] = 0.f;
#if V7_ALL_CHANNELS
#pragma unroll
        for (int c = 0; c < CONV_C; ++c) v7_accumulate(acc, in[c], m, c);
#else                          // too many channels: reload each channel's strip (from L1) per filter
#pragma unroll 1
        for (int c = 0; c < CONV_C; ++c) {
            float in[CONV_K][V7_STRIP];
            v7_load_channel(in, xb, c, w0);
            v7_accumulate(acc, in, m, c);
        }
#endif
        float* out = yb + (long long)m * CONV_HOWO;
#if V7_VEC4_IO
#pragma unroll
        for (int v = 0; v < VEC; v += 4) v7_store4(out + v, acc[v], acc[v + 1], acc[v + 2], acc[v + 3]);
#else
#pragma unroll
        for (int v = 0; v < VEC; ++v)
            if (V7_EXACT || w0 + v < CONV_WO) v7_store(out + v, acc[v]);
#endif
    }
#endif  // V7_ENABLED
}

// ------------------------------------------------------------------ helpers
// The launcher's wrappers for the course-style versions: zero padding around each of the
// `planes` H x W planes of x, and the bias added to each filter's output plane.
extern "C" __global__ void pad_input(float* __restrict__ xp, const float* __restrict__ x, long long planes,
                                     int H, int W, int PH, int PW)
{
    const int HP = H + 2 * PH, WP = W + 2 * PW;
    const long long total = planes * HP * WP;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const int col = (int)(e % WP) - PW;
        const long long t = e / WP;
        const int row = (int)(t % HP) - PH;
        const long long plane = t / HP;
        xp[e] = (row >= 0 && row < H && col >= 0 && col < W) ? x[(plane * H + row) * W + col] : 0.f;
    }
}

extern "C" __global__ void add_bias(float* __restrict__ y, const float* __restrict__ bias, long long n,
                                    int M, int HOWO)
{
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (long long)gridDim.x * blockDim.x)
        y[e] += bias[(e / HOWO) % M];
}

// y += t (req == 'add' on device arrays: the layer is computed into t first).
extern "C" __global__ void add_into(float* __restrict__ y, const float* __restrict__ t, long long n)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        y[i] += t[i];
}
