"""The PyTorch front-end in every precision PyTorch users run: float16 and bfloat16 data (``.half()``,
``.bfloat16()``, autocast) on v21/v22, NCHW and channels-last, and float32 under precision 'tf32'; each
output against float64 within a bound derived from the precision (``_half_bound``, ``_tf32_bound``), its
type and layout as PyTorch's, no copies on the hot path, torch.compile without graph breaks and CUDA graphs.
Skips without PyTorch or a GPU."""
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from suitekit import allocations_per_calls  # noqa: E402
from ece408_op.torch import Conv2d, swap_convolutions  # noqa: E402
from test_torch_compile import _break_count, _model  # noqa: E402  (its network: every kind of layer)

CL = torch.channels_last
# (input shape, nn.Conv2d arguments): padding, stride, dilation, groups (grouped, depthwise), rectangular
# windows, bias, odd channels (a network's first layer), 1x1, channels not a multiple of 8, a 7x7 stem
LAYERS = [
    ((2, 3, 17, 13), dict(in_channels=3, out_channels=7, kernel_size=3, padding=1)),
    ((3, 4, 20, 19), dict(in_channels=4, out_channels=6, kernel_size=(3, 5), stride=(2, 1), padding=(1, 2))),
    ((2, 6, 15, 15), dict(in_channels=6, out_channels=9, kernel_size=3, dilation=2, groups=3, bias=False)),
    ((4, 16, 12, 11), dict(in_channels=16, out_channels=16, kernel_size=3, padding=1, groups=16)),
    ((2, 24, 14, 14), dict(in_channels=24, out_channels=24, kernel_size=5, stride=2, padding=2, groups=24, bias=False)),
    ((2, 64, 30, 30), dict(in_channels=64, out_channels=128, kernel_size=3, stride=2, padding=1, bias=False)),
    ((2, 128, 9, 9), dict(in_channels=128, out_channels=128, kernel_size=3, padding=1, groups=32)),
    ((2, 32, 7, 7), dict(in_channels=32, out_channels=200, kernel_size=1)),
    ((2, 3, 32, 32), dict(in_channels=3, out_channels=64, kernel_size=7, stride=2, padding=3, bias=False)),
    ((1, 40, 11, 11), dict(in_channels=40, out_channels=36, kernel_size=3, padding=1)),
]
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
UNIT = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}       # half an ulp, relative: y's rounding


def _ids(layer):
    return "x" + "x".join(map(str, layer[0])) + "-" + "-".join(f"{k}={v}" for k, v in layer[1].items()
                                                               if k not in ("in_channels", "out_channels"))


def _float64(conv, x, weight=None, bias=None):
    """(y, |x| * |w| summed the same way) in float64 from the tensors as given (already rounded)."""
    weight = conv.weight if weight is None else weight
    bias = conv.bias if bias is None else bias
    args = dict(stride=conv.stride, padding=conv.padding, dilation=conv.dilation, groups=conv.groups)
    x, w = x.double(), weight.double()
    y = F.conv2d(x, w, None if bias is None else bias.double(), **args)
    return y, F.conv2d(x.abs(), w.abs(), None if bias is None else bias.double().abs(), **args)


def _half_bound(y_dtype, ref, size, depth):
    """The elementwise bound of a half-precision convolution of inputs already in that type: the products of
    two halves are exact in float32 and the tensor cores' float32 sums lose at most 2^-22 of the sum of
    magnitudes per addition over the depth (C/G*KH*KW; the tensor cores align before adding, truncating),
    then y is rounded to its type (half an ulp: UNIT, and float16's smallest subnormal step, 2^-24)."""
    return UNIT[y_dtype] * ref.abs() + depth * 2.0 ** -22 * size + 2.0 ** -24


def _tf32_bound(ref, size, depth):
    """One TF32 product per pair: each operand rounded to 10 mantissa bits (2^-11 relative each, 2^-10 for
    the product), float32 sums as above; y in float32."""
    return 2.0 ** -10 * size + depth * 2.0 ** -22 * size + 2.0 ** -24 * ref.abs()


def _depth(conv):
    return conv.in_channels // conv.groups * conv.kernel_size[0] * conv.kernel_size[1]


def _check(y, ref, bound, what):
    err = (y.double() - ref).abs()
    worst = float((err / bound).max())
    assert worst <= 1.0, f"{what}: error up to {worst:.3g}x the bound (max |err| {float(err.max()):.3g})"


def _module(kwargs, seed):
    torch.manual_seed(seed)
    conv = Conv2d(**kwargs).eval()
    with torch.no_grad():
        conv.weight.mul_(2)                                   # (weights of a few tenths: sums of ones and tens)
    return conv


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layer", LAYERS, ids=_ids)
def test_half_precision_layers_match_float64(cuda, layer, dtype, layout):
    shape, kwargs = layer
    dtype = DTYPES[dtype]
    conv = _module(kwargs, seed=sum(shape)).to(cuda).to(dtype)
    torch.manual_seed(1)
    x = (torch.rand(shape, device=cuda) * 4 - 2).to(dtype)
    if layout == "channels_last":
        conv, x = conv.to(memory_format=CL), x.to(memory_format=CL)
    with torch.inference_mode():
        y = conv(x)
        want = F.conv2d(x, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups)
    assert y.dtype == dtype and y.shape == want.shape
    assert y.is_contiguous(memory_format=CL if layout == "channels_last" else torch.contiguous_format)
    assert y.stride() == want.stride()                                     # the layout cuDNN returns
    ref, size = _float64(conv, x)
    _check(y, ref, _half_bound(dtype, ref, size, _depth(conv)), f"{dtype} {layout} {layer}")
    version = next(iter(conv._layers.values())).call.plan.version.number
    assert version in (21, 22, 23)                 # (v23 where the autotuner timed it faster: Hopper)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_autocast_computes_in_its_type_as_nn_conv2d(cuda, dtype):
    dtype = DTYPES[dtype]
    conv = _module(dict(in_channels=32, out_channels=64, kernel_size=3, padding=1), 5).to(cuda)
    reference = nn.Conv2d(32, 64, 3, padding=1).to(cuda).eval()
    reference.load_state_dict(conv.state_dict())
    x = torch.rand(4, 32, 20, 20, device=cuda)
    with torch.inference_mode():
        with torch.autocast("cuda", dtype=dtype):
            y = conv(x)
            theirs = reference(x)
            again = conv(x)                               # the weights' cast kept, the same result
    assert y.dtype == theirs.dtype == dtype and torch.equal(y, again)
    half = Conv2d(32, 64, 3, padding=1).to(cuda).eval().to(dtype)
    half.load_state_dict(conv.state_dict())
    with torch.inference_mode():
        assert torch.equal(half(x.to(dtype)), y)           # autocast's casts, then the half-precision kernel
    ref, size = _float64(conv, x.to(dtype), conv.weight.to(dtype), conv.bias.to(dtype))
    _check(y, ref, _half_bound(dtype, ref, size, _depth(conv)), f"autocast {dtype}")
    with torch.inference_mode():
        conv.weight.mul_(-1)                              # changed in place: the cast is made again
        conv.bias.mul_(-1)
        with torch.autocast("cuda", dtype=dtype):
            assert torch.equal(conv(x), -y)


def test_half_channels_last_reads_in_place_one_allocation_per_call(cuda):
    conv = Conv2d(64, 64, 3, padding=1).to(cuda).eval().half().to(memory_format=CL)
    x = torch.rand(8, 64, 28, 28, device=cuda).half().to(memory_format=CL)
    with torch.inference_mode():
        count, y = allocations_per_calls(torch, cuda, lambda: conv(x))
    assert count == 10                                            # y alone: x, the weight, the bias read in place
    assert next(iter(conv._layers.values())).queue is not None    # (the hot path)
    ref, size = _float64(conv, x)
    _check(y, ref, _half_bound(torch.float16, ref, size, _depth(conv)), "hot path")


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_tf32_precision_runs_one_tf32_product(cuda, layout):
    from ece408_op.kernels import VERSIONS          # (v9 asked for: a TF32 version whatever the autotuner's choice)
    conv = _module(dict(in_channels=64, out_channels=96, kernel_size=3, padding=1, kernel="9"), 7).to(cuda)
    x = torch.rand(8, 64, 28, 28, device=cuda) * 4 - 2
    if layout == "channels_last":
        conv, x = conv.to(memory_format=CL), x.to(memory_format=CL)
    previous = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = True            # PyTorch's default: 'auto' is 'tf32'
        with torch.inference_mode():
            y = conv(x)
        plan = next(v for v in conv._layers.values() if hasattr(v, "call")).call.plan
        torch.backends.cudnn.allow_tf32 = False           # 'auto' is 'tf32x3' again: resolved anew
        with torch.inference_mode():
            exact = conv(x)
    finally:
        torch.backends.cudnn.allow_tf32 = previous
    assert y.dtype == torch.float32 and y.is_contiguous(memory_format=CL if layout == "channels_last" else
                                                         torch.contiguous_format)
    assert plan.version.number == 9 and plan.defines["TF32_PASSES"] == 1 and VERSIONS[9].tf32
    ref, size = _float64(conv, x)
    _check(y, ref, _tf32_bound(ref, size, _depth(conv)), f"tf32 {layout}")
    assert float((exact.double() - ref).abs().max()) < float((y.double() - ref).abs().max())   # 3xTF32: closer
    assert len(conv._layers) == 2


@pytest.mark.parametrize("how", ["half_channels_last", "autocast_bf16"])
def test_compiled_and_cuda_graphs_without_graph_breaks(cuda, how):
    model = _model(3).to(cuda)
    swap_convolutions(model)
    x = torch.rand(4, 3, 64, 64, device=cuda)
    if how == "half_channels_last":
        model, x = model.half().to(memory_format=CL), x.half().to(memory_format=CL)
    context = torch.autocast("cuda", dtype=torch.bfloat16) if how == "autocast_bf16" else torch.no_grad()
    with context:
        assert _break_count(model, x) == (1, 0)
        with torch.no_grad():
            eager = model(x)
        torch._dynamo.reset()
        compiled = torch.compile(model, mode="reduce-overhead")
        with torch.no_grad():
            for _ in range(3):                            # warm-up, recording, replay
                got = compiled(x)
            fresh = x.clone() * -1                        # new memory, new values
            again = compiled(fresh).clone()
            want = model(fresh)
    assert got.dtype == eager.dtype == (torch.float16 if how == "half_channels_last" else torch.bfloat16)
    scale = float(eager.abs().max())
    assert (got - eager).abs().max() <= 0.02 * scale and (again - want).abs().max() <= 0.02 * scale


def test_float32_channels_last_returns_channels_last(cuda):
    conv = _module(dict(in_channels=16, out_channels=24, kernel_size=3, padding=1), 9).to(cuda)
    x = torch.rand(2, 16, 12, 12, device=cuda)
    with torch.inference_mode():
        nchw = conv(x)
        cl = conv(x.to(memory_format=CL))
    assert cl.is_contiguous(memory_format=CL) and not cl.is_contiguous() and torch.equal(cl, nchw)
