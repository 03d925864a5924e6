// common.cuh: what every module of ece408_conv's kernel ladder includes (docs/kernels.md lists the versions;
// each vNN_name.cu opens with how its versions differ from the ones before and what that measured).
//
//   The course's layer: y[b][m][h][w] = sum over c, p, q of x[b][c][h+p][w+q] * k[m][c][p][q]
//   x: B x C x H x W, k: M x C x K x K, y: B x M x HO x WO (HO = H-K+1, WO = W-K+1), float32
//   In general (conv/spec.py): stride SH x SW, zero padding PH x PW, dilation DH x DW, G groups
//   (k is M x C/G x KH x KW), an optional bias per filter; HO = (H + 2PH - DH(KH-1) - 1) / SH + 1.
//   v1, v5, v6, v8 and v9 compute the general layer; the others the course's kind (stride 1, no dilation,
//   one group, square kernel), the launcher padding x (pad_input) and adding the bias (add_bias).
//
// A plan compiles one version's file (its Python half, vNN_name.py beside it, holds the capability
// check, the #defines and the grid). The launcher passes #defines (CONV_C, CONV_H, CONV_W, CONV_M,
// CONV_K, TILE, MB, VEC, ...) computed by the same Python that sizes the grids
// (ece408_op/kernels/plans.py: module_spec). The defaults below, and each file's own, are exactly
// what it passes for the course layer (v7's tuned values, kernels/tuning.json, included), so nvcc
// builds any file alone (a test checks it), e.g.
//     nvcc -arch=sm_90 -cubin ece408_op/kernels/versions/v07_strip.cu
// Every module also holds the launcher's helper kernels below (padding, bias, req='add', tanh_pool).
#pragma once

#ifndef CONV_DYNAMIC
#define CONV_DYNAMIC 0     // 1: the layer's sizes are a kernel argument (ConvDims), not #defines
#endif

// n / d for 0 <= n < 2^31 by one multiply-high and a shift (m 0: d a power of two, a shift alone), the
// divisor chosen at run time: Granlund-Montgomery with s = floor(log2 d), m = ceil(2^(32+s) / d) < 2^32
// (kernels/plans.py: fast_div). What the compiler does for a constant divisor, for a size known at launch.
struct FastDiv {
    unsigned m;
    int s;
};
__host__ __device__ __forceinline__ unsigned fast_div(unsigned n, FastDiv d)
{
#ifdef __CUDA_ARCH__
    return d.m ? __umulhi(n, d.m) >> d.s : n >> d.s;
#else
    return d.m ? (unsigned)(((unsigned long long)n * d.m) >> 32) >> d.s : n >> d.s;
#endif
}

#if CONV_DYNAMIC
// The layer's sizes as the kernel's last argument: one module per version and tile serves every layer
// (a first forward compiles a handful of modules, not one per layer shape; docs/gpu-dropin.md). The
// launcher packs it (kernels/plans.py: conv_dims, in this order) and keeps a launch's positions and
// threads under 2^31, so position arithmetic is 32-bit (fast_div). A size given as a #define stays a
// compile-time constant (v13 keeps its window: its registers are sized by it).
struct ConvDims {
    int C, H, W, M, KH, KW, SH, SW, PH, PW, DH, DW, G, BIAS;
    int HO, WO, HW, HOWO, CG, MG, GKK, KHKW;
    FastDiv div_HOWO, div_WO, div_HO, div_M, div_MG, div_KHKW, div_KW, div_CG;
};
#define CONV_DIMS_PARAM , const __grid_constant__ ConvDims conv_dims
#define CONV_DIMS_DECL , const ConvDims& conv_dims
#define CONV_DIMS_ARG , conv_dims
#define CONV_UDIV(n, NAME) fast_div((unsigned)(n), conv_dims.div_##NAME)    // n < 2^31
#ifndef CONV_C
#define CONV_C (conv_dims.C)
#endif
#ifndef CONV_H
#define CONV_H (conv_dims.H)
#endif
#ifndef CONV_W
#define CONV_W (conv_dims.W)
#endif
#ifndef CONV_M
#define CONV_M (conv_dims.M)
#endif
#ifndef CONV_K
#define CONV_K (conv_dims.KH)
#endif
#ifndef CONV_KH
#define CONV_KH (conv_dims.KH)
#endif
#ifndef CONV_KW
#define CONV_KW (conv_dims.KW)
#endif
#ifndef CONV_SH
#define CONV_SH (conv_dims.SH)
#endif
#ifndef CONV_SW
#define CONV_SW (conv_dims.SW)
#endif
#ifndef CONV_PH
#define CONV_PH (conv_dims.PH)
#endif
#ifndef CONV_PW
#define CONV_PW (conv_dims.PW)
#endif
#ifndef CONV_DH
#define CONV_DH (conv_dims.DH)
#endif
#ifndef CONV_DW
#define CONV_DW (conv_dims.DW)
#endif
#ifndef CONV_G
#define CONV_G (conv_dims.G)
#endif
#ifndef CONV_BIAS
#define CONV_BIAS (conv_dims.BIAS)
#endif
#define CONV_HO (conv_dims.HO)
#define CONV_WO (conv_dims.WO)
#define CONV_HW (conv_dims.HW)
#define CONV_HOWO (conv_dims.HOWO)
#define CONV_CG (conv_dims.CG)
#define CONV_MG (conv_dims.MG)
#define CONV_GKK (conv_dims.GKK)
#define CONV_KHKW (conv_dims.KHKW)
#define CONV_KK (CONV_K * CONV_K)
#define CONV_CKK (CONV_C * CONV_KK)
#else
#define CONV_DIMS_PARAM
#define CONV_DIMS_DECL
#define CONV_DIMS_ARG
#define CONV_UDIV(n, NAME) ((unsigned)(n) / (unsigned)(CONV_##NAME))       // (a constant divisor)
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

#define CONV_HO ((CONV_H + 2 * CONV_PH - CONV_DH * (CONV_KH - 1) - 1) / CONV_SH + 1)
#define CONV_WO ((CONV_W + 2 * CONV_PW - CONV_DW * (CONV_KW - 1) - 1) / CONV_SW + 1)
#define CONV_KK (CONV_K * CONV_K)            // the course's kind of layer (v2-v4, v7)
#define CONV_CKK (CONV_C * CONV_KK)
#define CONV_HOWO (CONV_HO * CONV_WO)
#define CONV_CG (CONV_C / CONV_G)            // the general layer (v5, v6): channels and filters of a
#define CONV_MG (CONV_M / CONV_G)            // group, and a group's GEMM depth
#define CONV_GKK (CONV_CG * CONV_KH * CONV_KW)

#define CONV_HW (CONV_H * CONV_W)
#define CONV_KHKW (CONV_KH * CONV_KW)
#endif

#ifndef CONST_WEIGHTS
#define CONST_WEIGHTS 16384   // floats of constant memory for weights (64 KB)
#endif

__constant__ float c_weights[CONST_WEIGHTS];

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
