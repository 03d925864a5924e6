// weight.cu: the weight gradient dw (a correlation of x with dy, summed over the batch and the output
// positions) and the bias gradient db (dy summed over the batch and the positions), two versions each:
//
//   bwd_weight_plain   one thread per dw element: its sum over n, ho, wo of dy[n][m][ho][wo] x
//                      x[n][c][ho SH + p DH - PH][wo SW + q DW - PW]; float32 dw
//   bwd_weight_splitk  GEMM per group: dw (M/G x C/G KH KW) = A (M/G x N HO WO) B, A = dy, B[(n,ho,wo)][(c,p,q)]
//                      the input under the window (0 in the padding); 64 x 64 (or 128 x 128) tiles in shared memory
//                      (backward.cuh: tile_gemm) and the long N HO WO depth split over SPLIT blocks (split-K)
//                      whose float32 sums are added into dw by atomics (the caller zeroes dw first)
//   bwd_bias_plain     one thread per filter
//   bwd_bias_block     one block per filter: a strided sum per thread, then a warp-shuffle tree
//
// Sizes at run time (BwdDims); the element type a #define (ELEM). Build it alone:
//     nvcc -arch=sm_90 -cubin ece408_op/kernels/backward/weight.cu
#include "backward.cuh"

extern "C" __global__ void bwd_weight_plain(float* __restrict__ dw, const elem_t* __restrict__ dy,
                                            const elem_t* __restrict__ x, const BwdDims d)
{
    const int total = d.M * d.CG * d.KK;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int q = i % d.KW, p = i / d.KW % d.KH, cl = i / d.KK % d.CG, m = i / (d.KK * d.CG);
    const int c = m / d.MG * d.CG + cl;
    float acc = 0.f;
    for (int n = 0; n < d.N; ++n)
        for (int ho = 0; ho < d.HO; ++ho) {
            const int h = ho * d.SH + p * d.DH - d.PH;
            if (h < 0 || h >= d.H) continue;
            for (int wo = 0; wo < d.WO; ++wo) {
                const int col = wo * d.SW + q * d.DW - d.PW;
                if (col < 0 || col >= d.W) continue;
                acc += to_float(dy[(((long long)n * d.M + m) * d.HO + ho) * d.WO + wo]) *
                       to_float(x[(((long long)n * d.C + c) * d.H + h) * d.W + col]);
            }
        }
    dw[i] = acc;
}

// The gathers of bwd_weight_splitk: thread t loads depth t % 16 of a step (consecutive threads: consecutive
// output positions, so dy and x are read along their rows) for A's rows and B's columns t / 16 + 16 i
// (i < LOADS).
struct WeightOp {
    const elem_t* dy;
    const elem_t* x;
    BwdDims d;
    int depth, lane;
    int a_row[LOADS];          // m * HO * WO of its rows (-1: past M/G)
    int b_chan[LOADS], b_h[LOADS], b_w[LOADS];  // c * H * W (-1: past C/G KH KW), p DH - PH, q DW - PW of its columns

    __device__ void load(int k0, int k_end, elem_t ra[LOADS], elem_t rb[LOADS]) const
    {
        const int k = k0 + depth;
#pragma unroll
        for (int i = 0; i < LOADS; ++i) ra[i] = 0, rb[i] = 0;
        if (k >= k_end) return;
        const int t = udiv(k, d.div_WO), wo = k - t * d.WO, n = udiv(t, d.div_HO), ho = t - n * d.HO;
        const int ybase = n * d.M * d.HO * d.WO + ho * d.WO + wo;
        const int xbase = n * d.C * d.H * d.W;
#pragma unroll
        for (int i = 0; i < LOADS; ++i) {
            if (a_row[i] >= 0) ra[i] = dy[ybase + a_row[i]];
            const int h = ho * d.SH + b_h[i], col = wo * d.SW + b_w[i];
            if (b_chan[i] >= 0 && h >= 0 && h < d.H && col >= 0 && col < d.W)
                rb[i] = x[xbase + b_chan[i] + h * d.W + col];
        }
    }
    __device__ void stage(const Stage& s, const elem_t ra[LOADS], const elem_t rb[LOADS]) const
    {
#pragma unroll
        for (int i = 0; i < LOADS; ++i) {
            s.a(depth, lane + 16 * i) = ra[i];
            s.b(depth, lane + 16 * i) = rb[i];
        }
    }
};

// grid (M/G / TILE, C/G KH KW / TILE, G SPLIT), 256 threads; dw zeroed by the caller.
extern "C" __global__ void __launch_bounds__(THREADS) bwd_weight_splitk(float* __restrict__ dw,
    const elem_t* __restrict__ dy, const elem_t* __restrict__ x, const BwdDims d)
{
    const int g = blockIdx.z / d.SPLIT, split = blockIdx.z % d.SPLIT, cols = d.CG * d.KK;
    WeightOp op;
    op.dy = dy, op.x = x, op.d = d;
    op.depth = threadIdx.x % 16, op.lane = threadIdx.x / 16;
#pragma unroll
    for (int i = 0; i < LOADS; ++i) {
        const int r = blockIdx.x * BM + op.lane + 16 * i;
        op.a_row[i] = r < d.MG ? (g * d.MG + r) * d.HO * d.WO : -1;
        const int c = blockIdx.y * BN + op.lane + 16 * i;
        const int cl = udiv(c, d.div_KK), pq = c - cl * d.KK, p = udiv(pq, d.div_KW), q = pq - p * d.KW;
        op.b_chan[i] = c < cols ? (g * d.CG + cl) * d.H * d.W : -1;
        op.b_h[i] = p * d.DH - d.PH, op.b_w[i] = q * d.DW - d.PW;
    }
    const int depth = d.N * d.HO * d.WO, k_begin = split * d.CHUNK;
    const int k_end = min(depth, k_begin + d.CHUNK);
    if (k_begin >= k_end) return;
    float acc[ACC] = {};
    tile_gemm(op, k_begin, k_end, acc);
#pragma unroll
    for (int e = 0; e < ACC; ++e) {
        const int r = blockIdx.x * BM + tile_row(e), c = blockIdx.y * BN + tile_col(e);
        if (r < d.MG && c < cols) {
            float* out = &dw[(g * d.MG + r) * cols + c];
            if (d.SPLIT == 1) *out = acc[e];
            else atomicAdd(out, acc[e]);
        }
    }
}

extern "C" __global__ void bwd_bias_plain(elem_t* __restrict__ db, const elem_t* __restrict__ dy, const BwdDims d)
{
    const int m = blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= d.M) return;
    const int plane = d.HO * d.WO;
    float acc = 0.f;
    for (int n = 0; n < d.N; ++n)
        for (int j = 0; j < plane; ++j) acc += to_float(dy[((long long)n * d.M + m) * plane + j]);
    db[m] = from_float(acc);
}

// grid (M), 256 threads.
extern "C" __global__ void __launch_bounds__(256) bwd_bias_block(elem_t* __restrict__ db,
    const elem_t* __restrict__ dy, const BwdDims d)
{
    __shared__ float partial[8];
    const int m = blockIdx.x, plane = d.HO * d.WO;
    float acc = 0.f;
    for (int n = 0; n < d.N; ++n) {
        const elem_t* row = dy + ((long long)n * d.M + m) * plane;
        for (int j = threadIdx.x; j < plane; j += 256) acc += to_float(row[j]);
    }
    for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = threadIdx.x < 8 ? partial[threadIdx.x] : 0.f;
        for (int o = 4; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (threadIdx.x == 0) db[m] = from_float(acc);
    }
}
