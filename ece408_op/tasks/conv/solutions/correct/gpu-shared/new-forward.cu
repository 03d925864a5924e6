// Worked example (the reference ladder's v2, in the team interface): shared-memory tiles.
//
// Each block computes a TILE_WIDTH x TILE_WIDTH tile of one output map of one image. For every
// input channel it first loads the (TILE_WIDTH + K - 1)^2 input patch the tile needs into shared
// memory (one global read per input element instead of K*K), then every thread reads its K x K
// window from there. The block has as many threads as the patch has elements, so the load is one
// element per thread; only the TILE_WIDTH^2 threads inside the tile write an output.
// The weights stay in global memory (the constant example moves them).

#define TILE_WIDTH 16

extern "C" __global__ void forward_kernel(float *y, const float *x, const float *k,
                                          const int B, const int M, const int C,
                                          const int H, const int W, const int K)
{
    extern __shared__ float patch[];                      // (TILE_WIDTH + K - 1)^2 floats: launch.py's shared
    const int H_out = H - K + 1;
    const int W_out = W - K + 1;
    const int W_grid = (W_out + TILE_WIDTH - 1) / TILE_WIDTH;
    const int side = TILE_WIDTH + K - 1;                  // the block is side x side threads

    const int b = blockIdx.z;
    const int m = blockIdx.y;
    const int h0 = (blockIdx.x / W_grid) * TILE_WIDTH;
    const int w0 = (blockIdx.x % W_grid) * TILE_WIDTH;
    const int ty = threadIdx.y, tx = threadIdx.x;

    float acc = 0.0f;
    for (int c = 0; c < C; c++) {
        const int hi = h0 + ty, wi = w0 + tx;             // this thread's element of the patch
        patch[ty * side + tx] = (hi < H && wi < W) ? x[((b * C + c) * H + hi) * W + wi] : 0.0f;
        __syncthreads();
        if (ty < TILE_WIDTH && tx < TILE_WIDTH)
            for (int p = 0; p < K; p++)
                for (int q = 0; q < K; q++)
                    acc += patch[(ty + p) * side + tx + q] * k[((m * C + c) * K + p) * K + q];
        __syncthreads();                                  // before the next channel overwrites the patch
    }
    const int h = h0 + ty, w = w0 + tx;
    if (ty < TILE_WIDTH && tx < TILE_WIDTH && h < H_out && w < W_out)
        y[((b * M + m) * H_out + h) * W_out + w] = acc;
}
