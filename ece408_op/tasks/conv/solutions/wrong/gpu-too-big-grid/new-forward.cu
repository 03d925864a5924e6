// Your GPU forward convolution (milestones 3 and final): the course's new-forward.cuh.
//
// The harness compiles this file with nvcc for the GPU it runs on, then launches the kernels
// that launch.py names, with the grid, block and shared memory launch.py gives, on device
// memory the harness owns:
//
//   y  B x M x H_out x W_out   the output, zeroed before your kernels run
//   x  B x C x H x W           the input feature maps
//   k  M x C x K x K           the weights
//   y[b][m][h][w] = sum over c, p, q of x[b][c][h + p][w + q] * k[m][c][p][q]
//
// Declare every kernel extern "C": launch.py names it that way. Several kernels, __constant__
// arrays and workspaces are allowed (see launch.py).

#define TILE_WIDTH 16   // the block is TILE_WIDTH x TILE_WIDTH threads: launch.py's TILE_WIDTH

extern "C" __global__ void forward_kernel(float *y, const float *x, const float *k,
                                          const int B, const int M, const int C,
                                          const int H, const int W, const int K)
{
    const int H_out = H - K + 1;
    const int W_out = W - K + 1;
    const int W_grid = (W_out + TILE_WIDTH - 1) / TILE_WIDTH;   // tiles across the output's width

#define y4d(i3, i2, i1, i0) y[(i3) * (M * H_out * W_out) + (i2) * (H_out * W_out) + (i1) * (W_out) + (i0)]
#define x4d(i3, i2, i1, i0) x[(i3) * (C * H * W) + (i2) * (H * W) + (i1) * (W) + (i0)]
#define k4d(i3, i2, i1, i0) k[(i3) * (C * K * K) + (i2) * (K * K) + (i1) * (K) + (i0)]

    const int b = blockIdx.z;                                        // one image
    const int m = blockIdx.y;                                        // one output feature map
    const int h = (blockIdx.x / W_grid) * TILE_WIDTH + threadIdx.y;  // one output element
    const int w = (blockIdx.x % W_grid) * TILE_WIDTH + threadIdx.x;

    if (h < H_out && w < W_out) {
        float acc = 0.0f;
        for (int c = 0; c < C; c++)
            for (int p = 0; p < K; p++)
                for (int q = 0; q < K; q++)
                    acc += x4d(b, c, h + p, w + q) * k4d(m, c, p, q);
        y4d(b, m, h, w) = acc;
    }

#undef y4d
#undef x4d
#undef k4d
}
