"""v23 hgmma (half precision on Hopper's warpgroup MMA) through the PyTorch front-end: asked for by name on
ResNet/VGG/DenseNet-like layers (3x3 stride 1 and 2, 1x1, the 7x7 stride-2 stem of odd channels, channel and
filter counts off its tiles, a bias) in float16 and bfloat16, NCHW and channels-last, against float64 within
test_gpu_half_precision's bound; every autotuner tile of it; what it refuses falls back (v21, v22,
F.conv2d). Skips without PyTorch, a GPU, or where the GPU is not compute capability 9.0."""
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from ece408_op import kernels  # noqa: E402
from ece408_op.torch import Conv2d  # noqa: E402
from test_gpu_half_precision import CL, DTYPES, _check, _depth, _float64, _half_bound, _module  # noqa: E402

# (input shape, nn.Conv2d arguments)
LAYERS = [
    ((2, 64, 28, 28), dict(in_channels=64, out_channels=64, kernel_size=3, padding=1, bias=False)),     # ResNet 3x3
    ((2, 128, 15, 15), dict(in_channels=128, out_channels=256, kernel_size=3, stride=2, padding=1)),   # strided
    ((3, 256, 14, 14), dict(in_channels=256, out_channels=64, kernel_size=1, bias=False)),             # bottleneck
    ((2, 3, 45, 45), dict(in_channels=3, out_channels=64, kernel_size=7, stride=2, padding=3)),        # the stem
    ((2, 96, 9, 9), dict(in_channels=96, out_channels=128, kernel_size=1)),                            # DenseNet
    ((1, 40, 11, 13), dict(in_channels=40, out_channels=36, kernel_size=3, padding=1)),                # off tile
    ((2, 12, 20, 19), dict(in_channels=12, out_channels=200, kernel_size=(3, 5), stride=(2, 1), padding=(1, 2))),
    ((1, 512, 7, 7), dict(in_channels=512, out_channels=512, kernel_size=3, padding=1, bias=False)),   # deep, 7x7
]


def _ids(layer):
    return "x" + "x".join(map(str, layer[0])) + "-" + "-".join(f"{k}={v}" for k, v in layer[1].items())


@pytest.fixture(scope="module")
def hopper(cuda):
    why = kernels.VERSIONS[23].available()
    if why is not None:
        pytest.skip(f"v23: {why}")
    return cuda


def _data(shape, kwargs, dtype, layout, device, **extra):
    conv = _module({**kwargs, **extra}, seed=sum(shape)).to(device).to(dtype)
    torch.manual_seed(1)
    x = (torch.rand(shape, device=device) * 4 - 2).to(dtype)
    if layout == "channels_last":
        conv, x = conv.to(memory_format=CL), x.to(memory_format=CL)
    return conv, x


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layer", LAYERS, ids=_ids)
def test_hgmma_layers_match_float64(hopper, layer, dtype, layout):
    shape, kwargs = layer
    dtype = DTYPES[dtype]
    conv, x = _data(shape, kwargs, dtype, layout, hopper, kernel="23")
    with torch.inference_mode():
        y = conv(x)
        want = F.conv2d(x, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups)
    assert y.dtype == dtype and y.shape == want.shape and y.stride() == want.stride()
    assert next(iter(conv._layers.values())).call.plan.version.number == 23
    ref, size = _float64(conv, x)
    _check(y, ref, _half_bound(dtype, ref, size, _depth(conv)), f"v23 {dtype} {layout} {layer}")


TILE_LAYERS = [LAYERS[0], LAYERS[3], LAYERS[6], ((3, 64, 17, 17), dict(in_channels=64, out_channels=320,
                                                                         kernel_size=3, padding=1))]


@pytest.mark.parametrize("tile", kernels.VERSIONS[23].tune_tiles, ids=str)
@pytest.mark.parametrize("layer", TILE_LAYERS, ids=_ids)
def test_every_autotuner_tile_matches_float64(hopper, layer, tile):
    from ece408_op.kernels.device import GpuDevice
    shape, kwargs = layer
    conv, x = _data(shape, kwargs, torch.float16, "channels_last", hopper)
    s = kernels.ConvShape.of(tuple(x.shape), tuple(conv.weight.shape), _spec(conv), "float16", 1, 1)
    version = kernels.VERSIONS[23]
    if version.unsupported(s, tile):
        pytest.skip(f"tile {tile}: {version.unsupported(s, tile)}")
    y = torch.full((shape[0], conv.out_channels, *_out_hw(conv, shape)), float("nan"), device=hopper,
                   dtype=torch.float16).to(memory_format=CL)
    dev = GpuDevice.get(hopper.index)
    torch.cuda.synchronize(hopper)
    with dev.active():
        plan = kernels.plan_for(dev, s, 23, tile or None)
        bias = conv.bias.data_ptr() if conv.bias is not None else 0
        plan.launch(y.data_ptr(), x.data_ptr(), conv.weight.data_ptr(), bias, shape[0])
        dev.synchronize()
    ref, size = _float64(conv, x)
    _check(y, ref, _half_bound(torch.float16, ref, size, _depth(conv)), f"v23 {tile} {layer}")


def _spec(conv):
    from ece408_op.conv import ConvSpec
    return ConvSpec(num_filter=conv.out_channels, kernel=tuple(conv.kernel_size), stride=tuple(conv.stride),
                    pad=tuple(conv.padding), dilate=tuple(conv.dilation), num_group=conv.groups,
                    no_bias=conv.bias is None)


def _out_hw(conv, shape):
    return tuple((shape[2 + i] + 2 * conv.padding[i] - conv.dilation[i] * (conv.kernel_size[i] - 1) - 1)
                 // conv.stride[i] + 1 for i in range(2))


# layers v23 refuses (groups; channels not a multiple of 4): auto falls back to v21/v22, by name a one-line error
REFUSED = [
    ((2, 6, 15, 15), dict(in_channels=6, out_channels=18, kernel_size=3, padding=1)),
    ((2, 64, 9, 9), dict(in_channels=64, out_channels=64, kernel_size=3, padding=1, groups=4)),
    ((2, 32, 12, 12), dict(in_channels=32, out_channels=32, kernel_size=3, padding=1, groups=32)),
]


@pytest.mark.parametrize("layer", REFUSED, ids=_ids)
def test_what_hgmma_refuses_falls_back(hopper, layer):
    shape, kwargs = layer
    conv, x = _data(shape, kwargs, torch.float16, "channels_last", hopper)
    with torch.inference_mode():
        y = conv(x)
    assert next(iter(conv._layers.values())).call.plan.version.number in (21, 22)
    ref, size = _float64(conv, x)
    _check(y, ref, _half_bound(torch.float16, ref, size, _depth(conv)), f"fallback {layer}")
    forced, _ = _data(shape, kwargs, torch.float16, "channels_last", hopper, kernel="23")
    with pytest.raises(RuntimeError, match=r"v23 hgmma cannot run this layer: (needs one group|\d+ channels)"):
        with torch.inference_mode():
            forced(x)

