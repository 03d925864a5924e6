"""Graph pass: Convolution -> tanh -> 2x2 max-pool  =>  one ``ece408_conv_tanh_pool`` node.

``fuse_conv_tanh_pool(symbol, **op_attrs)`` finds every chain

    Convolution (2-D, square kernel, stride 1, no padding, no dilation, one group, bias or not;
                 or an ``ece408_conv`` node already swapped in)
    -> Activation(act_type='tanh') or tanh
    -> Pooling(pool_type='max', kernel 2x2, stride 2x2, no padding, 'valid' convention)

whose two inner outputs feed nothing else (and are not outputs of the symbol), and replaces
it with one custom node named after the convolution, taking the convolution's inputs (the
weight and bias keep their names, so the same parameters load). ``op_attrs`` (e.g.
``device="gpu"``) are added to every fused node. The pool's and the activation's names
disappear from the graph. Every other node is left as it was, so any network's symbol works.
"""
import json

from ..conv import ConvSpec
from ..errors import ShapeError
from .compat import import_mxnet
from .fused_op import FUSED_OP_TYPE

mx = import_mxnet()

CUSTOM_CONV = "ece408_conv"


def _window(attrs):
    """A Pooling node's (kernel, stride, pad), read by the same parser as a Convolution's."""
    spec = ConvSpec.from_attrs(num_filter=1, kernel=attrs.get("kernel", "(1, 1)"), stride=attrs.get("stride"),
                               pad=attrs.get("pad"))
    return spec.kernel, spec.stride, spec.pad


def _is_pool(node):
    attrs = node.get("attrs", {})
    if node["op"] != "Pooling" or attrs.get("pool_type") != "max":
        return False
    if attrs.get("global_pool", "False").lower() in ("true", "1"):
        return False
    if attrs.get("pooling_convention", "valid") != "valid" or attrs.get("layout", "None") not in ("None", "NCHW"):
        return False
    try:
        return _window(attrs) == ((2, 2), (2, 2), (0, 0))
    except ShapeError:
        return False


def _is_tanh(node):
    return node["op"] == "tanh" or (node["op"] == "Activation" and node.get("attrs", {}).get("act_type") == "tanh")


def _conv_attrs(node):
    """The fused node's attributes for a convolution node it can absorb, else None."""
    attrs = node.get("attrs", {})
    if node["op"] == "Custom" and attrs.get("op_type") == CUSTOM_CONV:
        kept = {k: v for k, v in attrs.items() if k in ("num_filter", "kernel", "device", "gpu_kernel")}
        return {**kept, "no_bias": "True"}
    if node["op"] != "Convolution":
        return None
    try:
        spec = ConvSpec.from_attrs(attrs.get("num_filter"), attrs.get("kernel"), attrs.get("stride"),
                                   attrs.get("pad"), attrs.get("dilate"), attrs.get("num_group", "1"),
                                   attrs.get("no_bias", "False"), attrs.get("layout"))
    except ShapeError:
        return None
    if spec.kernel[0] != spec.kernel[1] or not spec.with_(no_bias=True).is_course:
        return None
    return {"num_filter": str(spec.num_filter), "kernel": str(spec.kernel[0]), "no_bias": str(spec.no_bias)}


def _consumers(graph):
    """node index -> how many inputs (and heads) use any of its outputs."""
    count = [0] * len(graph["nodes"])
    for node in graph["nodes"]:
        for entry in node["inputs"]:
            count[entry[0]] += 1
    for entry in graph["heads"]:
        count[entry[0]] += 1
    return count


def _compact(graph):
    """Drop the nodes no head depends on and renumber the rest (order kept)."""
    nodes, keep = graph["nodes"], set()
    stack = [entry[0] for entry in graph["heads"]]
    while stack:
        i = stack.pop()
        if i not in keep:
            keep.add(i)
            stack.extend(entry[0] for entry in nodes[i]["inputs"])
    order = sorted(keep)
    new_index = {old: new for new, old in enumerate(order)}

    def renumber(entries):
        return [[new_index[e[0]]] + list(e[1:]) for e in entries]
    kept = []
    for old in order:
        node = dict(nodes[old])
        node["inputs"] = renumber(node["inputs"])
        kept.append(node)
    graph = {k: v for k, v in graph.items() if k not in ("node_row_ptr",)}
    graph.update(nodes=kept, heads=renumber(graph["heads"]),
                 arg_nodes=[i for i, node in enumerate(kept) if node["op"] == "null"])
    return graph


def fuse_conv_tanh_pool(symbol, select=None, **op_attrs):
    """Return (new symbol, names of the fused convolutions); see the module doc. ``select``
    (a predicate on the convolution's name) limits which chains are fused."""
    graph = json.loads(symbol.tojson())
    nodes = graph["nodes"]
    uses = _consumers(graph)
    fused = []
    for pool in nodes:
        if not _is_pool(pool) or not pool["inputs"]:
            continue
        act_index = pool["inputs"][0][0]
        act = nodes[act_index]
        if not _is_tanh(act) or uses[act_index] != 1:
            continue
        conv_index = act["inputs"][0][0]
        conv = nodes[conv_index]
        attrs = _conv_attrs(conv)
        if attrs is None or uses[conv_index] != 1 or (select is not None and not select(conv["name"])):
            continue
        pool.update(op="Custom", name=conv["name"], inputs=[list(e) for e in conv["inputs"]],
                    attrs={"op_type": FUSED_OP_TYPE, **attrs, **{k: str(v) for k, v in op_attrs.items()}})
        fused.append(conv["name"])
    if not fused:
        return symbol, []
    return mx.sym.load_json(json.dumps(_compact(graph))), fused
