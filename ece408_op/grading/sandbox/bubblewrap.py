"""bubblewrap: the default engine where it works (bwrap as the run's own uid, setpriv inside)."""
import os
import shutil
from pathlib import Path

from .base import ATTACH, Launch, Sandbox, SandboxError, Step, _prlimit, _quiet, engine, gpu_device_nodes
from .cgroup import Cgroup
from .python import PACKAGE_ROOT, SHM_BYTES, hidden_paths, package_binding, python_paths

ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group", "nsswitch.conf",
             "localtime", "ssl", "ca-certificates", "ca-certificates.conf", "os-release", "debian_version",
             "mime.types", "gai.conf", "host.conf")
SYSTEM_DIRS = ("/usr", "/opt")  # read-only; /bin, /lib... follow (symlinks into /usr, or bound)
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


@engine
class BubblewrapSandbox(Sandbox):
    engine = "bubblewrap"
    isolated = True
    auto = True
    _probe = {}

    def check(self):
        for tool in ("bwrap", "prlimit") + (("setpriv",) if os.geteuid() == 0 else ()):
            if shutil.which(tool) is None:
                raise SandboxError(f"engine bubblewrap needs {tool} (apt-get install bubblewrap util-linux)")
        key = os.geteuid()
        if key not in self._probe:
            argv = self._base(Step(["/bin/true"], cwd="/"), probe=True)
            out = _quiet(argv, timeout=30)
            self._probe[key] = None if out.returncode == 0 else \
                (out.stderr.strip().splitlines() or ["no reason given"])[-1]
        if self._probe[key]:
            raise SandboxError(f"bubblewrap cannot make a sandbox here: {self._probe[key]}")
        return self

    def _base(self, step, probe=False):
        """bwrap's arguments, up to the command. As root, bwrap makes the mounts as root (it can
        bind the grader's Python wherever it lives, /root included) without a user namespace,
        and ``setpriv`` inside switches to the run's uid with no capabilities and no new
        privileges before the command starts. As another user, bwrap runs unprivileged, in a
        user namespace, as that user."""
        root = os.geteuid() == 0
        argv = ["bwrap"]
        argv += (["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
                 if root else ["--unshare-all", "--cap-drop", "ALL"])
        argv += ["--die-with-parent", "--new-session", "--clearenv", "--hostname", "ece408"]
        if self.network:
            argv += ["--share-net"]
        for d in SYSTEM_DIRS:
            if os.path.isdir(d):
                argv += ["--ro-bind", d, d]
        for link in SYSTEM_LINKS:
            if os.path.islink(link):
                argv += ["--symlink", os.readlink(link), link]
            elif os.path.isdir(link):
                argv += ["--ro-bind", link, link]
        argv += ["--perms", "0755", "--dir", "/etc"]
        for name in ETC_FILES:
            if os.path.exists(f"/etc/{name}"):
                argv += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(self.limits.disk), "--tmpfs", "/tmp"]
        # POSIX semaphores (Numba's thread-pool start-up lock, multiprocessing): a small /dev/shm of the sandbox's own
        argv += ["--perms", "1777", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm"]
        if not probe:
            paths = [p for p in python_paths() if not p.startswith(SYSTEM_DIRS) and os.path.exists(p)]
            package = package_binding()[1]
            # the folders above every mount, made traversable (bwrap would make them root-only)
            targets = paths + [m.target for m in step.mounts] + ([f"{PACKAGE_ROOT}/ece408_op"] if package else [])
            parents = sorted({str(a) for t in targets for a in Path(t).parents if str(a) not in ("/", "/tmp")})
            for parent in parents:
                argv += ["--perms", "0755", "--dir", parent]
            for path in paths:
                argv += ["--ro-bind", path, path]
            for path in hidden_paths():                  # the installed checkpoints: an empty folder instead
                argv += ["--perms", "0555", "--tmpfs", path]
            if package is not None:
                argv += ["--ro-bind", package, f"{PACKAGE_ROOT}/ece408_op"]
            if step.gpu:
                for node in gpu_device_nodes():
                    argv += ["--dev-bind", node, node]
                if os.path.isdir("/sys"):
                    argv += ["--ro-bind", "/sys", "/sys"]
            for m in step.mounts:
                argv += ["--bind" if m.writable else "--ro-bind", m.source, m.target]
            for key, value in step.env.items():
                argv += ["--setenv", key, value]
            argv += ["--chdir", step.cwd]
        argv += ["--"]
        if root:
            argv += ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--inh-caps=-all",
                     "--bounding-set=-all", "--no-new-privs", "--"]
        return argv + (["/bin/true"] if probe else [])

    def launch(self, step, name):
        group = Cgroup.create(name, self.limits)
        argv = _prlimit(self.limits) + ["--"] + self._base(step) + list(step.argv)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        if group is not None:
            argv = ["/bin/sh", "-c", ATTACH, "sh", *argv]
            env["ECE408_CGROUP"] = " ".join(group.procs_files())
        return Launch(argv, env, group.remove if group else None, group)


