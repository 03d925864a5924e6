// Worked example (the reference ladder's v5, in the team interface): input unrolling and a tiled
// matrix multiply, two kernels and a workspace.
//
// unroll_kernel writes, for a chunk of images, each image's input as a (C*K*K) x (H_out*W_out)
// matrix (column = one output position, row = one (c, p, q) tap) into the workspace "unrolled";
// gemm_kernel then computes, per image, y (M x H_out*W_out) = k (M x C*K*K) times that matrix, in
// TILE x TILE tiles staged through shared memory. launch.py repeats the pair for each chunk of
// images, so that the workspace stays a fixed size.

#define TILE 16

extern "C" __global__ void unroll_kernel(float *unrolled, const float *x, const int b0, const int n,
                                         const int C, const int H, const int W, const int K)
{
    const int H_out = H - K + 1, W_out = W - K + 1;
    const int cols = H_out * W_out, rows = C * K * K;
    const long total = (long)n * rows * cols;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        const int col = i % cols;
        const int row = (i / cols) % rows;
        const int b = i / ((long)cols * rows);
        const int c = row / (K * K), p = (row / K) % K, q = row % K;
        const int h = col / W_out, w = col % W_out;
        unrolled[i] = x[(((long)(b0 + b) * C + c) * H + h + p) * W + w + q];
    }
}

extern "C" __global__ void gemm_kernel(float *y, const float *unrolled, const float *k, const int b0,
                                       const int M, const int rows, const int cols)
{
    __shared__ float a[TILE][TILE];
    __shared__ float bt[TILE][TILE];
    const int b = blockIdx.z;
    const int m = blockIdx.y * TILE + threadIdx.y;         // output map
    const int col = blockIdx.x * TILE + threadIdx.x;       // output position
    const float *xu = unrolled + (long)b * rows * cols;
    float acc = 0.0f;
    for (int t = 0; t < rows; t += TILE) {
        a[threadIdx.y][threadIdx.x] = (m < M && t + threadIdx.x < rows) ? k[m * rows + t + threadIdx.x] : 0.0f;
        bt[threadIdx.y][threadIdx.x] = (t + threadIdx.y < rows && col < cols) ? xu[(long)(t + threadIdx.y) * cols + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE; i++)
            acc += a[threadIdx.y][i] * bt[i][threadIdx.x];
        __syncthreads();
    }
    if (m < M && col < cols)
        y[((long)(b0 + b) * M + m) * cols + col] = acc;
}
