"""Make ``import mxnet`` work, in any order with ``import ece408_op``.

MXNet 1.9.1 fails at import on NumPy >= 1.24 (``np.bool``) and, on Python 3.12, without
distutils. ``install()`` puts a finder in front of ``sys.meta_path`` that, when ``mxnet``
itself is imported (by anyone), applies ``compat.apply()`` first and registers the
``ece408_conv`` operator right after. Where MXNet is already imported, ``install()``
registers at once. Standard library only: importing this module never imports NumPy or MXNet,
and it is cheap (no importlib.abc), since the package's ``ece408_op-hook.pth`` imports it at every
interpreter start-up of the environment it is installed in (so that ``import mxnet`` before
``import ece408_op`` works too).
"""
import importlib.machinery
import sys
import threading
import warnings

_lock = threading.RLock()
_state = {"registered": False, "error": None}


def _before_mxnet():
    from . import compat
    try:
        compat.apply()
    except Exception as exc:       # noqa: BLE001  e.g. NumPy 2: refuse with the reason, as an ImportError
        raise ImportError(str(exc)) from exc


def register():
    """Register ``ece408_conv`` with the imported MXNet (once). Returns None or the reason it failed."""
    with _lock:
        if _state["registered"] or _state["error"]:
            return _state["error"]
        try:
            from . import fused_op, op  # noqa: F401  (register the operators)
            _state["registered"] = True
        except Exception as exc:   # noqa: BLE001  never break the user's own `import mxnet`
            _state["error"] = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"ece408_op could not register ece408_conv: {_state['error']}", stacklevel=2)
        return _state["error"]


class _Loader:                       # an importlib loader (duck-typed: importlib.abc is costly to import)
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        _before_mxnet()
        self.inner.exec_module(module)
        _Finder.remove()
        register()

    def __getattr__(self, name):          # get_data, get_resource_reader, ...: the real loader's
        return getattr(self.inner, name)


class _Finder:                       # a sys.meta_path finder
    def find_spec(self, fullname, path, target=None):
        if fullname != "mxnet":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader)
        return spec

    @staticmethod
    def remove():
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]


def install():
    """Register now if MXNet is loaded, else arrange for the shims and registration at its import."""
    with _lock:
        if "mxnet" in sys.modules:
            if hasattr(sys.modules["mxnet"], "operator"):      # fully imported (not mid-import)
                register()
            return
        if not any(isinstance(f, _Finder) for f in sys.meta_path):
            sys.meta_path.insert(0, _Finder())


def require_mxnet():
    """Import MXNet (the shims first) with ``ece408_conv`` registered, and return the ``mxnet``
    module, or raise a one-line Ece408Error saying why MXNet is unusable here."""
    from .compat import import_mxnet
    mxnet = import_mxnet()
    error = register()
    if error is not None:
        from ..errors import Ece408Error
        raise Ece408Error(f"ece408_conv could not be registered with MXNet: {error}")
    return mxnet
