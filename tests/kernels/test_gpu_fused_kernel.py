"""The fused convolution (+ bias) + tanh + 2x2 max-pool against the float64 reference (skips
cleanly without a GPU): the one-pass kernel, the two-pass fallback, the device-pointer entry point."""
import numpy as np
import pytest

from ece408_op import kernels
from ece408_op.conv import ConvSpec, fused_reference_and_bound
from ece408_op.errors import ShapeError

# (B, C, H, W, M, attrs): the course models' three fused layers (ece408-high, 2018 and 2019 conv1),
# odd convolution outputs (a dropped last row/column), bias, padding, several channels, a strip that
# overhangs the row, and layers only the two-pass path runs (stride, many channels).
LAYERS = [
    (200, 1, 28, 28, 50, dict(kernel=5)),
    (3, 1, 64, 64, 6, dict(kernel=5, no_bias="False")),
    (129, 1, 70, 70, 12, dict(kernel=5)),
    (4, 1, 11, 9, 7, dict(kernel=3)),                  # 9x7 output: row 8 and column 6 dropped
    (2, 3, 17, 13, 5, dict(kernel=3, pad=1, no_bias="False")),
    (3, 2, 14, 22, 9, dict(kernel=5)),                 # 10x18: 9 pooled columns, strips of 2 overhang
    (2, 4, 10, 10, 3, dict(kernel=2)),
    (2, 6, 30, 30, 16, dict(kernel=5, no_bias="False")),   # C=6: strips too large, two-pass
    (2, 3, 20, 20, 8, dict(kernel=3, stride=2, pad=1)),    # stride 2: two-pass
    (70000, 1, 8, 8, 3, dict(kernel=3)),               # more images than a grid's z dimension
]


def _data(b, c, h, w, m, attrs, seed):
    spec = ConvSpec.from_attrs(num_filter=m, **{k: str(v) for k, v in attrs.items()})
    rng = np.random.default_rng(seed)
    x = rng.random((b, c, h, w)).astype(np.float32)
    k = (rng.standard_normal(spec.weight_shape(c)) * 0.3).astype(np.float32)
    bias = None if spec.no_bias else (rng.standard_normal(m) * 0.5).astype(np.float32)
    return spec, x, k, bias


def _check(y, x, k, bias, spec, what):
    images = np.unique(np.r_[0, len(x) - 1, np.random.default_rng(1).integers(0, len(x), 20)])
    ref, bound = fused_reference_and_bound(x[images], k, bias, spec)
    got = y[images].astype(np.float64)
    bad = ~(np.abs(got - ref) <= bound)
    assert not bad.any(), f"{what}: {int(bad.sum())} of {bad.size} off, first at {np.argwhere(bad)[0]}"


@pytest.mark.parametrize("version", ["auto", "fused", 8, 9, 6])
@pytest.mark.parametrize("layer", LAYERS, ids=lambda g: "B%dC%dH%dW%dM%d" % g[:5] + str(g[5]))
def test_fused_matches_reference(gpu, version, layer):
    spec, x, k, bias = _data(*layer, seed=7)
    shape = kernels.ConvShape.of(x.shape, k.shape, spec)
    if version == "fused" and kernels.FUSED.reason(shape):
        with pytest.raises(ShapeError, match="fused kernel cannot run"):
            kernels.fused_forward_gpu(x, k, bias, spec, version=version)
        return
    out = np.full(kernels.pooled_shape(x.shape, k.shape, spec), np.nan, np.float32)
    y, seconds = kernels.fused_forward_gpu(x, k, bias, spec, out=out, version=version)
    assert y is out and seconds > 0 and y.shape == (len(x), shape.M, shape.HO // 2, shape.WO // 2)
    _check(y, x, k, bias, spec, f"fused {version} on {layer}")


def test_the_course_models_blocks_take_the_one_pass_kernel(gpu):
    for shape in (kernels.ConvShape(1, 28, 28, 50, 5), kernels.ConvShape(1, 64, 64, 6, 5, BIAS=1),
                  kernels.ConvShape(1, 70, 70, 12, 5)):
        assert kernels.FUSED.reason(shape) is None
        with gpu.active():
            assert kernels.fused_plan_for(gpu, shape).label == "fused_forward"
    with gpu.active():     # several channels: the two-pass path with the default convolution
        plan = kernels.fused_plan_for(gpu, kernels.ConvShape(6, 30, 30, 16, 5))
    assert plan.label.startswith("fused_forward (v") and "tanh_pool" in plan.label


def test_fused_device_pointers(gpu):
    import pycuda.driver as cuda
    spec, x, k, bias = _data(5, 1, 28, 28, 50, dict(kernel=5, no_bias="False"), 3)
    y_shape = kernels.pooled_shape(x.shape, k.shape, spec)
    with gpu.active():
        xd, kd, bd = cuda.to_device(x), cuda.to_device(k), cuda.to_device(bias)
        yd = cuda.mem_alloc(4 * int(np.prod(y_shape)))
    seconds = kernels.fused_forward_device(int(yd), int(xd), int(kd), x.shape, k.shape, int(bd), spec)
    with gpu.active():
        y = cuda.from_device(yd, y_shape, np.float32)
        for allocation in (xd, kd, bd, yd):
            allocation.free()
    assert seconds > 0
    _check(y, x, k, bias, spec, "fused, device pointers")


def test_fused_rejects_bad_input(gpu):
    spec, x, k, bias = _data(2, 1, 28, 28, 50, dict(kernel=5), 4)
    # bad input: an out array of the convolution's shape instead of the pooled one
    with pytest.raises(ShapeError, match="fused layer's output"):
        kernels.fused_forward_gpu(x, k, out=np.empty((2, 50, 24, 24), np.float32))
    # bad input: a 1x1 convolution output has no 2x2 window
    with pytest.raises(ShapeError, match="too small for a 2x2 max-pool"):
        kernels.fused_forward_gpu(x[:, :, :5, :5], k)
    # bad input: a version that does not exist
    with pytest.raises(Exception, match="unknown kernel"):
        kernels.fused_forward_gpu(x, k, version="v99")
