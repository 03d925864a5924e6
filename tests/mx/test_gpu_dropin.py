"""The drop-in on the GPU path (needs MXNet + a GPU; skips cleanly without): ece408_conv with
device='gpu' on general layers (padding, stride, dilation, groups, bias) against the float64
reference, every kernel version on a layer it may not support (automatic fallback for 'auto', a
one-line reason for an explicit one), and model-zoo networks swapped with device='gpu' through
every path."""
import numpy as np
import pytest

from suitekit import require_mxnet
from ece408_op.conv import ConvSpec, reference_and_bound
from test_numpy_layer import _random
from test_operator import MORE

op = require_mxnet()
mx = op.mx
from ece408_op import kernels  # noqa: E402
from ece408_op.mx import zoo  # noqa: E402


def _run(inputs, spec, **attrs):
    nd_inputs = [mx.nd.array(a) for a in inputs]
    return mx.nd.Custom(*nd_inputs, op_type="ece408_conv", **spec.to_attrs(), **attrs).asnumpy()


@pytest.mark.parametrize("b,c,h,w,m,attrs", MORE, ids=[str(g[5]) for g in MORE])
def test_general_layers_on_the_gpu_path(gpu, b, c, h, w, m, attrs, rng):
    spec = ConvSpec.from_attrs(num_filter=m, **{"no_bias": "False", **attrs})
    inputs = [_random((b, c, h, w), rng, 3.0), _random(spec.weight_shape(c), rng)]
    bias = None if spec.no_bias else _random((m,), rng)
    ref, bound = reference_and_bound(*inputs, bias, spec)
    y = _run(inputs + ([] if bias is None else [bias]), spec, device="gpu")
    assert np.all(np.abs(y - ref) <= bound), f"max error {np.abs(y - ref).max()}"


@pytest.mark.parametrize("version", sorted(kernels.VERSIONS))
def test_explicit_versions_run_or_say_why(gpu, version, rng):
    spec = ConvSpec.from_attrs(num_filter=8, kernel="(3, 3)", pad="(1, 1)", stride="(2, 2)", no_bias="False")
    inputs = [_random((2, 4, 11, 11), rng), _random(spec.weight_shape(4), rng), _random((8,), rng)]
    ref, bound = reference_and_bound(*inputs, spec)
    try:
        y = _run(inputs, spec, device="gpu", gpu_kernel=str(version))
    except mx.base.MXNetError as exc:        # excluded by the capability table: one line with the reason
        assert str(exc).splitlines()[0].startswith("ece408_conv: kernel v"), str(exc)
        return
    assert np.all(np.abs(y - ref) <= bound)


def test_fast_runs_winograd_on_a_networks_3x3_layers(gpu):
    # gpu_kernel=fast on a whole network: v12 on its 3x3 stride-1 layers (64-512 channels), the default on
    # the stem, the stride-2 and the 1x1 layers; the swapped network agrees with the original.
    from ece408_op import kernels
    with gpu.profiling() as profile:
        result = zoo.validate("resnet18_v1", batch=2, device="gpu", gpu_kernel="fast")
    assert result.swapped == result.convolutions
    assert all(err <= zoo.TOLERANCE for err in result.max_rel.values()), result.max_rel
    assert all(result.argmax_equal.values()), result.argmax_equal
    ran = {name for name in profile.samples if name.startswith("conv_forward v")}
    assert "conv_forward v12 winograd" in ran and len(ran) >= 2, ran


@pytest.mark.parametrize("name", ["resnet18_v1", "inceptionv3"])
def test_model_zoo_on_the_gpu_path(gpu, name):
    result = zoo.validate(name, batch=2, device="gpu")
    assert result.swapped == result.convolutions
    assert all(err <= zoo.TOLERANCE for err in result.max_rel.values()), result.max_rel
    assert all(result.argmax_equal.values()), result.argmax_equal
