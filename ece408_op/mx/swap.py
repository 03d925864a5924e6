"""Graph rewriting: Convolution nodes -> ``ece408_conv``.

``swap_convolutions`` rewrites every Convolution node that ``ece408_conv`` can compute
(2-D, square kernel, stride 1, no padding, no dilation, one group, no bias) into the
custom operator, keeping the weight's name; any network's symbol works, not only the course's.
"""
import ast
import json

from .. import OP_TYPE
from .compat import import_mxnet

mx = import_mxnet()


def _tuple_attr(attrs, key, default):
    text = attrs.get(key)
    if text in (None, "", "()", "[]"):
        return default
    value = ast.literal_eval(text)
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _swappable(attrs):
    kernel = _tuple_attr(attrs, "kernel", ())
    if len(kernel) != 2 or kernel[0] != kernel[1]:
        return False
    checks = (
        all(s == 1 for s in _tuple_attr(attrs, "stride", (1, 1))),
        all(p == 0 for p in _tuple_attr(attrs, "pad", (0, 0))),
        all(d == 1 for d in _tuple_attr(attrs, "dilate", (1, 1))),
        int(attrs.get("num_group", "1")) == 1,
        attrs.get("no_bias", "False").lower() in ("true", "1"),
        attrs.get("layout", "None") in ("None", "NCHW"),
    )
    return all(checks)


def swap_convolutions(symbol, **op_attrs):
    """Return (new symbol, names of swapped layers): eligible Convolutions -> ``ece408_conv``.

    ``op_attrs`` (e.g. ``device="gpu"``) are added to every swapped node.
    """
    graph = json.loads(symbol.tojson())
    swapped = []
    for node in graph["nodes"]:
        attrs = node.get("attrs", {})
        if node["op"] != "Convolution" or not _swappable(attrs):
            continue
        kernel = _tuple_attr(attrs, "kernel", ())
        node["op"] = "Custom"
        node["attrs"] = {"op_type": OP_TYPE, "num_filter": attrs["num_filter"],
                         "kernel": str(kernel[0]), **{k: str(v) for k, v in op_attrs.items()}}
        node["inputs"] = node["inputs"][:2]
        swapped.append(node["name"])
    return mx.sym.load_json(json.dumps(graph)), swapped
