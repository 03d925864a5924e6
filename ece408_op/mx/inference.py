"""Binding a checkpoint and scoring a batch: what every milestone runs.

``run_inference(model, n)`` is the quiet milestone: accuracy and Op Times of the
first ``n`` test images, for tests and tools.
"""
import threading

import numpy as np

from ..data import load_fashion_mnist
from ..errors import ModelError
from .compat import import_mxnet
from .models import DEFAULT_INPUT_SHAPE, input_shape, load_model, model_input_shape
from .op import op_times
from .swap import swap_convolutions

mx = import_mxnet()

IMAGE_SHAPE = DEFAULT_INPUT_SHAPE          # Fashion-MNIST as it comes


def load_test_batch(count, data_dir=None, shape=IMAGE_SHAPE):
    """The first ``count`` test images as float32 N x C x H x W (raw 0-255), and their labels.
    ``shape`` is the model's input (``models.input_shape``): 1 x 28 x 28, or 1 x S x S for the
    later course models, whose inputs are the 28x28 images resized (cached, data/resize.py)."""
    shape = tuple(shape)
    if shape == IMAGE_SHAPE:
        images, labels = load_fashion_mnist("test", count, data_dir)
    elif shape[0] == 1 and shape[1] == shape[2]:
        from ..data.resize import load_resized
        images, labels = load_resized("test", shape[1], count, data_dir)
    else:
        raise ModelError(f"the model takes {shape[0]} x {shape[1]} x {shape[2]} inputs; Fashion-MNIST "
                         "gives 1 x S x S (one channel, square): use a model with such an input")
    return images.astype(np.float32).reshape((-1,) + shape), labels.astype(np.float32)


def label_names(symbol):
    return [name for name in symbol.list_arguments() if name.endswith("label")]


# MXNet 1.x's graph executor (Module, simple_bind) is not thread-safe: two threads binding at
# once can corrupt its heap (seen here: "free(): invalid size" about once in 360 runs of two
# threads binding and running; MXNet's "Multi Threaded Inference" guide says so). Binding is
# serialised; the forwards of bound executors still run concurrently in MXNet's engine.
BIND_LOCK = threading.Lock()


def bind_model(symbol, arg_params, aux_params, batch_size, context=None):
    """A Module bound for inference on one batch of ``batch_size`` images of the model's shape
    (safe to call from several threads: binds take BIND_LOCK)."""
    labels = label_names(symbol)
    with BIND_LOCK:
        module = mx.mod.Module(symbol, context=context or mx.cpu(), label_names=labels)
        module.bind(data_shapes=[("data", (batch_size,) + input_shape(symbol))],
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


def prepare(symbol, custom, device, op_attrs=None, fuse=False):
    """The symbol to run: as saved (built-in Convolution) or with ece408_conv swapped in; where
    ``fuse``, each conv -> tanh -> 2x2 max-pool chain first becomes one ece408_conv_tanh_pool."""
    if not custom:
        return symbol
    # Bound with a Module (the executor), which keeps MXNet's layout conversions alive: no guards.
    report = swap_convolutions(symbol, guard=False, fuse=fuse, device=device, **(op_attrs or {}))
    if not report.swapped and not report.fused:
        reasons = "; ".join(f"{name}: {reason}" for name, reason in report.kept) or "it has no Convolution"
        raise ModelError(f"the model has no convolution that ece408_conv can replace ({reasons})")
    return report.result


def run_inference(model, count, use_custom=True, device="cpu", data_dir=None, op_attrs=None, fuse=False):
    """Quiet version of a milestone: {'name', 'accuracy', 'op_times'} for the first ``count`` images."""
    images, labels = load_test_batch(count, data_dir, model_input_shape(model))
    name, symbol, arg_params, aux_params = load_model(model)
    module = bind_model(prepare(symbol, use_custom, device, op_attrs, fuse), arg_params, aux_params, len(images))
    with op_times.capture() as start:
        metric = score(module, images, labels)
    return {"name": name, "accuracy": metric.get()[1],
            "op_times": [seconds for seconds, _ in op_times.since(start)]}
