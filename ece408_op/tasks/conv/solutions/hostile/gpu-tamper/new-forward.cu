// A tampering team: no convolution at all. wipe() writes zeros into x and k, then into y: y = 0 is
// the convolution of the zeros it left in the buffers it was given, so a check against those buffers
// would pass. The grader checks against its own copies of x and k, uploaded after the timed run.

extern "C" __global__ void wipe(float *y, float *x, float *k, long nx, long nk, long ny)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < nx; i += (long)gridDim.x * blockDim.x) x[i] = 0.0f;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < nk; i += (long)gridDim.x * blockDim.x) k[i] = 0.0f;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < ny; i += (long)gridDim.x * blockDim.x) y[i] = 0.0f;
}
