"""The ece408_conv operator (CPU path) inside MXNet: against the built-in Convolution on the course
layers and on general ones (padding, stride, dilation, groups, bias), req, shape inference with
unknown dimensions, Op Time records, and every bad attribute, shape and dtype as a catchable
MXNetError carrying the reason, each run in a fresh interpreter so that a crash fails the test."""
import subprocess
import textwrap

import numpy as np
import pytest

from suitekit import ROOT, assert_close, needs_startup_hook, python_command, require_mxnet
from ece408_op.conv import ConvSpec, conv2d_forward_reference, reference_and_bound
from ece408_op.errors import ShapeError
from test_numpy_layer import GENERAL, SHAPES, _random

op = require_mxnet()
mx = op.mx
from ece408_op.mx.failures import OperatorError  # noqa: E402


def _custom(x, k, **attrs):
    m, _, ksize, _ = k.shape
    return mx.nd.Custom(mx.nd.array(x), mx.nd.array(k), op_type="ece408_conv", num_filter=m,
                        kernel=(ksize, ksize), **attrs).asnumpy()


def _builtin(x, k):
    m, _, ksize, _ = k.shape
    return mx.nd.Convolution(mx.nd.array(x), mx.nd.array(k), kernel=(ksize, ksize), num_filter=m,
                             no_bias=True).asnumpy()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B%dC%dH%dW%dM%dK%d" % s)
def test_operator_matches_builtin_convolution(shape, rng):
    b, c, h, w, m, ksize = shape
    x = _random((b, c, h, w), rng, 10.0)
    k = _random((m, c, ksize, ksize), rng)
    y = _custom(x, k, device="cpu")
    ref = _builtin(x, k)
    scale = np.abs(ref).max() + 1e-30
    assert_close(y, ref, atol=1e-5 * scale, rtol=1e-5, what=f"ece408_conv vs Convolution {shape}")


MORE = GENERAL + [  # (B, C, H, W, M, attrs) as MXNet's Convolution takes them (no_bias defaults to False)
    (2, 8, 12, 12, 16, dict(kernel="(3, 3)", pad="(1, 1)", stride="(2, 2)", no_bias="True")),
    (2, 3, 30, 30, 8, dict(kernel="(7, 7)", pad="(3, 3)", stride="(2, 2)")),
    (1, 16, 9, 9, 16, dict(kernel="(3, 3)", pad="(1, 1)", num_group="16", no_bias="True")),
    (2, 6, 8, 8, 12, dict(kernel="(1, 1)", stride="(2, 2)")),
    (2, 4, 11, 7, 4, dict(kernel="(1, 7)", pad="(0, 3)")),
]


@pytest.mark.parametrize("b,c,h,w,m,attrs", MORE, ids=[str(g[5]) for g in MORE])
def test_general_layers_match_builtin_and_reference(b, c, h, w, m, attrs, rng):
    spec = ConvSpec.from_attrs(num_filter=m, **{"no_bias": "False", **attrs})
    attrs = {k: v for k, v in spec.to_attrs().items() if k != "num_filter"}   # '3' -> '(3, 3)' for MXNet
    x, k = _random((b, c, h, w), rng, 3.0), _random(spec.weight_shape(c), rng)
    inputs = [x, k] + ([] if spec.no_bias else [_random((m,), rng)])
    nd_inputs = [mx.nd.array(a) for a in inputs]
    y = mx.nd.Custom(*nd_inputs, op_type="ece408_conv", num_filter=m, device="cpu", **attrs).asnumpy()
    builtin = mx.nd.Convolution(*nd_inputs, num_filter=m, **attrs).asnumpy()
    ref, bound = reference_and_bound(*inputs[:2], inputs[2] if len(inputs) > 2 else None, spec)
    assert y.shape == builtin.shape == ref.shape
    assert np.all(np.abs(y - ref) <= bound), f"max error {np.abs(y - ref).max()} over bound"
    assert_close(y, builtin, atol=1e-4 * (np.abs(builtin).max() + 1e-30), rtol=1e-5, what="vs Convolution")


def _forward_directly(req, initial, x, k):
    """Call the CustomOp's forward with a chosen req, as MXNet would."""
    out = mx.nd.array(initial)
    config = op.parse_attrs({"num_filter": str(k.shape[0]), "kernel": str(k.shape[2:])})
    forward = op.Conv2dForward(config, [x.shape, k.shape], "cpu")
    forward.forward(False, [req], [mx.nd.array(x), mx.nd.array(k)], [out], [])
    return out.asnumpy()


def test_forward_honours_req_add_and_null(rng):
    x = _random((2, 2, 8, 8), rng)
    k = _random((3, 2, 3, 3), rng)
    initial = _random((2, 3, 6, 6), rng)
    y = conv2d_forward_reference(x, k)
    assert_close(_forward_directly("write", initial, x, k), y, atol=1e-5)
    assert_close(_forward_directly("add", initial, x, k), initial + y, atol=1e-5)
    assert np.array_equal(_forward_directly("null", initial, x, k), initial)


def test_weight_shape_is_inferred_from_data():
    data = mx.sym.Variable("data")
    y = mx.sym.Custom(data, mx.sym.Variable("w"), op_type="ece408_conv", num_filter=50, kernel="(5, 5)")
    args, outs, _ = y.infer_shape(data=(10, 1, 28, 28))
    assert args == [(10, 1, 28, 28), (50, 1, 5, 5)]
    assert outs == [(10, 50, 24, 24)]


@pytest.mark.parametrize("hint", ["(64, 0, 3, 3)", "(64, -1, 3, 3)", "(0, 0, 3, 3)"])
def test_unknown_weight_dimensions_are_filled_from_the_data(hint):
    # Gluon-exported weights carry __shape__ hints with 0 (or -1) for the deferred in-channels.
    weight = mx.sym.Variable("w", shape=eval(hint))
    bias = mx.sym.Variable("b", shape=(0,))
    y = mx.sym.Custom(mx.sym.Variable("data"), weight, bias, op_type="ece408_conv", num_filter=64,
                      kernel="(3, 3)", stride="(2, 2)", pad="(1, 1)", no_bias="False")
    args, outs, _ = y.infer_shape(data=(2, 5, 9, 9))
    assert args == [(2, 5, 9, 9), (64, 5, 3, 3), (64,)] and outs == [(2, 64, 5, 5)]
    executor = y.simple_bind(mx.cpu(), data=(2, 5, 9, 9), grad_req="null")
    assert executor.forward()[0].shape == (2, 64, 5, 5)


def test_data_channels_follow_from_the_weight_where_unknown():
    y = mx.sym.Custom(mx.sym.Variable("data"), mx.sym.Variable("w"), op_type="ece408_conv",
                      num_filter=8, kernel="(3, 3)", num_group="2")
    args, outs, _ = y.infer_shape_partial(w=(8, 3, 3, 3))
    assert args[0][1] == 6 and outs[0][1] == 8


def test_op_time_is_recorded_per_forward(rng):
    x = _random((4, 1, 28, 28), rng)
    k = _random((50, 1, 5, 5), rng)
    mx.nd.waitall()                   # an earlier test's forwards, still queued in MXNet's engine, add theirs first
    start = len(op.op_times.records)
    _custom(x, k)
    _custom(x, k)
    got = op.op_times.since(start)
    assert len(got) == 2 and all(seconds > 0 and path == "cpu" for seconds, path in got)


def test_bad_shape_in_a_symbol_is_an_mxnet_error_with_its_reason():
    # bad input: a kernel larger than the image, found at shape inference
    data = mx.sym.Variable("data")
    y = mx.sym.Custom(data, mx.sym.Variable("w"), op_type="ece408_conv", num_filter=2, kernel=9)
    with pytest.raises(mx.base.MXNetError) as info:
        y.infer_shape(data=(1, 1, 4, 4))
    assert isinstance(info.value, OperatorError) and isinstance(info.value.cause, ShapeError)
    assert str(info.value).splitlines()[0] == \
        "ece408_conv: kernel 9x9 (dilated to 9 in height) does not fit a 4x4 input padded by (0, 0)"


# Each bad input is run in a fresh interpreter: a crash (segfault, abort) fails the test, and the
# script prints the first line of the MXNetError it caught.
BAD_INPUTS = [
    ("nd", dict(num_filter=4, kernel="(3, 3)", pad="(-1, 0)"), "ece408_conv: pad='(-1, 0)' must be at least 0"),
    ("nd", dict(num_filter=4, kernel="(3, 3)", stride="(0, 1)"), "ece408_conv: stride='(0, 1)' must be at least 1"),
    ("nd", dict(num_filter=4, kernel="(3, 5, 1)"), "ece408_conv: kernel='(3, 5, 1)' must be one or two integers "
                                                   "(2-D convolution)"),
    ("nd", dict(num_filter=0, kernel=3), "ece408_conv: num_filter='0' must be at least 1"),
    ("nd", dict(num_filter=4, kernel=3, no_bias="perhaps"), "ece408_conv: no_bias='perhaps' is not a boolean; "
                                                            "use True or False"),
    ("nd", dict(num_filter=4, kernel=3, device="tpu"), "ece408_conv: device='tpu' is not one of auto, cpu, gpu"),
    ("nd", dict(num_filter=4, kernel=3, gpu_kernel="v99"), "ece408_conv: gpu_kernel='v99': unknown kernel 'v99'"),
    ("nd", dict(num_filter=4, kernel=3, precision="fp16"), "ece408_conv: precision='fp16': unknown precision 'fp16'"),
    ("nd", dict(num_filter=4, kernel=3, layout="NHWC"), "ece408_conv: layout='NHWC' is not supported; use NCHW"),
    ("nd", dict(num_filter=4, kernel=3, colour="blue"), "ece408_conv: unknown attribute colour='blue'"),
    ("nd", dict(num_filter=4), "ece408_conv: kernel is required, e.g. kernel=(3, 3)"),
    ("nd", dict(num_filter=3, kernel=3, num_group=2), "ece408_conv: num_filter=3 is not a multiple of num_group=2"),
    ("sym", dict(num_filter=4, kernel=9), "ece408_conv: kernel 9x9 (dilated to 9 in height) does not fit a 8x8 "
                                          "input padded by (0, 0)"),
    ("nd-weight", dict(num_filter=4, kernel=3), "ece408_conv: weight has shape (4, 3, 3, 3), expected (4, 2, 3, 3)"),
    ("nd-3d", dict(num_filter=4, kernel=3), "ece408_conv: data must be 4-D (B, C, H, W), got shape (2, 8, 8)"),
    ("nd-fp16", dict(num_filter=4, kernel=3), "ece408_conv works on float32 only, got data of type float16"),
    ("sym", dict(num_filter=4, kernel=3, dilate="(0, 1)"), "ece408_conv: dilate='(0, 1)' must be at least 1"),
    ("bind", dict(num_filter=4, kernel=3, pad="x"), "ece408_conv: pad='x' is not a size; use e.g. pad=(3, 3)"),
]

_SCRIPT = textwrap.dedent("""
    import sys, mxnet as mx
    import ece408_op
    how, attrs = sys.argv[1], eval(sys.argv[2])
    x, w = mx.nd.ones((2, 2, 8, 8)), mx.nd.ones((4, 2, 3, 3))
    try:
        if how == "nd":
            mx.nd.Custom(x, w, op_type="ece408_conv", **attrs).wait_to_read()
        elif how == "nd-weight":
            mx.nd.Custom(x, mx.nd.ones((4, 3, 3, 3)), op_type="ece408_conv", **attrs).wait_to_read()
        elif how == "nd-3d":
            mx.nd.Custom(mx.nd.ones((2, 8, 8)), w, op_type="ece408_conv", **attrs).wait_to_read()
        elif how == "nd-fp16":
            mx.nd.Custom(x.astype("float16"), w.astype("float16"), op_type="ece408_conv", **attrs).wait_to_read()
        elif how == "sym":
            y = mx.sym.Custom(mx.sym.var("data"), mx.sym.var("w"), op_type="ece408_conv", **attrs)
            y.infer_shape(data=(2, 2, 8, 8))
        elif how == "bind":
            y = mx.sym.Custom(mx.sym.var("data"), mx.sym.var("w"), op_type="ece408_conv", **attrs)
            y.simple_bind(mx.cpu(), data=(2, 2, 8, 8)).forward()[0].wait_to_read()
    except (mx.base.MXNetError, RuntimeError) as exc:
        # nd calls raise our OperatorError, whose first line is the reason; Symbol.infer_shape and
        # simple_bind (which raises a RuntimeError) put "infer_shape error. Arguments: ..." first
        assert isinstance(exc, mx.base.MXNetError) or how == "bind", type(exc)
        lines = str(exc).splitlines()
        assert how not in ("nd", "nd-weight", "nd-3d", "nd-fp16") or lines[0].startswith("ece408_conv")
        print(next(line for line in lines if line.startswith("ece408_conv")))
        sys.exit(0)
    sys.exit("no error")
""")


@pytest.mark.slow
@needs_startup_hook
@pytest.mark.parametrize("how,attrs,reason", BAD_INPUTS, ids=[f"{h}-{sorted(a.items())}" for h, a, _ in BAD_INPUTS])
def test_bad_input_is_a_catchable_mxnet_error_never_a_crash(how, attrs, reason):
    # bad input: each attribute, shape and dtype above
    result = subprocess.run([*python_command(), "-c", _SCRIPT, how, repr(attrs)], capture_output=True,
                            text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-2000:]}"
    # (Symbol.infer_shape itself prints "infer_shape error. Arguments: ..." first: the last line is ours)
    assert result.stdout.splitlines()[-1].startswith(reason), result.stdout
    assert "Traceback" not in result.stdout + result.stderr     # one line, no dumped traceback


@pytest.mark.slow
def test_exit_with_work_still_queued_is_clean():
    # A program that ends while MXNet still has a forward of ours queued (no wait_to_read): MXNet's
    # shutdown would run it in a finalising interpreter and abort; the operator finishes it first.
    code = ("import ece408_op, mxnet as mx\n"
            "c = ece408_op.gluon.Conv2D(4, 3, in_channels=2)\nc.initialize()\nc.hybridize()\n"
            "c(mx.nd.ones((1, 2, 5, 5))).wait_to_read()\ny = c(mx.nd.ones((64, 2, 50, 50)))\n")
    for _ in range(3):
        result = subprocess.run([*python_command(), "-c", code], capture_output=True, text=True, cwd=ROOT)
        assert result.returncode == 0 and "terminate" not in result.stderr, result.stderr[-2000:]


def test_precision_is_an_attribute_of_the_operator():
    base = {"num_filter": "4", "kernel": "(3, 3)"}
    assert op.parse_attrs(base).precision == "auto"
    assert op.parse_attrs({**base, "precision": "FP32"}).precision == "fp32"
    assert op.parse_attrs({**base, "precision": "tf32x3"}).precision == "tf32x3"
    with pytest.raises(ShapeError, match="precision='half': unknown precision"):
        # bad input: a precision that does not exist
        op.parse_attrs({**base, "precision": "half"})


def test_parsed_attributes_are_remembered_per_attribute_set_and_errors_are_not():
    """Properties built again (MXNet's own registration built one per imperative call; lean.register
    rebuilds those it forgot): the attribute strings are parsed once per distinct set, and a bad
    set fails again every time (nothing cached)."""
    attrs = {"num_filter": "8", "kernel": "(3, 3)", "pad": "(1, 1)", "device": "cpu"}
    first = op._parsed(attrs)
    assert op._parsed(dict(reversed(list(attrs.items())))) is first            # same set, any order
    assert op._parsed({**attrs, "pad": "(0, 0)"}) is not first
    assert first == op.parse_attrs(attrs)
    bad = {"num_filter": "8", "kernel": "(3, 3)", "stride": "(0, 1)"}
    for _ in range(2):
        # bad input: a zero stride, refused on every call
        with pytest.raises(ShapeError, match="stride"):
            op._parsed(bad)
    assert tuple(sorted(bad.items())) not in op._PARSED


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_row_sparse_inputs_are_made_dense_as_the_builtin_does(rng):
    # MXNet's built-in Convolution takes row_sparse arrays (a dense temporary, "storage fallback");
    # so does ece408_conv, imperatively and bound in a graph. (csr holds only 2-D arrays: no
    # convolution input can be one.)
    x, k, bias = _random((2, 3, 9, 8), rng, 3.0), _random((4, 3, 3, 3), rng), _random((4,), rng)
    x[1, :, 2:5] = 0                                          # rows of zeros, as sparse data has
    want = mx.nd.Convolution(*[mx.nd.array(a) for a in (x, k, bias)], kernel=(3, 3), num_filter=4).asnumpy()
    attrs = dict(op_type="ece408_conv", num_filter=4, kernel="(3, 3)", no_bias="False")
    for sparse in ([0], [1], [0, 1, 2]):
        inputs = [mx.nd.array(a).tostype("row_sparse") if i in sparse else mx.nd.array(a)
                  for i, a in enumerate((x, k, bias))]
        assert_close(mx.nd.Custom(*inputs, **attrs).asnumpy(), want, atol=1e-5, what=f"row_sparse {sparse}")
        dense = mx.nd.Custom(*[mx.nd.array(a) for a in (x, k, bias)], **attrs)   # the same operator after
        assert_close(dense.asnumpy(), want, atol=1e-5, what="dense after sparse")
    data, weight, b = mx.sym.var("data", stype="row_sparse"), mx.sym.var("weight"), mx.sym.var("bias")
    executor = mx.sym.Custom(data, weight, b, **attrs).simple_bind(mx.cpu(), data=x.shape, grad_req="null",
                                                                   stype_dict={"data": "row_sparse"})
    executor.arg_dict["weight"][:] = k
    executor.arg_dict["bias"][:] = bias
    for _ in range(2):
        got = executor.forward(is_train=False, data=mx.nd.array(x).tostype("row_sparse"))[0]
        assert_close(got.asnumpy(), want, atol=1e-5, what="row_sparse data through the executor")
