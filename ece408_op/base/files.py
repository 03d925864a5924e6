"""Files every layer writes the same way.

* ``user_folder(kind, *parts)``: the one rule for the user's folders of each kind (config, data,
  state, cache): ``$XDG_<KIND>_HOME/ece408_op/...`` (default ``~/.config``, ``~/.local/share``,
  ``~/.local/state``, ``~/.cache``); on Windows where the XDG variable is not set, ``%APPDATA%`` for
  config and ``%LOCALAPPDATA%`` for the others. ``user_cache_dir(*parts)``: the cache's, where
  compiled modules, autotuning, Numba's cache and the Fashion-MNIST files live.
* ``atomic_write(path, data)``: a temporary file in the same folder, then a rename: readers see the
  old file or the new one, never a part (``create_beside`` and ``replace_with`` are its two steps, for
  a caller that reports their failures apart).
* ``read_regular(path, limit)``: the bytes of a file someone else controls (a team's, a data
  file): opened once, never blocking (a FIFO or a device never hangs the reader), without
  following a link unless asked, checked to be a regular file on that descriptor and read from it,
  at most ``limit`` bytes; each refusal its own exception, for the caller's one-line message.
"""
import errno
import ntpath
import os
import posixpath
import stat
import tempfile
from pathlib import Path

CHUNK = 1 << 16


class Refused(Exception):
    """A file ``read_regular`` will not read; ``str()`` is why, in a few words."""


class IsLink(Refused):
    def __init__(self):
        super().__init__("it is a symbolic link")


class NotRegular(Refused):
    def __init__(self, mode):
        self.kind = file_kind(mode)
        super().__init__(f"it is not a regular file ({self.kind})")


class TooLarge(Refused):
    def __init__(self, size, limit, growing=False):
        self.size, self.limit, self.growing = size, limit, growing
        super().__init__(f"it grew past {limit} bytes while it was read" if growing else
                         f"it has {size} bytes; at most {limit}")


def file_kind(mode):
    """What a non-regular file is, in words (``a folder``, ``a FIFO``...)."""
    for test, what in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return what
    return "not a file"


def read_regular(path, limit, follow_links=False):
    """The bytes of ``path`` (see the module docstring). Raises IsLink, NotRegular, TooLarge (each a
    Refused), FileNotFoundError, or the OSError of the open or the read."""
    # O_BINARY: Windows' C library would otherwise read text (CRLF turned into LF, Ctrl-Z an end);
    # without O_NOFOLLOW (Windows) a link is found by lstat before the open
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    if not follow_links and not nofollow and os.path.islink(path):
        raise IsLink()
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0) | \
        (0 if follow_links else nofollow)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_links:
            raise IsLink() from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegular(info.st_mode)
        if info.st_size > limit:
            raise TooLarge(info.st_size, limit)
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > limit:
                raise TooLarge(size, limit, growing=True)
            chunks.append(chunk)
    finally:
        os.close(fd)


# kind -> (XDG variable, its default under the home folder, the Windows variable, its sub-folder there)
USER_FOLDERS = {"config": ("XDG_CONFIG_HOME", ".config", "APPDATA", ""),
                "data": ("XDG_DATA_HOME", ".local/share", "LOCALAPPDATA", ""),
                "state": ("XDG_STATE_HOME", ".local/state", "LOCALAPPDATA", "state"),
                "cache": ("XDG_CACHE_HOME", ".cache", "LOCALAPPDATA", "cache")}
WINDOWS_DEFAULTS = {"APPDATA": "AppData\\Roaming", "LOCALAPPDATA": "AppData\\Local"}     # under the home folder


def user_folder_text(kind, *parts, environ=None, windows=None, home=None):
    """The user's folder of ``kind`` for ece408_op, joined with ``parts``, as text in the system's own
    form. The facts default to this system's (``os.environ``, ``os.name``, the home folder); a test
    gives another system's. RuntimeError where a home folder is needed and there is none."""
    environ = os.environ if environ is None else environ
    windows = os.name == "nt" if windows is None else windows
    join = ntpath.join if windows else posixpath.join
    xdg, default, win_variable, win_sub = USER_FOLDERS[kind]
    given = environ.get(xdg, "").strip()
    if given:
        return join(given, "ece408_op", *parts)
    if windows:
        base = environ.get(win_variable, "").strip() or join(home or str(Path.home()), WINDOWS_DEFAULTS[win_variable])
        return join(base, "ece408_op", *((win_sub,) if win_sub else ()), *parts)
    return join(home or str(Path.home()), default, "ece408_op", *parts)


def user_folder(kind, *parts):
    """``user_folder_text`` of this system, as a Path."""
    return Path(user_folder_text(kind, *parts))


def user_cache_dir(*parts):
    """The user's cache folder / ece408_op / parts (``user_folder``); RuntimeError where there is no
    home folder to expand (as ``Path.home()``)."""
    return user_folder("cache", *parts)


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
