"""Writing files so that no reader ever sees a half-written one."""
import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path, data):
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())          # mkstemp makes 0600; data is for everyone
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass
