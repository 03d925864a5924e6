"""Property-based tests of the attribute parsers: whatever strings or values arrive (MXNet passes
every attribute as a string), parsing raises ShapeError/Ece408Error or nothing, never another
exception; through MXNet, only a catchable MXNetError, never a crash (checked in a subprocess)."""
import json
import subprocess
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suitekit import ROOT, python_command
from ece408_op.conv.spec import ConvSpec, infer_shapes
from ece408_op.errors import Ece408Error, ShapeError

# Values a user or a JSON file might put in an attribute: MXNet's own formats, near misses, junk.
NEAR = ["(3, 3)", "(3,3)", "[3, 3]", "3", "(3,)", "()", "[]", "None", "(0, 0)", "(-1, 2)", "(1, 2, 3)", "(3.0, 3)",
        "True", "False", "true", "0", "1", "NCHW", "NHWC", "auto", "gpu", "cpu", "v7", "7", "(2**40, 1)",
        "((3, 3),)", "'3'", "(", "))", "{}", "__import__('os')", "1e9", "-0", " 5 ", "(5,\n5)", "nan", "\x00"]
values = st.one_of(st.sampled_from(NEAR), st.text(max_size=12), st.integers(-5, 1 << 40),
                   st.tuples(st.integers(-3, 9), st.integers(-3, 9)), st.booleans(), st.none(),
                   st.floats(allow_nan=True))
SPEC_KEYS = ["num_filter", "kernel", "stride", "pad", "dilate", "num_group", "no_bias", "layout"]
attrs_strategy = st.dictionaries(st.sampled_from(SPEC_KEYS + ["device", "gpu_kernel", "workspace", "junk"]),
                                 values, max_size=9)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.fixed_dictionaries({}, optional={k: values for k in SPEC_KEYS}))
def test_conv_spec_from_attrs_raises_only_shape_error(attrs):
    try:
        spec = ConvSpec.from_attrs(**{"num_filter": attrs.pop("num_filter", 4), "kernel": attrs.pop("kernel", 3),
                                      **attrs})
    except ShapeError:
        return
    assert spec.num_filter >= 1 and min(spec.kernel + spec.stride + spec.dilate) >= 1 and min(spec.pad) >= 0
    assert ConvSpec.from_attrs(**spec.to_attrs()) == spec


shape = st.lists(st.integers(-2, 40), max_size=5)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), st.tuples(st.integers(1, 5), st.integers(1, 5)), st.integers(1, 3),
       st.integers(0, 2), st.integers(1, 3), shape, shape, shape)
def test_shape_inference_raises_only_shape_error(m, kernel, stride, pad, groups, x, w, b):
    spec = ConvSpec(num_filter=m * groups, kernel=kernel, stride=(stride, stride), pad=(pad, pad), num_group=groups,
                    no_bias=len(b) == 0)
    try:
        x_full, w_full, bias, y = infer_shapes(spec, x, w, b)
    except ShapeError:
        return
    assert len(x_full) == len(w_full) == len(y) == 4 and y[1] == spec.num_filter


@pytest.fixture(scope="module")
def op_module():
    from suitekit import require_mxnet
    return require_mxnet()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(attrs_strategy)
def test_operator_attributes_raise_only_our_errors(op_module, attrs):
    try:
        config = op_module.parse_attrs({k: str(v) for k, v in attrs.items()})
    except Ece408Error:
        return
    assert config.device in ("auto", "cpu", "gpu")


_CHILD = textwrap.dedent("""
    import json, sys, mxnet as mx, ece408_op
    x, w, b = mx.nd.ones((1, 4, 9, 9)), mx.nd.ones((4, 4, 3, 3)), mx.nd.ones((4,))
    for attrs in json.loads(sys.stdin.read()):
        try:
            inputs = [x, w] if str(attrs.get("no_bias", "True")).lower() not in ("false", "0") else [x, w, b]
            mx.nd.Custom(*inputs, op_type="ece408_conv", **attrs).wait_to_read()
            print("ok")
        except mx.base.MXNetError as exc:
            print("MXNetError")
""")


@pytest.mark.slow
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(attrs_strategy, min_size=20, max_size=20))
def test_random_attributes_through_mxnet_never_crash(op_module, batch):
    # MXNet keeps attribute values as C strings: no NUL bytes (its Python API refuses them earlier)
    batch = [{k: str(v).replace("\x00", "") for k, v in attrs.items()} for attrs in batch]
    result = subprocess.run([*python_command(), "-c", _CHILD], input=json.dumps(batch), capture_output=True,
                            text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-3000:]}"
    lines = result.stdout.split()
    assert len(lines) == len(batch) and set(lines) <= {"ok", "MXNetError"}, result.stdout
