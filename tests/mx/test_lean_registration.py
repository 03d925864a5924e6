"""The lean CustomOp registration (mx/lean.py) against MXNet itself: shared property objects,
remembered inference that never remembers a failure, the operator's arrays and requests, errors
from every callback (the property's constructor included) as catchable MXNetErrors carrying the
reason, each in a fresh interpreter where a crash would fail the test."""
import subprocess
import textwrap

import numpy as np
import pytest

from suitekit import python_command, require_mxnet

require_mxnet()
import mxnet as mx  # noqa: E402

from ece408_op.mx import lean  # noqa: E402
from ece408_op.mx.failures import OperatorError  # noqa: E402

CALLS = {"props": 0, "shapes": 0, "types": 0, "forwards": []}


class _Double(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        CALLS["forwards"].append((is_train, list(req), len(in_data), len(out_data)))
        self.assign(out_data[0], req[0], in_data[0] * 2 + in_data[1].sum())

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        raise RuntimeError("no backward here")


@lean.register("test_lean_double")
class _DoubleProp(mx.operator.CustomOpProp):
    def __init__(self, scale="1"):
        super().__init__(need_top_grad=False)
        CALLS["props"] += 1
        self.scale = scale

    def list_arguments(self):
        return ["data", "offset"]

    def infer_shape(self, in_shape):
        CALLS["shapes"] += 1
        if len(in_shape[0]) != 2:
            raise ValueError(f"test_lean_double: data must be 2-D, got {tuple(in_shape[0])}")
        return [in_shape[0], [1]], [in_shape[0]], []

    def infer_type(self, in_type):
        CALLS["types"] += 1
        return [np.float32, np.float32], [np.float32], []

    def create_operator(self, ctx, shapes, dtypes):
        return _Double()


def test_one_property_object_and_one_inference_per_distinct_call():
    before = dict(CALLS, forwards=len(CALLS["forwards"]))
    x, one = mx.nd.ones((3, 4)), mx.nd.ones((1,))
    for _ in range(20):
        y = mx.nd.Custom(x, one, op_type="test_lean_double", scale="7")
    np.testing.assert_array_equal(y.asnumpy(), np.full((3, 4), 3.0))
    mx.nd.waitall()          # y is the last call's output: MXNet's custom-op threads may still run the others
    assert CALLS["props"] - before["props"] == 1                 # one object for 20 calls
    assert CALLS["shapes"] - before["shapes"] == 1 and CALLS["types"] - before["types"] == 1
    assert len(CALLS["forwards"]) - before["forwards"] == 20
    assert CALLS["forwards"][-1] == (False, ["write"], 2, 1)
    mx.nd.Custom(mx.nd.ones((2, 4)), one, op_type="test_lean_double", scale="7").wait_to_read()
    assert CALLS["shapes"] - before["shapes"] == 2                # new shapes: inferred again
    mx.nd.Custom(x, one, op_type="test_lean_double", scale="8").wait_to_read()
    assert CALLS["props"] - before["props"] == 2                 # new attributes: a new object


def test_a_failing_inference_fails_every_time_with_its_reason():
    bad = mx.nd.ones((2, 3, 4))
    for _ in range(2):                                            # never remembered as a success
        with pytest.raises(OperatorError, match=r"test_lean_double: data must be 2-D, got \(2, 3, 4\)"):
            mx.nd.Custom(bad, mx.nd.ones((1,)), op_type="test_lean_double").wait_to_read()
    out = mx.nd.Custom(mx.nd.ones((1, 2)), mx.nd.ones((1,)), op_type="test_lean_double")
    np.testing.assert_array_equal(out.asnumpy(), [[3.0, 3.0]])    # and the next good call works


def test_bound_graph_and_requests():
    data, offset = mx.sym.Variable("data"), mx.sym.Variable("offset")
    y = mx.sym.Custom(data, offset, op_type="test_lean_double", name="d")
    ex = y.simple_bind(mx.cpu(), grad_req="null", data=(2, 2), offset=(1,))
    ex.arg_dict["data"][:] = 5
    ex.arg_dict["offset"][:] = 1
    for _ in range(3):
        out = ex.forward(is_train=False)[0].asnumpy()
    np.testing.assert_array_equal(out, np.full((2, 2), 11.0))
    assert y.list_arguments() == ["data", "offset"] and y.infer_shape(data=(2, 2))[1] == [(2, 2)]


def _fresh(code):
    return subprocess.run([*python_command(), "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_a_raising_constructor_is_an_mxnet_error_not_a_crash():
    # with mx.operator.register this kills the interpreter (MXNet's creator does not catch it)
    result = _fresh("""
        import ece408_op, mxnet as mx
        from ece408_op.mx import lean

        @lean.register("test_lean_refuses")
        class Refuses(mx.operator.CustomOpProp):
            def __init__(self, **attrs):
                raise ValueError("test_lean_refuses: cannot be built: " + ",".join(sorted(attrs)))

        try:
            mx.nd.Custom(mx.nd.ones((2,)), op_type="test_lean_refuses", colour="red").wait_to_read()
        except mx.base.MXNetError as exc:
            print("caught:", str(exc).splitlines()[0])
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "caught: " in result.stdout and "test_lean_refuses: cannot be built: colour" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.slow
def test_forward_and_backward_errors_reach_the_caller_with_their_reason():
    result = _fresh("""
        import ece408_op, mxnet as mx
        from ece408_op.mx import lean

        class Fails(mx.operator.CustomOp):
            def forward(self, is_train, req, in_data, out_data, aux):
                raise ValueError("test_lean_fails: forward refused")

        @lean.register("test_lean_fails")
        class FailsProp(mx.operator.CustomOpProp):
            def create_operator(self, ctx, shapes, dtypes):
                return Fails()

        for _ in range(2):
            try:
                mx.nd.Custom(mx.nd.ones((2,)), op_type="test_lean_fails").wait_to_read()
            except mx.base.MXNetError as exc:
                print("caught:", str(exc).splitlines()[0])
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("test_lean_fails: forward refused") == 2 and result.stdout.count("caught:") == 2


@pytest.mark.slow                                   # measured 1.8 s (loaded machine)
def test_the_fused_operator_reports_an_unknown_attribute_instead_of_crashing():
    # its property once took named arguments only: an unknown one raised in the constructor
    result = _fresh("""
        import ece408_op, mxnet as mx
        x, w = mx.nd.ones((1, 1, 8, 8)), mx.nd.ones((2, 1, 3, 3))
        try:
            mx.nd.Custom(x, w, op_type="ece408_conv_tanh_pool", num_filter=2, kernel=3, colour="red").wait_to_read()
        except mx.base.MXNetError as exc:
            print("caught:", str(exc).splitlines()[0])
        print(mx.nd.Custom(x, w, op_type="ece408_conv_tanh_pool", num_filter=2, kernel=3).shape)
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "caught: ece408_conv_tanh_pool: unknown attribute colour; known: num_filter, kernel" in result.stdout
    assert "(1, 2, 3, 3)" in result.stdout


def test_unused_properties_are_forgotten_and_used_ones_kept():
    # a symbol holds its property (MXNet keeps the callbacks of its node): it must outlive the
    # forgetting of unused ones that more than CACHE_MAX distinct attribute sets trigger
    kept = mx.sym.Custom(mx.sym.Variable("data"), mx.sym.Variable("offset"), op_type="test_lean_double",
                         scale="kept")
    x, one = mx.nd.ones((1, 2)), mx.nd.ones((1,))
    for i in range(lean.CACHE_MAX + 20):
        mx.nd.Custom(x, one, op_type="test_lean_double", scale=f"s{i}").wait_to_read()
    assert len(lean._by_attrs) <= lean.CACHE_MAX + 1
    assert kept.infer_shape(data=(3, 2))[1] == [(3, 2)]
    ex = kept.simple_bind(mx.cpu(), grad_req="null", data=(1, 2), offset=(1,))
    ex.arg_dict["data"][:] = 1
    ex.arg_dict["offset"][:] = 2
    np.testing.assert_array_equal(ex.forward(is_train=False)[0].asnumpy(), [[4.0, 4.0]])
