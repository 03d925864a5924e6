"""The course models' block, convolution (+ bias) -> tanh -> 2x2/2 max-pool, in NumPy: the CPU
path of the fused operator, and the float64 reference (with its float32 error bound) that the
CPU path and the fused GPU kernel (``kernels.fused_forward_gpu``) are checked against.

For x (B, C, H, W), a weight k and an optional bias (M,), under a ConvSpec (None: the course's
layer, stride 1, no padding):

    z = conv(x, k) + bias                      B x M x HO x WO
    y[b][m][i][j] = max over p, q < 2 of tanh(z[b][m][2i + p][2j + q])
                                               B x M x HO//2 x WO//2  (an odd last row/column
                                               is dropped, as MXNet's Pooling 'valid' does)

The CPU path pools first and applies the bias and tanh to the pooled values (4x fewer):
max(tanh(a + b)) == tanh(max(a) + b) exactly, since float32 addition of one value and tanh
are both monotone. It runs in chunks of images, so the full-size conv output never exists:
memory stays at one chunk's conv output (about CHUNK_BYTES) whatever the batch.
"""
import threading

import numpy as np

from ..errors import ShapeError
from .cpu import conv2d_forward_cpu, prepare_cpu
from .parallel import over_slabs
from .reference import reference_and_bound
from .spec import output_shape

CHUNK_BYTES = 64 << 20          # conv output per chunk (bounded scratch memory)
_scratch = threading.local()


def pooled_shape(x_shape, k_shape, spec=None):
    """Shape of the fused output: the conv's B x M x HO x WO with HO and WO halved (floor)."""
    b, m, ho, wo = output_shape(x_shape, k_shape, spec)
    if ho < 2 or wo < 2:
        raise ShapeError(f"the convolution's {ho}x{wo} output is too small for a 2x2 max-pool")
    return b, m, ho // 2, wo // 2


def check_bias(bias, k_shape):
    if bias is None:
        return None
    bias = np.ascontiguousarray(bias, dtype=np.float32)
    if bias.shape != (k_shape[0],):
        raise ShapeError(f"bias has shape {bias.shape}, expected ({k_shape[0]},)")
    return bias


def max_pool_2x2(z, out=None, reduce=np.maximum):
    """The 2x2/2 windows of z (B x M x HO x WO) reduced by ``reduce`` (a NumPy binary ufunc,
    default the max), into ``out`` (B x M x HO//2 x WO//2; allocated when None)."""
    if out is None:
        out = np.empty(z.shape[:2] + (z.shape[2] // 2, z.shape[3] // 2), z.dtype)
    ph, pw = out.shape[2], out.shape[3]
    rows = z[:, :, :2 * ph, :2 * pw]
    reduce(rows[:, :, 0::2, 0::2], rows[:, :, 0::2, 1::2], out=out)
    reduce(out, rows[:, :, 1::2, 0::2], out=out)
    reduce(out, rows[:, :, 1::2, 1::2], out=out)
    return out


def tanh_maxpool(z):
    """tanh of the 2x2/2 max-pool of z (tanh is increasing: equal to the max-pool of tanh(z))."""
    return np.tanh(max_pool_2x2(z))


def _scratch_buffer(count):
    """A float32 scratch of ``count`` elements, reused by this thread (its pages faulted once)."""
    held = getattr(_scratch, "array", None)
    if held is None or held.size < count:
        held = _scratch.array = np.empty(count, np.float32)
    return held[:count]


def prepare_fused_cpu(x, k, bias=None):
    """Compile (or load) the kernels of ``conv_tanh_pool_cpu``'s convolution for one chunk, without
    running them (Op Time leaves compilation out)."""
    x1 = np.ascontiguousarray(x[:1], dtype=np.float32)
    k = np.ascontiguousarray(k, dtype=np.float32)
    conv_image = output_shape(x1.shape, k.shape)
    prepare_cpu(x1, k, out=np.empty(conv_image, np.float32))


def conv_tanh_pool_cpu(x, k, bias=None, out=None):
    """The fused layer on the CPU: float32, into ``out`` (allocated when None); see the module doc."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    k = np.ascontiguousarray(k, dtype=np.float32)
    bias = check_bias(bias, k.shape)
    shape = pooled_shape(x.shape, k.shape)
    if out is None:
        out = np.empty(shape, np.float32)
    elif out.shape != shape or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ShapeError(f"out must be a C-contiguous float32 array of shape {shape}")
    b, m = shape[:2]
    if b == 0:
        return out
    conv_image = output_shape((1,) + x.shape[1:], k.shape)
    per_image = int(np.prod(conv_image))
    chunk = max(1, CHUNK_BYTES // (4 * per_image))
    scratch = _scratch_buffer(min(chunk, b) * per_image)
    for start in range(0, b, chunk):
        xs = x[start:start + chunk]
        n = xs.shape[0]
        z = conv2d_forward_cpu(xs, k, out=scratch[:n * per_image].reshape((n,) + conv_image[1:]))
        pooled = out[start:start + n]

        def finish(part, z=z, pooled=pooled):
            max_pool_2x2(z[part], pooled[part])
            if bias is not None:
                pooled[part] += bias.reshape(1, m, 1, 1)
            np.tanh(pooled[part], out=pooled[part])
        over_slabs(pooled, finish, slab_bytes=max(1 << 20, pooled.nbytes // 16))   # every thread pools
    return out


def fused_reference_and_bound(x, k, bias=None, spec=None):
    """(float64 reference, per-element float32 bound) of the fused layer, unfused in float64:
    conv (+ bias), the pool, then tanh. tanh and max are 1-Lipschitz, so the conv's bound
    carries over (the pool takes the largest of its window's); tanh's own float32 rounding
    adds a few units in the last place."""
    z, bound = reference_and_bound(np.asarray(x), np.asarray(k), bias, spec)
    ref = tanh_maxpool(z)
    return ref, max_pool_2x2(bound) + 4 * np.finfo(np.float32).eps * np.abs(ref) + 1e-7
