"""Graph swap: MXNet's built-in ``Convolution`` nodes -> ``ece408_conv``.

    report = swap_convolutions(symbol)                 # a Symbol
    report = swap_convolutions("path/to/prefix")       # a checkpoint (latest epoch, or epoch=N)
    report = swap_convolutions(net)                    # a Gluon HybridBlock
    report.result     # the swapped Symbol / SymbolBlock (sharing net's parameters)
    report.swapped    # names of the swapped nodes
    report.kept       # [(name, reason)] of the Convolutions left alone
    report.save("path/to/swapped")                     # a checkpoint's report: as the epoch loaded
    report.fused      # with fuse=True: the convolutions now fused with their tanh and max-pool
    print(report)     # one line per node

Every 2-D NCHW Convolution (and legacy Convolution_v1) is swapped, whatever its kernel, stride, padding, dilation, groups
and bias; the node keeps its name, its attributes (``Convolution``'s names and formats) and its
inputs, so parameter names are unchanged and a checkpoint's parameters load as they are. Each
swapped node's inputs go through ``op.guard_inputs`` (see docs/mkldnn.md), named
``<node>_guard_<input>``. A swapped symbol saved as JSON loads in any program where ece408_op is
importable (the import hook registers the operator when MXNet loads).

``fuse=True`` first turns each Convolution -> tanh -> 2x2 max-pool chain that the fused kernel
computes into one ``ece408_conv_tanh_pool`` node (``mx/fuse_pass.py``; named after the convolution,
same parameters, guarded like the others), then swaps the remaining convolutions.
"""
import ast
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from ..course import OP_TYPE
from ..conv.spec import ConvSpec
from ..errors import Ece408Error, ModelError, ShapeError
from .compat import import_mxnet
from .fuse_pass import fuse_conv_tanh_pool
from .fused_op import FUSED_OP_TYPE
from .op import (OWN_ATTRS, SPEC_ATTRS, parse_cpu_kernel_attr, parse_device, parse_gpu_kernel, parse_precision_attr,
                 parse_team)

mx = import_mxnet()

KEEP_ATTRS = SPEC_ATTRS + ("workspace", "cudnn_tune", "cudnn_off")
CONVOLUTION_OPS = ("Convolution", "Convolution_v1")     # the legacy op: same attributes, inputs and result


@dataclass
class SwapReport:
    """What ``swap_convolutions`` did. Unpacks as ``(result, swapped)`` too, for callers that take the pair."""
    result: object                                  # Symbol, or SymbolBlock for a HybridBlock
    swapped: list = field(default_factory=list)     # node names
    kept: list = field(default_factory=list)        # (node name, reason)
    arg_params: dict = None                         # a checkpoint's parameters (prefix input)
    aux_params: dict = None
    block_symbol: object = None                     # the SymbolBlock's Symbol (HybridBlock input)
    fused: list = field(default_factory=list)       # convolutions fused with tanh + max-pool (fuse=True)
    epoch: int = 0                                  # the checkpoint's epoch that was loaded (prefix input)

    @property
    def symbol(self):
        """The swapped Symbol (also for a HybridBlock: the graph of the SymbolBlock)."""
        return self.result if isinstance(self.result, mx.sym.Symbol) else self.block_symbol

    def __iter__(self):
        return iter((self.result, self.swapped))

    def __str__(self):
        total = len(self.swapped) + len(self.kept) + len(self.fused)
        fused = f" (+ {len(self.fused)} fused with tanh + max-pool)" if self.fused else ""
        lines = [f"swapped {len(self.swapped) + len(self.fused)} of {total} convolutions{fused}"]
        lines += [f"  fused    {name}: conv -> tanh -> max-pool as one {FUSED_OP_TYPE}" for name in self.fused]
        lines += [f"  swapped  {name}" for name in self.swapped]
        lines += [f"  kept     {name}: {reason}" for name, reason in self.kept]
        return "\n".join(lines)

    def save(self, prefix, epoch=None):
        """Write the swapped checkpoint ``prefix-symbol.json`` + ``prefix-NNNN.params``, NNNN the
        epoch that was loaded unless ``epoch`` says otherwise."""
        if self.arg_params is None:
            raise Ece408Error("save() needs a report of a checkpoint (swap_convolutions(prefix))")
        Path(prefix).parent.mkdir(parents=True, exist_ok=True)
        mx.model.save_checkpoint(str(prefix), self.epoch if epoch is None else int(epoch), self.symbol,
                                 self.arg_params, self.aux_params)


def _kernel_dims(text):
    """How many spatial dimensions a Convolution's kernel attribute has, as MXNet reads it
    ('(3, 3)' -> 2, '(3,)' and '3' -> 1); None where it is not a size at all."""
    try:
        value = ast.literal_eval(str(text).strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return len(value) if isinstance(value, (tuple, list)) else 1


def why_not(attrs):
    """None if ece408_conv computes this Convolution node, else the reason."""
    kernel = attrs.get("kernel", "")
    dims = _kernel_dims(kernel)
    if dims is not None and dims != 2:
        return f"kernel={kernel} is {dims}-D: ece408_conv is 2-D only"
    layout = attrs.get("layout", "None")
    if layout not in ("None", "NCHW"):
        return f"layout={layout}: ece408_conv computes NCHW only"
    try:
        ConvSpec.from_attrs(**{k: attrs[k] for k in SPEC_ATTRS if k in attrs})
    except ShapeError as exc:
        return str(exc)
    return None


def parse_op_attrs(op_attrs):
    """Validate the attributes given for every swapped node (device, gpu_kernel, cpu_kernel, team, precision)
    up front."""
    unknown = [k for k in op_attrs if k not in OWN_ATTRS]
    if unknown:
        raise Ece408Error(f"swap_convolutions: unknown option {unknown[0]}=; known: {', '.join(OWN_ATTRS)}")
    out = {}
    if "device" in op_attrs:
        out["device"] = parse_device(op_attrs["device"])
    if "gpu_kernel" in op_attrs:
        out["gpu_kernel"] = parse_gpu_kernel(op_attrs["gpu_kernel"])
    if "cpu_kernel" in op_attrs:
        out["cpu_kernel"] = parse_cpu_kernel_attr(op_attrs["cpu_kernel"])
    if "team" in op_attrs and parse_team(op_attrs["team"]):
        out["team"] = "1"
    if "precision" in op_attrs:
        out["precision"] = parse_precision_attr(op_attrs["precision"])
    return out


def _selector(select):
    if select is None:
        return lambda name: True
    if callable(select):
        return select
    names = {select} if isinstance(select, str) else set(select)
    return names.__contains__


def swap_graph(symbol, guard=True, select=None, fuse=False, **op_attrs):
    """(swapped Symbol, swapped names, kept [(name, reason)], fused names)."""
    extra = parse_op_attrs(op_attrs)
    selected = _selector(select)
    fused = []
    if fuse:
        symbol, fused = fuse_conv_tanh_pool(symbol, select=selected, **extra)
    graph = json.loads(symbol.tojson())
    nodes, new_nodes, new_id = graph["nodes"], [], {}
    swapped, kept = [], []

    def entry(e):
        return [new_id[e[0]], e[1], e[2] if len(e) > 2 else 0]

    def add(node):
        new_nodes.append(node)
        return len(new_nodes) - 1

    for old, node in enumerate(nodes):
        node = dict(node)
        node["inputs"] = [entry(e) for e in node.get("inputs", [])]
        if guard and node["op"] == "Custom" and node["name"] in fused:
            node["inputs"] = _guard_nodes(node["name"], node["inputs"], add)
        elif node["op"] in CONVOLUTION_OPS:
            # Convolution has a bias unless told otherwise; ece408_conv's default is the course's
            attrs = {"no_bias": "False", **node.get("attrs", node.get("param", {}))}
            reason = why_not(attrs) if selected(node["name"]) else "not selected"
            if reason is None:
                inputs = node["inputs"]
                if guard:
                    inputs = _guard_nodes(node["name"], inputs, add)
                node = {"op": "Custom", "name": node["name"], "inputs": inputs,
                        "attrs": {"op_type": OP_TYPE, **{k: v for k, v in attrs.items() if k in KEEP_ATTRS},
                                  **{k: str(v) for k, v in extra.items()}}}
                swapped.append(node["name"])
            else:
                kept.append((node["name"], reason))
        new_id[old] = add(node)
    graph["nodes"] = new_nodes
    graph["arg_nodes"] = [new_id[i] for i in graph["arg_nodes"]]
    graph["heads"] = [entry(e) for e in graph["heads"]]
    graph.pop("node_row_ptr", None)
    return mx.sym.load_json(json.dumps(graph)), swapped, kept, fused


def _guard_nodes(name, inputs, add):
    """Nodes of ``op.guard_inputs`` in front of a swapped node's inputs (data, weight, bias)."""
    guarded = []
    for i, e in enumerate(inputs):
        role = ("data", "weight", "bias")[i] if i < 3 else f"input{i}"
        if i == 0:
            node = {"op": "broadcast_to", "name": f"{name}_guard_{role}", "attrs": {"shape": "(0, 0, 0, 0)"},
                    "inputs": [e]}
        else:
            node = {"op": "_mul_scalar", "name": f"{name}_guard_{role}", "attrs": {"scalar": "1.0"}, "inputs": [e]}
        guarded.append([add(node), 0, 0])
    return guarded


def swap_convolutions(model, epoch=None, input_names=("data",), guard=True, select=None, fuse=False,
                      **op_attrs):
    """Swap every 2-D Convolution of ``model`` that ece408_conv computes; returns a SwapReport.

    ``model``: a Symbol; a checkpoint prefix (``epoch``: which one, default the latest), whose
    parameters come back in the report; or a Gluon HybridBlock, for which the result is a
    SymbolBlock sharing the block's Parameters (``input_names``: the block's inputs).
    ``op_attrs`` (``device="gpu"``, ``gpu_kernel=7``) are set on every swapped node.
    ``select``: node names (or a predicate on them) to swap; the others are kept ("not selected").
    ``guard=False`` leaves out the layout guards (safe only for the executor / Module).
    ``fuse=True``: conv -> tanh -> 2x2 max-pool chains become one fused node first (see above).
    """
    if isinstance(model, mx.sym.Symbol):
        result, swapped, kept, fused = swap_graph(model, guard, select, fuse, **op_attrs)
        return SwapReport(result, swapped, kept, fused=fused)
    if isinstance(model, (str, Path)):
        return _swap_checkpoint(str(model), epoch, guard, select, fuse, op_attrs)
    if isinstance(model, mx.gluon.HybridBlock):
        return _swap_block(model, input_names, guard, select, fuse, op_attrs)
    raise Ece408Error(f"swap_convolutions takes a Symbol, a checkpoint prefix or a Gluon HybridBlock, "
                      f"not {type(model).__name__}")


def _swap_checkpoint(prefix, epoch, guard, select, fuse, op_attrs):
    from .models import load_model, resolve_model
    if epoch is None:
        epoch = resolve_model(prefix)[2]
        _, symbol, arg_params, aux_params = load_model(prefix)
    else:
        resolve_model(prefix)
        try:
            symbol, arg_params, aux_params = mx.model.load_checkpoint(prefix, int(epoch))
        except Exception as exc:  # noqa: BLE001  MXNetError, OSError
            raise ModelError(f"cannot load checkpoint {prefix}-{int(epoch):04d}: "
                             f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc}") from exc
    result, swapped, kept, fused = swap_graph(symbol, guard, select, fuse, **op_attrs)
    return SwapReport(result, swapped, kept, arg_params, aux_params, fused=fused, epoch=int(epoch))


def _swap_block(block, input_names, guard, select, fuse, op_attrs):
    inputs = [mx.sym.var(name) for name in input_names]
    outputs = block(*inputs)
    symbol = outputs if isinstance(outputs, mx.sym.Symbol) else mx.sym.Group(list(outputs))
    swapped_symbol, swapped, kept, fused = swap_graph(symbol, guard, select, fuse, **op_attrs)
    params = block.collect_params()
    wanted = set(swapped_symbol.list_arguments()) | set(swapped_symbol.list_auxiliary_states())
    shared = {name: p for name, p in params.items() if name in wanted}
    with warnings.catch_warnings():            # SymbolBlock's notes on inputs that look like parameters
        warnings.simplefilter("ignore")
        result = mx.gluon.SymbolBlock(swapped_symbol, inputs, params=_ParamDict(shared, block.prefix))
    return SwapReport(result, swapped, kept, block_symbol=swapped_symbol, fused=fused)


class _ParamDict(mx.gluon.ParameterDict):
    """The block's own Parameter objects (shared, not copies), as SymbolBlock takes them."""

    def __init__(self, params, prefix):
        super().__init__(prefix)
        self._params.update(params)
