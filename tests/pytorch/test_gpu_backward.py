"""The backward kernels on the GPU (kernels/backward/, issue 49): dx, dw and db of every version (plain and
fast) in float32, float16 and bfloat16 against float64 on seeded random general layers (stride, padding,
dilation, groups, depthwise, rectangular, odd sizes), within the float32 summation bound scaled by each
sum's length (plus the output's rounding to a half type); the front-end's backward runs on them; and a
torchvision ResNet-18 with every convolution swapped trains 5 SGD steps with cuDNN's loss curve."""
import copy
import random
import warnings
import zlib

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from ece408_op.kernels import backward as kernels_backward  # noqa: E402
from ece408_op.torch import Conv2d, swap_convolutions  # noqa: E402
from ece408_op.torch.backward import cuda_gradients  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
UNIT = {torch.float32: 0.0, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}   # the result's rounding
# per addition of a sum: float32's unit roundoff (2^-23 = 1.19e-7, FFMA); the tensor cores' float32 sums of half
# products align before adding, truncating: 2^-22 (as tests/pytorch/test_gpu_half_precision.py's bound)
EPS = {torch.float32: 1.2e-7, torch.float16: 2.0 ** -22, torch.bfloat16: 2.0 ** -22}


def _random_layers(count=14, seed=49):
    """(x shape, conv kwargs): seeded general layers, odd sizes; every feature at least once."""
    rnd = random.Random(seed)
    layers = [((2, 8, 13, 11), dict(in_channels=8, out_channels=8, kernel_size=3, padding=1, groups=8)),    # depthwise
              ((3, 20, 9, 15), dict(in_channels=20, out_channels=36, kernel_size=(3, 1), stride=(2, 1),
                                    padding=(1, 0))),
              ((2, 32, 17, 17), dict(in_channels=32, out_channels=70, kernel_size=5, stride=2, dilation=2, padding=3)),
              ((1, 64, 7, 7), dict(in_channels=64, out_channels=128, kernel_size=1, stride=2))]
    while len(layers) < count:
        groups = rnd.choice([1, 1, 2, 3, 4])
        c, m = groups * rnd.randint(1, 24), groups * rnd.randint(1, 24)
        kh, kw = rnd.choice([1, 2, 3, 5]), rnd.choice([1, 3, 4])
        s, d = (rnd.randint(1, 3), rnd.randint(1, 2)), (rnd.randint(1, 2), rnd.randint(1, 2))
        p = (rnd.randint(0, kh), rnd.randint(0, kw))
        h = max(d[0] * (kh - 1) + 1 - 2 * p[0], 1) + rnd.randint(0, 14)
        w = max(d[1] * (kw - 1) + 1 - 2 * p[1], 1) + rnd.randint(0, 14)
        layers.append(((rnd.randint(1, 4), c, h, w), dict(in_channels=c, out_channels=m, kernel_size=(kh, kw),
                                                           stride=s, padding=p, dilation=d, groups=groups)))
    return layers


LAYERS = _random_layers()


def _ids(layer):
    return "x" + "x".join(map(str, layer[0])) + "-" + "-".join(
        f"{k}={v}" for k, v in layer[1].items() if k not in ("in_channels", "out_channels")).replace(" ", "")


def _reference(x, w, dy, conv):
    """((dx, dw, db) in float64 on the CPU, (the same sums of magnitudes)) from the tensors as given."""
    args = (conv["stride"], conv["padding"], conv["dilation"], conv["groups"])
    x, w, dy = (t.detach().double().cpu() for t in (x, w, dy))
    grads = lambda x, w, dy: (torch.nn.grad.conv2d_input(x.shape, w, dy, *args),     # noqa: E731
                              torch.nn.grad.conv2d_weight(x, w.shape, dy, *args), dy.sum(dim=(0, 2, 3)))
    return grads(x, w, dy), grads(x.abs(), w.abs(), dy.abs())


def _check(got, ref, size, terms, dtype, what):
    """|got - ref| <= the float32 bound of a sum of ``terms`` products (float32 sums of exact products: a
    product of halves is exact in float32) + the result's rounding to ``dtype``."""
    bound = terms * EPS[dtype] * size + UNIT[dtype] * ref.abs() + 1e-6
    err = (got.double().cpu() - ref).abs()
    worst = float((err / bound).max())
    assert got.dtype == dtype, what
    assert worst <= 1.0, f"{what}: error up to {worst:.3g}x the bound (max |err| {float(err.max()):.3g})"


def _conv_args(kwargs):
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)          # noqa: E731
    return dict(stride=pair(kwargs.get("stride", 1)), padding=pair(kwargs.get("padding", 0)),
                dilation=pair(kwargs.get("dilation", 1)), groups=kwargs.get("groups", 1))


@pytest.mark.parametrize("version", ["plain", "fast", "fast128"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layer", LAYERS, ids=_ids)
def test_gradients_against_float64(layer, dtype, version, cuda, monkeypatch):
    shape, kwargs = layer
    if version == "fast128":                     # the 128 x 128 tile (the rule takes it for large layers only)
        monkeypatch.setenv(kernels_backward.TILE_ENV, "128")
        version = "fast"
    dtype = DTYPES[dtype]
    conv = _conv_args(kwargs)
    gen = torch.Generator().manual_seed(zlib.crc32(_ids(layer).encode()))
    kh, kw = (kwargs["kernel_size"],) * 2 if isinstance(kwargs["kernel_size"], int) else kwargs["kernel_size"]
    m, cg = kwargs["out_channels"], shape[1] // conv["groups"]
    x = torch.randn(shape, generator=gen).to(cuda, dtype)
    w = torch.randn((m, cg, kh, kw), generator=gen).to(cuda, dtype)
    y_shape = F.conv2d(x.float(), w.float(), **conv).shape
    dy = torch.randn(y_shape, generator=gen).to(cuda, dtype)
    versions = {g: version for g in kernels_backward.VERSIONS}
    dx, dw, db = cuda_gradients(x, w, dy, versions=versions, **conv)
    torch.cuda.synchronize()
    call = kernels_backward.backward_call(tuple(x.shape), tuple(w.shape), conv["stride"], conv["padding"],
                                          conv["dilation"], conv["groups"], str(dtype).split(".")[1], cuda.index,
                                          versions)
    ran = set(call.versions.values())
    assert call.tiles == (128, 128) if kernels_backward.os.environ.get(kernels_backward.TILE_ENV) else True
    assert ran == {"plain"} if version == "plain" else "plain" not in ran
    refs, sizes = _reference(x, w, dy, conv)
    depth = y_shape[0] * y_shape[2] * y_shape[3]
    for name, got, ref, size, terms in zip(("dx", "dw", "db"), (dx, dw, db), refs, sizes,
                                           (m // conv["groups"] * kh * kw, depth, depth)):
        _check(got, ref, size, terms, dtype, f"{name} {version} {dtype}")


def test_the_front_end_backward_runs_on_the_kernels(cuda):
    torch.manual_seed(3)
    ours = Conv2d(16, 24, 3, stride=2, padding=1).to(cuda)
    original = torch.nn.Conv2d(16, 24, 3, stride=2, padding=1).to(cuda)
    original.load_state_dict(ours.state_dict())
    x = torch.randn(3, 16, 21, 19, device=cuda)
    before = len(kernels_backward._calls)
    grads = []
    for conv in (ours, original):
        xg = x.clone().requires_grad_()
        conv.zero_grad()
        (conv(xg) * torch.linspace(-1, 1, 24 * 11 * 10, device=cuda).reshape(24, 11, 10)).sum().backward()
        grads.append([xg.grad, conv.weight.grad, conv.bias.grad])
    assert len(kernels_backward._calls) > before                 # resolved on the backward kernels
    for a, b in zip(*grads):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4 * float(b.abs().max()))
    x.requires_grad_()
    ours.weight.requires_grad_(False)
    ours.bias.grad = None
    ours(x).sum().backward()
    assert ours.bias.grad is not None and x.grad is not None


def test_a_layer_the_kernels_do_not_take_falls_back_once(cuda):
    conv = Conv2d(4, 4, 3).to(cuda, torch.float64)
    x = torch.randn(2, 4, 9, 9, device=cuda, dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        conv(x).sum().backward()
        conv(x).sum().backward()
    said = [w for w in caught if "torch.nn.grad" in str(w.message)]
    assert len(said) == 1 and x.grad is not None


def _resnet_losses(model, x, label, steps=5):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), label)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def test_resnet18_trains_as_cudnn(cuda):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(18)
    reference = torchvision.models.resnet18(num_classes=10).to(cuda).train()
    ours = copy.deepcopy(reference)
    report = swap_convolutions(ours)
    assert len(report.swapped) == 20 and not report.kept
    x = torch.randn(8, 3, 112, 112, device=cuda)
    label = torch.randint(0, 10, (8,), device=cuda)
    exact = copy.deepcopy(reference).double()
    before = len(kernels_backward._calls)
    want, got = _resnet_losses(reference, x, label), _resnet_losses(ours, x, label)
    assert len(kernels_backward._calls) - before >= 10
    truth = _resnet_losses(exact, x.double(), label)
    assert max(want) - min(want) > 1e-2                          # the steps change the loss
    # float32 noise: ours as far from the float64 curve as cuDNN's float32 curve is (the steps amplify
    # rounding: 8 images memorised, the loss from 2.0 to 0.16, cuDNN's own error grows ~10x a step)
    for step, (a, b, t) in enumerate(zip(got, want, truth)):
        assert abs(a - t) <= 4 * abs(b - t) + 2e-6 * abs(t), f"step {step}: {got} vs cuDNN {want}, float64 {truth}"
