"""Files and folders: atomic writes, bounded reads, storage errors in one line, signals.

* ``atomic_write_bytes``: a temporary file in the same folder, then a rename; no reader
  ever sees a half-written file.
* ``read_regular_file``: the bytes of a regular file (never a FIFO or a device, which
  could block forever), errors as one-line DataErrors.
* ``storage_error``: an OSError met while writing (read-only, full, a file where a folder
  should be, no permission) as a DataError saying what to do.
* ``terminate_on_signals``: SIGTERM and SIGHUP raise ``Terminated`` inside the block, so
  that ``finally`` clauses (cleaning temporary files) run as they do for Ctrl-C.
"""
import errno
import os
import shutil
import signal
import threading
from contextlib import contextmanager
from pathlib import Path

from ..base.files import NotRegular, TooLarge, create_beside, read_regular, replace_with
from ..errors import DataError, Terminated

MAX_READ_BYTES = 1 << 31          # 2 GiB: far above any Fashion-MNIST file (47 MB)


def storage_error(path, exc, doing="write"):
    """A DataError for an OSError met while writing ``path``: names the cause and the remedy."""
    where = Path(path)
    code = getattr(exc, "errno", None)
    reason = exc.strerror or str(exc)
    if code in (errno.ENOSPC, errno.EDQUOT):
        hint = "free some space (a fetch needs about 100 MB) or give --dest a folder on another disk"
    elif code == errno.EROFS:
        hint = "give --dest a folder on a writable disk (or set XDG_CACHE_HOME)"
    elif code in (errno.EACCES, errno.EPERM):
        hint = "you may not write there; fix its permissions or give --dest a folder you own"
    elif code in (errno.ENOTDIR, errno.EEXIST):
        hint = "a file is in the way where a folder is needed; give --dest a folder"
    elif code == errno.EFBIG:
        hint = "the file size limit (ulimit -f) is too small; raise it or fetch elsewhere"
    else:
        hint = "check the folder and try again"
    return DataError(f"cannot {doing} {where}: {reason}; {hint}")


def atomic_write_bytes(path, data):
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename
    (``base.files``), flushed to the disk first. OSErrors (full disk, read-only, no permission)
    become one-line DataErrors."""
    path = Path(path)
    try:
        handle, tmp = create_beside(path, suffix=".part")
    except OSError as exc:
        raise storage_error(path.parent, exc, "create files in") from exc
    try:
        replace_with(handle, tmp, path, data, durable=True, mode=0o666 & ~_umask())   # data is for everyone
    except OSError as exc:
        raise storage_error(path, exc) from exc


def read_regular_file(path, limit=MAX_READ_BYTES):
    """The bytes of ``path``, which must be a regular file of at most ``limit`` bytes (a link is
    followed: a data folder may be made of links; a FIFO never blocks the reader)."""
    path = Path(path)
    try:
        return read_regular(path, limit, follow_links=True)
    except NotRegular as exc:
        if exc.kind == "a folder":
            raise DataError(f"cannot read {path}: a folder is where the file should be; remove it") from None
        raise DataError(f"{path} is not a regular file; replace it with the IDX file") from None
    except TooLarge as exc:
        raise DataError(f"{path} is {exc.size} bytes, more than any Fashion-MNIST file; is it the right file?") from None
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror}; {_read_hint(exc)}") from exc


def _read_hint(exc):
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "fix its permissions (chmod) or use another data folder"
    return "check the file or use another data folder"


def list_folder(folder, what="data folder"):
    """Names in ``folder``; DataError where it cannot be read."""
    try:
        return set(os.listdir(folder))
    except NotADirectoryError as exc:
        raise DataError(f"{what} {folder} is a file, not a folder; give a folder") from exc
    except OSError as exc:
        raise DataError(f"cannot read {what} {folder}: {exc.strerror}; fix its permissions (chmod) "
                        "or point --data-dir / ECE408_DATA_DIR at another folder") from exc


def fsync_folder(folder):
    """Make renames inside ``folder`` durable (best effort: not every file system allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_quietly(path):
    """Remove a file or a whole folder; ignore what is already gone or cannot be removed."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


TERMINATING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def _raise_terminated(signum, frame):
    raise Terminated(signum)


@contextmanager
def terminate_on_signals():
    """Inside the block, SIGTERM and SIGHUP raise ``Terminated`` (where their handler is the
    default one, in the main thread), so cleanup code runs; the handlers are restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {}
    for signum in TERMINATING_SIGNALS:
        if signal.getsignal(signum) == signal.SIG_DFL:
            saved[signum] = signal.signal(signum, _raise_terminated)
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
