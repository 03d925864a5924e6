"""Validation on MXNet's model zoo: networks of ``mxnet.gluon.model_zoo.vision`` built offline with
random weights (no download), every 2-D convolution swapped, compared with the original through
every way MXNet runs a network.

    python -m ece408_op bench zoo [--nets resnet18_v1 ...] [--batch 8] [--size 224] [--repeats 5]
                                  [--device cpu|gpu] [--json FILE]

validates each network here and times it (``ece408_op/bench/zoo.py``: the model-zoo table of
docs/benchmarks.md). Paths (``PATHS``):

  executor      Symbol.simple_bind of the swapped symbol (``swap_convolutions(symbol)``)
  module        mx.mod.Module of the same
  imperative    the Gluon network with its nn.Conv2D blocks replaced (``gluon.swap_blocks``), not hybridized
  hybridized    the same, hybridize()
  static        the same, hybridize(static_alloc=True, static_shape=True)
  symbolblock   ``swap_convolutions(net)``: a SymbolBlock sharing the network's parameters

Agreement: the largest |swapped - original| over the largest |original| (relative, the logits)
and whether every image's argmax is the same.
"""
from dataclasses import dataclass, field

import numpy as np

from .compat import import_mxnet
from .gluon import swap_blocks
from .swap import swap_convolutions

mx = import_mxnet()

# name -> the smallest square input (multiple of 32 where possible) its pooling layers accept
NETS = {"resnet18_v1": 32, "resnet50_v2": 32, "vgg11": 32, "alexnet": 64, "mobilenet1.0": 32,
        "squeezenet1.0": 224, "densenet121": 224, "inceptionv3": 299}
PATHS = ("executor", "module", "imperative", "hybridized", "static", "symbolblock")
TOLERANCE = 1e-4          # relative, on the logits


def build(name, seed=408):
    """A model-zoo network with random (Xavier) weights, built offline (``pretrained=False``)."""
    from mxnet.gluon.model_zoo import vision
    mx.random.seed(seed)
    net = vision.get_model(name, pretrained=False)
    net.initialize(mx.init.Xavier(magnitude=2.0))
    return net


def _randomise_batchnorm(net, seed):
    """BatchNorm statistics and scales away from the identity they are initialised to."""
    rng = np.random.default_rng(seed)
    for pname, param in net.collect_params().items():
        shape = param.shape
        if pname.endswith("running_mean") or pname.endswith("beta"):
            param.set_data(mx.nd.array(rng.normal(0, 0.1, shape).astype(np.float32)))
        elif pname.endswith("running_var") or pname.endswith("gamma"):
            param.set_data(mx.nd.array(rng.uniform(0.5, 1.5, shape).astype(np.float32)))


def parameters(net):
    return {name: p.data() for name, p in net.collect_params().items()}


def bind_executor(symbol, params, shape, context):
    executor = symbol.simple_bind(context, data=shape, grad_req="null")
    for name, array in executor.arg_dict.items():
        if name != "data":
            array[:] = params[name]
    for name, array in executor.aux_dict.items():
        array[:] = params[name]
    return executor


@dataclass
class ZooResult:
    net: str
    convolutions: int
    swapped: int
    shape: tuple
    max_rel: dict = field(default_factory=dict)       # path -> relative difference
    argmax_equal: dict = field(default_factory=dict)  # path -> bool
    seconds: dict = field(default_factory=dict)       # 'original' / 'swapped' -> median seconds
    timed_shape: tuple = None                         # the input of the timed forwards

    @property
    def ok(self):
        return all(v <= TOLERANCE for v in self.max_rel.values()) and all(self.argmax_equal.values())


def _compare(result, path, got, want):
    got, want = np.asarray(got), np.asarray(want)
    result.max_rel[path] = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
    result.argmax_equal[path] = bool((got.argmax(axis=1) == want.argmax(axis=1)).all())


def validate(name, batch=2, size=None, paths=PATHS, seed=408, **op_attrs):
    """Run ``name`` original and swapped through ``paths``; returns a ZooResult."""
    size = size or NETS[name]
    shape = (batch, 3, size, size)
    x = mx.nd.array(np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32))
    net = build(name, seed)
    net(x).wait_to_read()                                          # finish deferred initialisation
    _randomise_batchnorm(net, seed)
    want = net(x).asnumpy()
    symbol = net(mx.sym.var("data"))
    report = swap_convolutions(symbol, **op_attrs)
    result = ZooResult(name, len(report.swapped) + len(report.kept), len(report.swapped), shape)
    params = parameters(net)
    if "executor" in paths:
        executor = bind_executor(report.result, params, shape, mx.cpu())
        _compare(result, "executor", executor.forward(is_train=False, data=x)[0].asnumpy(), want)
    if "module" in paths:
        module = mx.mod.Module(report.result, data_names=["data"], label_names=None, context=mx.cpu())
        module.bind(data_shapes=[("data", shape)], for_training=False)
        module.set_params({k: v for k, v in params.items() if k in report.result.list_arguments()},
                          {k: v for k, v in params.items() if k in report.result.list_auxiliary_states()})
        module.forward(mx.io.DataBatch([x]), is_train=False)
        _compare(result, "module", module.get_outputs()[0].asnumpy(), want)
    if "symbolblock" in paths:
        block = swap_convolutions(net, **op_attrs).result
        _compare(result, "symbolblock", block(x).asnumpy(), want)
    gluon_paths = [p for p in ("imperative", "hybridized", "static") if p in paths]
    if gluon_paths:
        swap_blocks(net, **op_attrs)                               # in place, same parameters
        for path in gluon_paths:
            if path == "hybridized":
                net.hybridize()
            elif path == "static":
                net.hybridize(static_alloc=True, static_shape=True)
            _compare(result, path, net(x).asnumpy(), want)
    return result
