"""A team's project folder: the template, ``init``, finding one, and the files a run takes.

Only the template's own file names are ever taken from a team folder, as regular files (a
symbolic link is refused), each at most MAX_FILE_BYTES, hashed (SHA-256) as they are copied:
the record of a ranked run lists exactly the files it measured and their digests.
"""
import os
import shutil
from pathlib import Path

from ..base.terms import TeamError
from ..course import CPU_FILES, GPU_FILES
from ..course import TEMPLATE                  # the task's template: what init copies

TEMPLATE_FILES = ("README.md", "rai_build.yml", "new-forward.py", "new-forward.cu", "launch.py")
FORWARD_FILES = CPU_FILES + GPU_FILES


def init(dest, restore=False):
    """Make a team project in ``dest`` (new or empty) from the template; returns the paths written.
    ``restore``: into an existing folder, only the template's files it lacks (a deleted
    new-forward.py), every file it has kept as it is."""
    dest = Path(dest)
    if restore:
        if not dest.is_dir():
            raise TeamError(f"{dest}: no such folder to restore; make a new project: python -m ece408_op init {dest}")
    elif dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise TeamError(f"{dest} already exists and is not an empty folder; choose a new folder for the team "
                        f"(or restore the template's files it lacks: python -m ece408_op init {dest} --restore)")
    try:
        dest.mkdir(parents=True, exist_ok=True)
        written = []
        for name in TEMPLATE_FILES:
            if restore and os.path.lexists(dest / name):
                continue
            shutil.copyfile(TEMPLATE / name, dest / name)
            written.append(dest / name)
    except OSError as exc:
        raise TeamError(f"cannot write the team project into {dest}: {exc.strerror or exc}") from exc
    return written


def is_team_dir(path):
    path = Path(path)
    return any((path / name).is_file() for name in FORWARD_FILES)


def find_team(explicit=None, cwd=None):
    """The team folder to run: ``explicit`` (it must hold a team's forward files), else the
    current folder where it holds one, else None (the reference kernels run)."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_dir():
            raise TeamError(f"--team {explicit}: no such folder; make one with: python -m ece408_op init {explicit}")
        if not is_team_dir(path):
            raise TeamError(f"--team {explicit}: no {' or '.join(FORWARD_FILES)} in it; "
                            "make a team project with: python -m ece408_op init DIR")
        return path.resolve()
    here = Path(cwd or os.getcwd())
    return here.resolve() if is_team_dir(here) else None


def require_files(folder, names):
    """TeamError (one line, saying how to mend it) unless the team ``folder`` holds every file of
    ``names`` (a milestone's files: ``course.MILESTONES[...].files``). A name that is there but is
    no regular file (a folder, a FIFO, a device, a link) is not missing: the run reads it once and
    says what it is (``read_team_files``), as its record does."""
    missing = [n for n in names if not os.path.lexists(Path(folder) / n)]
    if not missing:
        return
    if not is_team_dir(folder):
        where = "this folder" if os.path.abspath(folder) == os.getcwd() else str(folder)
        raise TeamError(f"{where} is not a team project (no {', '.join(missing)}): make one with python -m "
                        "ece408_op init DIR and run this in it, or give --team DIR")
    raise TeamError(f"the team folder {folder} has no {' or '.join(missing)}; restore the template's (your other "
                    f"files are kept): python -m ece408_op init {folder} --restore")
