"""Who made a leftover, and whether it still runs: a runner names what it makes (cgroups, scratch
folders, containers) with its pid and start time, so that a later runner can tell what a killed
one left behind (``sandbox.clean_stale``) without touching what a live one still uses."""
import os
from pathlib import Path


def process_start(pid):
    """The start time of process ``pid`` (clock ticks since boot), or None where it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text.rsplit(")", 1)[1].split()[19])


def owner_tag():
    """This process, named so that a later process can tell whether it still runs: pid-starttime."""
    return f"{os.getpid()}-{process_start(os.getpid())}"


def tag_alive(tag):
    try:
        pid, start = (int(v) for v in tag.split("-")[:2])
    except ValueError:
        return False
    return process_start(pid) == start
