"""Files every layer writes the same way.

* ``user_cache_dir(*parts)``: the one rule for the user's cache folder:
  ``$XDG_CACHE_HOME/ece408_op/...`` (default ``~/.cache/ece408_op/...``); compiled modules, autotuning,
  Numba's cache and the Fashion-MNIST files live under it.
* ``atomic_write(path, data)``: a temporary file in the same folder, then a rename: readers see the
  old file or the new one, never a part (``create_beside`` and ``replace_with`` are its two steps, for
  a caller that reports their failures apart).
"""
import os
import tempfile
from pathlib import Path


def user_cache_dir(*parts):
    """$XDG_CACHE_HOME (default ~/.cache) / ece408_op / parts; RuntimeError where there is no home folder
    to expand (as ``Path.home()``)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache").joinpath("ece408_op", *parts)


def create_beside(path, suffix=""):
    """(file descriptor, name) of a new temporary file in ``path``'s folder (made where missing), named
    ``.<name>.<random><suffix>`` so that it stays hidden."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)


def replace_with(handle, tmp, path, data, durable=False, mode=None):
    """Write ``data`` (bytes) to the temporary file (``handle``, ``tmp``), then rename it over ``path``;
    ``durable``: flushed to the disk first; ``mode``: its permission bits (mkstemp makes 0600). On any
    failure the temporary file is removed and the error raised."""
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write(path, data, durable=False, mode=None, suffix=""):
    """Write ``data`` (bytes) to ``path`` through a temporary file and a rename (OSErrors raised)."""
    handle, tmp = create_beside(path, suffix)
    replace_with(handle, tmp, path, data, durable, mode)
