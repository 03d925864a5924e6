"""Every layer F.conv2d runs runs on the drop-in too (ece408_op.torch): on a kernel version, or on
PyTorch's own convolution, said once per configuration; never an exception the built-in would not raise.

Anywhere PyTorch is installed: the functional's string padding ('same', 'valid'; PyTorch's errors for
the rest), other element types on the CPU, the warning said once. On a CUDA device: seeded random general
layers (groups of any width, depthwise multipliers, strides, dilations, rectangular kernels, unbatched
inputs, both layouts) in float32, float16, bfloat16 and float64 against a float64 reference, each output's
error within twice cuDNN's in the same type; and PyTorch's own OpInfo samples of nn.functional.conv2d
(torch.testing._internal, which imports the small ``expecttest`` package) in every dtype they list."""
import warnings

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from ece408_op.torch import Conv2d, conv2d  # noqa: E402


def _error(y, ref):
    """The largest absolute difference of ``y`` from ``ref`` (float64), as a float."""
    return float((y.detach().to(torch.complex128 if y.is_complex() else torch.float64) - ref).abs().max()) \
        if y.numel() else 0.0


def _floor(ref, dtype):
    """The error a correctly rounded result of ``dtype`` may have: a few of its units at ref's scale."""
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else torch.finfo(torch.float32).eps
    return 4 * eps * (float(ref.abs().max()) if ref.numel() else 0.0)


# ------------------------------------------------------------------ anywhere PyTorch is installed

@pytest.mark.parametrize("shape, k, dilation", [((2, 3, 11, 12), (4, 4), 1), ((1, 2, 9, 9), (3, 2), (2, 1)),
                                                ((3, 10, 10), (3, 3), 1)])
def test_the_functional_takes_same_and_valid_as_f_conv2d_does(shape, k, dilation):
    torch.manual_seed(0)
    x = torch.rand(shape) * 2 - 1
    c = shape[-3]
    w = torch.rand(5, c, *k) - 0.5
    b = torch.rand(5)
    for padding in ("same", "valid"):
        with torch.no_grad():
            want = F.conv2d(x, w, b, padding=padding, dilation=dilation)
            got = conv2d(x, w, b, padding=padding, dilation=dilation)
        assert got.shape == want.shape, (padding, got.shape, want.shape)
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), padding


@pytest.mark.parametrize("kwargs, words", [(dict(padding="same", stride=2), "not supported for strided"),
                                            (dict(padding="full"), "Invalid padding string")])
def test_string_padding_errors_are_pytorchs(kwargs, words):
    # bad input: strided 'same' and an unknown string: the built-in's own kind of error, the same words
    x, w = torch.rand(1, 3, 9, 9), torch.rand(4, 3, 3, 3)
    with pytest.raises(Exception, match=words) as builtin:
        F.conv2d(x, w, **kwargs)
    with torch.no_grad(), pytest.raises(builtin.type, match=words):
        conv2d(x, w, **kwargs)


def test_other_types_on_the_cpu_run_on_pytorchs_convolution_said_once():
    import ece408_op.torch as front
    front._said.clear()                         # said once per process: what earlier tests said, forgotten
    torch.manual_seed(1)
    conv = Conv2d(3, 5, 3, padding=1).double().eval()
    x = torch.rand(2, 3, 9, 9, dtype=torch.float64)
    with torch.no_grad(), warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        first = conv(x)
        second = conv(x)
    assert torch.equal(first, F.conv2d(x, conv.weight, conv.bias, padding=1)) and torch.equal(first, second)
    lines = [str(w.message) for w in said if "ece408_op.torch" in str(w.message)]
    assert len(lines) == 1 and "not torch.float64" in lines[0] and "torch.nn.functional.conv2d" in lines[0], lines
    for dtype in (torch.float16, torch.bfloat16):            # half precision on the CPU: PyTorch's own
        half = Conv2d(3, 5, 3).eval().to(dtype)
        xh = torch.rand(1, 3, 9, 9, dtype=dtype)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert torch.equal(half(xh), F.conv2d(xh, half.weight, half.bias))
    # integer tensors: whatever F.conv2d says of them, the drop-in says too (never a different error)
    xi, wi = torch.ones(1, 3, 5, 5, dtype=torch.int32), torch.ones(2, 3, 3, 3, dtype=torch.int32)
    try:
        F.conv2d(xi, wi)
        builtin = None
    except Exception as exc:                                     # noqa: BLE001  its type is the point
        builtin = type(exc)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if builtin is None:
            assert torch.equal(conv2d(xi, wi), F.conv2d(xi, wi))
        else:
            with pytest.raises(builtin):
                conv2d(xi, wi)


# ------------------------------------------------------------------ on a CUDA device

def _random_layers(count, seed):
    """``count`` seeded general layers: (x shape, weight shape, stride, padding, dilation, groups)."""
    g = torch.Generator().manual_seed(seed)

    def pick(*options):
        return options[int(torch.randint(len(options), (1,), generator=g))]
    layers = []
    for _ in range(count):
        groups = pick(1, 1, 2, 3, 4, 8)
        per_in = pick(1, 3, 5, 7, 8, 9, 13, 16)
        mult = pick(1, 2, 3) if groups > 1 else 1
        per_out = pick(per_in * mult, 4, 8, 6)
        kh, kw = pick(1, 3, 5), pick(1, 3, 2, 5)
        stride, dilation = (pick(1, 2), pick(1, 2, 3)), (pick(1, 2), pick(1, 1, 2))
        padding = (pick(0, 1, 2), pick(0, 1, 3))
        h, w = pick(7, 12, 17), pick(6, 13, 20)
        if h + 2 * padding[0] < dilation[0] * (kh - 1) + 1 or w + 2 * padding[1] < dilation[1] * (kw - 1) + 1:
            padding = (dilation[0] * kh, dilation[1] * kw)
        layers.append(((pick(1, 2, 5), groups * per_in, h, w), (groups * per_out, per_in, kh, kw), stride, padding,
                       dilation, groups))
    return layers


DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[1])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_random_general_layers_run_in_every_dtype(cuda, dtype, layout):
    """30 seeded general layers: no RuntimeError, each output within twice cuDNN's error in the same
    type (float32: PyTorch's default, TF32 allowed on both sides) against float64, unbatched once in five."""
    torch.backends.cudnn.allow_tf32 = True
    try:
        for i, (xs, ws, stride, padding, dilation, groups) in enumerate(_random_layers(30, seed=48)):
            torch.manual_seed(i)
            x = torch.rand(xs, device=cuda, dtype=torch.float64) * 2 - 1
            w = (torch.rand(ws, device=cuda, dtype=torch.float64) - 0.5) / (ws[1] * ws[2] * ws[3]) ** 0.5
            b = torch.rand(ws[0], device=cuda, dtype=torch.float64) if i % 2 else None
            xt, wt = x.to(dtype), w.to(dtype)
            bt = None if b is None else b.to(dtype)
            if layout == "channels_last":
                xt, wt = xt.contiguous(memory_format=torch.channels_last), wt.contiguous(memory_format=torch.channels_last)
            if i % 5 == 4:
                xt, x = xt[0], x[0]
            what = f"layer {i}: x {tuple(xt.shape)} w {ws} stride {stride} padding {padding} dilation {dilation} " \
                   f"groups {groups} {dtype} {layout}"
            ref = F.conv2d(xt.double(), wt.double(), None if bt is None else bt.double(), stride, padding, dilation,
                           groups)
            with torch.inference_mode(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                theirs = F.conv2d(xt, wt, bt, stride, padding, dilation, groups)
                ours = conv2d(xt, wt, bt, stride, padding, dilation, groups)
            assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, what
            mine, cudnn = _error(ours, ref), _error(theirs, ref)
            assert mine <= 2 * cudnn + _floor(ref, dtype), f"{what}: error {mine:.3g}, cuDNN's {cudnn:.3g}"
    finally:
        torch.backends.cudnn.allow_tf32 = False


# PyTorch's OpInfo database freezes the process's cuDNN flags when it is imported (its test utilities call
# torch.backends.disable_global_flags()), so its samples run in a child process of their own.
OPINFO_CHILD = r"""
import json, sys, warnings
import torch
import torch.nn.functional as F
from torch.testing._internal.common_methods_invocations import op_db
from ece408_op.torch import conv2d
sys.path.insert(0, sys.argv[1])
from test_torch_every_layer import _error, _floor

(op,) = [o for o in op_db if o.name == "nn.functional.conv2d" and not o.variant_test_name]
device = torch.device("cuda", int(sys.argv[2]))
ran, failures = {}, []
with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
    for dtype in sorted(op.supported_dtypes("cuda"), key=str):
        for sample in op.sample_inputs(device, dtype, requires_grad=False):
            args, kwargs = list(sample.args), dict(sample.kwargs)
            what = f"{dtype} x {tuple(sample.input.shape)} args {[tuple(getattr(a, 'shape', ())) or a for a in args]} {kwargs}"
            with torch.inference_mode(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    theirs = F.conv2d(sample.input, *args, **kwargs)
                except Exception as exc:
                    try:
                        conv2d(sample.input, *args, **kwargs)
                        failures.append(f"{what}: F.conv2d raised {type(exc).__name__}, the drop-in did not")
                    except Exception as mine:
                        if type(mine) is not type(exc):
                            failures.append(f"{what}: {type(mine).__name__} where F.conv2d raised {type(exc).__name__}")
                    continue
                try:
                    ours = conv2d(sample.input, *args, **kwargs)
                except Exception as exc:
                    failures.append(f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
                    continue
            wide = torch.complex128 if dtype.is_complex else torch.float64
            ref = F.conv2d(sample.input.to(wide), *[a.to(wide) if isinstance(a, torch.Tensor) else a for a in args],
                           **{k: v.to(wide) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})
            if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
                failures.append(f"{what}: {tuple(ours.shape)} {ours.dtype}, F.conv2d {tuple(theirs.shape)} {theirs.dtype}")
                continue
            mine, cudnn = _error(ours, ref), _error(theirs, ref)
            if not mine <= 2 * cudnn + _floor(ref, dtype if dtype.is_floating_point else torch.float32):
                failures.append(f"{what}: error {mine:.3g}, F.conv2d's {cudnn:.3g}")
            ran[str(dtype)] = ran.get(str(dtype), 0) + 1
print("RESULT " + json.dumps({"ran": ran, "failures": failures}))
"""


def test_pytorchs_own_opinfo_samples_all_agree(cuda):
    """Every sample input PyTorch's OpInfo lists for nn.functional.conv2d, in every dtype it lists on
    CUDA: the drop-in's output within twice F.conv2d's error against float64 (complex: the same), or
    the same exception type as F.conv2d's."""
    pytest.importorskip("expecttest", reason="PyTorch's OpInfo database imports expecttest: pip install expecttest")
    import json
    import subprocess
    import sys
    from pathlib import Path
    child = subprocess.run([sys.executable, "-c", OPINFO_CHILD, str(Path(__file__).parent), str(cuda.index or 0)],
                           capture_output=True, text=True, timeout=600)
    found = [line for line in child.stdout.splitlines() if line.startswith("RESULT ")]
    assert child.returncode == 0 and found, child.stdout[-2000:] + child.stderr[-3000:]
    result = json.loads(found[-1][len("RESULT "):])
    print("OpInfo samples that ran, by dtype:", result["ran"])
    assert not result["failures"], "\n".join(result["failures"][:20])
    assert {"torch.float32", "torch.float16", "torch.bfloat16"} <= set(result["ran"]), result["ran"]
