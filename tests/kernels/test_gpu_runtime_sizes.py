"""On a GPU: v8, v9, v13 and v20 with the layer's sizes as a kernel argument (one module per tile) against
the float64 reference on layers of every kind, the same as their per-shape modules ($ECE408_STATIC_SIZES=1),
and one module shared by several layers (skips without a GPU)."""
import numpy as np
import pytest

from ece408_op import kernels
from ece408_op.conv import ConvSpec, reference_and_bound
from ece408_op.kernels.versions.version import STATIC_SIZES_ENV

# (B, C, H, W, M, attributes): padding, stride, dilation, groups, a bias, rectangular, a 1x1, odd sizes
LAYERS = [
    (3, 19, 13, 11, 40, dict(kernel=3, pad=1, no_bias="False")),
    (2, 8, 20, 19, 70, dict(kernel="(3, 5)", stride="(2, 1)", pad="(1, 2)")),
    (4, 12, 15, 15, 12, dict(kernel=3, dilate=2, pad=2)),
    (65, 24, 7, 7, 130, dict(kernel=1)),
    (2, 16, 30, 30, 32, dict(kernel=3, stride=2, pad=1, no_bias="False")),
    (3, 3, 33, 33, 16, dict(kernel=7, stride=2, pad=3)),
    (2, 12, 9, 9, 24, dict(kernel=3, pad=1, num_group=3)),
    (3, 32, 17, 17, 32, dict(kernel=3, pad=1, num_group=32, no_bias="False")),      # depthwise
    (2, 24, 15, 17, 48, dict(kernel=5, stride=2, pad=2, num_group=24)),               # depthwise, multiplier 2
]
DYNAMIC = [8, 9, 13, 20]


def _data(b, c, h, w, m, attrs, seed):
    spec = ConvSpec.from_attrs(num_filter=m, **{k: str(v) for k, v in attrs.items()})
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, c, h, w)).astype(np.float32)
    k = rng.standard_normal(spec.weight_shape(c)).astype(np.float32)
    bias = None if spec.no_bias else rng.standard_normal(m).astype(np.float32)
    return spec, x, k, bias


@pytest.mark.parametrize("static", [False, True], ids=["sizes at run time", "sizes as #defines"])
@pytest.mark.parametrize("version", DYNAMIC, ids=lambda v: f"v{v}")
@pytest.mark.parametrize("layer", LAYERS, ids=lambda g: "B%dC%dH%dW%dM%d" % g[:5] + str(g[5]))
def test_dynamic_versions_match_reference_either_way(gpu, monkeypatch, layer, version, static):
    if static:
        monkeypatch.setenv(STATIC_SIZES_ENV, "1")
    else:
        monkeypatch.delenv(STATIC_SIZES_ENV, raising=False)
    kernels.forget_layer_calls()
    spec, x, k, bias = _data(*layer, seed=version)
    shape = kernels.ConvShape.of(x.shape, k.shape, spec)
    if kernels.VERSIONS[version].unsupported(shape) or kernels.VERSIONS[version].available():
        pytest.skip("the version does not run this layer here")
    out = np.full(spec.output_shape(x.shape), np.nan, np.float32)
    try:
        y, _ = kernels.conv2d_forward_gpu(x, k, bias, spec, out=out, version=version)
    finally:
        kernels.forget_layer_calls()
    with gpu.active():
        plan = kernels.plan_for(gpu, shape, version)
    assert bool(plan.dims) is (not static)
    ref, bound = reference_and_bound(x, k, bias, spec)
    bad = ~(np.abs(y - ref) <= bound)
    assert not bad.any(), f"v{version} {layer[5]}: {int(bad.sum())} of {bad.size} off, first at {np.argwhere(bad)[0]}"


def test_one_module_runs_several_layers(gpu, monkeypatch):
    monkeypatch.delenv(STATIC_SIZES_ENV, raising=False)
    tile = {"V9_WP": 4, "V9_WF": 2, "V9_MI": 2, "V9_NI": 4}
    shapes = [kernels.ConvShape(64, 28, 28, 64, 3, PH=1, PW=1), kernels.ConvShape(256, 14, 14, 512, 1, SH=2, SW=2)]
    with gpu.active():
        plans = [kernels.plan_for(gpu, s, 9, tile) for s in shapes]
    assert plans[0] is not plans[1] and plans[0].kernels[0] is plans[1].kernels[0]     # one module, two plans


def test_a_layer_switches_to_its_specialised_module_once_built(gpu, monkeypatch, tmp_path):
    """The first plan takes the sizes at run time; the module with the layer's sizes as #defines is built in the
    background and the next call runs it; a new LayerCall (another process, the cache folder) starts with it."""
    import pycuda.gpuarray as gpuarray
    monkeypatch.setenv("ECE408_GPU_CACHE", str(tmp_path))
    monkeypatch.delenv("ECE408_CUBIN_CACHE", raising=False)
    monkeypatch.delenv(STATIC_SIZES_ENV, raising=False)
    monkeypatch.delenv("ECE408_SPECIALISE", raising=False)
    kernels.forget_layer_calls()
    spec, x, k, bias = _data(*LAYERS[0], seed=5)
    ref, bound = reference_and_bound(x, k, bias, spec)
    with gpu.active():
        xd, kd, bd = gpuarray.to_gpu(x), gpuarray.to_gpu(k), gpuarray.to_gpu(bias)
        yd = gpuarray.to_gpu(np.full(spec.output_shape(x.shape), np.nan, np.float32))
    args = (int(yd.gpudata), int(xd.gpudata), int(kd.gpudata), x.shape, k.shape, int(bd.gpudata), spec, 9)
    try:
        kernels.conv2d_forward_async(*args)
        call = kernels.layer_call(x.shape, k.shape, spec, True, 9)
        assert call.plan.dims                                       # sizes at run time first
        assert kernels.wait_for_specialised(300) and call.upgrade is True
        for _ in range(2):
            kernels.conv2d_forward_async(*args)
        assert not call.plan.dims and call.plan.defines["CONV_DYNAMIC"] == 0 and call.upgrade is None
        with gpu.active():
            gpu.synchronize()
            y = yd.get()
        assert (np.abs(y - ref) <= bound).all()
        kernels.forget_layer_calls()
        assert not kernels.layer_call(x.shape, k.shape, spec, True, 9).plan.dims       # built before: at once
    finally:
        kernels.forget_layer_calls()
