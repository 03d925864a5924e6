// v22_hdepthwise.cu: v22, depthwise layers in half precision (float16 or bfloat16).
//
//   v22 hdepthwise  v13's layers (one channel per group, one filter per channel: MobileNetV2's and
//                EfficientNet's 3x3 and 5x5 windows) on channels-last half-precision data: a thread computes
//                VEC adjacent channels of one position, reading VEC halves of x per tap in one load, the
//                block's weights staged once in shared memory as float32 (tap-major: one 16-byte read per
//                four channels and tap); float32 sums, y in the data's type, NHWC or NCHW (half.cuh).
//                Memory-bound: a depthwise layer reads each input value KH*KW times for one product.
//
//                The layer's sizes are a kernel argument (CONV_DYNAMIC, common.cuh: ConvDims).
//
// Build it alone: nvcc -arch=sm_90 -cubin ece408_op/kernels/versions/v22_hdepthwise.cu (its defaults are the
// launcher's for the course layer's shape, a test checks it).
#ifndef CONV_DYNAMIC
#define CONV_DYNAMIC 1
#endif
#include "common.cuh"
#include "gemm.cuh"
#include "half.cuh"

#ifndef V22_VEC
#define V22_VEC 1          // v22: channels per thread (8, 4, 2 or 1; dividing C)
#endif
#ifndef V22_CV
#define V22_CV 1           // v22: channel vectors per block (V22_CV * V22_VEC channels)
#endif
#ifndef V22_THREADS
#define V22_THREADS 256    // v22: threads per block (V22_THREADS / V22_CV positions)
#endif
#ifndef V22_YNCHW
#define V22_YNCHW 1        // v22: 1: y is NCHW, 0: NHWC
#endif
#define V22_CB (V22_CV * V22_VEC)

// VEC halves at p (VEC * 2 bytes, aligned to that) as floats.
__device__ __forceinline__ void load_halves(float (&v)[V22_VEC], const half_t* p)
{
#if V22_VEC == 8
    const uint4 r = __ldg(reinterpret_cast<const uint4*>(p));
    const unsigned u[4] = {r.x, r.y, r.z, r.w};
#elif V22_VEC == 4
    const uint2 r = __ldg(reinterpret_cast<const uint2*>(p));
    const unsigned u[2] = {r.x, r.y};
#elif V22_VEC == 2
    const unsigned u[1] = {__ldg(reinterpret_cast<const unsigned*>(p))};
#endif
#if V22_VEC >= 2
#pragma unroll
    for (int i = 0; i < V22_VEC / 2; ++i) {
        v[2 * i] = low_half(u[i]);
        v[2 * i + 1] = high_half(u[i]);
    }
#else
    v[0] = half_to_float(p[0]);
#endif
}

// Grid: (ceil(B*HO*WO / positions per block), ceil(C / V22_CB)); shared memory KH*KW*V22_CB floats.
extern "C" __global__ void __launch_bounds__(V22_THREADS)
conv_forward_v22(half_t* __restrict__ y, const half_t* __restrict__ x, const half_t* __restrict__ w,
                 const half_t* __restrict__ bias, int B CONV_DIMS_PARAM)
{
    constexpr int POS = V22_THREADS / V22_CV;
    float* ws = reinterpret_cast<float*>(gemm_smem);              // [tap][V22_CB channels]
    const int c_block = blockIdx.y * V22_CB;
    for (int e = threadIdx.x; e < CONV_KHKW * V22_CB; e += V22_THREADS) {
        const int tap = e / V22_CB, c = c_block + e % V22_CB;
        ws[e] = c < CONV_C ? half_to_float(w[c * CONV_KHKW + tap]) : 0.f;   // (M x 1 x KH x KW, either layout)
    }
    __syncthreads();
    const int cv = threadIdx.x % V22_CV, c0 = c_block + cv * V22_VEC;
    const long long n = (long long)blockIdx.x * POS + threadIdx.x / V22_CV;
    if (c0 >= CONV_C || n >= (long long)B * CONV_HOWO) return;
    const int b = (int)pos_image(n CONV_DIMS_ARG), s = (int)(n - (long long)b * CONV_HOWO);
    const int oh = (int)CONV_UDIV(s, WO), ow = s - oh * CONV_WO;
    const int ih0 = oh * CONV_SH - CONV_PH, iw0 = ow * CONV_SW - CONV_PW;
    const half_t* xb = x + (long long)b * CONV_HW * CONV_C + c0;
    float acc[V22_VEC];
#pragma unroll
    for (int v = 0; v < V22_VEC; ++v) acc[v] = CONV_BIAS ? half_to_float(bias[c0 + v]) : 0.f;
    for (int p = 0; p < CONV_KH; ++p) {
        const int ih = ih0 + p * CONV_DH;
        if (ih < 0 || ih >= CONV_H) continue;
        for (int q = 0; q < CONV_KW; ++q) {
            const int iw = iw0 + q * CONV_DW;
            if (iw < 0 || iw >= CONV_W) continue;
            float xv[V22_VEC];
            load_halves(xv, xb + (ih * CONV_W + iw) * CONV_C);
            const float* wt = ws + (p * CONV_KW + q) * V22_CB + cv * V22_VEC;
#pragma unroll
            for (int v = 0; v < V22_VEC; ++v) acc[v] = fmaf(xv[v], wt[v], acc[v]);
        }
    }
#if V22_YNCHW
    half_t* out = y + ((long long)b * CONV_M + c0) * CONV_HOWO + s;
#pragma unroll
    for (int v = 0; v < V22_VEC; ++v) out[(long long)v * CONV_HOWO] = float_to_half(acc[v]);
#else
    half_t* out = y + n * CONV_M + c0;
#if V22_VEC == 1
    out[0] = float_to_half(acc[0]);
#else
#pragma unroll
    for (int v = 0; v < V22_VEC; v += 2)
        *reinterpret_cast<unsigned*>(out + v) = floats_to_halves(acc[v], acc[v + 1]);
#endif
#endif
}
