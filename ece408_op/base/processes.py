"""Processes every layer asks about: ``pid_alive(pid)``, whether a process id names a running
process (a lock's holder, a detached service)."""
import os
from pathlib import Path


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
