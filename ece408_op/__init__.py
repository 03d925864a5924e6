"""ece408_op: the UIUC ECE 408 convolution project harness as an MXNet 1.9.1 plugin.

``import ece408_op`` registers the ``ece408_conv`` custom operator with MXNet
(``mx.sym.Custom(data, weight, op_type="ece408_conv", num_filter=..., kernel=...)``).
Where MXNet cannot be imported (the GPU benchmark environment, with NumPy 2),
the package still imports: the kernel and data layers need no MXNet, and
``ece408_op.require_op()`` raises the reason the operator is unavailable.
"""
__version__ = "0.1.0"

OP_TYPE = "ece408_conv"
_OP_UNAVAILABLE = None

try:
    from . import op  # noqa: F401  (registers the operator)
except ImportError as _exc:            # MXNet not installed
    _OP_UNAVAILABLE = f"MXNet is not importable ({_exc}); run: pip install 'mxnet==1.9.1' 'numpy<2'"
except Exception as _exc:              # noqa: BLE001  e.g. NumPy 2 refused by _compat
    _OP_UNAVAILABLE = str(_exc)


def require_op():
    """Return the registered operator module, or raise a one-line Ece408Error saying why not."""
    if _OP_UNAVAILABLE is not None:
        from .errors import Ece408Error
        raise Ece408Error(_OP_UNAVAILABLE)
    from . import op as registered
    return registered
