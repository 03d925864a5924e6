"""The model zoo (eight networks of mxnet.gluon.model_zoo.vision, random weights, built offline): every
2-D convolution swapped, logits within 1e-4 relative of the original and the same argmax, through the
executor, Module, Gluon imperative, hybridized (static allocation off and on) and SymbolBlock paths.
Small inputs on the CPU (each network's smallest accepted size; about 30 s on 2 cores in all)."""
import pytest

from suitekit import require_mxnet

zoo = require_mxnet("ece408_op.mx.zoo")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(zoo.NETS))
def test_every_convolution_swapped_and_logits_agree_on_every_path(name):
    size = zoo.NETS[name]
    result = zoo.validate(name, batch=1 if size >= 224 else 2, device="cpu")
    assert result.convolutions > 0 and result.swapped == result.convolutions
    assert set(result.max_rel) == set(zoo.PATHS)
    bad = {path: err for path, err in result.max_rel.items() if not err <= zoo.TOLERANCE}
    assert not bad, f"{name}: relative difference over {zoo.TOLERANCE}: {bad}"
    assert all(result.argmax_equal.values()), result.argmax_equal
