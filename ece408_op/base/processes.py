"""Processes every layer asks about: ``pid_alive(pid)``, whether a process id names a running
process (a lock's holder, a detached service); ``python_command()``, this interpreter as a child
process is started with it."""
import os
import sys
from pathlib import Path


def python_command():
    """This interpreter, with the same -S: a child of a process started without the site packages
    (the GPU machine's MXNet kit, whose NumPy must not meet the machine's SciPy) runs without them
    too."""
    return [sys.executable] + (["-S"] if sys.flags.no_site else [])


def pid_alive(pid):
    """Whether ``pid`` runs: it exists (another user's too) and is not a zombie, dead and waiting to
    be reaped (told by /proc where there is one)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:                  # Windows: an id that names no process
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True
