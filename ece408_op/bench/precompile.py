"""Every module the GPU benchmarks load, built ahead into the cubin cache on a machine without a GPU
(``bench gpu --precompile``: nvcc alone): the suite's (with its tile sweep), and the network benchmark's
with the autotuner's candidates for each of its layers (those need PyTorch, to find the layers' shapes
on the meta device).
"""
from ..conv import ConvSpec
from ..kernels import autotune
from ..kernels.choice import resolve_version
from ..kernels.plans import module_spec
from ..kernels.shape import ConvShape
from ..kernels.versions import FUSED, VERSIONS
from .suite import LAYERS
from .tiles import TILE_LAYERS, tile_configs


def suite_modules(quick=False, layers=None, tiles=True):
    """The module of every plan the suite (and with ``tiles`` the tile sweep) loads (of ``layers``:
    names, default all)."""
    modules = []
    for layer in LAYERS:
        if layers and layer.name not in layers:
            continue
        shape = layer.shape()
        modules += [module_spec(n, VERSIONS[n].inner(shape)) for n in VERSIONS if VERSIONS[n].unsupported(shape) is None]
        modules += [module_spec(FUSED, shape.unpadded())]
        if VERSIONS[12].unsupported(shape) is None:          # v12's GEMMs: a plan of v8 or v9 of their own
            number, overrides = VERSIONS[12].gemm_tuning(shape)
            modules += [module_spec(number, VERSIONS[12].gemm_shape(shape), overrides)]
        if tiles and layer.name in TILE_LAYERS:
            modules += [module for _, _, module in tile_configs(layer)]
    return modules


def autotune_shapes(with_suite):
    """(name, ConvShape, batch) of the layers the autotuner is checked on: new kinds of layer, and with
    ``with_suite`` the suite's."""
    shapes = [("1x1 256->64 56x56", ConvShape(256, 56, 56, 64, 1), 64),
              ("1x1/2 512->1024 28x28", ConvShape(512, 28, 28, 1024, 1, SH=2, SW=2), 64),
              ("dw 3x3 144 56x56", ConvShape(144, 56, 56, 144, 3, PH=1, PW=1, G=144), 64),
              ("dilated 3x3 d2 64 28x28", ConvShape(64, 28, 28, 64, 3, PH=2, PW=2, DH=2, DW=2), 64)]
    if with_suite:
        shapes += [(layer.name, layer.shape(), 10000 if layer.course else layer.batches[0]) for layer in LAYERS]
    return shapes


def network_modules(names=None, device_name=None, with_suite=True):
    """The modules the network benchmark (and its autotuning) loads, without a GPU: every distinct layer's
    default and candidates (a meta-device forward finds the shapes). Needs PyTorch (ImportError without)."""
    import torch
    from ..torch.nets import NETWORK_BATCH, NETWORKS, conv_layers
    modules = []

    def add(shape):
        number, overrides = resolve_version(None, shape, device_name, tune=lambda s: None)
        modules.append(module_spec(number, VERSIONS[number].inner(shape), overrides))
        for n, o in autotune.candidates(shape):
            modules.append(module_spec(n, VERSIONS[n].inner(shape), o))
    for name in names or NETWORKS:
        model = NETWORKS[name]().to("meta").eval()
        for _, conv, shape in conv_layers(model, torch.empty(NETWORK_BATCH[name], 3, 224, 224, device="meta")):
            spec = ConvSpec(num_filter=conv.out_channels, kernel=tuple(conv.kernel_size), stride=tuple(conv.stride),
                            pad=tuple(conv.padding), dilate=tuple(conv.dilation), num_group=conv.groups,
                            no_bias=conv.bias is None)
            add(ConvShape.of(shape, tuple(conv.weight.shape), spec))
    for _, shape, _ in autotune_shapes(with_suite):
        add(shape)
    return modules
