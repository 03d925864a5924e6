"""Binding a checkpoint and scoring a batch: what every milestone runs.

``run_inference(model, n)`` is the quiet milestone: accuracy and Op Times of the
first ``n`` test images, for tests and tools.
"""
import numpy as np

from ..data import load_fashion_mnist
from ..errors import ModelError
from .compat import import_mxnet
from .models import load_model
from .op import op_times
from .swap import swap_convolutions

mx = import_mxnet()

IMAGE_SHAPE = (1, 28, 28)


def load_test_batch(count, data_dir=None):
    """The first ``count`` test images as float32 N x 1 x 28 x 28 (raw 0-255), and their labels."""
    images, labels = load_fashion_mnist("test", count, data_dir)
    return images.astype(np.float32).reshape((-1,) + IMAGE_SHAPE), labels.astype(np.float32)


def label_names(symbol):
    return [name for name in symbol.list_arguments() if name.endswith("label")]


def bind_model(symbol, arg_params, aux_params, batch_size, context=None):
    """A Module bound for inference on one batch of ``batch_size`` images."""
    labels = label_names(symbol)
    module = mx.mod.Module(symbol, context=context or mx.cpu(), label_names=labels)
    module.bind(data_shapes=[("data", (batch_size,) + IMAGE_SHAPE)],
                label_shapes=[(name, (batch_size,)) for name in labels], for_training=False)
    module.set_params(arg_params, aux_params)
    return module


def score(module, images, labels):
    """Run the whole batch once and return an Accuracy metric."""
    batch = mx.io.NDArrayIter(images, labels, batch_size=len(images),
                              label_name=(label_names(module.symbol) or ["softmax_label"])[0])
    metric = mx.metric.Accuracy()
    module.score(batch, metric)
    return metric


def prepare(symbol, custom, device, op_attrs=None):
    """The symbol to run: as saved (built-in Convolution) or with ece408_conv swapped in."""
    if not custom:
        return symbol
    # Bound with a Module (the executor), which keeps MXNet's layout conversions alive: no guards.
    report = swap_convolutions(symbol, guard=False, device=device, **(op_attrs or {}))
    if not report.swapped:
        reasons = "; ".join(f"{name}: {reason}" for name, reason in report.kept) or "it has no Convolution"
        raise ModelError(f"the model has no convolution that ece408_conv can replace ({reasons})")
    return report.result


def run_inference(model, count, use_custom=True, device="cpu", data_dir=None, op_attrs=None):
    """Quiet version of a milestone: {'name', 'accuracy', 'op_times'} for the first ``count`` images."""
    name, symbol, arg_params, aux_params = load_model(model)
    images, labels = load_test_batch(count, data_dir)
    module = bind_model(prepare(symbol, use_custom, device, op_attrs), arg_params, aux_params, len(images))
    with op_times.capture(echo=False) as start:
        metric = score(module, images, labels)
    return {"name": name, "accuracy": metric.get()[1],
            "op_times": [seconds for seconds, _ in op_times.since(start)]}
