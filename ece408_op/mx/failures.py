"""The reason of an ece408_conv failure, carried into the MXNetError the user sees.

MXNet runs a CustomOp's callbacks behind its C API: it prints the Python traceback of an
exception raised there (on stdout) and raises a generic ``MXNetError`` ("Check failed:
reinterpret_cast<CustomOpInferShapeFunc>(...)"). ``install()`` changes two things, for our
operator only:

* the exception is remembered (``record``) and MXNet's traceback dump is not printed
  (``ECE408_DEBUG=1`` prints it again);
* the MXNetError that MXNet then raises is an ``OperatorError``: still an MXNetError (catch it
  as one), whose first line is the reason (``ece408_conv: weight has shape ..., expected ...``)
  and whose ``cause`` is the original exception.

Callbacks that MXNet runs on the calling thread (attribute lists, shape and type inference,
operator creation) attach only to an error of that thread; forward/backward run on MXNet's
worker threads and attach to the next CustomOp error raised in any thread.
"""
import functools
import os
import threading

from ..course import OP_TYPE
from .compat import import_mxnet

mx = import_mxnet()

DEBUG_ENV = "ECE408_DEBUG"
_lock = threading.Lock()
_pending = {"sync": {}, "async": None, "attached": None}   # thread id -> exception; the last forward/
# backward one; the last one put into an MXNetError (for take_last_error after the fact)
_state = {"installed": False}


class OperatorError(mx.base.MXNetError):
    """An MXNetError raised by MXNet because an ece408_conv callback failed; ``cause`` is why."""

    def __init__(self, message, cause=None):
        super().__init__(message)
        self.cause = cause


def _debug():
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def record(exc, sync):
    """Remember ``exc`` for the MXNetError MXNet is about to raise."""
    with _lock:
        if sync:
            _pending["sync"][threading.get_ident()] = exc
        else:
            _pending["async"] = exc


def recording(sync):
    """Decorator for our callbacks: remember what they raise, then let MXNet see it."""
    def wrap(method):
        @functools.wraps(method)
        def wrapper(*args, **kwargs):
            try:
                return method(*args, **kwargs)
            except Exception as exc:
                record(exc, sync)
                raise
        return wrapper
    return wrap


def take(message=None):
    """The recorded exception behind the MXNet error ``message``, then forget it. Without a
    message (``op.take_last_error``): also the one last put into an MXNetError."""
    with _lock:
        exc = _pending["sync"].pop(threading.get_ident(), None)
        if exc is None and _pending["async"] is not None and (message is None or "CustomOpFBFunc" in message):
            exc, _pending["async"] = _pending["async"], None
        if message is None:
            exc, _pending["attached"] = exc or _pending["attached"], None
        elif exc is not None:
            _pending["attached"] = exc
        return exc


def reason(exc):
    """One line: ``ece408_conv: <what was wrong>``."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if text.startswith(OP_TYPE) else f"{OP_TYPE}: {text}"


def _custom_op_error(message):
    return "reinterpret_cast<CustomOp" in message or "CustomOp" in message


def install():
    """Patch MXNet's error construction and its callback traceback printing (once)."""
    if _state["installed"]:
        return
    import mxnet.base as mx_base
    import mxnet.operator as mx_operator
    original = mx_base.get_last_ffi_error

    def get_last_ffi_error():
        error = original()
        message = str(error)
        if not _custom_op_error(message):
            return error
        cause = take(message)
        if cause is None:
            return error
        return OperatorError(f"{reason(cause)}\n{message}", cause)

    def quiet_print(*args, **kwargs):
        text = str(args[0]) if args else ""
        ours = text.startswith((f"Error in {OP_TYPE}", "Error in CustomOp.forward", "Error in CustomOp.backward"))
        if ours and not _debug() and _has_pending():
            return
        print(*args, **kwargs)

    mx_base.get_last_ffi_error = get_last_ffi_error
    mx_operator.print = quiet_print
    _state["installed"] = True


def _has_pending():
    with _lock:
        return bool(_pending["sync"].get(threading.get_ident())) or _pending["async"] is not None


def mxnet_cause(exc):
    """(message, exit code) for an MXNetError, or None if ``exc`` is not one: the reason our
    operator gave (the exception of its failed callback), else MXNet's own first line. Imports no
    MXNet (an MXNetError exists only where MXNet is loaded)."""
    import sys
    mxnet = sys.modules.get("mxnet")
    if mxnet is None or not isinstance(exc, mxnet.base.MXNetError):
        return None
    from .messages import mxnet_error_line
    cause = getattr(exc, "cause", None) or (take() if "CustomOp" in str(exc) else None)
    if cause is not None:
        return str(cause), getattr(cause, "exit_code", 1)
    return mxnet_error_line(exc), 1
