"""cgroups for one command (v1: memory, pids, cpuacct, freezer; v2: one folder): its memory,
processes and CPU time limits, and every process in it killed when it ends."""
import os
import signal
import time
from pathlib import Path

from ..owner import tag_alive

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "ece408"


class Cgroup:
    """A cgroup for one command (v1: memory, pids, cpuacct, freezer; v2: one folder), where the
    runner may create it; None from ``create`` elsewhere."""

    def __init__(self, name, dirs, v2):
        self.name, self.dirs, self.v2 = name, dirs, v2

    @classmethod
    def create(cls, name, limits):
        if os.geteuid() != 0:
            return None
        v2 = (CGROUP_ROOT / "cgroup.controllers").exists()
        controllers = [""] if v2 else ["memory", "pids", "cpuacct", "freezer"]
        dirs = {}
        try:
            for c in controllers:
                base = CGROUP_ROOT / c / CGROUP_PARENT if c else CGROUP_ROOT / CGROUP_PARENT
                if v2 and not base.exists():
                    base.mkdir(exist_ok=True)
                    (CGROUP_ROOT / "cgroup.subtree_control").write_text("+memory +pids +cpu")
                    (base / "cgroup.subtree_control").write_text("+memory +pids +cpu")
                base.mkdir(parents=True, exist_ok=True)
                path = base / name
                path.mkdir()
                dirs[c or "unified"] = path
            group = cls(name, dirs, v2)
            group._limit(limits)
            return group
        except OSError:
            for path in dirs.values():
                try:
                    path.rmdir()
                except OSError:
                    pass
            return None

    def _limit(self, limits):
        if self.v2:
            d = self.dirs["unified"]
            (d / "memory.max").write_text(str(limits.memory))
            if (d / "memory.swap.max").exists():
                (d / "memory.swap.max").write_text("0")
            (d / "pids.max").write_text(str(limits.processes))
            return
        (self.dirs["memory"] / "memory.limit_in_bytes").write_text(str(limits.memory))
        swap = self.dirs["memory"] / "memory.memsw.limit_in_bytes"
        if swap.exists():
            try:
                swap.write_text(str(limits.memory))
            except OSError:
                pass
        (self.dirs["pids"] / "pids.max").write_text(str(limits.processes))

    def procs_files(self):
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def pids(self):
        found = set()
        for d in self.dirs.values():
            try:
                found.update(int(v) for v in (d / "cgroup.procs").read_text().split())
            except OSError:
                pass
        return found

    def cpu_seconds(self):
        try:
            if self.v2:
                for line in (self.dirs["unified"] / "cpu.stat").read_text().splitlines():
                    if line.startswith("usage_usec"):
                        return int(line.split()[1]) / 1e6
                return 0.0
            return int((self.dirs["cpuacct"] / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError, KeyError):
            return 0.0

    def out_of_memory(self):
        """Whether the kernel killed a process of this cgroup for its memory limit."""
        name = "memory.events" if self.v2 else "memory.oom_control"
        try:
            text = (self.dirs["unified" if self.v2 else "memory"] / name).read_text()
        except (OSError, KeyError):
            return False
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "oom_kill" and parts[1].isdigit():
                return int(parts[1]) > 0
        return False

    def kill_all(self, wait=10.0):
        """SIGKILL every process in the cgroup (frozen first, so that none forks meanwhile); True
        when none is left."""
        if self.v2 and (self.dirs["unified"] / "cgroup.kill").exists():
            try:
                (self.dirs["unified"] / "cgroup.kill").write_text("1")
            except OSError:
                pass
        freezer = self.dirs.get("freezer")
        deadline = time.monotonic() + wait
        while True:
            pids = self.pids()
            if not pids:
                return True
            if freezer is not None:
                try:
                    (freezer / "freezer.state").write_text("FROZEN")
                except OSError:
                    pass
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if freezer is not None:
                try:
                    (freezer / "freezer.state").write_text("THAWED")
                except OSError:
                    pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)

    def remove(self):
        self.kill_all()
        for path in self.dirs.values():
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


def stale_cgroups():
    """(name, [folders]) of cgroups left by runners that no longer run."""
    found = {}
    for base in [CGROUP_ROOT / c / CGROUP_PARENT for c in ("memory", "pids", "cpuacct", "freezer")] + \
            [CGROUP_ROOT / CGROUP_PARENT]:
        if not base.is_dir():
            continue
        for path in base.iterdir():
            if path.is_dir() and path.name.startswith("run-") and not tag_alive(path.name[4:]):
                found.setdefault(path.name, []).append(path)
    return found


# ---------------------------------------------------------------------------- engines

