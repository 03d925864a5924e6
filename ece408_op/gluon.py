"""``ece408_op.gluon``: the Gluon drop-in, importable both ways (``ece408_op.gluon.Conv2D``,
``from ece408_op.gluon import Conv2D``). It lives in the MXNet layer (``mx/gluon.py``); this
module only re-exports it, importing MXNet (with the operator registered) on first use."""
from .mx.hook import require_mxnet

require_mxnet()

from .mx.gluon import Conv2D, swap_blocks  # noqa: E402

__all__ = ["Conv2D", "swap_blocks"]
