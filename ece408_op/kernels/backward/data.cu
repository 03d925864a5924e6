// data.cu: the data gradient dx of a convolution (its transposed convolution: dy through the flipped
// weights), two versions:
//
//   bwd_data_plain   one thread per dx element: the sum over the filters of its group and the window
//                    positions whose output position exists (h + PH - p DH = ho SH, 0 <= ho < HO); easy to
//                    read, every operand from global memory (through the caches)
//   bwd_data_gemm    implicit GEMM per group and stride phase: dx (N H W x C/G) = A (N H W x M/G KH KW) B,
//                    A[(n,h,w)][(p,q,m)] = dy[n][m][(h + PH - p DH) / SH][(w + PW - q DW) / SW] where that
//                    divides and exists (else 0), B[(p,q,m)][c] = w[m][c][p][q]; 64 x 64 tiles in shared
//                    memory (128 x 128 for large layers; backward.cuh: tile_gemm), sums in float32, dx in the data's
//                    type. A stride of SH x SW makes SH SW phases (h mod SH, w mod SW), each launched alone
//                    over its own rows and only the taps that divide for it (p DH = h + PH mod SH): with
//                    every tap over every row, 3/4 of a stride-2 layer's products were zeros (its dx ran
//                    3-4x cuDNN's, H200 ResNet-50 2026-12-02; per phase, as the stride-1 layers)
//
// Sizes at run time (BwdDims); the element type a #define (ELEM). Build it alone:
//     nvcc -arch=sm_90 -cubin ece408_op/kernels/backward/data.cu
#include "backward.cuh"

extern "C" __global__ void bwd_data_plain(elem_t* __restrict__ dx, const elem_t* __restrict__ dy,
                                          const elem_t* __restrict__ w, const BwdDims d)
{
    const long long total = (long long)d.N * d.C * d.H * d.W;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int col = (int)(i % d.W);
    long long t = i / d.W;
    const int row = (int)(t % d.H); t /= d.H;
    const int c = (int)(t % d.C);
    const long long n = t / d.C;
    const int g = c / d.CG, cl = c % d.CG;
    float acc = 0.f;
    for (int m = g * d.MG; m < (g + 1) * d.MG; ++m)
        for (int p = 0; p < d.KH; ++p) {
            const int th = row + d.PH - p * d.DH;            // = ho * SH for the output row that reads it
            if (th < 0 || th % d.SH) continue;
            const int ho = th / d.SH;
            if (ho >= d.HO) continue;
            for (int q = 0; q < d.KW; ++q) {
                const int tw = col + d.PW - q * d.DW;
                if (tw < 0 || tw % d.SW) continue;
                const int wo = tw / d.SW;
                if (wo >= d.WO) continue;
                acc += to_float(dy[((n * d.M + m) * d.HO + ho) * d.WO + wo]) *
                       to_float(w[((m * d.CG + cl) * d.KH + p) * d.KW + q]);
            }
        }
    dx[i] = from_float(acc);
}

// The gathers of bwd_data_gemm: thread t loads A's row t % TILE and B's column t % TILE at the depths
// t / TILE + (256 / TILE) i of a step (consecutive threads: consecutive positions of dy, coalesced).
struct DataOp {
    const elem_t* dy;
    const elem_t* w;
    BwdDims d;
    int g, n, h, x, c, lane, depth;
    bool row_ok, col_ok;

    __device__ void load(int k0, int k_end, elem_t ra[LOADS], elem_t rb[LOADS]) const
    {
#pragma unroll
        for (int i = 0; i < LOADS; ++i) {
            const int k = k0 + depth + (THREADS / TILE) * i;
            ra[i] = 0, rb[i] = 0;
            if (k >= k_end) continue;
            const int tap = udiv(k, d.div_MG), m = g * d.MG + k - tap * d.MG;
            const int tp = udiv(tap, d.div_QCOUNT), p = d.P0 + tp * d.PSTEP, q = d.Q0 + (tap - tp * d.QCOUNT) * d.QSTEP;
            if (col_ok) rb[i] = w[(m * d.CG + c) * d.KK + p * d.KW + q];
            const int th = h + d.PH - p * d.DH, tw = x + d.PW - q * d.DW;
            if (!row_ok || th < 0 || tw < 0) continue;
            const int ho = udiv(th, d.div_SH), wo = udiv(tw, d.div_SW);
            if (ho * d.SH == th && wo * d.SW == tw && ho < d.HO && wo < d.WO)
                ra[i] = dy[((n * d.M + m) * d.HO + ho) * d.WO + wo];
        }
    }
    __device__ void stage(const Stage& s, const elem_t ra[LOADS], const elem_t rb[LOADS]) const
    {
#pragma unroll
        for (int i = 0; i < LOADS; ++i) {
            s.a(depth + (THREADS / TILE) * i, lane) = ra[i];
            s.b(depth + (THREADS / TILE) * i, lane) = rb[i];
        }
    }
};

// One phase's row (n, i, j) as (n, h, w); false past the phase's rows or the image.
__device__ __forceinline__ bool phase_row(const BwdDims& d, int r, int& n, int& h, int& x)
{
    const int t = udiv(r, d.div_WB), j = r - t * d.WB;
    n = udiv(t, d.div_HA);
    h = d.PA + (t - n * d.HA) * d.SH, x = d.PB + j * d.SW;
    return n < d.N && h < d.H && x < d.W;
}

// grid (N HA WB / TILE, C/G / TILE, G) for each phase, 256 threads.
extern "C" __global__ void __launch_bounds__(THREADS) bwd_data_gemm(elem_t* __restrict__ dx,
    const elem_t* __restrict__ dy, const elem_t* __restrict__ w, const BwdDims d)
{
    DataOp op;
    op.dy = dy, op.w = w, op.d = d, op.g = blockIdx.z;
    op.lane = threadIdx.x % TILE, op.depth = threadIdx.x / TILE;
    op.row_ok = phase_row(d, blockIdx.x * BM + op.lane, op.n, op.h, op.x);
    op.c = blockIdx.y * BN + op.lane;
    op.col_ok = op.c < d.CG;
    float acc[ACC] = {};
    tile_gemm(op, 0, d.MG * d.PCOUNT * d.QCOUNT, acc);
#pragma unroll
    for (int e = 0; e < ACC; ++e) {
        int n, h, col;
        const int c = blockIdx.y * BN + tile_col(e);
        if (c < d.CG && phase_row(d, blockIdx.x * BM + tile_row(e), n, h, col))
            dx[((n * d.C + blockIdx.z * d.CG + c) * d.H + h) * d.W + col] = from_float(acc[e]);
    }
}
