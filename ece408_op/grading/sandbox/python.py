"""What the grader's Python needs inside a sandbox, and never more: its prefixes, its import
path, and the package bound alone (never the checkout around it)."""
import os
import sys
from pathlib import Path

SHM_BYTES = 64 << 20            # a sandbox's /dev/shm
PACKAGE_ROOT = "/ece408"        # where a checkout's package is bound in a sandbox: the package alone


def _within(path, root):
    path, root = Path(os.path.realpath(path)), Path(os.path.realpath(root))
    return path == root or root in path.parents


def package_binding():
    """(the grader's import path inside a bubblewrap sandbox, the package folder to bind at
    ``PACKAGE_ROOT/ece408_op`` or None). An installed package is seen where it is installed (its
    site-packages); a package run from a checkout (an editable install) is bound ALONE, never its
    checkout (which may hold models, databases, a class folder): every path in or above the
    checkout leaves the import path, except the interpreter's own prefixes (a virtual environment
    kept inside the checkout)."""
    from ...team.harness import PACKAGE_HOME, trusted_path
    home = PACKAGE_HOME
    package = home / "ece408_op"
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    paths = trusted_path()
    if any(_within(home, prefix) for prefix in prefixes) or home.name in ("site-packages", "dist-packages"):
        return paths, None
    kept = [p for p in paths[1:] if any(_within(p, prefix) for prefix in prefixes)
            or not (_within(p, home) or _within(home, p))]
    return [PACKAGE_ROOT] + kept, str(package)


def python_paths():
    """What the grader's Python needs to be visible read-only inside a sandbox: its prefixes and
    every folder on its import path (``package_binding``: never a checkout; the team's files are
    never among them)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    paths.update(p for p in package_binding()[0] if p != PACKAGE_ROOT and os.path.exists(p))
    return sorted({os.path.realpath(p) for p in paths} | paths)


def hidden_paths():
    """What of the grader's Python a team never sees although its prefix is bound: the checkpoints
    installed in it (``<prefix>/share/ece408_op``: the models' distribution, models/setup.py). The
    measuring process gets the models over its channel; a team's process must find none."""
    found = {os.path.join(p, "share", "ece408_op") for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    return sorted(p for p in found if os.path.isdir(p))


# ---------------------------------------------------------------------------- cgroups

