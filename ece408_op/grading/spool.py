"""Records waiting for their database: a write that fails (PostgreSQL gone, a disk full) is
retried (reconnecting) for about RETRY_SECONDS; then the record goes to a local spool folder
(``spool_dir``: one JSON file per record, named by its id) and SpooledError says where; every later
``open_store`` delivers what the spool holds first. A spool file is created exclusively (written
aside, then linked into place): the first record spooled under an id is the one kept, so a later
fall-back record of the same id (error, killed) never replaces a measured run."""
import errno
import json
import os
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from ..base.files import user_folder
from .record import Record, SpooledError, StoreError

SPOOL_ENV = "ECE408_SPOOL"
RETRY_ENV = "ECE408_DB_RETRY"              # seconds a failing write is retried (default RETRY_SECONDS)
RETRY_SECONDS = 20.0


def spool_dir():
    """Where records wait that the database refused ($ECE408_SPOOL, else the user's state folder)."""
    if os.environ.get(SPOOL_ENV):
        return Path(os.environ[SPOOL_ENV])
    return user_folder("state", "spool")


def spool(record, url=None, folder=None):
    """Write ``record`` into the spool ``folder`` (default ``spool_dir()``) as ``<id>.json``, unless
    a record of that id waits there already: the first one spooled is kept (created exclusively:
    written and synced aside, then linked into place, so a reader never sees half a file).
    Returns the file's path; StoreError where it can be written nowhere."""
    folder = Path(folder) if folder is not None else spool_dir()
    path = folder / f"{record.id}.json"
    tmp = folder / f".{record.id}.{uuid.uuid4().hex}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w") as f:
            f.write(json.dumps({"url": url, "record": asdict(record)}))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass                                 # the first record of this id stays
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK):
                raise
            _create_exclusively(path, tmp)       # a file system without hard links
    except OSError as exc:
        raise StoreError(f"the record {record.id} could be neither stored nor spooled in {folder} "
                         f"({exc.strerror or exc})") from exc
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return path


def _create_exclusively(path, source):
    """``path`` created (O_EXCL) with the bytes of ``source``; nothing where ``path`` exists."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as out:
        out.write(Path(source).read_text())
        out.flush()
        os.fsync(out.fileno())


def spooled_files(folder=None):
    """{record id: path} of the records waiting in the spool ``folder`` (default ``spool_dir()``)."""
    folder = Path(folder) if folder is not None else spool_dir()
    try:
        return {p.name[:-len(".json")]: p for p in sorted(folder.glob("*.json")) if not p.name.startswith(".")}
    except OSError:
        return {}


def spooled_record(path):
    """The Record waiting in the spool file ``path``, or None where it cannot be read."""
    try:
        return Record(**json.loads(Path(path).read_text())["record"])
    except (OSError, ValueError, TypeError, KeyError):
        return None


def move_spool(source, dest=None):
    """Move the records waiting in the spool folder ``source`` into ``dest`` (default
    ``spool_dir()``), each kept where its id already waits in ``dest``; returns the ids that
    could not be moved (they stay in ``source``)."""
    dest = Path(dest) if dest is not None else spool_dir()
    left = []
    for record_id, path in spooled_files(source).items():
        try:
            dest.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, dest / path.name)
            except FileExistsError:
                pass                             # the first record of this id stays
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                data = json.loads(path.read_text())      # another file system: copied, still exclusively
                spool(Record(**data["record"]), data.get("url"), dest)
            path.unlink()
        except (OSError, ValueError, TypeError, KeyError, StoreError):
            left.append(record_id)
    return left


def retry_seconds():
    """How long a failing write is retried: $ECE408_DB_RETRY seconds, else RETRY_SECONDS."""
    try:
        return float(os.environ.get(RETRY_ENV, RETRY_SECONDS))
    except ValueError:
        return RETRY_SECONDS


def stored_or_spooled(record, url, attempt, between=lambda: None, seconds=None):
    """``attempt()`` (which stores ``record``) until it succeeds, for ``seconds`` (``retry_seconds()``),
    with ``between()`` after each failure (a reconnect); then the record is spooled and SpooledError
    says where it waits (StoreError where it could not be spooled either)."""
    deadline = time.monotonic() + (retry_seconds() if seconds is None else seconds)
    delay = 0.2
    while True:
        try:
            return attempt()
        except StoreError as exc:
            if time.monotonic() + delay > deadline:
                path = spool(record, url)
                raise SpooledError(f"the record {record.id} could not be stored ({exc}); it waits in {path} "
                                   "and is stored by the next command that opens the database",
                                   record, path) from exc
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
            between()
