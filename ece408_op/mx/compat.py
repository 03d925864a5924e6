"""Shims that let MXNet 1.9.1 import on current Python and NumPy.

``hook.py`` applies them whenever ``mxnet`` is imported; ``import_mxnet()`` does it
explicitly. This module is the only place that knows about these breakages:

* NumPy 1.24-1.26 removed the aliases ``np.bool``, ``np.int``, ``np.float``,
  ``np.object``... that MXNet 1.9.1 still uses at import time; they are put
  back as the builtins they always were.
* Python 3.12 removed ``distutils``; MXNet imports it. Importing setuptools
  first installs its bundled copy under that name.
* MXNet 1.9.1 needs NumPy < 2; with NumPy 2 it fails in obscure places, so we
  stop early with an actionable message instead.
"""
import os
import sys
import warnings

import numpy as np

from ..base.extras import install_hint
from ..errors import Ece408Error

_EXPIRED_ALIASES = {"bool": bool, "int": int, "float": float, "complex": complex,
                    "object": object, "str": str}


def _numpy_major():
    return int(np.__version__.split(".")[0])


def apply():
    """Install the shims (idempotent)."""
    if _numpy_major() >= 2:
        raise Ece408Error(
            f"MXNet 1.9.1 needs NumPy < 2 but NumPy {np.__version__} is installed; "
            "run: pip install 'numpy<2'")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, value in _EXPIRED_ALIASES.items():
            if name not in np.__dict__:
                setattr(np, name, value)
    if sys.version_info >= (3, 12) and "distutils" not in sys.modules:
        try:
            import setuptools  # noqa: F401  (registers setuptools' distutils)
        except ImportError as exc:
            raise Ece408Error("MXNet needs distutils, which Python 3.12 dropped; "
                              "run: pip install setuptools") from exc


def import_mxnet():
    """Import MXNet with the shims in place and its import-time warnings kept quiet;
    raises Ece408Error with the reason where it cannot be imported."""
    apply()
    # MXNet logs "Subgraph backend MKLDNN is activated." at every bind otherwise.
    os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import mxnet
        except ModuleNotFoundError:
            raise                                # not installed: the command line names the extra that brings it
        except ImportError as exc:
            raise Ece408Error(f"MXNet is not importable ({exc}); install it again: {install_hint('mxnet')}") from exc
        except OSError as exc:                   # libmxnet.so's own libraries missing (libgomp1)
            raise Ece408Error(f"MXNet's library cannot be loaded ({exc}); install the system library "
                              "it names (e.g. apt-get install libgomp1 libquadmath0)") from exc
    return mxnet
