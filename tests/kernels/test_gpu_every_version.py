"""Every GPU kernel version against the float64 NumPy reference (skips cleanly without a GPU)."""
import threading

import numpy as np
import pytest

from suitekit import check_against_reference
from ece408_op import kernels
from ece408_op.errors import Ece408Error, ShapeError


# (B, C, H, W, M, K): B=1 and B=10000, C=1 and C>1, K=1/3/5/7, K=H, odd H/W, M not a multiple of
# the tile (16), of MB (4) or of anything.
SHAPES = [
    (10000, 1, 28, 28, 50, 5), (1, 1, 28, 28, 50, 5), (100, 1, 28, 28, 50, 5), (3, 1, 28, 28, 1, 5),
    (2, 3, 9, 11, 7, 3), (1, 1, 5, 5, 1, 5), (4, 2, 6, 6, 3, 6), (5, 1, 7, 13, 4, 1), (1, 4, 8, 8, 9, 1),
    (2, 6, 30, 30, 16, 5), (1, 12, 33, 33, 24, 5), (3, 1, 64, 64, 6, 5), (2, 2, 15, 17, 5, 7),
    (1, 3, 7, 7, 2, 7), (6, 1, 10, 3, 5, 3), (2, 5, 12, 12, 13, 4), (1, 1, 1, 1, 3, 1), (7, 2, 11, 9, 1, 2),
    (2, 1, 70, 70, 12, 5), (1, 8, 16, 16, 33, 3), (3, 3, 4, 4, 2, 4), (129, 1, 28, 28, 50, 5),
    (2, 16, 9, 9, 8, 3), (1, 2, 31, 29, 11, 6), (9, 1, 29, 31, 17, 7), (2, 1, 19, 19, 50, 3),
    (70000, 1, 8, 8, 3, 3),            # more images than a grid's z dimension (65535)
    (2, 3, 10, 10, 7, 3),              # y rows a multiple of 4 wide, x rows not: v7's 16-byte stores only
]
SAMPLE = 40                            # images checked per large batch


def autotune_tiles(number):
    """The autotuner's tile choices of a version besides its default."""
    return [t for t in kernels.VERSIONS[number].tune_tiles if t]


def _data(shape, seed):
    b, c, h, w, m, ksize = shape
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (b, c, h, w)).astype(np.float32)       # pixel-like, never all zero
    k = (rng.standard_normal((m, c, ksize, ksize)) * 0.01).astype(np.float32)
    return x, k


def _sample(b, seed):
    if b <= SAMPLE:
        return np.arange(b)
    return np.unique(np.concatenate([[0, b - 1], np.random.default_rng(seed).integers(0, b, SAMPLE)]))


def test_every_version_runs_on_at_least_25_of_the_shapes():
    for number in kernels.VERSIONS:
        if number in (12, 13):        # 3x3 stride-1 layers of 16 channels or more only: WINOGRAD below;
            continue                  # depthwise (and one-channel) layers only: DEPTHWISE below
        if "float32" not in kernels.VERSIONS[number].dtypes:
            continue                  # half-precision data (v21, v22): tests/pytorch/test_gpu_half_precision.py
        runs = [s for s in SHAPES if kernels.VERSIONS[number].unsupported(kernels.ConvShape(*s[1:])) is None]
        assert len(runs) >= 25, f"v{number} supports only {len(runs)} test shapes"


def _version_id(number):
    return f"v{number}"


def _require_available(version):
    """Skip where a version's library (v18 cuBLAS, v19 cuFFT) is not on this machine."""
    why = kernels.VERSIONS[version].available()
    if why:
        pytest.skip(why)


def check_own_model(version, y, x, k, bias=None, spec=None, what="kernel"):
    """v17 (FP16) and v19 (FFT) against their error models (conv/bounds.py): elementwise within the model's
    bound, and for FP16 the RMS error within the random-walk model as well."""
    from ece408_op.conv import bounds
    if version == 17:
        errors = bounds.fp16_errors(y, x, k, bias, spec)
        assert errors["rms_vs_model"] <= 1.0, f"{what}: RMS error {errors['rms_vs_model']:.2f}x the FP16 model"
    else:
        inner = kernels.VERSIONS[version].inner(kernels.ConvShape.of(x.shape, k.shape, spec))
        errors = bounds.fft_errors(y, x, k, bias, spec, kernels.VERSIONS[version].size(inner))
    assert errors["vs_bound"] <= 1.0, f"{what}: error up to {errors['vs_bound']:.3g}x its model's bound"
    return errors


@pytest.mark.parametrize("version", sorted(kernels.VERSIONS), ids=_version_id)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B%dC%dH%dW%dM%dK%d" % s)
def test_version_matches_reference(gpu, version, shape):
    reason = kernels.VERSIONS[version].unsupported(kernels.ConvShape(*shape[1:]))
    if reason:
        with pytest.raises(ShapeError):
            kernels.choose_version(version, kernels.ConvShape(*shape[1:]))
        return
    _require_available(version)
    x, k = _data(shape, seed=sum(shape) + version)
    out = np.full((shape[0], shape[4], shape[2] - shape[5] + 1, shape[3] - shape[5] + 1), np.nan, np.float32)
    y, seconds = kernels.conv2d_forward_gpu(x, k, out=out, version=version)
    assert y is out and seconds > 0
    images = _sample(shape[0], version)
    if kernels.VERSIONS[version].own_error_model:
        check_own_model(version, y[images], x[images], k, what=f"v{version} on {shape}")
    else:
        check_against_reference(y, x, k, images, what=f"v{version} on {shape}")


# General layers (ConvSpec attributes): padding, stride, dilation, groups (depthwise too),
# rectangular kernels, bias; batch, C, H, W, M chosen so nothing is a multiple of a tile.
GENERAL = [
    (5, 3, 17, 13, 7, dict(kernel=3, pad=1)),
    (3, 4, 20, 19, 6, dict(kernel="(3, 5)", stride="(2, 1)", pad="(1, 2)", no_bias="False")),
    (2, 6, 15, 15, 9, dict(kernel=3, dilate=2, num_group=3)),
    (4, 8, 12, 11, 8, dict(kernel=3, pad=1, num_group=8, no_bias="False")),            # depthwise
    (2, 16, 30, 30, 32, dict(kernel=3, stride=2, pad=1, no_bias="False")),             # ResNet-like
    (3, 1, 28, 28, 50, dict(kernel=5, pad=2, no_bias="False")),                         # course + pad + bias
    (2, 3, 32, 32, 16, dict(kernel=7, stride=2, pad=3)),                                # a stem
    (6, 2, 9, 9, 5, dict(kernel=1, stride=3)),
    (1, 4, 6, 10, 4, dict(kernel=5, pad=(2, 0), dilate=(1, 2), num_group=2)),
    (70000, 1, 8, 8, 3, dict(kernel=3, pad=1, no_bias="False")),                        # more images than grid z
    (2, 3, 24, 24, 64, dict(kernel=3, pad=1, no_bias="False")),                       # VGG's first, small
]


def _general_data(b, c, h, w, m, attrs, seed):
    from ece408_op.conv import ConvSpec
    spec = ConvSpec.from_attrs(num_filter=m, **{k: str(v) for k, v in attrs.items()})
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (b, c, h, w)).astype(np.float32)
    k = (rng.standard_normal(spec.weight_shape(c)) * 0.01).astype(np.float32)
    bias = None if spec.no_bias else rng.standard_normal(m).astype(np.float32)
    return spec, x, k, bias


def test_general_layers_are_run_or_refused_by_every_version():
    for b, c, h, w, m, attrs in GENERAL:
        spec, x, k, _ = _general_data(1, c, h, w, m, attrs, 0)
        shape = kernels.ConvShape.of(x.shape, k.shape, spec)
        for number in (1, 5, 6):
            assert kernels.VERSIONS[number].unsupported(shape) is None, (number, attrs)
        assert kernels.VERSIONS[kernels.default_version(shape)].unsupported(shape) is None
        for number, version in kernels.VERSIONS.items():
            reason = version.unsupported(shape)
            assert reason is None or len(reason) > 10
            if reason is None and not version.general:     # a course-style version: only padding and bias
                assert shape.course_reason() is None


@pytest.mark.parametrize("version", sorted(kernels.VERSIONS), ids=_version_id)
@pytest.mark.parametrize("layer", GENERAL, ids=[str(g[5]) for g in GENERAL])
def test_version_matches_reference_on_general_layers(gpu, version, layer):
    from ece408_op.conv import reference_and_bound
    spec, x, k, bias = _general_data(*layer, seed=version)
    shape = kernels.ConvShape.of(x.shape, k.shape, spec)
    reason = kernels.VERSIONS[version].unsupported(shape)
    if reason:
        with pytest.raises(ShapeError, match="cannot run this layer"):
            kernels.choose_version(version, shape)
        return
    _require_available(version)
    out = np.full(spec.output_shape(x.shape), np.nan, np.float32)
    y, _ = kernels.conv2d_forward_gpu(x, k, bias, spec, out=out, version=version)
    images = _sample(len(x), version)
    if kernels.VERSIONS[version].own_error_model:
        check_own_model(version, y[images], x[images], k, bias, spec, what=f"v{version} {layer[5]}")
        return
    ref, bound = reference_and_bound(x[images], k, bias, spec)
    bad = ~(np.abs(y[images] - ref) <= bound)
    assert not bad.any(), f"v{version} {layer[5]}: {int(bad.sum())} of {bad.size} off, first at {np.argwhere(bad)[0]}"


def test_accumulate_adds_to_out(gpu):
    x, k = _data((3, 2, 9, 9, 5, 3), 1)
    base = np.random.default_rng(2).standard_normal((3, 5, 7, 7)).astype(np.float32)
    y, _ = kernels.conv2d_forward_gpu(x, k, out=base.copy(), accumulate=True)
    check_against_reference(y - base, x, k, what="accumulate")


def test_device_pointer_path_and_add(gpu):
    import pycuda.driver as cuda
    x, k = _data((4, 3, 12, 12, 6, 5), 3)
    y_shape = (4, 6, 8, 8)
    with gpu.active():
        xd, kd, yd = cuda.to_device(x), cuda.to_device(k), cuda.mem_alloc(4 * int(np.prod(y_shape)))
        cuda.memcpy_htod(yd, np.ones(y_shape, np.float32))
    kernels.conv2d_forward_device(int(yd), int(xd), int(kd), x.shape, k.shape, accumulate=True)
    with gpu.active():
        y = cuda.from_device(yd, y_shape, np.float32)
        for allocation in (xd, kd, yd):
            allocation.free()
    check_against_reference(y - 1.0, x, k, what="device pointers, accumulate")


def test_concurrent_calls_with_different_inputs_and_shapes(gpu):
    # Each thread its own layer and batch (the staging buffer grows and is reused between them);
    # every result is checked, so a thread reading another's output fails.
    layers = [(64, 1, 28, 28, 50, 5), (3000, 1, 28, 28, 50, 5), (40, 3, 17, 13, 7, 3), (500, 1, 64, 64, 6, 5),
              (25, 6, 30, 30, 16, 5), (1200, 1, 28, 28, 50, 5), (7, 2, 9, 9, 5, 1), (90, 12, 33, 33, 24, 5)]
    inputs = [_data(layer, 100 + i) for i, layer in enumerate(layers)]
    results, errors = {}, []
    start = threading.Barrier(len(layers))

    def work(i):
        try:
            start.wait()
            for _ in range(3):
                x, k = inputs[i]
                results[i] = kernels.conv2d_forward_gpu(x, k)[0].copy()
                check_against_reference(results[i], x, k, _sample(len(x), i), what=f"thread {i} {layers[i]}")
        except BaseException as exc:       # noqa: BLE001  reported below (pytest.fail raises BaseException)
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(layers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(results) == list(range(len(layers)))


def test_plans_and_modules_are_keyed_by_their_defines(gpu):
    # Two v7 tunings of one shape: two modules, two plans, both correct.
    shape = kernels.ConvShape(1, 28, 28, 50, 5)
    x, k = _data((200, 1, 28, 28, 50, 5), 9)
    import pycuda.gpuarray as gpuarray
    with gpu.active():
        tuned = kernels.plan_for(gpu, shape, 7)
        other = kernels.plan_for(gpu, shape, 7, {"THREADS": 128, "UNROLL_M": 2})
        assert tuned is kernels.plan_for(gpu, shape, 7) and other is not tuned
        assert other.defines["V7_THREADS"] == 128 and tuned.defines["V7_THREADS"] == 256
        assert other.kernels[0] is not tuned.kernels[0]
        xd, kd = gpuarray.to_gpu(x), gpuarray.to_gpu(k)
        for plan in (tuned, other):
            yd = gpuarray.empty((200, 50, 24, 24), np.float32)
            yd.fill(np.nan)
            plan.forward(int(yd.gpudata), int(xd.gpudata), int(kd.gpudata), 0, 200)
            check_against_reference(yd.get(), x, k, what=f"v7 with {plan.defines['V7_THREADS']} threads")
            del yd
        del xd, kd


@pytest.mark.serial                                 # the whole device's memory in use: alone (gpu_alone)
def test_200_forwards_do_not_grow_device_memory(gpu_alone):
    x, k = _data((1000, 1, 28, 28, 50, 5), 5)
    kernels.conv2d_forward_gpu(x, k)                # allocate, compile
    before = gpu_alone.memory_in_use()
    for _ in range(200):
        kernels.conv2d_forward_gpu(x, k)
    assert gpu_alone.memory_in_use() == before


def test_default_is_the_preferred_supported_version():
    assert kernels.default_version(kernels.ConvShape(1, 28, 28, 50, 5)) == 7
    big = kernels.ConvShape(64, 32, 32, 128, 5)     # weights far beyond constant memory
    assert kernels.default_version(big) == 8
    many = kernels.ConvShape(6, 30, 30, 16, 5)      # v7 runs it, but its strips do not all fit: v10
    assert kernels.VERSIONS[7].unsupported(many) is None and kernels.default_version(many) == 10


# Data with full float32 mantissas and both signs (pixel-like integers are exact in TF32's high part
# and would hide an error in splitting x): the 3xTF32 versions (v9, v11) must stay inside the float32 bound.
ACCURACY = [
    (3, 6, 30, 30, 16, dict(kernel=5)), (2, 12, 33, 33, 24, dict(kernel=5)),
    (2, 64, 14, 14, 72, dict(kernel=3, pad=1, no_bias="False")), (2, 96, 9, 9, 40, dict(kernel=3, stride=2, pad=1)),
    (3, 1, 28, 28, 50, dict(kernel=5)), (2, 8, 11, 13, 8, dict(kernel=1)), (2, 4, 10, 10, 12, dict(kernel=7, pad=3)),
]


@pytest.mark.parametrize("version", [8, 18] + [n for n, v in sorted(kernels.VERSIONS.items())
                                                if not v.exact and not v.own_error_model], ids=_version_id)
@pytest.mark.parametrize("scale", [1.0, 1e6])
@pytest.mark.parametrize("layer", ACCURACY, ids=lambda g: "C%dM%d" % (g[1], g[4]) if isinstance(g, tuple) else str(g))
def test_gemm_versions_keep_float32_accuracy_on_full_mantissas(gpu, version, scale, layer):
    from ece408_op.conv import ConvSpec, reference_and_bound
    b, c, h, w, m, attrs = layer
    spec = ConvSpec.from_attrs(num_filter=m, **{k: str(v) for k, v in attrs.items()})
    rng = np.random.default_rng(version + c)
    x = (rng.standard_normal((b, c, h, w)) * scale).astype(np.float32)
    k = (rng.standard_normal(spec.weight_shape(c)) / np.sqrt(c * 9)).astype(np.float32)
    bias = None if spec.no_bias else (rng.standard_normal(m) * scale).astype(np.float32)
    reason = kernels.VERSIONS[version].unsupported(kernels.ConvShape.of(x.shape, k.shape, spec))
    if reason:
        pytest.skip(reason)
    _require_available(version)
    y, _ = kernels.conv2d_forward_gpu(x, k, bias, spec, version=version)
    ref, bound = reference_and_bound(x, k, bias, spec)
    ratio = np.abs(y - ref) / bound
    assert ratio.max() <= 1.0, f"v{version}: error up to {ratio.max():.2f}x the float32 bound"


@pytest.mark.parametrize("text,want", [("auto", None), ("3", 3), ("v4", 4), ("implicit", 6), ("V7", 7)])
def test_parse_version(text, want):
    assert kernels.parse_version(text) == want


def test_parse_version_rejects_unknown():
    # bad input: a kernel version that does not exist
    with pytest.raises(Ece408Error, match="unknown kernel"):
        kernels.parse_version("v99")


def test_profile_is_held_by_the_device(gpu):
    x, k = _data((10, 1, 28, 28, 50, 5), 6)
    with gpu.profiling() as profile:
        kernels.conv2d_forward_gpu(x, k, version=4)
    kernels.conv2d_forward_gpu(x, k, version=4)          # outside the block: not recorded
    assert gpu.profile is None
    assert len(profile.samples["conv_forward v4 register"]) == 1
    assert {"[CUDA memcpy HtoD] x, k", "[CUDA memcpy DtoH] y", "[host copy] y -> caller"} <= set(profile.samples)


def test_profile_table_format():
    profile = kernels.Profile()
    profile.add("conv_forward v7 (strip)", 0.0004)
    profile.add("conv_forward v7 (strip)", 0.0006)
    profile.add("[CUDA memcpy DtoH] y", 0.03)
    lines = profile.table().splitlines()
    assert lines[0].split() == ["Time(%)", "Cum(%)", "Time", "Calls", "Avg", "Min", "Max", "Name"]
    assert lines[1].endswith("[CUDA memcpy DtoH] y") and "96.77%" in lines[1]
    assert "2" in lines[2].split() and "500.000us" in lines[2].replace(" ", "")


# v12 (Winograd F(4x4, 3x3)): 3x3 stride-1 layers of 16 channels or more; output planes whose sides are
# and are not multiples of the 4x4 tile, padding 0, 1 and uneven, a bias, ResNet-18's stride-1 layers.
WINOGRAD = [
    (3, 16, 9, 11, 5, dict(kernel=3, pad=1)), (5, 32, 10, 10, 40, dict(kernel=3)),
    (3, 20, 13, 6, 7, dict(kernel=3, pad="(1, 0)", no_bias="False")), (2, 64, 56, 56, 64, dict(kernel=3, pad=1)),
    (4, 128, 28, 28, 128, dict(kernel=3, pad=1, no_bias="False")), (2, 256, 14, 14, 256, dict(kernel=3, pad=1)),
    (2, 512, 7, 7, 512, dict(kernel=3, pad=1, no_bias="False")), (700, 16, 6, 6, 3, dict(kernel=3, pad=1)),
]


def test_winograd_runs_its_layers_and_refuses_the_rest():
    v12 = kernels.VERSIONS[12]
    for b, c, h, w, m, attrs in WINOGRAD:
        spec, x, k, _ = _general_data(1, c, h, w, m, attrs, 0)
        assert v12.unsupported(kernels.ConvShape.of(x.shape, k.shape, spec)) is None, attrs
    assert "3x3" in v12.unsupported(kernels.ConvShape(64, 56, 56, 128, 3, 3, 2, 2, 1, 1))      # stride 2
    assert "3x3" in v12.unsupported(kernels.ConvShape(64, 28, 28, 64, 5))
    assert "channels" in v12.unsupported(kernels.ConvShape(3, 224, 224, 64, 3, PH=1, PW=1))   # VGG's first
    runs = [s for s in SHAPES if v12.unsupported(kernels.ConvShape(*s[1:])) is None]
    assert runs == [s for s in SHAPES if s[1] >= 16 and s[5] == 3] != []


@pytest.mark.parametrize("gemm", [8, 9])
@pytest.mark.parametrize("layer", WINOGRAD, ids=lambda g: "B%dC%dH%dW%dM%d" % g[:5] + str(g[5]))
def test_winograd_matches_reference(gpu, gemm, layer):
    from ece408_op.conv import reference_and_bound
    spec, x, k, bias = _general_data(*layer, seed=gemm)
    x = x / 255 - 0.5                                        # full mantissas, both signs
    shape = kernels.ConvShape.of(x.shape, k.shape, spec)
    import pycuda.gpuarray as gpuarray
    with gpu.active():
        plan = kernels.plan_for(gpu, shape, 12, {"V12_GEMM": gemm})
        xd, kd = gpuarray.to_gpu(x), gpuarray.to_gpu(k)
        bias_d = gpuarray.to_gpu(bias) if bias is not None else None     # (held until the forward is done)
        bd = int(bias_d.gpudata) if bias_d is not None else 0
        yd = gpuarray.empty(spec.output_shape(x.shape), np.float32)
        yd.fill(np.nan)
        plan.forward(int(yd.gpudata), int(xd.gpudata), int(kd.gpudata), bd, len(x))
        y = yd.get()
        assert plan.winograd_gemm.version.number == gemm
        assert kernels.plan_for(gpu, shape, 12, {"V12_GEMM": gemm, "V12_CHUNK_MB": 1}) is not plan   # its own plan
    images = _sample(len(x), gemm)
    ref, bound = reference_and_bound(x[images], k, bias, spec)
    ratio = np.abs(y[images] - ref) / bound
    assert ratio.max() <= 0.25, f"v12 (GEMM v{gemm}) {layer}: error up to {ratio.max():.3f}x the float32 bound"


def test_winograd_in_chunks_of_images(gpu, monkeypatch):
    # Chunks of 3 images: 10 images in 4 chunks, each at its own offset.
    v12 = kernels.VERSIONS[12]
    spec, x, k, bias = _general_data(10, 32, 12, 12, 24, dict(kernel=3, pad=1, no_bias="False"), 3)
    inner = kernels.ConvShape.of(x.shape, k.shape, spec)
    per_image = v12.POINTS * 9 * (32 + 24) * 4                     # 3 x 3 tiles of 36 points, C + M planes
    assert v12.images_per_chunk(inner, 10000, {"V12_CHUNK_MB": 1}) == (1 << 20) // per_image
    assert v12.images_per_chunk(inner, 10, {"V12_CHUNK_MB": 2}) == 10
    monkeypatch.setattr(type(v12), "images_per_chunk", lambda self, inner, batch, overrides=None: 3)
    y, _ = kernels.conv2d_forward_gpu(x, k, bias, spec, version=12)
    from ece408_op.conv import reference_and_bound
    ref, bound = reference_and_bound(x, k, bias, spec)
    assert (np.abs(y - ref) <= bound).all()


def test_winograd_error_follows_the_tile_not_the_window(gpu):
    # Why v12 is never a default: zero 3x3 windows inside tiles with large values (suitekit's case).
    from suitekit import striped_winograd_case
    spec, x, k, ref, bound = striped_winograd_case()
    direct, _ = kernels.conv2d_forward_gpu(x, k, None, spec, version=8)
    wino, _ = kernels.conv2d_forward_gpu(x, k, None, spec, version=12)
    assert (np.abs(direct - ref) <= bound).all()
    assert (np.abs(wino - ref) > bound).any()
    assert np.abs(wino - ref).max() <= 1e-5 * np.abs(ref).max()


# v13 (depthwise): one input channel per group, with padding, stride, dilation, a bias, a channel
# multiplier, rectangular kernels, rows that are and are not a multiple of its 4 outputs, one channel.
DEPTHWISE = [
    (3, 32, 28, 28, 32, dict(kernel=3, pad=1, num_group=32)), (2, 24, 15, 17, 24, dict(kernel=3, stride=2, pad=1, num_group=24)),
    (2, 16, 14, 14, 32, dict(kernel=3, pad=1, num_group=16, no_bias="False")),          # multiplier 2
    (2, 8, 20, 19, 8, dict(kernel="(5, 3)", pad="(2, 1)", dilate=2, num_group=8)), (5, 4, 7, 7, 4, dict(kernel=7, pad=3, num_group=4)),
    (64, 96, 12, 12, 96, dict(kernel=3, stride=2, pad=1, num_group=96, no_bias="False")), (3, 1, 28, 28, 50, dict(kernel=5)),
    (70000, 2, 6, 6, 2, dict(kernel=3, pad=1, num_group=2)),
]


def test_depthwise_runs_its_layers_and_refuses_the_rest():
    v13 = kernels.VERSIONS[13]
    for b, c, h, w, m, attrs in DEPTHWISE:
        spec, x, k, _ = _general_data(1, c, h, w, m, attrs, 0)
        assert v13.unsupported(kernels.ConvShape.of(x.shape, k.shape, spec)) is None, attrs
    assert "depthwise" in v13.unsupported(kernels.ConvShape(64, 56, 56, 64, 3, PH=1, PW=1))
    assert "taps" in v13.unsupported(kernels.ConvShape(8, 30, 30, 8, 9, G=8))
    assert kernels.default_version(kernels.ConvShape(32, 28, 28, 32, 3, PH=1, PW=1, G=32)) == 13


def _plan_on_general_layer(gpu, version, layer, overrides, seed):
    """(y, x, k, bias, spec): ``version``'s plan with ``overrides`` run once (forward) on a GENERAL-style
    layer of full-mantissa data of both signs, y first filled with NaN."""
    spec, x, k, bias = _general_data(*layer, seed=seed)
    x = x / 255 - 0.5
    shape = kernels.ConvShape.of(x.shape, k.shape, spec)
    import pycuda.gpuarray as gpuarray
    with gpu.active():
        plan = kernels.plan_for(gpu, shape, version, overrides)
        xd, kd = gpuarray.to_gpu(x), gpuarray.to_gpu(k)
        bias_d = gpuarray.to_gpu(bias) if bias is not None else None
        yd = gpuarray.empty(spec.output_shape(x.shape), np.float32)
        yd.fill(np.nan)
        plan.forward(int(yd.gpudata), int(xd.gpudata), int(kd.gpudata), int(bias_d.gpudata) if bias_d is not None else 0, len(x))
        return yd.get(), x, k, bias, spec


def _check_sample(what, y, x, k, bias, spec, images):
    from ece408_op.conv import reference_and_bound
    ref, bound = reference_and_bound(x[images], k, bias, spec)
    bad = ~(np.abs(y[images] - ref) <= bound)
    assert not bad.any(), f"{what}: {int(bad.sum())} of {bad.size} off, first at {np.argwhere(bad)[0]}"


@pytest.mark.parametrize("overrides", [{}, {"V13_VEC": 2}, {"V13_VEC": 1, "V13_THREADS": 128}], ids=str)
@pytest.mark.parametrize("layer", DEPTHWISE, ids=lambda g: "B%dC%dH%dW%dM%d" % g[:5] + str(g[5]))
def test_depthwise_matches_reference(gpu, layer, overrides):
    y, x, k, bias, spec = _plan_on_general_layer(gpu, 13, layer, overrides, seed=13)
    _check_sample(f"v13 {layer} {overrides}", y, x, k, bias, spec, _sample(len(x), 13))


def test_v7_adds_the_bias_from_the_constant_bank(gpu):
    # VGG's first layer, small: the bias rides in the constant bank behind the weights (no add_bias pass)
    from ece408_op.conv import reference_and_bound
    spec, x, k, bias = _general_data(3, 3, 24, 24, 64, dict(kernel=3, pad=1, no_bias="False"), 7)
    shape = kernels.ConvShape.of(x.shape, k.shape, spec)
    with gpu.active():
        plan = kernels.plan_for(gpu, shape, 7)
    assert plan.inner.BIAS == 1 and plan.add_bias is None
    y, _ = kernels.conv2d_forward_gpu(x, k, bias, spec, version=7)
    ref, bound = reference_and_bound(x, k, bias, spec)
    assert (np.abs(y - ref) <= bound).all()


# v20 (wgmma): filters not a multiple of its 64/128-filter tile, k not of its 16/32-k stage, positions
# not of its 64/128-position block; padding, stride, dilation, a rectangular window, a bias.
WGMMA = [
    (3, 70, 11, 13, 96, dict(kernel=3, pad=1, no_bias="False")),
    (2, 5, 17, 15, 130, dict(kernel="(3, 5)", stride="(2, 1)", pad="(1, 2)")),
    (4, 33, 9, 9, 64, dict(kernel=3, dilate=2, pad=2)),
    (65, 24, 7, 7, 40, dict(kernel=1)),
]


@pytest.mark.parametrize("overrides", [{}, *autotune_tiles(20), {"V20_STAGES": 3, "V20_MINB": 1}], ids=str)
@pytest.mark.parametrize("layer", WGMMA, ids=lambda g: "B%dC%dH%dW%dM%d" % g[:5] + str(g[5]))
def test_wgmma_tiles_match_reference(gpu, layer, overrides):
    _require_available(20)
    spec, x, k, _ = _general_data(*layer, seed=20)
    assert kernels.VERSIONS[20].unsupported(kernels.ConvShape.of(x.shape, k.shape, spec), overrides) is None
    y, x, k, bias, spec = _plan_on_general_layer(gpu, 20, layer, overrides, seed=20)
    _check_sample(f"v20 {layer} {overrides}", y, x, k, bias, spec, np.arange(len(x)))


def test_wgmma_refuses_what_it_cannot_run_in_one_line():
    v20 = kernels.VERSIONS[20]
    assert "one group" in v20.unsupported(kernels.ConvShape(32, 28, 28, 32, 3, PH=1, PW=1, G=32))
    assert "63-tap" in v20.unsupported(kernels.ConvShape(3, 20, 20, 8, 9))
    assert "tile" in v20.unsupported(kernels.ConvShape(64, 8, 8, 64, 3), {"V20_BN": 96})
    assert "tile" in v20.unsupported(kernels.ConvShape(64, 8, 8, 64, 3), {"V20_WG": 4})
    assert v20.unsupported(kernels.ConvShape(64, 8, 8, 64, 3), {"V20_BK": 16, "V20_WG": 2}) is None
    # never a fallback (it exists on compute capability 9.0 only): the table or the autotuner choose it
    assert 20 not in kernels.fallback_order()


def test_asking_for_wgmma_where_it_cannot_run_is_one_line():
    from ece408_op.errors import GpuError
    shape = kernels.ConvShape(64, 8, 8, 64, 3)
    why = kernels.VERSIONS[20].available()
    if why is None:                          # an H100/H200: it runs
        assert kernels.choose_version(20, shape) == 20
        return
    with pytest.raises(GpuError) as info:    # no GPU, or not compute capability 9.0: refused before any build
        kernels.choose_version("wgmma", shape)
    message = str(info.value)
    assert "\n" not in message and "v20 wgmma cannot run here" in message and why in message


def test_wgmma_is_a_candidate_only_on_compute_capability_9_0():
    from ece408_op.kernels import autotune
    shape = kernels.ConvShape(128, 28, 28, 128, 3, PH=1, PW=1)
    on_hopper = {n for n, _ in autotune.candidates(shape, "sm_90")}
    assert 20 in on_hopper and 9 in on_hopper
    assert 20 not in {n for n, _ in autotune.candidates(shape, "sm_80")}
    assert "9.0" in kernels.VERSIONS[20].arch_reason("sm_100") and kernels.VERSIONS[9].arch_reason("sm_80") is None
    # a dilated window that reaches past 2^25 elements into an image (its k table's offsets are 26 bits)
    far = kernels.ConvShape(7, 2048, 2048, 8, 3, PH=2049, DH=2048)
    assert far.HO > 0 and "reaches" in kernels.VERSIONS[20].unsupported(far)
    assert kernels.VERSIONS[20].launches({"V20_INLINE": 1}) == 1 and kernels.VERSIONS[20].launches({"V20_INLINE": 0}) == 2
