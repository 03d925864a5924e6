"""The PyTorch front-end (ece408_op.torch): nn.Conv2d's constructor and state dict, swap_convolutions,
PyTorch-style errors (without a GPU: the CPU path; training: tests/pytorch/test_torch_training.py), then on a CUDA device the
zero-copy path: every output against the float64 reference within the float32 bound, no tensor copied
(one allocation per call: y), the kernels queued on PyTorch's current stream without synchronising,
and a small residual network swapped whole. Skips without PyTorch; the GPU tests skip without a GPU."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from ece408_op.conv import ConvSpec, reference_and_bound  # noqa: E402
from ece408_op.torch import Conv2d, swap_convolutions  # noqa: E402

# (input shape, nn.Conv2d arguments): padding, stride, dilation, groups (depthwise too), rectangular
# kernels, bias, 'same', a non-zero padding mode, an unbatched input, a 1x1 layer
LAYERS = [
    ((2, 3, 17, 13), dict(in_channels=3, out_channels=7, kernel_size=3, padding=1)),
    ((3, 4, 20, 19), dict(in_channels=4, out_channels=6, kernel_size=(3, 5), stride=(2, 1), padding=(1, 2))),
    ((2, 6, 15, 15), dict(in_channels=6, out_channels=9, kernel_size=3, dilation=2, groups=3, bias=False)),
    ((4, 8, 12, 11), dict(in_channels=8, out_channels=8, kernel_size=3, padding=1, groups=8)),
    ((2, 16, 30, 30), dict(in_channels=16, out_channels=32, kernel_size=3, stride=2, padding=1, bias=False)),
    ((2, 5, 11, 12), dict(in_channels=5, out_channels=4, kernel_size=4, padding="same")),
    ((2, 3, 10, 10), dict(in_channels=3, out_channels=5, kernel_size=3, padding=1, padding_mode="reflect")),
    ((3, 9, 9), dict(in_channels=3, out_channels=4, kernel_size=3)),
    ((2, 32, 7, 7), dict(in_channels=32, out_channels=24, kernel_size=1, bias=False)),
    ((2, 3, 32, 32), dict(in_channels=3, out_channels=16, kernel_size=7, stride=2, padding=3)),
]


def _ids(layer):
    return "x" + "x".join(map(str, layer[0])) + "-" + "-".join(f"{k}={v}" for k, v in layer[1].items()
                                                               if k not in ("in_channels", "out_channels"))


def _reference(conv, x):
    """float64 reference and float32 bound of ``conv`` on ``x`` (padding as F.pad would, then the spec)."""
    x = x.detach().cpu().double()
    unbatched = x.dim() == 3
    if unbatched:
        x = x[None]
    lr = conv._reversed_padding_repeated_twice
    mode = "constant" if conv.padding_mode == "zeros" else conv.padding_mode
    x = F.pad(x, list(lr), mode=mode)
    spec = ConvSpec(num_filter=conv.out_channels, kernel=tuple(conv.kernel_size), stride=tuple(conv.stride),
                    dilate=tuple(conv.dilation), num_group=conv.groups, no_bias=conv.bias is None)
    bias = None if conv.bias is None else conv.bias.detach().cpu().double().numpy()
    ref, bound = reference_and_bound(x.numpy(), conv.weight.detach().cpu().double().numpy(), bias, spec)
    return (ref[0], bound[0]) if unbatched else (ref, bound)


def _check(y, ref, bound, what):
    got = y.detach().cpu().double().numpy()
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    bad = ~(np.abs(got - ref) <= bound)
    if bad.any():
        idx = np.argwhere(bad)[:5]
        pytest.fail(f"{what}: {int(bad.sum())} of {bad.size} elements off, first at "
                    + ", ".join(f"{tuple(i)}: {got[tuple(i)]!r} vs {ref[tuple(i)]!r}" for i in idx))


def _pair(shape, kwargs, seed=0):
    torch.manual_seed(seed)
    original = nn.Conv2d(**kwargs).eval()
    ours = Conv2d(**kwargs).eval()
    ours.load_state_dict(original.state_dict())
    return original, ours, torch.rand(shape) * 4 - 2


# ------------------------------------------------------------------ anywhere PyTorch is installed

def test_constructor_and_state_dict_are_nn_conv2ds():
    torch.manual_seed(1)
    original = nn.Conv2d(4, 6, (3, 5), stride=2, padding=1, dilation=1, groups=2, bias=True)
    ours = Conv2d(4, 6, (3, 5), stride=2, padding=1, dilation=1, groups=2, bias=True, kernel="v8")
    assert list(ours.state_dict()) == list(original.state_dict()) == ["weight", "bias"]
    assert ours.load_state_dict(original.state_dict()) is not None
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), original.state_dict().values()))
    assert isinstance(ours, nn.Conv2d) and "kernel='v8'" in repr(ours)
    # bad input: an unknown kernel version
    with pytest.raises(ValueError, match="unknown kernel"):
        Conv2d(4, 6, 3, kernel="v99")


@pytest.mark.parametrize("layer", LAYERS, ids=_ids)
def test_cpu_tensors_match_the_reference(layer):
    original, ours, x = _pair(*layer)
    with torch.no_grad():
        y = ours(x)
    _check(y, *_reference(original, x), what=f"CPU {layer}")


def test_swap_shares_parameters_and_keeps_the_output():
    torch.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                          nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), nn.BatchNorm2d(8)),
                          nn.Conv2d(8, 4, 1)).eval()
    x = torch.rand(2, 3, 12, 12)
    with torch.no_grad():
        want = model(x)
    weights = [m.weight for m in model.modules() if isinstance(m, nn.Conv2d)]
    report = swap_convolutions(model)
    result, swapped = report
    assert result is model and swapped == ["0", "2.0", "3"] and report.kept == []
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert all(type(m) is Conv2d for m in convs)
    assert all(m.weight is w for m, w in zip(convs, weights))               # shared, not copied
    with torch.no_grad():
        got = model(x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-5)
    assert swap_convolutions(model).swapped == []                           # nothing left to swap
    bare = swap_convolutions(nn.Conv2d(3, 3, 3)).result
    assert type(bare) is Conv2d
    half = nn.Sequential(nn.Conv2d(3, 3, 3).double())
    assert swap_convolutions(half).kept[0][0] == "0"                        # float64: kept, with the reason


@pytest.mark.parametrize("make_input, error, match", [
    (lambda: torch.rand(1, 2, 3, 9, 9), RuntimeError, "Expected 3D \\(unbatched\\) or 4D"),
    (lambda: torch.rand(1, 4, 9, 9), RuntimeError, "to have 3 channels, but got 4 channels"),
    (lambda: torch.rand(1, 3, 2, 2), RuntimeError, "Kernel size can't be greater than actual input size"),
    (lambda: torch.rand(1, 3, 9, 9, dtype=torch.float64), RuntimeError, "should be the same"),
    (lambda: np.zeros((1, 3, 9, 9), np.float32), TypeError, "must be Tensor"),
], ids=["5-D", "channels", "too small", "dtype mismatch", "not a tensor"])
def test_bad_inputs_raise_as_pytorch_does(make_input, error, match):
    # bad input: each of these, one clear error of PyTorch's kind
    conv = Conv2d(3, 5, 3).eval()
    with torch.no_grad(), pytest.raises(error, match=match):
        conv(make_input())


def test_an_empty_batch_and_an_unbatched_input():
    conv = Conv2d(3, 5, 3, padding=1).eval()
    with torch.no_grad():
        assert conv(torch.rand(0, 3, 8, 8)).shape == (0, 5, 8, 8)
        one = torch.rand(3, 8, 8)
        assert torch.allclose(conv(one), conv(one[None])[0])


def _changed_after_a_call(device):
    """Stride, padding, dilation and groups set on a module after its first call take effect, as they do
    on nn.Conv2d (the module's resolved layers are dropped)."""
    torch.manual_seed(9)
    ours = Conv2d(4, 6, 3, padding=1).eval().to(device)
    x = (torch.rand(2, 4, 13, 12) * 4 - 2).to(device)
    changes = [("padding", (2, 0)), ("stride", (2, 1)), ("dilation", (1, 2)), ("groups", 2)]
    with torch.no_grad():
        ours(x)
        for count in range(1, len(changes) + 1):
            kwargs = dict(changes[:count])
            if "groups" in kwargs:
                ours.weight = nn.Parameter(ours.weight[:, :2].contiguous())
            for name, value in changes[count - 1:count]:
                setattr(ours, name, value)
            fresh = nn.Conv2d(4, 6, 3, **kwargs).eval()
            fresh.load_state_dict({k: v.cpu() for k, v in ours.state_dict().items()})
            _check(ours(x), *_reference(fresh, x.cpu()), what=f"after setting {changes[count - 1][0]}")


def test_attributes_changed_after_a_call_take_effect():
    _changed_after_a_call("cpu")


def test_a_type_mismatch_is_pytorchs_error():
    # bad input: a half-precision input for a float32 module (PyTorch's RuntimeError and wording); other
    # types alone run on F.conv2d (tests/pytorch/test_torch_every_layer.py)
    with torch.no_grad(), pytest.raises(RuntimeError, match="should be the same"):
        Conv2d(3, 5, 3).eval()(torch.rand(1, 3, 9, 9, dtype=torch.float16))


def test_channels_last_on_the_cpu_returns_channels_last():
    original, ours, x = _pair((2, 8, 10, 10), dict(in_channels=8, out_channels=6, kernel_size=3, padding=1))
    cl = x.to(memory_format=torch.channels_last)
    with torch.no_grad():
        y = ours(cl)
        want = original(cl)
    assert y.is_contiguous(memory_format=torch.channels_last) and y.stride() == want.stride()
    _check(y, *_reference(original, x), what="CPU channels-last")


def test_the_front_end_imports_without_mxnet():
    import subprocess

    from suitekit import ROOT, python_command
    code = ("import sys; sys.modules['mxnet'] = None\nimport ece408_op.torch, ece408_op.bench.network_layers, "
            "ece408_op.torch.nets\nassert sys.modules['mxnet'] is None\n")
    result = subprocess.run([*python_command(), "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_network_shapes():
    from ece408_op.torch import nets
    counts = {}
    for name, make in nets.NETWORKS.items():
        model = make().to("meta").eval()
        layers = nets.conv_layers(model, torch.empty(2, 3, 224, 224, device="meta"))
        counts[name] = (len(layers), sum(len(names) for names, _, _ in layers))
    # distinct layers, all convolutions: ResNet-18 20 convolutions, ResNet-50 53, VGG-16 13, MobileNetV2 52
    assert {name: total for name, (_, total) in counts.items()} == {
        "resnet18": 20, "resnet50": 53, "vgg16": 13, "mobilenet_v2": 52}
    assert all(distinct < total or name == "vgg16" for name, (distinct, total) in counts.items())


# ------------------------------------------------------------------ on a CUDA device

@pytest.mark.parametrize("layer", LAYERS, ids=_ids)
def test_cuda_tensors_match_the_reference(cuda, layer):
    original, ours, x = _pair(*layer, seed=3)
    ours = ours.to(cuda)
    with torch.inference_mode():
        y = ours(x.to(cuda))
    assert y.device == cuda and y.dtype == torch.float32
    _check(y, *_reference(original, x), what=f"CUDA {layer}")


@pytest.mark.parametrize("version", ["8", "9", "fast"])
def test_explicit_kernels(cuda, version):
    original, ours, x = _pair((2, 16, 14, 14), dict(in_channels=16, out_channels=32, kernel_size=3, padding=1), 4)
    ours.kernel = version
    ours = ours.to(cuda)
    with torch.inference_mode():
        y = ours(x.to(cuda))
    ref, bound = _reference(original, x)
    if version == "fast":                   # v12 (Winograd): outside the elementwise bound is possible
        assert np.abs(y.cpu().numpy() - ref).max() <= 1e-5 * np.abs(ref).max()
    else:
        _check(y, ref, bound, what=f"kernel {version}")


def test_cuda_attributes_changed_after_a_call_take_effect(cuda):
    _changed_after_a_call(cuda)


def test_cuda_empty_batch(cuda):
    conv = Conv2d(3, 5, 3).to(cuda).eval()
    with torch.inference_mode():
        y = conv(torch.rand(0, 3, 9, 9, device=cuda))
    assert y.shape == (0, 5, 7, 7) and y.device == cuda


def test_no_copies_one_allocation_per_call(cuda):
    conv = Conv2d(64, 64, 3, padding=1).to(cuda).eval()
    x = torch.rand(8, 64, 28, 28, device=cuda)
    from suitekit import allocations_per_calls
    with torch.inference_mode():
        count, y = allocations_per_calls(torch, cuda, lambda: conv(x))
    assert count == 10                                            # y alone: x, the weight, the bias read in place
    want = F.conv2d(x.double(), conv.weight.double(), conv.bias.double(), padding=1)
    assert torch.allclose(y.double(), want, rtol=1e-4, atol=1e-4)


def test_queued_on_the_current_stream_without_synchronising(cuda):
    conv = Conv2d(32, 48, 3, padding=1).to(cuda).eval()
    data = torch.rand(16, 32, 40, 40, device=cuda)
    side = torch.cuda.Stream(cuda)
    with torch.inference_mode():
        with torch.cuda.stream(side):
            conv(data)                                             # resolve and set up the layer first
        want = F.conv2d(data.double(), conv.weight.double(), conv.bias.double(), padding=1)
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            x = torch.empty_like(data)
            torch.cuda._sleep(200_000_000)                        # ~0.1 s of work ahead on the side stream
            x.copy_(data)
            y = conv(x)
            assert not side.query()                               # returned at once: nothing waited for the GPU
        side.synchronize()
    assert torch.allclose(y.double(), want, rtol=1e-4, atol=1e-4)  # read x after the copy: the same stream


def test_a_swapped_network_agrees_with_cudnn(cuda):
    torch.manual_seed(5)

    def block(c, stride):
        return nn.Sequential(nn.Conv2d(c // stride, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                             nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c))
    model = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3), nn.ReLU(), block(16, 1), block(32, 2), nn.Conv2d(32, 10, 1),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten()).to(cuda).eval()
    x = torch.rand(4, 3, 64, 64, device=cuda)
    with torch.inference_mode():
        want = model.double()(x.double())
        model.float()
        cudnn = model(x)
        swap_convolutions(model)
        got = model(x)
    scale = want.abs().max()
    assert (got.double() - want).abs().max() <= 1e-5 * scale
    assert (got - cudnn).abs().max() <= 1e-5 * scale
