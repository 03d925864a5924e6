"""Team kernels for the GPU tests: the template's kernel with one hostile twist each."""
from ece408_op.team import project

TEMPLATE_CU = (project.TEMPLATE / "new-forward.cu").read_text()
TEMPLATE_LAUNCH = (project.TEMPLATE / "launch.py").read_text()

# every thread 0 of the first block prints the course's lines: they reach the transcript only
PRINTF_CU = "#include <cstdio>\n" + TEMPLATE_CU.replace(
    "    if (h < H_out && w < W_out) {",
    '    if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0 && threadIdx.y == 0)\n'
    '        printf("Op Time: 0.000001\\nCorrectness: 0.99 Model: ece408-high\\n");\n'
    "    if (h < H_out && w < W_out) {")

# the first call computes and keeps its output in a __device__ buffer; every later call replays it.
# The buffer holds a 1,000-image course layer's whole y (28.8 M values): with a smaller one the images
# past it were computed, and a check whose 8 random images all fell there passed that run (about one
# final submission in 16, 0.71^8, failed on a later fresh run instead of the first)
REPLAY_CU = TEMPLATE_CU.replace('#define TILE_WIDTH 16', '''#define TILE_WIDTH 16
__device__ float kept[1 << 25];
__device__ int calls;

extern "C" __global__ void count_call() { calls += 1; }''').replace(
    "    if (h < H_out && w < W_out) {",
    "    const long at = ((long)(b * M + m) * H_out + h) * W_out + w;\n"
    "    if (calls > 0 && h < H_out && w < W_out && at < (1 << 25)) { y[at] = kept[at]; return; }\n"
    "    if (h < H_out && w < W_out) {").replace(
    "        y4d(b, m, h, w) = acc;", "        y4d(b, m, h, w) = acc;\n        if (at < (1 << 25)) kept[at] = acc;")
REPLAY_LAUNCH = TEMPLATE_LAUNCH.replace(
    "               args=(\"y\", \"x\", \"k\", B, M, C, H, W, K)),\n    ]",
    "               args=(\"y\", \"x\", \"k\", B, M, C, H, W, K)),\n        kernel(\"count_call\", grid=(1,), block=(1,)),\n    ]")

TOO_MUCH_SHARED = TEMPLATE_LAUNCH.replace("block=(TILE_WIDTH, TILE_WIDTH, 1),", "block=(TILE_WIDTH, TILE_WIDTH, 1), shared=400 * 1024,")
TOO_BIG_GRID = TEMPLATE_LAUNCH.replace("grid=(tiles, M, B)", "grid=(tiles, 70000, B)")
NO_SUCH_KERNEL = TEMPLATE_LAUNCH.replace('kernel("forward_kernel"', 'kernel("forward_kernal"')
TOO_MANY_THREADS = TEMPLATE_LAUNCH.replace("block=(TILE_WIDTH, TILE_WIDTH, 1)", "block=(32, 32, 1)").replace(
    "TILE_WIDTH = 16", "TILE_WIDTH = 32")

# computes only image 0 of every call (a team that "foresees" which images are checked and computes
# those): the grader's kernel checks every value, so any skipped image fails
ONE_IMAGE_CU = TEMPLATE_CU.replace("    if (h < H_out && w < W_out) {", "    if (b == 0 && h < H_out && w < W_out) {")

# writes zeros into x and k, then y = 0: consistent with what it left in the buffers it was given,
# wrong against the grader's own copies (uploaded after the timed run)
TAMPER_CU = TEMPLATE_CU.replace("#define TILE_WIDTH 16", '''#define TILE_WIDTH 16
extern "C" __global__ void wipe(float *y, float *x, float *k, long nx, long nk, long ny)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < nx; i += (long)gridDim.x * blockDim.x) x[i] = 0.0f;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < nk; i += (long)gridDim.x * blockDim.x) k[i] = 0.0f;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < ny; i += (long)gridDim.x * blockDim.x) y[i] = 0.0f;
}''')
TAMPER_LAUNCH = """
from ece408_op.team import i64, kernel


def launch(B, M, C, H, W, K):
    n_y = B * M * (H - K + 1) * (W - K + 1)
    return [kernel("wipe", grid=(64,), block=(256,), args=("y", "x", "k", i64(B * C * H * W), i64(M * C * K * K),
                                                             i64(n_y)))]
"""
