"""Numba for this package's CPU kernels (and a team's plain-loop forward): set up once, the same way.

    from ece408_op.conv import numba_env
    numba = numba_env.load()                 # None where Numba is missing: numba_env.unavailable() says why
    forward = numba_env.njit(parallel=True)(forward)       # cache=True where the cache folder is writable
    numba_env.call(forward, y, x, k)         # first call: compiled (or loaded from the cache), with the note

What it takes care of:

* **SLP vectoriser.** Numba 0.68 turns LLVM's SLP vectoriser off by default; kernels written as
  scalar statements over a register block (``conv/direct.py``) then run at a tenth of their speed.
  ``load()`` sets ``NUMBA_SLP_VECTORIZE=1`` before Numba's first import (unless the user set it).
  Where Numba was imported earlier without it, ``load()`` turns it on in Numba's config (Numba reads
  it for every compilation) and warns once; where the user set it to 0, it is left off (warned).
* **Cache folder.** Compiled code is cached in ``$ECE408_NUMBA_CACHE`` or
  ``$XDG_CACHE_HOME/ece408_op/numba`` (``~/.cache/...``), in a sub-folder named by everything that
  changes the machine code and that Numba's own cache index does not key on: the SLP setting, Numba's
  and llvmlite's versions, LLVM's and the CPU's name (``cache_key()``). A folder that cannot be written
  (a read-only home, a container's user without one) is not an error: the kernels are compiled in
  memory, every run, after a one-line note.
* **First-compile note.** ``call`` compiles a function for its arguments' types before running it;
  where Numba's cache index does not hold that signature (so it really compiles) it first prints one
  line on stderr, once per process (where the index cannot be read: if compiling lasts longer than
  ``NOTE_AFTER_S``).
* **Generated sources.** ``load_source`` imports generated kernel source (register-blocked kernels
  are generated per tile size) from a file in the cache folder, so that Numba can cache it like any
  module (in memory where the folder cannot be written).

Environment: ``ECE408_NUMBA=0`` makes ``load()`` return None (the CPU path then uses its BLAS
fallback); ``ECE408_NUMBA_CACHE=DIR`` moves the cache.
"""
import hashlib
import importlib.util
import os
import sys
import threading
from pathlib import Path

from ..base.files import atomic_write, user_cache_dir

SLP_ENV = "NUMBA_SLP_VECTORIZE"
CACHE_ENV = "ECE408_NUMBA_CACHE"
DISABLE_ENV = "ECE408_NUMBA"
NOTE_AFTER_S = 1.5            # where the cache index cannot be read: a compilation lasting longer gets the note
                              # (a real one takes 2-15 s; a parallel function's first cache load up to 0.6 s)
_state = {"loaded": False, "numba": None, "reason": None, "folder": None, "folder_note": None,
          "noted": False, "warned": set()}
_lock = threading.RLock()


def _say(text, key=None):
    """One line on stderr (once per ``key`` per process)."""
    if key is not None:
        if key in _state["warned"]:
            return
        _state["warned"].add(key)
    try:
        sys.stderr.write(f"ece408_op: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):        # stderr closed: the note is not worth failing for
        pass


def load():
    """Numba, imported with the SLP vectoriser on; None where it is not installed, disabled
    (``ECE408_NUMBA=0``) or broken (``unavailable()`` gives the reason)."""
    if _state["loaded"]:
        return _state["numba"]
    with _lock:
        if _state["loaded"]:
            return _state["numba"]
        if os.environ.get(DISABLE_ENV, "").strip() == "0":
            _state["reason"] = f"{DISABLE_ENV}=0"
        else:
            already = "numba" in sys.modules
            if not already:
                os.environ.setdefault(SLP_ENV, "1")
            try:
                import numba
                from numba.core import config
            except Exception as exc:          # noqa: BLE001  not installed, or an incompatible NumPy
                _state["reason"] = f"Numba is not importable ({type(exc).__name__}: {exc})"
            else:
                if not getattr(config, "SLP_VECTORIZE", 1):        # older Numba: no such switch, SLP on
                    if os.environ.get(SLP_ENV, "").strip() == "0":
                        _say(f"{SLP_ENV}=0 is set: the CPU kernels will run several times slower", "slp")
                    else:
                        config.SLP_VECTORIZE = 1     # read by every later compilation (Numba 0.68)
                        _say(f"Numba was imported before ece408_op without {SLP_ENV}=1; turned it on for "
                             "the kernels compiled from now on", "slp")
                _state["numba"] = numba
                _setup_cache(numba, config)
        _state["loaded"] = True
        return _state["numba"]


def unavailable():
    """Why ``load()`` returns None (None where Numba is there)."""
    load()
    return _state["reason"]


def cache_key():
    """The cache sub-folder's name: what changes the machine code that Numba's index does not key on."""
    numba = load()
    return None if numba is None else _key(numba)


def _key(numba):
    import llvmlite
    import llvmlite.binding as llvm
    from numba.core import config
    llvm_version = ".".join(map(str, llvm.llvm_version_info))
    return (f"slp{int(bool(getattr(config, 'SLP_VECTORIZE', 1)))}-numba{numba.__version__}-llvmlite{llvmlite.__version__}"
            f"-llvm{llvm_version}-{config.CPU_NAME or llvm.get_host_cpu_name()}")


def cache_base():
    """The folder that holds one cache sub-folder per key."""
    given = os.environ.get(CACHE_ENV, "").strip()
    if given:
        return Path(given).expanduser()
    return user_cache_dir("numba")


def _writable(folder):
    """None if ``folder`` can be created and written, else the reason."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe-{os.getpid()}-{threading.get_ident()}"
        probe.write_bytes(b"")
        probe.unlink()
        return None
    except (OSError, RuntimeError) as exc:      # RuntimeError: no home folder to expand
        return getattr(exc, "strerror", None) or str(exc)


def _setup_cache(numba, config):
    try:
        folder = cache_base() / _key(numba)
    except RuntimeError as exc:                   # Path.home() without a home
        folder, reason = None, str(exc)
    else:
        reason = _writable(folder)
    if reason is None:
        _state["folder"] = folder
        config.CACHE_DIR = str(folder)               # read when a function's cache is set up
    else:
        _state["folder_note"] = (f"cannot write Numba's cache folder {folder} ({reason}): compiling the CPU "
                                 f"kernels in memory, every run (set {CACHE_ENV} to a writable folder)")


def cache_folder():
    """The writable cache folder in use, or None (compiled in memory)."""
    load()
    return _state["folder"]


def njit(**options):
    """``numba.njit`` with ``cache`` on where the cache folder is writable (off otherwise)."""
    numba = load()
    if numba is None:
        raise RuntimeError(f"Numba is unavailable: {unavailable()}")
    options.setdefault("cache", cache_folder() is not None)
    if not options["cache"]:
        options.pop("cache")
    return numba.njit(**options)


def load_source(name, source):
    """A module of generated kernel source: written once to ``<cache>/src/<name>_<hash>.py`` and
    imported from there (so Numba caches its functions), or run in memory where the folder cannot be
    written. The module's name is unique per source text."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    modname = f"ece408_op_generated_{name}_{digest}"
    with _lock:
        if modname in sys.modules:
            return sys.modules[modname]
        folder = cache_folder()
        path = None
        if folder is not None:
            path = folder / "src" / f"{modname}.py"
            try:
                if not path.exists() or path.read_text() != source:
                    atomic_write(path, source.encode())    # other processes see the whole file or none
            except OSError:
                path = None
        if path is not None:
            spec = importlib.util.spec_from_file_location(modname, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[modname] = module            # Numba's cache rebuilds environments by module name
            spec.loader.exec_module(module)
        else:
            module = type(sys)(modname)
            sys.modules[modname] = module
            exec(compile(source, f"<{modname}>", "exec"), module.__dict__)   # noqa: S102  our own source
        return module


def _note_first_compile(what):
    if not _state["noted"]:
        _state["noted"] = True
        where = cache_folder()
        _say(f"compiling {what} with Numba (first run on this machine: about 10 s per kernel; "
             + (f"cached in {where})" if where is not None else "not cached)"))


def _in_cache(dispatcher, signature):
    """Whether Numba's cache index holds ``signature`` (None: cannot tell; Numba's private API)."""
    if cache_folder() is None:
        return False
    try:
        cache = dispatcher._cache
        key = cache._index_key(signature, dispatcher.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:            # noqa: BLE001  another Numba version: fall back to the timer
        return None


def compile_for(dispatcher, args, what="the CPU kernels"):
    """Compile (or load from the cache) ``dispatcher`` for ``args``' types, printing the one-line note
    if that takes longer than ``NOTE_AFTER_S``; a no-op once compiled in this process."""
    numba = load()
    signature = tuple(numba.typeof(a) for a in args)
    if signature in dispatcher.overloads:
        return
    if _state["folder_note"]:
        _say(_state["folder_note"], "folder")      # says it compiles, every run: no second note
        _state["noted"] = True
    cached = _in_cache(dispatcher, signature)
    if cached is False:
        _note_first_compile(what)
    timer = threading.Timer(NOTE_AFTER_S if cached is None else 1e9, _note_first_compile, (what,))
    timer.daemon = True
    timer.start()
    try:
        with _lock:                          # one compilation at a time (MXNet may call from several threads)
            dispatcher.compile(signature)
    finally:
        timer.cancel()


def call(dispatcher, *args, what="the CPU kernels"):
    """``dispatcher(*args)``, compiled first with ``compile_for`` (note included)."""
    compile_for(dispatcher, args, what)
    return dispatcher(*args)


_workqueue = threading.Lock()


def parallel_guard():
    """A lock to hold around a parallel function's call where Numba's threading layer is 'workqueue'
    (no TBB or OpenMP library: that layer aborts the process when two threads launch parallel work at
    once, and MXNet runs operators on several threads); otherwise a no-op context."""
    numba = load()
    try:
        layer = numba.threading_layer()
    except ValueError:                   # no parallel function has run yet: serialise this first one
        return _workqueue
    return _workqueue if layer == "workqueue" else _NOLOCK


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NOLOCK = _NoLock()


def set_threads(count):
    """Numba's parallel regions use ``count`` threads in the calling thread (Numba's setting is per
    thread: MXNet calls operators from threads of its own). Returns the count used."""
    numba = load()
    count = max(1, min(int(count), numba.config.NUMBA_NUM_THREADS))
    if numba.get_num_threads() != count:
        numba.set_num_threads(count)
    return count
