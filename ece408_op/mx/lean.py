"""A leaner registration of a ``CustomOpProp`` class with MXNet: ``register(op_type)``.

Why. ``mx.operator.register`` hands MXNet a creator that, on every call (once per node when a
graph is built, and on *every* imperative ``nd.Custom`` call), builds a new property object,
ten new ctypes callback objects (closures over it), and their arrays; then every inference
callback runs the property's Python methods again, and every ``create_operator`` builds three
more callback objects. For one imperative call that was most of its cost: an empty CustomOp
took 0.34-0.42 ms before ``nd.Custom`` returned (docs/benchmarks.md, "Fixed cost of one call").

What this does instead, through the same C API (``MXCustomOpRegister``), so MXNet's side is
unchanged:

* one set of callback objects for the whole process, created here at import; each callback
  finds its property or operator through the ``contexts`` pointer MXNet passes back (an id);
* one property object per distinct set of attribute strings, reused by every call with those
  attributes (so the property class must not keep per-call state: ours keep only their
  attributes and what is parsed from them), with its name lists made once;
* ``infer_shape`` and ``infer_type`` results remembered per property and input shapes/types
  (the classes registered here declare them pure functions of those); errors are never
  remembered: a failing call fails again, with its reason;
* an exception anywhere (the property's constructor included, which in MXNet's own creator
  kills the interpreter) is recorded for the ``MXNetError`` MXNet raises next
  (``failures.py``), never printed as a traceback (``ECE408_DEBUG=1`` prints it).

The operator objects (``CustomOp``) are created per ``create_operator`` call, as MXNet's creator does, and
their ``forward``/``backward`` receive the same ``NDArray`` arguments as under MXNet's
creator, except that sparse inputs (``row_sparse``, ``csr``) reach them as dense copies, made before
the forward: what MXNet does for its own operators that have no sparse implementation ("storage
fallback"), so that a CustomOp takes what the built-in operator takes.
"""
import ctypes
import itertools
import threading
import traceback
from ctypes import CFUNCTYPE, POINTER, c_char, c_char_p, c_int, c_void_p

from .compat import import_mxnet
from .failures import _debug, record

mx = import_mxnet()

from mxnet.base import MXCallbackList, _LIB, check_call, mx_int, mx_uint  # noqa: E402
from mxnet.ndarray.ndarray import _DTYPE_MX_TO_NP, _DTYPE_NP_TO_MX, NDArray  # noqa: E402

DEFAULT_STORAGE = 0              # MXNet's kDefaultStorage
REQUESTS = ("null", "write", "inplace", "add")
CACHE_MAX = 256                  # remembered shapes/types per property; properties kept unused
c_int_p = POINTER(c_int)

_FB = CFUNCTYPE(c_int, c_int, POINTER(c_void_p), POINTER(c_int), POINTER(c_int), c_int, c_void_p)
_DEL = CFUNCTYPE(c_int, c_void_p)
_SHAPE = CFUNCTYPE(c_int, c_int, POINTER(c_int), POINTER(POINTER(mx_int)), c_void_p)
_TYPE = CFUNCTYPE(c_int, c_int, POINTER(c_int), c_void_p)
_STORAGE = CFUNCTYPE(c_int, c_int, POINTER(c_int), c_void_p)
_STORAGE_BACKWARD = CFUNCTYPE(c_int, c_int, POINTER(c_int), POINTER(c_int), c_void_p)
_LIST = CFUNCTYPE(c_int, POINTER(POINTER(POINTER(c_char))), c_void_p)
_DEPS = CFUNCTYPE(c_int, c_int_p, c_int_p, c_int_p, c_int_p, POINTER(c_int_p), c_void_p)
_CREATE = CFUNCTYPE(c_int, c_char_p, c_int, POINTER(POINTER(mx_uint)), POINTER(c_int), POINTER(c_int),
                    POINTER(MXCallbackList), c_void_p)
_CREATOR = CFUNCTYPE(c_int, c_char_p, c_int, POINTER(c_char_p), POINTER(c_char_p), POINTER(MXCallbackList))

_lock = threading.Lock()
_ids = itertools.count(1)        # 0 would reach the callbacks as None
_props = {}                      # id -> _Prop
_by_attrs = {}                   # (op_type, ((key, value), ...)) -> _Prop
_ops = {}                        # id -> CustomOp
_classes = {}                    # op_type -> property class
_contexts = {}                   # 'cpu(0)' -> mx.Context


def _failed(exc, sync):
    """Record ``exc`` for the MXNetError MXNet raises next; 0 is MXNet's failure return."""
    record(exc, sync)
    if _debug():
        traceback.print_exc()
    return 0


def _names(names):
    """A NULL-terminated char** MXNet reads a name list from (kept alive by the caller)."""
    array = (c_char_p * (len(names) + 1))(*[n.encode() for n in names], None)
    return array, ctypes.cast(array, POINTER(POINTER(c_char)))


class _Prop:
    """One property object and what is remembered of it, shared by every call with its attributes."""

    def __init__(self, key, prop):
        self.key = key
        self.prop = prop
        self.id = next(_ids)
        self.users = 0
        lists = (prop.list_arguments(), prop.list_outputs(), prop.list_auxiliary_states())
        self.arguments, self.outputs, self.aux = (_names(names) for names in lists)
        self.counts = tuple(len(names) for names in lists)
        self.shapes = {}
        self.types = {}
        self.deps = {}
        self.sparse = False        # sparse inputs seen: operators made from now on densify them
        contexts = (c_void_p * len(_PROP_CALLBACKS))(*([self.id] * len(_PROP_CALLBACKS)))
        self.callbacks = MXCallbackList(len(_PROP_CALLBACKS), _PROP_CALLBACK_ARRAY,
                                        ctypes.cast(contexts, POINTER(c_void_p)))
        self._contexts = contexts


def _remember(cache, key, value):
    if len(cache) >= CACHE_MAX:
        cache.clear()
    cache[key] = value
    return value


# ------------------------------------------------------------------ the property's callbacks

def _creator(op_type, argc, keys, values, ret):
    try:
        attrs = tuple((keys[i], values[i]) for i in range(argc))
        key = (op_type, attrs)
        with _lock:                            # counted as used under the lock that finds it, so
            entry = _by_attrs.get(key)         # that no other thread can forget it in between
            if entry is not None:
                entry.users += 1
        if entry is None:
            cls = _classes[op_type.decode()]
            kwargs = {k.decode(): v.decode() for k, v in attrs}
            try:
                prop = cls(**kwargs)
            except Exception as exc:           # noqa: BLE001  MXNet's creator would crash here
                record(exc, sync=True)
                prop = _Refused(exc)
            entry = _Prop(key, prop)
            with _lock:
                if len(_by_attrs) >= CACHE_MAX:                    # forget the unused ones
                    for stale in [e for e in _by_attrs.values() if e.users == 0]:
                        del _by_attrs[stale.key]
                        _props.pop(stale.id, None)
                entry = _by_attrs.setdefault(key, entry)
                _props[entry.id] = entry
        with _lock:
            entry.users += 1
        ret[0] = entry.callbacks
        return 1
    except Exception as exc:                   # noqa: BLE001
        return _failed(exc, sync=True)


def _release(forget, context):
    """A delete callback's work under the lock; never fails (MXNet frees its graphs at exit, after
    this module's globals may be gone)."""
    try:
        with _lock:
            forget(context)
    except Exception:              # noqa: BLE001
        pass
    return 1


def _prop_unused(context):
    entry = _props.get(context)
    if entry is not None:
        entry.users -= 1


def _prop_delete(context, _release=_release, _forget=_prop_unused):   # bound now: see _release
    return _release(_forget, context)


def _list_arguments(out, context):
    out[0] = _props[context].arguments[1]
    return 1


def _list_outputs(out, context):
    out[0] = _props[context].outputs[1]
    return 1


def _list_aux(out, context):
    out[0] = _props[context].aux[1]
    return 1


def _flatten(result, count, what):
    """An inference result's entries (inputs, outputs, aux states if given), checked to be ``count``."""
    every = list(result[0]) + list(result[1]) + (list(result[2]) if len(result) > 2 else [])
    if len(every) != count:
        raise ValueError(f"{what} returned {len(every)} entries for {count} arrays")
    return every


def _fill(target, values):
    """Write ``values`` into the C array MXNet passed."""
    for i, value in enumerate(values):
        target[i] = value


def _infer_shape(count, ndims, shapes, context):
    try:
        entry = _props[context]
        given = tuple(tuple(shapes[i][j] for j in range(ndims[i])) for i in range(entry.counts[0]))
        known = entry.shapes.get(given)
        if known is None:
            every = [tuple(int(d) for d in s)
                     for s in _flatten(entry.prop.infer_shape([list(s) for s in given]), count, "infer_shape")]
            arrays = [(mx_int * max(1, len(s)))(*s) for s in every]
            known = _remember(entry.shapes, given, (arrays, [ctypes.cast(a, POINTER(mx_int)) for a in arrays],
                                                    [len(s) for s in every]))
        _fill(shapes, known[1])
        _fill(ndims, known[2])
        return 1
    except Exception as exc:                   # noqa: BLE001
        return _failed(exc, sync=True)


def _infer_type(count, types, context):
    try:
        entry = _props[context]
        given = tuple(types[i] for i in range(entry.counts[0]))
        known = entry.types.get(given)
        if known is None:
            result = entry.prop.infer_type([_DTYPE_MX_TO_NP[t] for t in given])
            known = _remember(entry.types, given, [_DTYPE_NP_TO_MX[t] for t in _flatten(result, count, "infer_type")])
        _fill(types, known)
        return 1
    except Exception as exc:                   # noqa: BLE001
        return _failed(exc, sync=True)


def _infer_storage(count, stypes, context):
    """Inputs as they come, outputs and aux dense: MXNet checks that the types it was given are the
    ones inferred, so a sparse input stays sparse here, and the forward densifies it (``_dense``)."""
    try:
        entry = _props[context]
        n_in = entry.counts[0]
        given = [stypes[i] for i in range(n_in)]
        if any(stype not in (DEFAULT_STORAGE, -1) for stype in given):
            entry.sparse = True
        _fill(stypes, [DEFAULT_STORAGE if s == -1 else s for s in given] + [DEFAULT_STORAGE] * (count - n_in))
        return 1
    except Exception as exc:                   # noqa: BLE001
        return _failed(exc, sync=True)


def _infer_storage_backward(count, stypes, tags, context):
    _fill(stypes, [DEFAULT_STORAGE] * count)
    return 1


def _backward_dependency(out_grad, in_data, out_data, num_dep, deps, context):
    try:
        entry = _props[context]
        n_in, n_out, _ = entry.counts
        ids = (tuple(out_grad[i] for i in range(n_out)), tuple(in_data[i] for i in range(n_in)),
               tuple(out_data[i] for i in range(n_out)))
        known = entry.deps.get(ids)
        if known is None:
            chosen = [int(d) for d in entry.prop.declare_backward_dependency(*[list(part) for part in ids])]
            known = _remember(entry.deps, ids, ((c_int * max(1, len(chosen)))(*chosen), len(chosen)))
        num_dep[0] = known[1]
        deps[0] = ctypes.cast(known[0], c_int_p)
        return 1
    except Exception as exc:                   # noqa: BLE001
        return _failed(exc, sync=True)


def _context(text):
    ctx = _contexts.get(text)
    if ctx is None:
        name = text.decode()
        sep = name.find("(")
        ctx = _contexts[text] = mx.context.Context(name[:sep], int(name[sep + 1:-1]))
    return ctx


def _create_operator(ctx, count, shapes, ndims, dtypes, ret, context):
    try:
        entry = _props[context]
        op = entry.prop.create_operator(_context(ctx),
                                        [[shapes[i][j] for j in range(ndims[i])] for i in range(count)],
                                        [dtypes[i] for i in range(count)])
        op_id = next(_ids)
        contexts = (c_void_p * 3)(op_id, op_id, op_id)
        op._lean_contexts = contexts                    # alive as long as the operator
        op._lean_sparse = entry.sparse
        with _lock:
            _ops[op_id] = op
        ret[0] = MXCallbackList(3, _OP_CALLBACK_ARRAY, ctypes.cast(contexts, POINTER(c_void_p)))
        return 1
    except Exception as exc:                   # noqa: BLE001
        return _failed(exc, sync=True)


# ------------------------------------------------------------------ the operator's callbacks

def _arrays(count, handles, tags, writable_tags):
    """MXNet's arrays for a forward/backward, grouped by tag (in, out, in_grad, out_grad, aux);
    the NDArray objects own the handles MXNet made for the call (they free them)."""
    groups = ([], [], [], [], [])
    for i in range(count):
        tag = tags[i]
        groups[tag].append(NDArray(c_void_p(handles[i]), writable=tag in writable_tags))
    return groups


def _dense(arrays):
    """The arrays, each sparse one replaced by a dense copy whose values are ready to read."""
    out = []
    for array in arrays:
        if array.stype != "default":
            array = array.tostype("default")
            array.wait_to_read()
        out.append(array)
    return out


def _forward(count, handles, tags, reqs, is_train, context):
    try:
        groups = _arrays(count, handles, tags, (1, 4))
        op = _ops[context]
        if op._lean_sparse:
            groups = (_dense(groups[0]),) + groups[1:]
        op.forward(is_train=bool(is_train), req=[REQUESTS[reqs[i]] for i in range(len(groups[1]))],
                   in_data=groups[0], out_data=groups[1], aux=groups[4])
        return 1
    except Exception as exc:                   # noqa: BLE001
        return _failed(exc, sync=False)


def _backward(count, handles, tags, reqs, is_train, context):
    try:
        groups = _arrays(count, handles, tags, (2, 4))
        _ops[context].backward(req=[REQUESTS[reqs[i]] for i in range(len(groups[2]))], in_data=groups[0],
                               out_data=groups[1], in_grad=groups[2], out_grad=groups[3], aux=groups[4])
        return 1
    except Exception as exc:                   # noqa: BLE001
        return _failed(exc, sync=False)


def _op_forget(context):
    _ops.pop(context, None)


def _op_delete(context, _release=_release, _forget=_op_forget):       # bound now: see _release
    return _release(_forget, context)


class _Refused(mx.operator.CustomOpProp):
    """Stands in for a property whose constructor raised (the registered classes never should:
    they check their attributes in ``infer_shape``), so that MXNet raises an error instead of
    crashing: one argument, one output; shape inference raises the constructor's exception."""

    def __init__(self, exc):
        super().__init__(need_top_grad=False)
        self.exc = exc

    def list_arguments(self):
        return ["data"]

    def infer_shape(self, in_shape):
        raise self.exc

    def infer_type(self, in_type):
        raise self.exc

    def create_operator(self, ctx, shapes, dtypes):
        raise self.exc


def _cast(callbacks):
    funcs = [ctypes.cast(f, CFUNCTYPE(c_int)) for f in callbacks]
    return callbacks, ctypes.cast((CFUNCTYPE(c_int) * len(funcs))(*funcs), POINTER(CFUNCTYPE(c_int)))


# Order: MXNet's CustomOpPropCallbacks and CustomOpCallbacks enums (include/mxnet/c_api.h).
_PROP_CALLBACKS, _PROP_CALLBACK_ARRAY = _cast([
    _DEL(_prop_delete), _LIST(_list_arguments), _LIST(_list_outputs), _LIST(_list_aux), _SHAPE(_infer_shape),
    _DEPS(_backward_dependency), _CREATE(_create_operator), _TYPE(_infer_type), _STORAGE(_infer_storage),
    _STORAGE_BACKWARD(_infer_storage_backward)])
_OP_CALLBACKS, _OP_CALLBACK_ARRAY = _cast([_DEL(_op_delete), _FB(_forward), _FB(_backward)])
_CREATOR_CALLBACK = _CREATOR(_creator)


def register(op_type):
    """Class decorator: register a CustomOpProp subclass under ``op_type`` with the lean creator.
    Its ``infer_shape`` and ``infer_type`` must depend only on the attributes and the inputs'
    shapes and types, and its objects must keep no per-call state (they are shared)."""
    def do_register(cls):
        with _lock:
            _classes[op_type] = cls
            for key in [k for k in _by_attrs if k[0] == op_type.encode()]:
                _props.pop(_by_attrs.pop(key).id, None)
        check_call(_LIB.MXCustomOpRegister(op_type.encode(), _CREATOR_CALLBACK))
        return cls
    return do_register
