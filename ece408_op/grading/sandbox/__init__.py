"""Where a team's commands run: a sandbox per command, on every engine, and nothing left after it.

A command runs as an unprivileged user of its own (a fresh uid per run when the runner is root),
with its own pid, mount, network, IPC and UTS namespaces, a read-only root, the submission's
/src read-only, a private /tmp and the run's /build (size-capped), none of the grader's
environment, GPU device nodes only for GPU runs, and these limits (``Limits``, flags of submit
and grade): memory, processes, CPU time per process and for the whole tree, file size, output.
When the command ends (exit, time limit, SIGTERM, or the runner killed with SIGKILL), so does
every process it started: a pid namespace dies with its first process, and bubblewrap and the
runner's own child die with their parent. What a killed runner leaves (cgroups, scratch folders
and their tmpfs, containers) is removed by the next runner that starts (``clean_stale``).

Engines:

  bubblewrap  (default where it works) bwrap as the run's own uid (setpriv), in a user
              namespace: only the grader's Python, the system's libraries and tools, the
              models and data, read-only; rlimits (prlimit) and, where the runner may write
              them, cgroups for memory, processes and the tree's CPU time.
  podman, docker   one fresh container per command: --network none --read-only --user UID
              --pids-limit --memory --tmpfs /tmp --cap-drop ALL --security-opt no-new-privileges
  buildah     ``buildah run --isolation oci`` (namespaces, not chroot) in a container made with
              --memory and --ulimit; --network none
  host        only when asked for by name: no isolation at all; marked "not isolated" in the
              transcript and the record.
"""
from . import bubblewrap, containers, host  # noqa: F401  (each registers its engine, in auto's order)
from .base import ENGINE_ENV, ENGINES, Launch, Limits, Mount, Sandbox, SandboxError, Step, gpu_device_nodes
from .bubblewrap import BubblewrapSandbox
from .cgroup import Cgroup, stale_cgroups
from .containers import BuildahSandbox, ContainerSandbox, DockerSandbox, PodmanSandbox
from .host import HostSandbox
from .python import PACKAGE_ROOT, package_binding, python_paths


def choose_engine(requested=None):
    """The engine name for ``requested`` (or $ECE408_ENGINE): auto picks the first that works of
    the engines registered for it (bubblewrap, podman, docker, buildah); host only by name."""
    import os
    requested = (requested or os.environ.get(ENGINE_ENV) or "auto").strip().lower()
    if requested != "auto" and requested not in ENGINES:
        raise SandboxError(f"unknown engine {requested!r}; use auto, {', '.join(ENGINES)}")
    return requested


def open_sandbox(engine, limits, image=None, network=False, uid=None):
    """A checked Sandbox for ``engine`` (auto: the first that works here); SandboxError naming why
    none does."""
    candidates = [cls for cls in ENGINES.values() if cls.auto] if engine == "auto" else [ENGINES[engine]]
    reasons = []
    for cls in candidates:
        try:
            return cls(limits, image, uid, network).check()
        except SandboxError as exc:
            reasons.append(str(exc))
    if engine == "auto":
        raise SandboxError("no sandbox engine works here (" + "; ".join(reasons) + "); install bubblewrap, or "
                           "run without isolation with --engine host")
    raise SandboxError(reasons[0])


def clean_stale(scratch_parent=None):
    """Remove what runners killed with SIGKILL left behind: their cgroups (and any process still
    in them), scratch folders (and the tmpfs mounted on their /build), each engine's leftovers
    (containers). Returns a list of what was removed (one line each)."""
    from ..scratch import stale_scratch
    removed = []
    for name, dirs in stale_cgroups().items():
        group = Cgroup(name, {str(d): d for d in dirs}, False)
        group.dirs = {("freezer" if "freezer" in str(d) else str(d)): d for d in dirs}
        group.remove()
        removed.append(f"cgroup {name}")
    removed += [f"scratch folder {path}" for path in stale_scratch(scratch_parent)]
    for cls in ENGINES.values():
        removed += cls.clean_stale()
    return removed


__all__ = ["ENGINE_ENV", "ENGINES", "BubblewrapSandbox", "BuildahSandbox", "Cgroup", "ContainerSandbox",
           "DockerSandbox", "HostSandbox", "Launch", "Limits", "Mount", "PACKAGE_ROOT", "PodmanSandbox", "Sandbox",
           "SandboxError", "Step", "choose_engine", "clean_stale", "gpu_device_nodes", "open_sandbox",
           "package_binding", "python_paths"]
