"""A run's scratch folder: ``<parent>/ece408-run-<pid>-<start>-<random>/`` holding

    src/       what the sandbox sees as /src (read-only): the team's files, or for a development
               run a size-capped copy of the submission folder
    build/     /build (read-write): a tmpfs of ``disk`` bytes where the runner may mount one
    channel/   the socket the measuring process reports on (ranked runs; only its sandbox sees it)
    art/       what the build step produced, taken out of /build (size-capped), read-only to the next

Removed on exit; a folder whose runner was killed (its pid-starttime no longer runs) is removed,
its tmpfs unmounted, by the next runner (``stale_scratch``).
"""
import os
import random
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from ..base.ignore import LeftOut, Rules, holds_token
from ..errors import Ece408Error
from ..base.terms import MAX_SUBMISSION_BYTES, MAX_SUBMISSION_FILES, walk_folder
from .owner import owner_tag, tag_alive

PREFIX = "ece408-run-"


class ScratchError(Ece408Error):
    """The scratch folder could not be made or filled (disk full, a submission too large...)."""


def _parent(parent=None):
    return Path(parent or tempfile.gettempdir())


def stale_scratch(parent=None):
    """Remove the scratch folders of runners that no longer run; returns their paths."""
    removed = []
    root = _parent(parent)
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for path in entries:
        if path.name.startswith(PREFIX) and path.is_dir() and not tag_alive(path.name[len(PREFIX):]):
            _unmount(path / "build")
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _unmount(path):
    if os.path.ismount(path):
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def link_stays_inside(root, rel, target):
    """Whether the link at ``rel`` (bytes, relative to the submission's ``root``) pointing at
    ``target`` resolves inside the submission: a relative target, read component by component from
    the link's folder, that never climbs above the root and never passes through another link on
    the way (``b -> a/..`` with ``a -> .`` would reach above it). An absolute target never does
    (inside the sandbox it would name the sandbox's own files)."""
    if target.startswith(b"/"):
        return False
    parts = rel.split(b"/")[:-1]                    # the folders between the root and the link
    steps = [p for p in target.split(b"/") if p not in (b"", b".")]
    for i, part in enumerate(steps):
        if part == b"..":
            if not parts:
                return False
            parts.pop()
            continue
        parts.append(part)
        if i < len(steps) - 1 and os.path.islink(os.path.join(root, *parts)):
            return False
    return True


def copy_submission(src, dst, max_bytes=MAX_SUBMISSION_BYTES, max_files=MAX_SUBMISSION_FILES):
    """Copy the folder ``src`` into ``dst`` (which must not exist): regular files, folders and
    symbolic links (as links, never followed), names of any bytes; what an upload's rules leave out
    (``base/ignore.py``: tokens, databases, version control, caches, virtual environments, other
    teams' folders, .ece408ignore) left out too, counted in one line. A link that would resolve
    outside the submission (absolute, or climbing above its root) is left out, so that no link of
    a submission ever reaches a file of the grader's.
    ScratchError where it holds more than ``max_bytes`` (apparent sizes: a sparse file counts
    whole) or ``max_files`` entries, or something that is none of those; IgnoreError where its
    .ece408ignore cannot be read. Returns one line per link left out, and the rules' line."""
    src_b, dst_b = os.fsencode(src), os.fsencode(dst)
    total = count = 0
    plan, notes, left = [], [], LeftOut()
    rules = Rules(src_b)                         # the upload's rules (base/ignore.py): the same folder either way
    try:
        for found in walk_folder(src_b):
            ignored = rules.left_out(found.parts, stat.S_ISDIR(found.info.st_mode), found.path)
            if ignored is not None:
                left.add(_show(b"/".join(found.parts)), stat.S_ISDIR(found.info.st_mode), *ignored, path=found.path)
                found.descend = False
                continue
            count += 1
            if count > max_files:
                raise ScratchError(f"the submission has more than {max_files} files; leave out what the build "
                                   "does not need")
            path, info = b"/".join(found.parts), found.info
            if stat.S_ISDIR(info.st_mode):
                plan.append(("dir", path))
            elif stat.S_ISLNK(info.st_mode):
                target = os.readlink(found.path)
                if link_stays_inside(src_b, path, target):
                    plan.append(("link", path))
                else:
                    notes.append(f"* Left out {_show(path)}: a symbolic link to {_show(target)}, outside the "
                                 "submission (links never resolve outside it; copy the file in instead)")
            elif stat.S_ISREG(info.st_mode):
                total += info.st_size
                if total > max_bytes:
                    raise ScratchError(f"the submission holds more than {max_bytes >> 20} MiB "
                                       f"(at {_show(path)}: {info.st_size} bytes); leave out data and builds")
                plan.append(("file", path))
            else:
                raise ScratchError(f"the submission holds {_show(path)}, which is not a file, a folder or a link")
    except OSError as exc:
        raise ScratchError(f"cannot read the submission folder: {exc.strerror or exc}") from exc
    try:
        os.mkdir(dst_b, 0o755)
        for kind, path in sorted(plan, key=lambda p: p[1].count(b"/")):
            target = os.path.join(dst_b, path)
            if kind == "dir":
                os.mkdir(target, 0o755)
        for kind, path in plan:
            source, target = os.path.join(src_b, path), os.path.join(dst_b, path)
            if kind == "link":
                os.symlink(os.readlink(source), target)
            elif kind == "file":
                with open(source, "rb", opener=_nofollow) as f_in:
                    data = f_in.read(max_bytes + 1)
                if holds_token(data):
                    left.add(_show(path), False, "token", "it holds a token of the service: never sent")
                    continue
                with open(target, "wb") as f_out:
                    f_out.write(data)
                os.chmod(target, 0o755 if os.stat(source).st_mode & 0o111 else 0o644)
    except OSError as exc:
        raise ScratchError(f"cannot copy the submission into {Path(dst).parent}: {exc.strerror or exc}") from exc
    if left.items:
        notes.append(f"* L{left.line()[1:]} (python -m ece408_op submit --dry-run lists them)")
    return notes


def _nofollow(path, flags):
    return os.open(path, flags | os.O_NOFOLLOW)


def _show(path):
    """A path of any bytes, printable: undecodable bytes and control characters escaped."""
    from ..base.names import printable
    return printable(os.fsdecode(path))


class Scratch:
    """The scratch folder of one run (see the module docstring); ``uid`` owns build/."""

    def __init__(self, parent=None, uid=None, disk=None, keep=False):
        self.keep = keep
        parent = _parent(parent)
        try:
            parent.mkdir(parents=True, exist_ok=True)
            self.root = parent / f"{PREFIX}{owner_tag()}-{random.SystemRandom().randrange(1 << 40):x}"
            self.root.mkdir(mode=0o711)
            os.chmod(self.root, 0o711)
            for name in ("build", "channel", "art"):
                (self.root / name).mkdir()
            self.mounted = False
            if disk and os.geteuid() == 0 and shutil.which("mount"):
                done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={int(disk)},mode=0700,nosuid,nodev",
                                       "ece408-build", str(self.build)], capture_output=True)
                self.mounted = done.returncode == 0
            if uid is not None and os.geteuid() == 0:
                os.chown(self.build, uid, uid)
            os.chmod(self.build, 0o700 if uid is not None and os.geteuid() == 0 else 0o777)
            os.chmod(self.channel, 0o711)
            os.chmod(self.art, 0o755)
        except OSError as exc:
            self.remove()
            raise ScratchError(f"cannot make a scratch folder in {parent}: {exc.strerror or exc}") from exc

    @property
    def src(self):
        return self.root / "src"

    @property
    def build(self):
        return self.root / "build"

    @property
    def channel(self):
        return self.root / "channel"

    @property
    def art(self):
        return self.root / "art"

    def remove(self):
        root = getattr(self, "root", None)
        if root is None:
            return
        if getattr(self, "mounted", False):
            _unmount(root / "build")
        shutil.rmtree(root, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.keep:
            self.remove()
