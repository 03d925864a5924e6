"""Training through the PyTorch drop-in (ece408_op.torch, issue 49's PyTorch slice): while autograd
records, the forward runs on the kernels and the backward gives the input, weight and bias gradients
nn.Conv2d gives (float32 CPU tensors: the project's CPU backward, conv/backward.py; CUDA: the project's
backward kernels, kernels/backward/, tests/pytorch/test_gpu_backward.py); gradcheck in float64; only what autograd asks for is computed; a few SGD
steps of a small network equal nn.Conv2d's; torch.compile trains through the registered operator."""
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from ece408_op.torch import Conv2d, conv2d, swap_convolutions  # noqa: E402
from test_torch_frontend import LAYERS, _ids, _pair  # noqa: E402


def _grads(conv, x):
    x = x.clone().requires_grad_()
    y = conv(x)
    weight = torch.linspace(-1, 1, y.numel(), dtype=y.dtype, device=y.device).reshape(y.shape)
    (y * weight).sum().backward()
    return [x.grad] + [p.grad for p in conv.parameters()]


@pytest.mark.parametrize("layer", LAYERS, ids=_ids)
def test_cpu_gradients_equal_nn_conv2ds(layer):
    original, ours, x = _pair(*layer, seed=5)
    ours.train()
    want, got = _grads(original, x), _grads(ours, x)
    assert len(want) == len(got)
    for name, a, b in zip(["input", "weight", "bias"], got, want):
        assert a.shape == b.shape and a.dtype == b.dtype, name
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4 * (float(b.abs().max()) + 1)), name


def test_gradcheck_in_float64():
    torch.manual_seed(0)
    x = torch.rand(2, 4, 7, 6, dtype=torch.float64, requires_grad=True)
    w = torch.rand(6, 2, 3, 2, dtype=torch.float64, requires_grad=True)
    b = torch.rand(6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: conv2d(x, w, b, stride=(2, 1), padding=1, dilation=(1, 2),
                                                           groups=2), (x, w, b))


def test_only_the_gradients_asked_for():
    conv = Conv2d(3, 4, 3, padding=1)
    conv.weight.requires_grad_(False)
    x = torch.rand(2, 3, 8, 8, requires_grad=True)
    conv(x).sum().backward()
    assert x.grad is not None and conv.bias.grad is not None and conv.weight.grad is None
    y = conv.eval()(torch.rand(1, 3, 8, 8))                 # eval mode, a parameter that requires grad:
    assert y.requires_grad                                  # recorded, as nn.Conv2d's output is
    with torch.no_grad():
        assert not conv(torch.rand(1, 3, 8, 8)).requires_grad


def _train(make, device, steps=3, dtype=torch.float32):
    torch.manual_seed(11)
    model = make().to(device=device, dtype=dtype)
    x = torch.rand(8, 3, 16, 16, device=device, dtype=dtype)
    label = torch.randint(0, 5, (8,), device=device)
    return model, x, label


def _steps(model, x, label, steps=3):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), label)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def _net():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2, groups=2),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))


def _swapped_and_not(device):
    a, x, label = _train(_net, device)
    b, _, _ = _train(_net, device)
    swap_convolutions(b)
    return a, b, x, label


def test_sgd_steps_equal_nn_conv2ds_on_the_cpu():
    a, b, x, label = _swapped_and_not("cpu")
    want, got = _steps(a, x, label), _steps(b, x, label)
    assert got == pytest.approx(want, rel=1e-4), (got, want)


def test_sgd_steps_equal_nn_conv2ds_on_cuda(cuda):
    a, b, x, label = _swapped_and_not(cuda)
    want, got = _steps(a, x, label), _steps(b, x, label)
    assert got == pytest.approx(want, rel=1e-3), (got, want)


@pytest.mark.parametrize("layer", LAYERS, ids=_ids)
def test_cuda_gradients_equal_nn_conv2ds(cuda, layer):
    original, ours, x = _pair(*layer, seed=6)
    original, ours = original.to(cuda), ours.to(cuda).train()
    want, got = _grads(original, x.to(cuda)), _grads(ours, x.to(cuda))
    for name, a, b in zip(["input", "weight", "bias"], got, want):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4 * (float(b.abs().max()) + 1)), name


def test_torch_compile_trains_through_the_registered_operator(cuda):
    a, b, x, label = _swapped_and_not(cuda)
    compiled = torch.compile(b)
    want, got = _steps(a, x, label), _steps(compiled, x, label)
    assert got == pytest.approx(want, rel=1e-3), (got, want)
