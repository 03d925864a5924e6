// v01_naive.cu: v1, the ladder's first rung.
//
//   v1 naive     one thread per output, every operand from global memory, the layer at run time
//                H100, the course layer (B=10,000): 5.743 ms; cuDNN 1.174 (docs/kernel-notes.md)
//
// Build it alone: nvcc -arch=sm_90 -cubin ece408_op/kernels/versions/v01_naive.cu (its defaults are the
// course layer's, as the launcher passes them: a test checks it).
#include "common.cuh"

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
