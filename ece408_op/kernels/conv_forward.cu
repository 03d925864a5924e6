// conv_forward.cu: forward convolution kernels of ece408_conv, a ladder of versions.
//
//   The course's layer: y[b][m][h][w] = sum over c, p, q of x[b][c][h+p][w+q] * k[m][c][p][q]
//   x: B x C x H x W, k: M x C x K x K, y: B x M x HO x WO (HO = H-K+1, WO = W-K+1), float32
//   In general (conv/spec.py): stride SH x SW, zero padding PH x PW, dilation DH x DW, G groups
//   (k is M x C/G x KH x KW), an optional bias per filter; HO = (H + 2PH - DH(KH-1) - 1) / SH + 1.
//   v1, v5, v6, v8 and v9 compute the general layer; the others the course's kind (stride 1, no dilation,
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
//   v8 gemm      like v6, but register-tiled: a block computes BP output positions (taken across the
//                whole batch) x BF filters, each thread a TP x TF micro-tile from 16-byte shared-memory
//                reads; the x and weight tiles arrive by cp.async, STAGES tiles deep (any layer, FP32).
//                H100: 2018 conv2 1.28 ms (v6 4.37, v7 2.55), ResNet 3x3 C=64 at B=64 0.44 ms (v6 1.88)
//   v9 tensor    like v8, but on the tensor cores: warps of mma.sync m16n8k8 TF32 fragments in the
//                error-compensated 3xTF32 scheme (three products per fragment: float32 accuracy).
//                H100: 2019 conv2 4.13 ms (v8 4.78), ResNet 3x3 C=64 at B=64 0.32 ms (v8 0.44)
//   v10 filters  like v7, but its loops swapped for several channels: one channel's strip in registers
//                at a time, the VEC accumulators of every filter kept across the channels. H100: 2019
//                conv1 1.39 ms (v7 2.02); with several channels slower than v8 (2018 conv2 1.57 ms)
//   v11 resident like v9 (3xTF32 tensor cores), but a block keeps whole images in shared memory and
//                reads the x operand straight from them, at tap offsets from each position's window
//                corner (no gather); weights split once per block. Small multi-channel layers.
//                H100: 2018 conv2 0.59 ms (v8 1.30), 2019 conv2 1.94 ms (v9 4.13): 0.49x, 0.34x cuDNN
//   v12 winograd unlike the others, not the direct sum: Winograd F(4x4, 3x3) for 3x3 stride-1 layers
//                (36 products per 4x4 outputs instead of 144), input and output transforms around 36
//                GEMMs that v8 or v9 computes; never a default (its error follows 6x6 tiles, not each
//                output's window). H100, ResNet-18's 3x3 stride-1 layers at B=64: 0.167-0.247 ms
//                (v9 0.319-0.446), 0.38-0.92x cuDNN fp32
//   v13 depthwise like v1 (any padding, stride, dilation, bias), but for depthwise layers (one input
//                channel per group): a thread computes V13_VEC adjacent outputs of one row of one
//                filter, every size at compile time, its filter's taps in registers, each input row
//                segment loaded once per tap row; 16-byte stores. Memory-bound, where v8's GEMM has a
//                depth of only KH*KW. MobileNetV2's depthwise layers (docs/gpu-dropin.md)
//   v14 restrict like v3, but the layer's sizes compile-time constants: `#pragma unroll` flattens the
//                K x K loop (weights at fixed constant-bank offsets), x through the read-only path
//                (const __restrict__, __ldg); v4 is v14 plus register blocking (MB filters per thread)
//   v15 tree     like v14, but the input channels split among the block's z-slices, their partial sums
//                added by a tree in shared memory (the course's input-channel reduction)
//   v16 atomics  like v15, but the partial sums added by atomicAdd into y (zeroed first)
//   v17 fp16     like v14 in half precision: x and the weights converted to half, two outputs per thread
//                in one f16x2 accumulator (fma.rn.f16x2); its error has its own model; never a default
//   v18 cublas   like v5, but the GEMM is cuBLAS's (cublasSgemmStridedBatched, FP32, through ctypes);
//                refused in one line where libcublas is not found; never a default
//   v19 fft      not the direct sum: FFT overlap-add with cuFFT (tiles of x zero-padded to F x F, R2C,
//                a product summed over channels per frequency, C2R, the tile outputs added into y);
//                norm-wise error, its own model; refused where libcufft is not found; never a default
//   v20 wgmma    like v9 (3xTF32), but on Hopper's warpgroup MMA (wgmma.mma_async, sm_90a only): a
//                warpgroup multiplies 64 positions x 64 or 128 filters per instruction, x gathered
//                into its registers, the weights split once per call and staged by 16-byte copies.
//                H100, at batch 64 (VGG 32): ResNet-18's 3x3 stride-1 28x28 layer 0.157 ms (v9 0.323,
//                cuDNN fp32 0.207), VGG-16's 512-channel 28x28 0.99 ms (v9 2.52, cuDNN 1.46)
//   fused        not a convolution version: conv + bias + tanh + 2x2 max-pool in one pass (v7's
//                register strips over two rows; kernels.fused_forward_gpu), the course models' block.
//                H100: 0.33 ms on the course layer, 0.29x cuDNN's convolution alone
//
// Why v7 wins on the course layer (B=10000, C=1, M=50, 28x28, K=5): y is 1152 MB and x 31 MB,
// so the layer is bound by writing y (0.39 ms at the 3.0 TB/s copy rate measured on the H100)
// while its 7.2 G FMAs take about 0.22 ms at its fp32 rate, if nearly every instruction is an
// FMA. v7 issues 25 FMAs per output with the weight in a uniform register (fully unrolled filter
// loop: 5000 of its 6552 instructions are FFMA), no shared-memory traffic, and one 16-byte
// evict-first store per 4 outputs, so both limits overlap: 0.43-0.45 ms, 1.09-1.13x the floor in
// separate runs (docs/kernel-notes.md has the measurements).
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
#define V7_UNROLL_M 16     // v7: unroll factor of the filter loop (CONV_M: fully; weights are operands either way)
#endif
#ifndef V7_STREAM
#define V7_STREAM 0        // v7: 1: streaming (evict-first) stores for y, which nothing here reads again
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
#ifndef ONLY_KERNEL
#define ONLY_KERNEL 0      // 0: every version's kernels; n: only version n's (100: the fused kernel's), so
#endif                     // that a plan compiles what it launches (the helpers below always)
#define WANTED(n) (ONLY_KERNEL == 0 || ONLY_KERNEL == (n))

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
#if WANTED(1)
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
#endif  // WANTED(1)

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

#if WANTED(2)
extern "C" __global__ void conv_forward_v2(float* __restrict__ y, const float* __restrict__ x,
                                           const float* __restrict__ k,
                                           int B, int C, int H, int W, int M, int K)
{
    tiled_plane<false>(y, x, k, B, C, H, W, M, K);
}
#endif  // WANTED(2)

#if WANTED(3)
extern "C" __global__ void conv_forward_v3(float* __restrict__ y, const float* __restrict__ x,
                                           const float* __restrict__ k,
                                           int B, int C, int H, int W, int M, int K)
{
    tiled_plane<true>(y, x, k, B, C, H, W, M, K);
}
#endif  // WANTED(3)

// ------------------------------------------------------------------ v4 register
// Grid: (tiles of the output plane, ceil(M / MB), min(B, 65535)). Weights in constant memory; where
// M is not a multiple of MB, the last group reads past the M filters (still inside the bank, which
// the capability check ensures) and does not store those results.
#define V4_SPAN (TILE + CONV_K - 1)
#if WANTED(4) || WANTED(14)
// MB_ filters per thread: v4 with MB, v14 (the step before it: sizes and unrolling only) with 1.
template <int MB_>
__device__ __forceinline__ void register_tiles(float* __restrict__ y, const float* __restrict__ x, int B)
{
    __shared__ float tile[V4_SPAN * V4_SPAN];
    const int tiles_w = (CONV_WO + TILE - 1) / TILE;
    const int h0 = (blockIdx.x / tiles_w) * TILE, w0 = (blockIdx.x % tiles_w) * TILE;
    const int m0 = blockIdx.y * MB_, ty = threadIdx.y, tx = threadIdx.x;
    const int h = h0 + ty, w = w0 + tx;
    const bool live = h < CONV_HO && w < CONV_WO;
    for (long long b = blockIdx.z; b < B; b += gridDim.z) {
        float acc[MB_];
#pragma unroll
        for (int j = 0; j < MB_; ++j) acc[j] = 0.f;
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
                        for (int j = 0; j < MB_; ++j)
                            acc[j] = fmaf(v, kc[j * CONV_CKK + p * CONV_K + q], acc[j]);
                    }
            }
            __syncthreads();
        }
        if (live) {
#pragma unroll
            for (int j = 0; j < MB_; ++j)
                if (m0 + j < CONV_M)
                    y[((b * CONV_M + m0 + j) * CONV_HO + h) * CONV_WO + w] = acc[j];
        }
    }
}
#endif  // WANTED(4) || WANTED(14)

#if WANTED(4)
extern "C" __global__ void __launch_bounds__(TILE * TILE)
conv_forward_v4(float* __restrict__ y, const float* __restrict__ x, int B)
{
    register_tiles<MB>(y, x, B);
}
#endif  // WANTED(4)

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
#if WANTED(5) || WANTED(18)
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
#endif  // WANTED(5)

#if WANTED(5)
extern "C" __global__ void gemm_v5(float* __restrict__ y, const float* __restrict__ cols,
                                   const float* __restrict__ k, const float* __restrict__ bias, long long b0, int n)
{
    gemm_tile<false>(y, cols, k, bias, b0, n);
}
#endif  // WANTED(5)

#if WANTED(6)
extern "C" __global__ void conv_forward_v6(float* __restrict__ y, const float* __restrict__ x,
                                           const float* __restrict__ k, const float* __restrict__ bias,
                                           long long b0, int n)
{
    gemm_tile<true>(y, x, k, bias, b0, n);
}
#endif  // WANTED(6)

// ------------------------------------------------------------------ v7 strip
// One thread per (b, h, strip of VEC outputs along w): B * HO * ceil(WO / VEC) threads.
#define V7_STRIP (VEC + CONV_K - 1)
#define V7_EXACT (CONV_WO % VEC == 0)               // every strip lies inside the row
#define V7_VEC4_IO (VEC % 4 == 0 && V7_EXACT && CONV_W % 4 == 0 && V7_STRIP % 4 == 0)

// Stores of y, which nothing here reads again: streaming (evict-first) where STREAM, else plain.
template <bool STREAM>
__device__ __forceinline__ void v7_store(float* p, float v)
{
    if (STREAM) __stcs(p, v);
    else *p = v;
}

template <bool STREAM>
__device__ __forceinline__ void v7_store4(float* p, float a, float b, float c, float d)
{
    if (STREAM) __stcs(reinterpret_cast<float4*>(p), make_float4(a, b, c, d));
    else *reinterpret_cast<float4*>(p) = make_float4(a, b, c, d);
}

// Where thread t's strip of VEC_ outputs lies (v7, v10): image b, output row h, first column w0;
// false for a thread past the batch.
template <int VEC_>
__device__ __forceinline__ bool strip_of(long long t, int B, long long& b, int& h, int& w0)
{
    constexpr int strips = (CONV_WO + VEC_ - 1) / VEC_;
    if (t >= (long long)B * CONV_HO * strips) return false;
    w0 = (int)(t % strips) * VEC_;
    const long long r = t / strips;
    h = (int)(r % CONV_HO);
    b = r / CONV_HO;
    return true;
}

// x at channel 0, row h, column w0 of image b (the corner of a thread's strips).
__device__ __forceinline__ const float* strip_input(const float* x, long long b, int h, int w0)
{
    return x + b * (CONV_C * CONV_H * CONV_W) + h * CONV_W + w0;
}

// A thread's N adjacent outputs from column w0 of one output row (LIMIT columns wide): 16-byte
// stores where N is a multiple of 4, every strip lies inside the row (EXACT) and rows are a
// multiple of 4 wide (so every strip starts 16-byte aligned in an aligned y), else the ones left
// of column LIMIT (every one where EXACT). v10 and the fused kernel stream them always; v7 as
// tuned (V7_STREAM; the launcher streams the one-float stores: plain ones cost v7 40% on 2019 conv1).
template <int N, bool EXACT, int LIMIT, bool STREAM = true>
__device__ __forceinline__ void store_strip(float* out, const float (&v)[N], int w0)
{
    constexpr bool kWide = N % 4 == 0 && EXACT && LIMIT % 4 == 0;
    if (kWide) {
#pragma unroll
        for (int i = 0; i < N; i += 4)
            v7_store4<STREAM>(out + i, v[i], v[(i + 1) % N], v[(i + 2) % N], v[(i + 3) % N]);
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i)
            if (EXACT || w0 + i < LIMIT) v7_store<STREAM>(out + i, v[i]);
    }
}

// The ROWS x COLS inputs of channel c under a thread's outputs (xb: its first row and column in
// channel 0), into registers; EXACT: every strip lies inside the row, else columns past W read 0.
template <int ROWS, int COLS, bool EXACT, bool VEC4>
__device__ __forceinline__ void load_strip(float (&in)[ROWS][COLS], const float* __restrict__ xb, int c, int w0)
{
#pragma unroll
    for (int p = 0; p < ROWS; ++p) {
        const float* row = xb + (c * CONV_H + p) * CONV_W;
        if (VEC4) {
#pragma unroll
            for (int j = 0; j < COLS; j += 4) {
                const float4 v = __ldg(reinterpret_cast<const float4*>(row + j));
                in[p][j] = v.x; in[p][j + 1] = v.y; in[p][j + 2] = v.z; in[p][j + 3] = v.w;
            }
        } else {
#pragma unroll
            for (int j = 0; j < COLS; ++j)
                in[p][j] = (EXACT || w0 + j < CONV_W) ? __ldg(row + j) : 0.f;
        }
    }
}

__device__ __forceinline__ void v7_load_channel(float (&in)[CONV_K][V7_STRIP], const float* __restrict__ xb,
                                                int c, int w0)
{
    load_strip<CONV_K, V7_STRIP, V7_EXACT, V7_VEC4_IO>(in, xb, c, w0);
}

// acc[v] += channel c's contribution to filter m (weights from constant memory); v7, v10.
template <int VEC_>
__device__ __forceinline__ void accumulate(float (&acc)[VEC_], const float (&in)[CONV_K][VEC_ + CONV_K - 1], int m, int c)
{
#pragma unroll
    for (int p = 0; p < CONV_K; ++p)
#pragma unroll
        for (int q = 0; q < CONV_K; ++q) {
            const float kv = c_weights[m * CONV_CKK + c * CONV_KK + p * CONV_K + q];
#pragma unroll
            for (int v = 0; v < VEC_; ++v) acc[v] = fmaf(in[p][q + v], kv, acc[v]);
        }
}

#if WANTED(7)
extern "C" __global__ void __launch_bounds__(V7_THREADS)
conv_forward_v7(float* __restrict__ y, const float* __restrict__ x, int B)
{
#if V7_ENABLED
    constexpr int kV7UnrollM = V7_UNROLL_M;
    long long b;
    int h, w0;
    if (!strip_of<VEC>((long long)blockIdx.x * V7_THREADS + threadIdx.x, B, b, h, w0)) return;
    const float* xb = strip_input(x, b, h, w0);
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
        for (int v = 0; v < VEC; ++v) acc[v] = CONV_BIAS ? c_weights[CONV_M * CONV_CKK + m] : 0.f;   // bias after
#if V7_ALL_CHANNELS                                                                                   // the weights
#pragma unroll
        for (int c = 0; c < CONV_C; ++c) accumulate<VEC>(acc, in[c], m, c);
#else                          // too many channels: reload each channel's strip (from L1) per filter
#pragma unroll 1
        for (int c = 0; c < CONV_C; ++c) {
            float in[CONV_K][V7_STRIP];
            v7_load_channel(in, xb, c, w0);
            accumulate<VEC>(acc, in, m, c);
        }
#endif
        store_strip<VEC, V7_EXACT, CONV_WO, V7_STREAM != 0>(yb + (long long)m * CONV_HOWO, acc, w0);
    }
#endif  // V7_ENABLED
}
#endif  // WANTED(7)

// ------------------------------------------------------------------ v10 filters
// v7 with its loops swapped, for layers with several channels (the course models' second layers):
// a thread keeps one channel's K x (VEC+K-1) input strip in registers at a time and the VEC
// accumulators of every filter across all channels, so each strip is loaded once (v7 reloads it
// for every filter where the channels' strips do not all fit) and nearly every instruction is an
// FMA on a constant-bank weight. One thread per (b, h, strip of V10_VEC outputs along w).
#ifndef V10_VEC
#define V10_VEC 2          // v10: adjacent outputs per thread (M * V10_VEC accumulators)
#endif
#ifndef V10_THREADS
#define V10_THREADS 128    // v10: threads per block
#endif
#ifndef V10_UNROLL_C
#define V10_UNROLL_C 1     // v10: unroll factor of the channel loop
#endif
#ifndef V10_ENABLED
#define V10_ENABLED 1      // v10: 0 where the accumulators do not fit in registers (the launcher refuses v10)
#endif
#define V10_STRIP (V10_VEC + CONV_K - 1)
#define V10_EXACT (CONV_WO % V10_VEC == 0)
#define V10_VEC4_IO (V10_VEC % 4 == 0 && V10_EXACT && CONV_W % 4 == 0 && V10_STRIP % 4 == 0)

#if WANTED(10)
extern "C" __global__ void __launch_bounds__(V10_THREADS)
conv_forward_v10(float* __restrict__ y, const float* __restrict__ x, int B)
{
#if V10_ENABLED
    constexpr int kUnrollC = V10_UNROLL_C;
    long long b;
    int h, w0;
    if (!strip_of<V10_VEC>((long long)blockIdx.x * V10_THREADS + threadIdx.x, B, b, h, w0)) return;
    const float* xb = strip_input(x, b, h, w0);
    float acc[CONV_M][V10_VEC];
#pragma unroll
    for (int m = 0; m < CONV_M; ++m)
#pragma unroll
        for (int v = 0; v < V10_VEC; ++v) acc[m][v] = 0.f;
#pragma unroll kUnrollC
    for (int c = 0; c < CONV_C; ++c) {
        float in[CONV_K][V10_STRIP];
        load_strip<CONV_K, V10_STRIP, V10_EXACT, V10_VEC4_IO>(in, xb, c, w0);
#pragma unroll
        for (int m = 0; m < CONV_M; ++m) accumulate<V10_VEC>(acc[m], in, m, c);
    }
    float* yb = y + b * CONV_M * CONV_HOWO + h * CONV_WO + w0;
#pragma unroll
    for (int m = 0; m < CONV_M; ++m)
        store_strip<V10_VEC, V10_EXACT, CONV_WO>(yb + (long long)m * CONV_HOWO, acc[m], w0);
#endif  // V10_ENABLED
}
#endif  // WANTED(10)

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
#ifndef V8_BP
#define V8_BP 128          // v8: positions per block (V8_BP / V8_TP threads along them)
#endif
#ifndef V8_BF
#define V8_BF 64           // v8: filters per block (V8_BF / V8_TF threads along them)
#endif
#ifndef V8_TP
#define V8_TP 8            // v8: positions per thread (chunks of 4, 4 * V8_BP / V8_TP apart)
#endif
#ifndef V8_TF
#define V8_TF 4            // v8: filters per thread (adjacent)
#endif
#ifndef V8_BK
#define V8_BK 8            // v8: GEMM rows per stage
#endif
#ifndef V8_STAGES
#define V8_STAGES 3        // v8: shared-memory stages of the cp.async pipeline
#endif
#ifndef V8_ACOLS
#define V8_ACOLS 4         // v8: columns of the x tile each thread copies (sharing one row decomposition)
#endif
#ifndef V9_MI
#define V9_MI 2            // v9: 16-position fragments per warp
#endif
#ifndef V9_NI
#define V9_NI 4            // v9: 8-filter fragments per warp
#endif
#ifndef V9_WP
#define V9_WP 4            // v9: warps along positions
#endif
#ifndef V9_WF
#define V9_WF 2            // v9: warps along filters
#endif
#ifndef V9_BK
#define V9_BK 16           // v9: GEMM rows per stage (a multiple of 8)
#endif
#ifndef V9_STAGES
#define V9_STAGES 3        // v9: shared-memory stages
#endif
#ifndef V9_ACOLS
#define V9_ACOLS 4         // v9: columns of the x tile each thread copies
#endif

#define V8_THREADS ((V8_BP / V8_TP) * (V8_BF / V8_TF))
#define V9_THREADS (32 * V9_WP * V9_WF)
#define V9_BP (V9_WP * V9_MI * 16)
#define V9_BF (V9_WF * V9_NI * 8)
#define CONV_HW (CONV_H * CONV_W)
#define CONV_KHKW (CONV_KH * CONV_KW)

// A shared-memory row of n floats, padded to a stride of 8 (mod 16).
__host__ __device__ constexpr int gemm_stride(int n) { return n + (24 - n % 16) % 16; }

// r / D for 0 <= r < 2^16 and a constant 0 < D < 2^16: one multiply-high (exact in that range, where
// the compiler's general division by a constant takes 64-bit arithmetic). The launcher keeps GKK < 2^16.
template <unsigned D>
__device__ __forceinline__ int div_small(int r) { return D == 1 ? r : (int)__umulhi((unsigned)r, 0xffffffffu / D + 1u); }

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
// under 2^31 elements); with padding a column's in-bounds window taps are a bit mask.
#if CONV_PH > 0 || CONV_PW > 0
#define GEMM_PADDED 1
typedef unsigned long long gemm_mask_t;     // one bit per tap (p, q): KH*KW <= 64
#else
#define GEMM_PADDED 0
#endif

template <int BP, int BK, int THREADS, int COLS>
struct XTileLoader {
    static constexpr int TC = BP / COLS, TR = THREADS / TC, ROWS = BK / TR, SA = gemm_stride(BP);
    static_assert(BP % COLS == 0 && THREADS % TC == 0 && BK % TR == 0, "x tile does not divide among the threads");
    int corner[COLS];          // offset of the window's corner (row ih0, column iw0; may lie in the padding)
#if GEMM_PADDED
    gemm_mask_t taps[COLS];    // bit p*KW+q: that tap lies inside x (none for a column past the batch)
#else
    bool live[COLS];           // the column is a position of the batch
#endif
    int col, row;
    const float* xg;

    __device__ __forceinline__ XTileLoader(const float* __restrict__ xg_, long long n0, long long npos)
        : col(threadIdx.x % TC), row(threadIdx.x / TC), xg(xg_)
    {
#pragma unroll
        for (int j = 0; j < COLS; ++j) {
            const long long n = n0 + col + j * TC;
            const bool in = n < npos;
            const int b = in ? (int)(n / CONV_HOWO) : 0;
            const int s = in ? (int)(n - (long long)b * CONV_HOWO) : 0;
            const int ih0 = (s / CONV_WO) * CONV_SH - CONV_PH, iw0 = (s % CONV_WO) * CONV_SW - CONV_PW;
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
            const int c = div_small<CONV_KHKW>(r), pq = r - c * CONV_KHKW;
            const int p = div_small<CONV_KW>(pq), q = pq - p * CONV_KW;
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
__device__ __forceinline__ void load_weight_tile(float* Bs, const float* __restrict__ kg, int f0, int k0)
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
                                              long long n0, int f0, long long npos, Compute&& compute)
{
    constexpr int A_STAGE = BK * gemm_stride(BP), B_STAGE = BK * gemm_stride(BF);
    constexpr int KT = (CONV_GKK + BK - 1) / BK;
    float* As = smem;
    float* Bs = smem + STAGES * A_STAGE;
    const XTileLoader<BP, BK, THREADS, COLS> xtile(xg, n0, npos);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) {
            xtile.load(As + s * A_STAGE, s * BK);
            load_weight_tile<BF, BK, THREADS>(Bs + s * B_STAGE, kg, f0, s * BK);
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
            load_weight_tile<BF, BK, THREADS>(Bs + st * B_STAGE, kg, f0, next * BK);
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

// v8: FP32 FFMA; each thread a V8_TP x V8_TF micro-tile (4-wide shared-memory reads on positions).
#if WANTED(8)
extern "C" __global__ void __launch_bounds__(V8_THREADS)
conv_forward_v8(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ k,
                const float* __restrict__ bias, int B)
{
    constexpr int SA = gemm_stride(V8_BP), SB = gemm_stride(V8_BF), TXP = V8_BP / V8_TP;
    constexpr int tiles_f = (CONV_MG + V8_BF - 1) / V8_BF;
    static_assert(V8_TP % 4 == 0 && V8_BP % V8_TP == 0 && V8_BF % V8_TF == 0, "v8 tile");
    const int g = blockIdx.y / tiles_f, f0 = (blockIdx.y % tiles_f) * V8_BF;
    const long long n0 = (long long)blockIdx.x * V8_BP, npos = (long long)B * CONV_HOWO;
    const int tx = threadIdx.x % TXP, ty = threadIdx.x / TXP;
    float acc[V8_TF][V8_TP];
#pragma unroll
    for (int i = 0; i < V8_TF; ++i)
#pragma unroll
        for (int j = 0; j < V8_TP; ++j) acc[i][j] = 0.f;

    gemm_mainloop<V8_BP, V8_BF, V8_BK, V8_STAGES, V8_THREADS, V8_ACOLS>(
        reinterpret_cast<float*>(gemm_smem), x + (long long)g * CONV_CG * CONV_HW, k + (long long)g * CONV_MG * CONV_GKK,
        n0, f0, npos, [&](const float* As, const float* Bs) {
#pragma unroll
            for (int kk = 0; kk < V8_BK; ++kk) {
                float a[V8_TP], w[V8_TF];
#pragma unroll
                for (int j = 0; j < V8_TP; j += 4) {
                    const float4 v = *reinterpret_cast<const float4*>(As + kk * SA + tx * 4 + j * TXP);
                    a[j] = v.x; a[j + 1] = v.y; a[j + 2] = v.z; a[j + 3] = v.w;
                }
#pragma unroll
                for (int i = 0; i < V8_TF; ++i) w[i] = Bs[kk * SB + ty * V8_TF + i];
#pragma unroll
                for (int i = 0; i < V8_TF; ++i)
#pragma unroll
                    for (int j = 0; j < V8_TP; ++j) acc[i][j] = fmaf(a[j], w[i], acc[i][j]);
            }
        });

    // Position chunk j/4 of this thread: 4 adjacent positions, one 16-byte store where they lie in one image.
#pragma unroll
    for (int j = 0; j < V8_TP; j += 4) {
        const long long n = n0 + tx * 4 + j * TXP;
#pragma unroll
        for (int i = 0; i < V8_TF; ++i) {
            const int f = f0 + ty * V8_TF + i;
            if (f >= CONV_MG) continue;
            const int m = g * CONV_MG + f;
#if CONV_BIAS
            const float add = __ldg(&bias[m]);
#else
            const float add = 0.f;
#endif
            if (CONV_HOWO % 4 == 0 && n < npos) {          // npos is a multiple of 4: all four exist
                const long long b = n / CONV_HOWO;
                float* out = y + (b * CONV_M + m) * CONV_HOWO + (n - b * CONV_HOWO);
                __stcs(reinterpret_cast<float4*>(out),
                       make_float4(acc[i][j] + add, acc[i][j + 1] + add, acc[i][j + 2] + add, acc[i][j + 3] + add));
            } else if (CONV_HOWO % 4 != 0) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    if (n + e >= npos) break;
                    const long long b = (n + e) / CONV_HOWO;
                    gemm_store(y + (b * CONV_M + m) * CONV_HOWO + (n + e - b * CONV_HOWO), acc[i][j + e] + add);
                }
            }
        }
    }
}
#endif  // WANTED(8)

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

#if WANTED(9)
extern "C" __global__ void __launch_bounds__(V9_THREADS)
conv_forward_v9(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ k,
                const float* __restrict__ bias, int B)
{
    constexpr int SA = gemm_stride(V9_BP), SB = gemm_stride(V9_BF);
    constexpr int tiles_f = (CONV_MG + V9_BF - 1) / V9_BF;
    static_assert(V9_BK % 8 == 0, "v9: BK must be a multiple of 8");
    const int g = blockIdx.y / tiles_f, f0 = (blockIdx.y % tiles_f) * V9_BF;
    const long long n0 = (long long)blockIdx.x * V9_BP, npos = (long long)B * CONV_HOWO;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
    const int p0 = (warp % V9_WP) * V9_MI * 16, q0 = (warp / V9_WP) * V9_NI * 8;   // the warp's corner
    float acc[V9_MI][V9_NI][4];
    zero_fragments(acc);

    gemm_mainloop<V9_BP, V9_BF, V9_BK, V9_STAGES, V9_THREADS, V9_ACOLS>(
        reinterpret_cast<float*>(gemm_smem), x + (long long)g * CONV_CG * CONV_HW, k + (long long)g * CONV_MG * CONV_GKK,
        n0, f0, npos, [&](const float* As, const float* Bs) {
#pragma unroll
            for (int k8 = 0; k8 < V9_BK; k8 += 8) {
                unsigned ahi[V9_MI][4], alo[V9_MI][4], bhi[V9_NI][2], blo[V9_NI][2];
#pragma unroll
                for (int i = 0; i < V9_MI; ++i) {     // A (16 x 8): rows gid, gid+8; columns tig, tig+4
                    const float* a = As + (k8 + tig) * SA + p0 + i * 16 + gid;
                    split_tf32(a[0], ahi[i][0], alo[i][0]);
                    split_tf32(a[8], ahi[i][1], alo[i][1]);
                    split_tf32(a[4 * SA], ahi[i][2], alo[i][2]);
                    split_tf32(a[4 * SA + 8], ahi[i][3], alo[i][3]);
                }
#pragma unroll
                for (int j = 0; j < V9_NI; ++j) {     // B (8 x 8): rows tig, tig+4; column gid
                    const float* b = Bs + (k8 + tig) * SB + q0 + j * 8 + gid;
                    split_tf32(b[0], bhi[j][0], blo[j][0]);
                    split_tf32(b[4 * SB], bhi[j][1], blo[j][1]);
                }
#pragma unroll
                for (int i = 0; i < V9_MI; ++i)
#pragma unroll
                    for (int j = 0; j < V9_NI; ++j) {  // the small products first
                        mma_tf32(acc[i][j], alo[i], bhi[j]);
                        mma_tf32(acc[i][j], ahi[i], blo[j]);
                        mma_tf32(acc[i][j], ahi[i], bhi[j]);
                    }
            }
        });

    // Accumulator e of fragment (i, j): position row gid (+8 for e >= 2), filter column 2*tig (+1 for odd e).
#pragma unroll
    for (int i = 0; i < V9_MI; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const long long n = n0 + p0 + i * 16 + gid + half * 8;
            if (n >= npos) continue;
            const long long b = n / CONV_HOWO;
            float* out = y + b * CONV_M * CONV_HOWO + (n - b * CONV_HOWO);
#pragma unroll
            for (int j = 0; j < V9_NI; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int f = f0 + q0 + j * 8 + 2 * tig + e;
                    if (f >= CONV_MG) continue;
                    const int m = g * CONV_MG + f;
#if CONV_BIAS
                    gemm_store(out + (long long)m * CONV_HOWO, acc[i][j][half * 2 + e] + __ldg(&bias[m]));
#else
                    gemm_store(out + (long long)m * CONV_HOWO, acc[i][j][half * 2 + e]);
#endif
                }
        }
}
#endif  // WANTED(9)

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

#if WANTED(11) && V11_ENABLED
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
        mma_tf32_all(acc, alo, bhi);                   // each product over every fragment in turn: the
        mma_tf32_all(acc, ahi, blo);                   // small ones first, MT x NT independent chains
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
#if WANTED(11)
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
#endif  // WANTED(11)

// ------------------------------------------------------------------ v12 winograd: F(4x4, 3x3)
// A 3x3, stride-1 layer (any padding, a bias) computed as Lavin and Gray's Winograd F(4x4, 3x3): each
// 4x4 output tile of a (b, m) plane is A^T [sum over c of (G g G^T) . (B^T d B)] A, d the 6x6 input
// tile of channel c (rows 4i-PH .. 4i-PH+5; outside x: zero), g the filter's 3x3 weights, "." the
// element-wise product at each of the 36 transform points. Per point that sum is a GEMM over c:
// 36 GEMMs of M x C by C x tiles, 2.25 multiplications per output instead of 9. Three passes here and
// the GEMMs in between by v8's or v9's kernel (V12_GEMM), as a grouped 1x1 convolution of 36 groups
// (group p: point p's C channels -> its M filters) on planes of TH x TW tiles:
//   wino_filter: U[p][m][c]                   (36 x M x C: the 1x1 convolution's weights)
//   wino_input:  V[b][p][c][tile]             (its input: B images of 36*C planes of TH x TW)
//   wino_output: y from Mh[b][p][m][tile]     (its output: 36*M planes), plus the bias
// Float32 arithmetic throughout, but not the direct sum's: the transforms mix the whole 6x6 tile, so
// an output's error scales with its tile's magnitude, not its own 3x3 window's (docs/kernel-notes.md).
#ifndef V12_GEMM
#define V12_GEMM 0         // v12: the version computing its 36 GEMMs (8, 9; 0: by the layer) and the
#endif                     // transformed images per chunk in MB (both read by the launcher, not here)
#ifndef V12_CHUNK_MB
#define V12_CHUNK_MB 1024
#endif
#define WINO_TH ((CONV_HO + 3) / 4)
#define WINO_TW ((CONV_WO + 3) / 4)
#define WINO_TT (WINO_TH * WINO_TW)

// B^T v: 6 -> 6.
__device__ __forceinline__ void wino_bt(const float* v, float* out)
{
    out[0] = fmaf(4.f, v[0], fmaf(-5.f, v[2], v[4]));
    out[1] = fmaf(-4.f, v[1] + v[2], v[3] + v[4]);
    out[2] = fmaf(4.f, v[1] - v[2], v[4] - v[3]);
    out[3] = fmaf(2.f, v[3] - v[1], v[4] - v[2]);
    out[4] = fmaf(2.f, v[1] - v[3], v[4] - v[2]);
    out[5] = fmaf(4.f, v[1], fmaf(-5.f, v[3], v[5]));
}

// A^T v: 6 -> 4.
__device__ __forceinline__ void wino_at(const float* v, float* out)
{
    const float a = v[1] + v[2], b = v[1] - v[2], c = v[3] + v[4], d = v[3] - v[4];
    out[0] = v[0] + a + c;
    out[1] = fmaf(2.f, d, b);
    out[2] = fmaf(4.f, c, a);
    out[3] = fmaf(8.f, d, b) + v[5];
}

// G v: 3 -> 6.
__device__ __forceinline__ void wino_g(const float* v, float* out)
{
    const float s = v[0] + v[2];
    out[0] = 0.25f * v[0];
    out[1] = (s + v[1]) * (-1.f / 6.f);
    out[2] = (s - v[1]) * (-1.f / 6.f);
    out[3] = fmaf(1.f / 24.f, v[0], fmaf(1.f / 12.f, v[1], (1.f / 6.f) * v[2]));
    out[4] = fmaf(1.f / 24.f, v[0], fmaf(-1.f / 12.f, v[1], (1.f / 6.f) * v[2]));
    out[5] = v[2];
}

#if WANTED(12)
// One thread per (m, c): U[p][m][c] = (G g G^T)[p], p = 6i + j.
extern "C" __global__ void wino_filter(float* __restrict__ U, const float* __restrict__ k)
{
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= CONV_M * CONV_C) return;
    float g[9], t[6][3], col[3], out[6];
#pragma unroll
    for (int i = 0; i < 9; ++i) g[i] = __ldg(k + (long long)e * 9 + i);
#pragma unroll
    for (int j = 0; j < 3; ++j) {                  // t = G g: each column of g
        col[0] = g[j]; col[1] = g[3 + j]; col[2] = g[6 + j];
        wino_g(col, out);
#pragma unroll
        for (int i = 0; i < 6; ++i) t[i][j] = out[i];
    }
#pragma unroll
    for (int i = 0; i < 6; ++i) {                  // U = t G^T: each row of t
        wino_g(t[i], out);
#pragma unroll
        for (int j = 0; j < 6; ++j) U[(6 * i + j) * CONV_M * CONV_C + e] = out[j];
    }
}

// One thread per (b, c, tile) of `n` images: V[b][p][c][tile] = (B^T d B)[p].
extern "C" __global__ void wino_input(float* __restrict__ V, const float* __restrict__ x, int n)
{
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long long)n * CONV_C * WINO_TT) return;
    const int tile = (int)(e % WINO_TT);
    const long long bc = e / WINO_TT;                 // b * C + c
    const int r0 = (tile / WINO_TW) * 4 - CONV_PH, c0 = (tile % WINO_TW) * 4 - CONV_PW;
    const float* xc = x + bc * (CONV_H * CONV_W);
    float d[6][6], t[6][6], col[6], out[6];
#pragma unroll
    for (int i = 0; i < 6; ++i)
#pragma unroll
        for (int j = 0; j < 6; ++j) {
            const int r = r0 + i, c = c0 + j;
            d[i][j] = (r >= 0 && r < CONV_H && c >= 0 && c < CONV_W) ? __ldg(xc + r * CONV_W + c) : 0.f;
        }
#pragma unroll
    for (int j = 0; j < 6; ++j) {                  // t = B^T d: each column
#pragma unroll
        for (int i = 0; i < 6; ++i) col[i] = d[i][j];
        wino_bt(col, out);
#pragma unroll
        for (int i = 0; i < 6; ++i) t[i][j] = out[i];
    }
    const long long b = bc / CONV_C, c = bc - b * CONV_C;
    float* v = V + (b * 36 * CONV_C + c) * WINO_TT + tile;
#pragma unroll
    for (int i = 0; i < 6; ++i) {                  // V = t B: each row
        wino_bt(t[i], out);
#pragma unroll
        for (int j = 0; j < 6; ++j) v[(long long)(6 * i + j) * CONV_C * WINO_TT] = out[j];
    }
}

// One thread per (b, m, tile) of `n` images: the 4x4 tile A^T Mh A (+ bias) into y.
extern "C" __global__ void wino_output(float* __restrict__ y, const float* __restrict__ Mh, const float* __restrict__ bias,
                                       int n)
{
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long long)n * CONV_M * WINO_TT) return;
    const int tile = (int)(e % WINO_TT);
    const long long bm = e / WINO_TT;                 // b * M + m
    const long long b = bm / CONV_M, m = bm - b * CONV_M;
    const float* src = Mh + (b * 36 * CONV_M + m) * WINO_TT + tile;
    float t[4][6], row[6], out[4];
#pragma unroll
    for (int j = 0; j < 6; ++j) {                  // t = A^T Mh: each column
#pragma unroll
        for (int i = 0; i < 6; ++i) row[i] = __ldcs(src + (long long)(6 * i + j) * CONV_M * WINO_TT);
        wino_at(row, out);
#pragma unroll
        for (int i = 0; i < 4; ++i) t[i][j] = out[i];
    }
    const float add = CONV_BIAS ? __ldg(bias + m) : 0.f;
    const int oy = (tile / WINO_TW) * 4, ox = (tile % WINO_TW) * 4;
    float* yp = y + bm * CONV_HOWO + oy * CONV_WO + ox;
#pragma unroll
    for (int i = 0; i < 4; ++i) {                  // y = t A: each row
        if (oy + i >= CONV_HO) break;
        wino_at(t[i], out);
        if (CONV_WO % 4 == 0) {
            __stcs(reinterpret_cast<float4*>(yp + i * CONV_WO), make_float4(out[0] + add, out[1] + add, out[2] + add, out[3] + add));
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (ox + j < CONV_WO) __stcs(yp + i * CONV_WO + j, out[j] + add);
        }
    }
}
#endif  // WANTED(12)

// ------------------------------------------------------------------ v13 depthwise
// A depthwise layer (C/G = 1: filter m reads channel m / (M/G) only) does KH*KW FMAs per output: an
// implicit GEMM (v8) has a k-depth of 9 there, and the layer is bound by moving x and y (MobileNetV2's
// 32-channel 112x112 layer at B=64: 103 MB each way, 0.068 ms at 3 TB/s; cuDNN 0.24 ms, v8 0.34 ms).
// One thread per (image, filter, output row, strip of V13_VEC outputs): its KH*KW taps in registers,
// for each tap row the V13_SPAN input values under its strip loaded once (L1 serves the neighbours'
// overlap), the bias first, then the taps in order (the float32 bound's summation).
#ifndef V13_VEC
#define V13_VEC 4          // v13: adjacent outputs per thread
#endif
#ifndef V13_THREADS
#define V13_THREADS 256    // v13: threads per block
#endif
#ifndef V13_ENABLED
#define V13_ENABLED 1      // v13: 0 where a group has several channels (the launcher refuses v13)
#endif
#define V13_SPAN ((V13_VEC - 1) * CONV_SW + (CONV_KW - 1) * CONV_DW + 1)
#define V13_STRIPS ((CONV_WO + V13_VEC - 1) / V13_VEC)

#if WANTED(13)
extern "C" __global__ void __launch_bounds__(V13_THREADS)
conv_forward_v13(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ k,
                 const float* __restrict__ bias, int B)
{
#if V13_ENABLED
    const long long t = (long long)blockIdx.x * V13_THREADS + threadIdx.x;
    if (t >= (long long)B * CONV_M * CONV_HO * V13_STRIPS) return;
    const int strip = (int)(t % V13_STRIPS);
    long long r = t / V13_STRIPS;
    const int ho = (int)(r % CONV_HO);
    r /= CONV_HO;
    const int m = (int)(r % CONV_M);
    const long long b = r / CONV_M;
    const float* xc = x + (b * CONV_C + m / CONV_MG) * (long long)(CONV_H * CONV_W);
    float w[CONV_KH * CONV_KW];
#pragma unroll
    for (int i = 0; i < CONV_KH * CONV_KW; ++i) w[i] = __ldg(k + m * (CONV_KH * CONV_KW) + i);
    float acc[V13_VEC];
    const float b0 = CONV_BIAS ? __ldg(bias + m) : 0.f;
#pragma unroll
    for (int v = 0; v < V13_VEC; ++v) acc[v] = b0;
    const int wo0 = strip * V13_VEC;
    const int wi0 = wo0 * CONV_SW - CONV_PW;
#pragma unroll
    for (int p = 0; p < CONV_KH; ++p) {
        const int hi = ho * CONV_SH - CONV_PH + p * CONV_DH;
        if (hi < 0 || hi >= CONV_H) continue;
        const float* row = xc + hi * CONV_W;
        float seg[V13_SPAN];
#pragma unroll
        for (int j = 0; j < V13_SPAN; ++j) {
            const int wi = wi0 + j;
            seg[j] = (wi >= 0 && wi < CONV_W) ? __ldg(row + wi) : 0.f;
        }
#pragma unroll
        for (int q = 0; q < CONV_KW; ++q)
#pragma unroll
            for (int v = 0; v < V13_VEC; ++v)
                acc[v] = fmaf(seg[v * CONV_SW + q * CONV_DW], w[p * CONV_KW + q], acc[v]);
    }
    store_strip<V13_VEC, CONV_WO % V13_VEC == 0, CONV_WO, false>(
        y + ((b * CONV_M + m) * CONV_HO + ho) * (long long)CONV_WO + wo0, acc, wo0);
#endif  // V13_ENABLED
}
#endif  // WANTED(13)

// ------------------------------------------------------------------ fused: conv + bias + tanh + 2x2 max-pool
// The course models' conv -> tanh -> maxpool(2, 2) in one pass (kernels.fused_forward_gpu). Like v7,
// but a thread computes a 2 x 2*FUSE_PV block of the convolution (two rows) for every filter from a
// (K+1) x (2*FUSE_PV+K-1) input strip per channel in registers, takes the 2x2 maxima, adds the bias and
// applies tanh once per pooled output (tanh is increasing, so tanh(max) = max(tanh)): y is
// B x M x HO/2 x WO/2, 4x smaller than the convolution's output (an odd last row/column is dropped,
// as the pooling does). One thread per (b, pooled row, strip of FUSE_PV pooled outputs).
#ifndef FUSE_PV
#define FUSE_PV 4          // fused: pooled outputs per thread along a row
#endif
#ifndef FUSE_THREADS
#define FUSE_THREADS 256   // fused: threads per block
#endif
#ifndef FUSE_UNROLL_M
#define FUSE_UNROLL_M 5    // fused: unroll factor of the filter loop
#endif
#ifndef FUSE_ENABLED
#define FUSE_ENABLED 1     // fused: 0 where the strips do not fit in registers (the launcher falls back)
#endif
#define FUSE_VEC (2 * FUSE_PV)
#define FUSE_STRIP (FUSE_VEC + CONV_K - 1)
#define FUSE_PHO (CONV_HO / 2)
#define FUSE_PWO (CONV_WO / 2)
#define FUSE_STRIPS ((FUSE_PWO + FUSE_PV - 1) / FUSE_PV)
#define FUSE_EXACT (FUSE_PWO % FUSE_PV == 0)
#define FUSE_VEC4_IN (FUSE_EXACT && CONV_W % 4 == 0 && FUSE_VEC % 4 == 0 && FUSE_STRIP % 4 == 0)

#if WANTED(100)
extern "C" __global__ void __launch_bounds__(FUSE_THREADS)
fused_forward(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ bias, int B)
{
#if FUSE_ENABLED
    constexpr int kUnrollM = FUSE_UNROLL_M;
    const long long t = (long long)blockIdx.x * FUSE_THREADS + threadIdx.x;
    if (t >= (long long)B * FUSE_PHO * FUSE_STRIPS) return;
    const int j0 = (int)(t % FUSE_STRIPS) * FUSE_PV;
    const long long r = t / FUSE_STRIPS;
    const int ph = (int)(r % FUSE_PHO);
    const long long b = r / FUSE_PHO;
    const int w0 = 2 * j0;
    const float* xb = x + b * (CONV_C * CONV_H * CONV_W) + 2 * ph * CONV_W + w0;
    float in[CONV_C][CONV_K + 1][FUSE_STRIP];
#pragma unroll
    for (int c = 0; c < CONV_C; ++c) load_strip<CONV_K + 1, FUSE_STRIP, FUSE_EXACT, FUSE_VEC4_IN>(in[c], xb, c, w0);

    float* yb = y + b * CONV_M * (FUSE_PHO * FUSE_PWO) + ph * FUSE_PWO + j0;
#pragma unroll kUnrollM
    for (int m = 0; m < CONV_M; ++m) {
        float top[FUSE_VEC], bottom[FUSE_VEC];
#pragma unroll
        for (int v = 0; v < FUSE_VEC; ++v) top[v] = bottom[v] = 0.f;
#pragma unroll
        for (int c = 0; c < CONV_C; ++c)
#pragma unroll
            for (int p = 0; p < CONV_K; ++p)
#pragma unroll
                for (int q = 0; q < CONV_K; ++q) {
                    const float kv = c_weights[m * CONV_CKK + c * CONV_KK + p * CONV_K + q];
#pragma unroll
                    for (int v = 0; v < FUSE_VEC; ++v) {
                        top[v] = fmaf(in[c][p][q + v], kv, top[v]);
                        bottom[v] = fmaf(in[c][p + 1][q + v], kv, bottom[v]);
                    }
                }
        const float add = bias ? __ldg(&bias[m]) : 0.f;
        float pooled[FUSE_PV];
#pragma unroll
        for (int j = 0; j < FUSE_PV; ++j)
            pooled[j] = tanhf(fmaxf(fmaxf(top[2 * j], top[2 * j + 1]), fmaxf(bottom[2 * j], bottom[2 * j + 1])) + add);
        float* out = yb + (long long)m * (FUSE_PHO * FUSE_PWO);
        if (FUSE_EXACT && FUSE_PV == 2 && FUSE_PWO % 2 == 0)
            __stcs(reinterpret_cast<float2*>(out), make_float2(pooled[0], pooled[FUSE_PV - 1]));
        else
            store_strip<FUSE_PV, FUSE_EXACT, FUSE_PWO>(out, pooled, j0);
    }
#endif  // FUSE_ENABLED
}
#endif  // WANTED(100)

// The unfused tail for layers the fused kernel does not run: out = tanh(2x2 max-pool(conv)), one
// thread per pooled output; conv holds `planes` HO x WO planes (the bias already added).
extern "C" __global__ void tanh_pool(float* __restrict__ out, const float* __restrict__ conv, long long planes,
                                     int HO, int WO)
{
    const int PH = HO / 2, PW = WO / 2;
    const long long total = planes * PH * PW;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const int j = (int)(e % PW);
        const long long t = e / PW;
        const int i = (int)(t % PH);
        const float* src = conv + ((t / PH) * HO + 2 * i) * WO + 2 * j;
        out[e] = tanhf(fmaxf(fmaxf(src[0], src[1]), fmaxf(src[WO], src[WO + 1])));
    }
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

// ================================================================== v14-v19: the rest of the course's list
// The optimisations the course's later project pages (2021-2025) gave points for and the ladder above
// does not show as a step of its own; docs/course-map.md maps every item of that list to a version.

// ------------------------------------------------------------------ v14 restrict/unroll
// v3's tiling with the layer's sizes as compile-time constants, so that `#pragma unroll` flattens the
// K x K loop (the weights become constant-bank operands at fixed offsets) and x is read through the
// read-only path (const __restrict__, __ldg); one filter per thread. v4 is this plus register blocking.
#if WANTED(14)
extern "C" __global__ void __launch_bounds__(TILE * TILE)
conv_forward_v14(float* __restrict__ y, const float* __restrict__ x, int B)
{
    register_tiles<1>(y, x, B);
}
#endif  // WANTED(14)

// ------------------------------------------------------------------ v15 tree, v16 atomics: channels in parallel
// v14 with the input channels split among V15_CZ slices of the block (threadIdx.z): slice z sums the
// channels z, z + CZ, ... of its output tile from its own shared tile, then the CZ partial sums are
// added by a tree in shared memory (v15) or by atomicAdd into y, zeroed first by the launcher (v16).
// Grid: (tiles of the output plane, M, min(B, 65535)), block (TILE, TILE, V15_CZ).
#ifndef V15_CZ
#define V15_CZ 1           // v15, v16: channel slices per block, a power of two (the largest <= min(C, 4))
#endif
#if WANTED(15) || WANTED(16)
template <bool ATOMIC>
__device__ __forceinline__ void channel_slices(float* __restrict__ y, const float* __restrict__ x, int B)
{
    __shared__ float tile[V15_CZ][V4_SPAN * V4_SPAN];
    __shared__ float part[ATOMIC ? 1 : V15_CZ][TILE * TILE];
    const int tiles_w = (CONV_WO + TILE - 1) / TILE;
    const int h0 = (blockIdx.x / tiles_w) * TILE, w0 = (blockIdx.x % tiles_w) * TILE;
    const int m = blockIdx.y, z = threadIdx.z, ty = threadIdx.y, tx = threadIdx.x, t = ty * TILE + tx;
    const int h = h0 + ty, w = w0 + tx;
    const bool live = h < CONV_HO && w < CONV_WO;
    for (long long b = blockIdx.z; b < B; b += gridDim.z) {
        float acc = 0.f;
#pragma unroll 1
        for (int c0 = 0; c0 < CONV_C; c0 += V15_CZ) {      // every slice takes every trip (the barriers)
            const int c = c0 + z;
            if (c < CONV_C) {
                const float* xc = x + (b * CONV_C + c) * (CONV_H * CONV_W);
                for (int i = t; i < V4_SPAN * V4_SPAN; i += TILE * TILE) {
                    const int hh = h0 + i / V4_SPAN, ww = w0 + i % V4_SPAN;
                    tile[z][i] = (hh < CONV_H && ww < CONV_W) ? __ldg(&xc[hh * CONV_W + ww]) : 0.f;
                }
            }
            __syncthreads();
            if (live && c < CONV_C) {
                const float* kc = c_weights + m * CONV_CKK + c * CONV_KK;
#pragma unroll
                for (int p = 0; p < CONV_K; ++p)
#pragma unroll
                    for (int q = 0; q < CONV_K; ++q)
                        acc = fmaf(tile[z][(ty + p) * V4_SPAN + tx + q], kc[p * CONV_K + q], acc);
            }
            __syncthreads();
        }
        float* out = y + ((b * CONV_M + m) * CONV_HO + h) * CONV_WO + w;
        if constexpr (ATOMIC) {
            if (live) atomicAdd(out, acc);
        } else {
            part[z][t] = acc;
            __syncthreads();
#pragma unroll
            for (int s = V15_CZ / 2; s > 0; s >>= 1) {     // the tree: slice z adds slice z + s
                if (z < s) part[z][t] += part[z + s][t];
                __syncthreads();
            }
            if (z == 0 && live) *out = part[0][t];
        }
    }
}
#endif  // WANTED(15) || WANTED(16)

#if WANTED(15)
extern "C" __global__ void __launch_bounds__(TILE * TILE * V15_CZ)
conv_forward_v15(float* __restrict__ y, const float* __restrict__ x, int B)
{
    channel_slices<false>(y, x, B);
}
#endif  // WANTED(15)

#if WANTED(16)
extern "C" __global__ void __launch_bounds__(TILE * TILE * V15_CZ)
conv_forward_v16(float* __restrict__ y, const float* __restrict__ x, int B)
{
    channel_slices<true>(y, x, B);
}
#endif  // WANTED(16)

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
#if WANTED(17)
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
#endif  // WANTED(17)

// ------------------------------------------------------------------ v18 cublas
// v5 with its GEMM replaced by cuBLAS (cublasSgemmStridedBatched, FP32, called by the launcher through
// ctypes): im2col_v5 above unrolls a chunk of images, one strided-batched SGEMM per group multiplies
// them (batch = images), add_bias adds the bias. No kernel of its own here.

// ------------------------------------------------------------------ v19 fft: overlap-add with cuFFT
// Not the direct sum: x is cut into FFT_T x FFT_T tiles, each zero-padded to V19_F x V19_F (F = T + K - 1,
// so the tile's full linear convolution with the flipped filter fits the transform without wrapping);
// cuFFT (called by the launcher) transforms the tiles and the filters (R2C), fft_multiply sums the
// products over the channels at each frequency, cuFFT transforms back (C2R), and fft_overlap_add adds
// the overlapping tile outputs into y (at most 2 x 2 per output), scaled by 1 / F^2. Its rounding error
// is norm-wise (each output carries error of its tiles' whole energy), measured against its own model.
#ifndef V19_F
#define V19_F 32           // v19: transform size; tiles of x are V19_F - K + 1 square
#endif
#ifndef V19_CHUNK_MB
#define V19_CHUNK_MB 1024  // v19: workspace per chunk of images in MB (read by the launcher, not here)
#endif
#define FFT_T (V19_F - CONV_K + 1)
#define FFT_TH ((CONV_H + FFT_T - 1) / FFT_T)
#define FFT_TW ((CONV_W + FFT_T - 1) / FFT_T)
#define FFT_NT (FFT_TH * FFT_TW)
#define FFT_NF (V19_F * (V19_F / 2 + 1))   // complex points of one real F x F transform

#if WANTED(19)
// xt[b][c][t] (F x F each): tile t of image b's channel c, zero outside the tile and outside x.
extern "C" __global__ void fft_tiles(float* __restrict__ xt, const float* __restrict__ x, int n)
{
    const long long total = (long long)n * CONV_C * FFT_NT * V19_F * V19_F;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
        const int j = (int)(e % V19_F);
        long long r = e / V19_F;
        const int i = (int)(r % V19_F);
        r /= V19_F;
        const int t = (int)(r % FFT_NT);
        const long long bc = r / FFT_NT;               // b * C + c
        const int row = (t / FFT_TW) * FFT_T + i, col = (t % FFT_TW) * FFT_T + j;
        xt[e] = (i < FFT_T && j < FFT_T && row < CONV_H && col < CONV_W) ? __ldg(&x[(bc * CONV_H + row) * CONV_W + col]) : 0.f;
    }
}

// kt[m][c] (F x F each): the filter flipped (the transform's product is a convolution, the layer a
// correlation) and zero-padded.
extern "C" __global__ void fft_weights(float* __restrict__ kt, const float* __restrict__ k)
{
    const long long total = (long long)CONV_M * CONV_C * V19_F * V19_F;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
        const int j = (int)(e % V19_F), i = (int)(e / V19_F % V19_F);
        const long long mc = e / (V19_F * V19_F);      // m * C + c
        kt[e] = (i < CONV_K && j < CONV_K) ? __ldg(&k[(mc * CONV_K + CONV_K - 1 - i) * CONV_K + CONV_K - 1 - j]) : 0.f;
    }
}

// yh[b][m][t][f] = sum over c of xh[b][c][t][f] * kh[m][c][f] (complex): one thread per (b, m, t, f).
extern "C" __global__ void fft_multiply(float2* __restrict__ yh, const float2* __restrict__ xh,
                                        const float2* __restrict__ kh, int n)
{
    const long long total = (long long)n * CONV_M * FFT_NT * FFT_NF;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
        const int f = (int)(e % FFT_NF);
        long long r = e / FFT_NF;
        const int t = (int)(r % FFT_NT);
        r /= FFT_NT;
        const int m = (int)(r % CONV_M);
        const long long b = r / CONV_M;
        const float2* xp = xh + (b * CONV_C * FFT_NT + t) * FFT_NF + f;      // channel c: + c * NT * NF
        const float2* kp = kh + (long long)m * CONV_C * FFT_NF + f;           // channel c: + c * NF
        float re = 0.f, im = 0.f;
        for (int c = 0; c < CONV_C; ++c) {
            const float2 a = __ldg(xp + (long long)c * FFT_NT * FFT_NF), w = __ldg(kp + (long long)c * FFT_NF);
            re = fmaf(a.x, w.x, fmaf(-a.y, w.y, re));
            im = fmaf(a.x, w.y, fmaf(a.y, w.x, im));
        }
        yh[e] = make_float2(re, im);
    }
}

// y[b][m][h][w] = (1 / F^2) * the sum, over the tiles whose full output covers (h + K - 1, w + K - 1),
// of that output (tile rows h / T .. (h + K - 1) / T, the same for columns). One thread per element of y.
extern "C" __global__ void fft_overlap_add(float* __restrict__ y, const float* __restrict__ z, int n)
{
    const long long total = (long long)n * CONV_M * CONV_HOWO;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
        const int w = (int)(e % CONV_WO);
        const long long r = e / CONV_WO;
        const int h = (int)(r % CONV_HO);
        const long long bm = r / CONV_HO;              // b * M + m
        const int u = h + CONV_K - 1, v = w + CONV_K - 1;
        const int ty1 = min(FFT_TH - 1, u / FFT_T), tx1 = min(FFT_TW - 1, v / FFT_T);
        float s = 0.f;
        for (int ty = h / FFT_T; ty <= ty1; ++ty)
            for (int tx = w / FFT_T; tx <= tx1; ++tx)
                s += __ldg(&z[((bm * FFT_NT + ty * FFT_TW + tx) * V19_F + u - ty * FFT_T) * V19_F + v - tx * FFT_T]);
        y[e] = s * (1.f / (V19_F * V19_F));
    }
}
#endif  // WANTED(19)

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

#if WANTED(20)
// A weight stage: [hi, lo][k-step of 8][V20_BN filters x 8 k] with wgmma's canonical K-major layout
// without swizzling: core matrix (n / 8, k / 4), 8 filters x 4 k in 16-byte rows, at byte
// (k / 4) * 128 + (n / 8) * 256 (so LBO, between core matrices along k, is 128; SBO, along n, 256).
// Filters past M and k past GKK are zeros. One thread per element of the split weights.
extern "C" __global__ void wgmma_weights(float* __restrict__ w2, const float* __restrict__ k)
{
    constexpr int STEP = V20_BN * 8, STEPS = V20_BK / 8;
    const long long total = (long long)V20_FTILES * V20_KT * 2 * V20_BK * V20_BN;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
        const int i = (int)(e % STEP);
        long long r = e / STEP;                        // (filter tile, k tile, half, k-step)
        const int step = (int)(r % STEPS);
        r /= STEPS;
        const int half = (int)(r % 2);
        r /= 2;
        const int kt = (int)(r % V20_KT), ft = (int)(r / V20_KT);
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
                 const float* __restrict__ bias, int B)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(V20_BK % 8 == 0 && (V20_BN == 64 || V20_BN == 128), "v20 tile");
    constexpr int STEPS = V20_BK / 8, HALF = V20_BK * V20_BN, STAGE = 2 * HALF, KPAD = V20_KT * V20_BK;
    float* ws = reinterpret_cast<float*>(gemm_smem);                  // V20_STAGES stages of (hi, lo)
    int* koff = reinterpret_cast<int*>(ws + V20_STAGES * STAGE);      // k -> (x offset << 6) | tap
    const int ft = blockIdx.y, tid = threadIdx.x;
    const long long n0 = (long long)blockIdx.x * V20_BM, npos = (long long)B * CONV_HOWO;
    const int wrow = (tid / 32) * 16, lane = tid % 32, gid = lane / 4, tig = lane % 4;

    for (int r = tid; r < KPAD; r += V20_THREADS) {
        int packed = 63;                               // past GKK: tap 63, never in a mask (zeros)
        if (r < CONV_GKK) {
            const int c = r / CONV_KHKW, pq = r - c * CONV_KHKW, p = pq / CONV_KW, q = pq - p * CONV_KW;
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
        const int b = in ? (int)(n / CONV_HOWO) : 0, s = in ? (int)(n - (long long)b * CONV_HOWO) : 0;
        const int ih0 = (s / CONV_WO) * CONV_SH - CONV_PH, iw0 = (s % CONV_WO) * CONV_SW - CONV_PW;
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
        for (int i = tid * 4; i < STAGE; i += V20_THREADS * 4) cp_async16(dst + i, src + i);
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
        split_stage(kt);                               // (each thread splits the values it copied)
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
            wgmma_tf32(acc, alo[s], hi);               // the small products first
            wgmma_tf32(acc, ahi[s], lo);
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
        const long long b = n / CONV_HOWO;
        float* out = y + b * CONV_M * CONV_HOWO + (n - b * CONV_HOWO);
#pragma unroll
        for (int i = 0; i < V20_BN / 8; ++i)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int f = ft * V20_BN + 8 * i + 2 * tig + e;
                if (f >= CONV_M) continue;
#if CONV_BIAS
                gemm_store(out + (long long)f * CONV_HOWO, acc[4 * i + 2 * h + e] + __ldg(&bias[f]));
#else
                gemm_store(out + (long long)f * CONV_HOWO, acc[4 * i + 2 * h + e]);
#endif
            }
    }
#else
    __trap();
#endif
}
#endif  // WANTED(20)
