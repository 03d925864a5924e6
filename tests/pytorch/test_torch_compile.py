"""The PyTorch front-end under torch.compile, CUDA graphs, autocast and the precision choice:
the forward is one registered operator (``torch.ops.ece408.conv2d``, with a fake implementation), so a
swapped network compiles without graph breaks and equals eager; ``mode="reduce-overhead"`` captures the
kernels in a CUDA graph and replays them right, also for inputs in new memory; under autocast the
convolutions run in autocast's type, as nn.Conv2d's (on the CPU path: computed in float32, returned in
that type); ``precision="fp32"`` runs plain float32 versions only. The CPU tests use the
project's CPU path (the aot_eager backend); the CUDA ones skip without a GPU. Skips without PyTorch."""
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from ece408_op.torch import Conv2d, swap_convolutions, warmup  # noqa: E402


def _model(seed=0):
    torch.manual_seed(seed)

    def block(c, stride):
        return nn.Sequential(nn.Conv2d(c // stride, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                             nn.Conv2d(c, c, 3, 1, 1, groups=c, bias=False), nn.Conv2d(c, c, 1), nn.BatchNorm2d(c))
    return nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3), nn.ReLU(), block(16, 1), block(32, 2),
                         nn.Conv2d(32, 32, 3, padding=1, padding_mode="reflect"), nn.Conv2d(32, 10, 1),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten()).eval()


def _break_count(model, x):
    torch._dynamo.reset()
    with torch.no_grad():
        explained = torch._dynamo.explain(model)(x)
    return explained.graph_count, explained.graph_break_count


# ------------------------------------------------------------------ anywhere PyTorch is installed

def test_the_operator_and_its_fake_give_the_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    assert hasattr(torch.ops.ece408, "conv2d")
    with FakeTensorMode():
        x, w = torch.empty(2, 6, 17, 13), torch.empty(8, 3, 3, 5)
        y = torch.ops.ece408.conv2d(x, w, None, [2, 1], [1, 2], [1, 1], 2, None, None)
        assert tuple(y.shape) == (2, 8, 9, 13) and y.dtype == torch.float32
        assert tuple(torch.ops.ece408.conv2d(x[0], w, None, [1, 1], [0, 0], [2, 2], 2, "8", "fp32").shape) == (8, 13, 5)
        half = torch.ops.ece408.conv2d(x.half().to(memory_format=torch.channels_last), w.half(), None, [1, 1],
                                       [1, 1], [1, 1], 2, None, None)
        assert half.dtype == torch.float16 and half.is_contiguous(memory_format=torch.channels_last)   # as y is


def test_compiled_on_the_cpu_path_without_graph_breaks_equals_eager():
    model = _model()
    swap_convolutions(model)
    x = torch.rand(2, 3, 32, 32)
    assert _break_count(model, x) == (1, 0)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager")
    with torch.no_grad():
        eager = model(x)
        assert torch.equal(compiled(x), eager)
        other = torch.rand(3, 3, 40, 40)                  # another shape: compiled again, still equal
        assert torch.equal(compiled(other), model(other))


def test_autocast_on_the_cpu_computes_in_float32_and_returns_its_type():
    model = _model()
    swap_convolutions(model)
    x = torch.rand(2, 3, 32, 32)
    conv = model[0]
    with torch.no_grad():
        want = conv(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = conv(x.bfloat16())                      # an input autocast made half precision
            assert got.dtype == torch.bfloat16 == nn.Conv2d(3, 16, 7, 2, 3)(x).dtype     # as nn.Conv2d's
            compiled = torch.compile(conv, backend="aot_eager")(x.bfloat16())
            assert compiled.dtype == torch.bfloat16 and torch.equal(compiled, got)
    assert torch.allclose(got.float(), want, atol=0.05 * float(want.abs().max()))     # (x rounded to bfloat16)


def test_precision_is_an_argument_of_the_module_the_functional_and_the_swap():
    assert "precision='fp32'" in repr(Conv2d(3, 4, 3, precision="fp32"))
    model = _model()
    swap_convolutions(model, precision="fp32")
    assert {m.precision for m in model.modules() if isinstance(m, Conv2d)} == {"fp32"}
    with pytest.raises(ValueError, match="unknown precision"):
        # bad input: a precision that does not exist
        Conv2d(3, 4, 3, precision="fp16")
    with pytest.raises(ValueError, match="unknown precision"):
        # bad input: the same through the swap
        swap_convolutions(_model(), precision="half")
    conv = Conv2d(3, 4, 3).eval()
    x = torch.rand(1, 3, 8, 8)
    with torch.no_grad():
        before = conv(x)
        conv.precision = "fp32"                           # resolved layers dropped: resolved again
        assert not conv._layers
        assert torch.allclose(conv(x), before)


def test_warmup_runs_one_forward_per_batch():
    model = _model()
    swap_convolutions(model)
    seconds = warmup(model, torch.rand(2, 3, 32, 32), batches=[1, 3])
    assert sorted(seconds) == [1, 3] and all(s > 0 for s in seconds.values())


# ------------------------------------------------------------------ on a CUDA device

def test_cuda_compiled_without_graph_breaks_equals_eager(cuda):
    model = _model().to(cuda)
    swap_convolutions(model)
    x = torch.rand(4, 3, 64, 64, device=cuda)
    assert _break_count(model, x) == (1, 0)
    torch._dynamo.reset()
    compiled = torch.compile(model)
    with torch.inference_mode():
        eager = model(x)
        got = compiled(x)
    assert torch.allclose(got, eager, rtol=1e-5, atol=1e-5 * float(eager.abs().max()))


def test_cuda_graphs_capture_and_replay_also_for_inputs_in_new_memory(cuda):
    import ece408_op.torch as front
    model = _model(1).to(cuda)
    swap_convolutions(model)
    torch._dynamo.reset()
    # the layers resolved for the first time inside the graphs' warm-up (whose allocations come from
    # their pool): nothing of the pool may stay alive (an earlier test in this process would hide it)
    front._functional_cache.clear()
    compiled = torch.compile(model, mode="reduce-overhead")
    with torch.inference_mode():
        for step in range(5):                             # warm-up, capture, replays
            x = torch.rand(4, 3, 64, 64, device=cuda) + step      # a new tensor each time: new memory
            want = model(x)
            got = compiled(x).clone()
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max())), step
        keep = torch.rand(4, 3, 64, 64, device=cuda)
        first = compiled(keep).clone()
        keep.mul_(-1)                                     # the same memory, new values
        assert torch.allclose(compiled(keep), model(keep), rtol=1e-5, atol=1e-5 * float(first.abs().max()))


def test_cuda_autocast_runs_the_convolutions_in_float16(cuda):
    model = _model(2).to(cuda)
    swap_convolutions(model)
    x = torch.rand(4, 3, 64, 64, device=cuda)
    with torch.inference_mode():
        want = model(x)
        with torch.autocast("cuda", dtype=torch.float16):
            got = model(x)
            half_in = model[0](x.half())
    assert got.dtype == torch.float16 and half_in.dtype == torch.float16           # as nn.Conv2d's
    assert torch.allclose(got.float(), want, rtol=0.02, atol=0.02 * float(want.abs().max()))


def test_cuda_precision_fp32_runs_plain_float32_versions(cuda):
    from ece408_op.kernels import VERSIONS
    conv = Conv2d(64, 64, 3, padding=1, precision="fp32").to(cuda).eval()
    x = torch.rand(8, 64, 28, 28, device=cuda)
    with torch.inference_mode():
        y = conv(x)
    layer = next(iter(conv._layers.values()))
    assert VERSIONS[layer.call.plan.version.number].exact
    want = torch.nn.functional.conv2d(x.double(), conv.weight.double(), conv.bias.double(), padding=1)
    assert torch.allclose(y.double(), want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))


def test_cuda_eager_host_time_is_at_most_nn_conv2ds(cuda):
    """The eager module's host time per call against nn.Conv2d's (cuDNN), rounds taking turns; 10% of room
    for a machine shared with other tests (bench gpu --network's hot path measures it alone)."""
    from ece408_op.bench.timing import host_us
    from ece408_op.kernels import wait_for_specialised
    conv = Conv2d(8, 8, 3, padding=1, kernel=9).to(cuda).eval()      # (one launch: the front-end's cost alone)
    ref = nn.Conv2d(8, 8, 3, padding=1).to(cuda).eval()
    x = torch.rand(1, 8, 8, 8, device=cuda)
    ours, theirs = [], []
    with torch.inference_mode():
        conv(x), ref(x)
        wait_for_specialised(300)
        conv(x)
        for _ in range(5):
            ours.append(host_us(lambda: conv(x), torch, calls=200, rounds=3))
            theirs.append(host_us(lambda: ref(x), torch, calls=200, rounds=3))
    plan = next(iter(conv._layers.values())).call.plan
    assert min(ours) <= 1.1 * min(theirs), (f"{min(ours):.1f} us per call against nn.Conv2d's {min(theirs):.1f} "
                                            f"({plan.label})")
