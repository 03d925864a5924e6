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
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Ece408Error

ENGINES = ("bubblewrap", "podman", "docker", "buildah", "host")
ENGINE_ENV = "ECE408_ENGINE"
ISOLATED = {"bubblewrap": True, "podman": True, "docker": True, "buildah": True, "host": False}
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "ece408"
UID_BASE = 1_000_000            # a run's uid: UID_BASE + a random number below UID_SPAN
UID_SPAN = 1_000_000
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group", "nsswitch.conf",
             "localtime", "ssl", "ca-certificates", "ca-certificates.conf", "os-release", "debian_version",
             "mime.types", "gai.conf", "host.conf")
SYSTEM_DIRS = ("/usr", "/opt")  # read-only; /bin, /lib... follow (symlinks into /usr, or bound)
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


class SandboxError(Ece408Error):
    """An engine that cannot run here, or a sandbox that could not be set up."""


def _gib(n):
    return f"{n / 2**30:g} GiB" if n >= 2**30 else f"{n / 2**20:g} MiB"


@dataclass
class Limits:
    """What one command may use. Defaults fit the course's milestones on 10,000 images."""
    memory: int = 8 << 30            # bytes of memory (the whole tree where cgroups apply)
    processes: int = 512             # processes and threads
    cpu_seconds: int = 3600          # CPU time (each process; the whole tree where cgroups apply)
    disk: int = 2 << 30              # bytes in /build, and in /tmp
    output: int = 64 << 20           # bytes of output before the command is stopped
    file_size: int = 2 << 30         # the largest file a command may write

    def describe(self):
        return (f"memory {_gib(self.memory)}, {self.processes} processes, CPU {self.cpu_seconds} s, "
                f"/build and /tmp {_gib(self.disk)} each, output {_gib(self.output)}")


@dataclass
class Mount:
    source: str
    target: str
    writable: bool = False


@dataclass
class Step:
    """One command to run in a sandbox."""
    argv: list
    mounts: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    cwd: str = "/build"
    gpu: bool = False


@dataclass
class Launch:
    """How the runner starts a Step: argv and environment for Popen, and what to do afterwards."""
    argv: list
    env: dict
    cleanup: object = None           # callable: kill whatever is left, free what was made
    cgroup: object = None
    cwd: str = None
    notes: list = field(default_factory=list)


# ---------------------------------------------------------------------------- helpers

def _quiet(argv, timeout=60, env=None):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(argv, 127, "", str(exc))


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


def gpu_device_nodes():
    return sorted(str(p) for p in Path("/dev").glob("nvidia*") if not p.is_dir()) + \
        sorted(str(p) for p in Path("/dev").glob("nvidia-caps/*"))


def run_uid():
    """A uid for one run: fresh when this process may switch users, else its own."""
    if os.geteuid() != 0:
        return os.getuid()
    return UID_BASE + random.SystemRandom().randrange(UID_SPAN)


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
    import ece408_op
    from ..team.client import trusted_path
    package = Path(ece408_op.__file__).resolve().parent
    home = package.parent
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


# ---------------------------------------------------------------------------- cgroups

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

class Sandbox:
    """One engine, for the commands of one run (they share ``uid``)."""

    engine = "host"
    isolated = False

    def __init__(self, limits, image=None, uid=None, network=False):
        self.limits = limits
        self.image = image
        self.uid = run_uid() if uid is None else uid
        self.network = network
        self.image_id = None
        self.counter = 0

    def check(self):
        """SandboxError where this engine cannot run here (a one-line reason); else self."""
        return self

    def launch(self, step, name):
        raise NotImplementedError

    def _name(self):
        self.counter += 1
        return f"run-{owner_tag()}-{self.counter}-{random.SystemRandom().randrange(1 << 30):x}"

    def prepare(self, step):
        """The Launch of ``step``."""
        return self.launch(step, self._name())


def _prlimit(limits):
    """The limits of a command as rlimits, and death with the runner from its very start (bwrap's
    own --die-with-parent is set only once bwrap has begun: a runner killed before that moment
    would leave it running)."""
    death = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []
    return death + ["prlimit", "--as=unlimited", f"--nproc={limits.processes}",
                    f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}", f"--fsize={limits.file_size}",
                    "--core=0", "--nofile=4096"]


ATTACH = 'for f in $ECE408_CGROUP; do echo $$ > "$f" || exit 126; done; unset ECE408_CGROUP; exec "$@"'


class HostSandbox(Sandbox):
    """No isolation: the command runs here, as the runner's user (asked for by name only)."""

    engine = "host"
    isolated = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.uid = os.getuid()

    def launch(self, step, name):
        mounts = {m.target: m.source for m in step.mounts}
        argv = [_host_path(word, mounts) for word in step.argv]
        env = {**step.env, "PATH": _host_path(step.env.get("PATH", os.environ.get("PATH", "")), mounts)}
        group = Cgroup.create(name, self.limits)
        cwd = mounts.get(step.cwd, step.cwd)
        if group is not None:
            argv = ["/bin/sh", "-c", ATTACH, "sh", *argv]
            env["ECE408_CGROUP"] = " ".join(group.procs_files())
        return Launch(_prlimit(self.limits) + ["--"] + argv, env, group.remove if group else None, group, cwd)


def _host_path(word, mounts):
    """``word`` with each mount target (/src, /build...) standing as a whole path component for
    its host folder (``/src/*``, ``"cp -r /src/* /build"``, ``--out=/build``; not ``/usr/src``)."""
    import re
    for target in sorted(mounts, key=len, reverse=True):
        pattern = r"(?<![\w.~/-])" + re.escape(target) + r"(?![\w.-])"
        word = re.sub(pattern, lambda m, host=mounts[target]: host, word)
    return word


class BubblewrapSandbox(Sandbox):
    engine = "bubblewrap"
    isolated = True
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


class ContainerSandbox(Sandbox):
    """podman or docker: a fresh container per command, removed after it."""

    isolated = True

    def __init__(self, engine, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.engine = engine

    def check(self):
        if shutil.which(self.engine) is None:
            raise SandboxError(f"engine {self.engine} is not installed")
        if self.engine == "docker" and _quiet(["docker", "info", "--format", "{{.ServerVersion}}"], 15).returncode:
            raise SandboxError("engine docker: its daemon does not answer (docker info)")
        inspect = _quiet([self.engine, "image", "inspect", "--format", "{{.Id}}", self.image])
        if inspect.returncode != 0:
            raise SandboxError(f"image {self.image} not found by {self.engine}; build it first "
                               f"({self.engine} build -t {self.image} .) or name another one with --image")
        self.image_id = inspect.stdout.strip()
        return self

    def launch(self, step, name):
        L = self.limits
        argv = [self.engine, "run", "--rm", "-i", "--name", name, "--label", f"ece408.runner={owner_tag()}",
                "--user", f"{self.uid}:{self.uid}", "--read-only", "--cap-drop", "ALL",
                "--security-opt", "no-new-privileges", "--pids-limit", str(L.processes),
                "--memory", str(L.memory), "--memory-swap", str(L.memory),
                "--ulimit", f"cpu={L.cpu_seconds}:{L.cpu_seconds}", "--ulimit", f"fsize={L.file_size}:{L.file_size}",
                "--ulimit", "core=0:0", "--ulimit", "nofile=4096:4096", "--ulimit", f"nproc={L.processes}:{L.processes}",
                "--tmpfs", f"/tmp:rw,size={L.disk},mode=1777",
                "--workdir", step.cwd, "--entrypoint", step.argv[0]]
        if not self.network:
            argv += ["--network", "none"]
        if step.gpu:
            argv += ["--gpus", "all"] if self.engine == "docker" else \
                [a for node in gpu_device_nodes() for a in ("--device", node)]
        for m in step.mounts:
            argv += ["-v", f"{m.source}:{m.target}:{'rw' if m.writable else 'ro'}"]
        for key, value in step.env.items():
            argv += ["-e", f"{key}={value}"]
        argv += [self.image, *step.argv[1:]]
        engine = self.engine
        # the client's own folder: conmon writes a file named "oom" into it when the kernel kills the
        # container for its memory limit, and nothing of a run may be left behind
        here = tempfile.mkdtemp(prefix="ece408-client-")

        def cleanup():
            _quiet([engine, "rm", "-f", name], timeout=120)
            shutil.rmtree(here, ignore_errors=True)
        return Launch(argv, dict(os.environ), cleanup, cwd=here)


class BuildahSandbox(Sandbox):
    """buildah: ``buildah run --isolation oci`` (namespaces, not chroot), one working container per
    command, made with the memory limit and a process-count ulimit."""

    engine = "buildah"
    isolated = True

    def check(self):
        if shutil.which("buildah") is None:
            raise SandboxError("engine buildah is not installed")
        if shutil.which("runc") is None and shutil.which("crun") is None:
            raise SandboxError("engine buildah runs with --isolation oci, which needs runc or crun")
        inspect = _quiet(["buildah", "inspect", "--type", "image", "--format", "{{.FromImageID}}", self.image])
        if inspect.returncode != 0:
            raise SandboxError(f"image {self.image} not found by buildah; build it first "
                               f"(buildah bud -t {self.image} .) or name another one with --image")
        self.image_id = inspect.stdout.strip()
        return self

    def launch(self, step, name):
        L = self.limits
        made = _quiet(["buildah", "from", "--pull=never", "--name", name, "--memory", str(L.memory),
                       "--memory-swap", str(L.memory), "--ulimit", f"nproc={L.processes}:{L.processes}",
                       "--ulimit", f"cpu={L.cpu_seconds}:{L.cpu_seconds}", "--ulimit", "nofile=4096:4096",
                       "--cap-drop", "all", self.image], timeout=300)
        if made.returncode != 0:
            raise SandboxError(f"buildah could not start {self.image}: "
                               f"{(made.stderr.strip().splitlines() or ['no reason given'])[-1]}")
        # buildah 1.28: "--network none" is read as the flag without its value (the "=" form is
        # needed), and any other namespace flag (--pid, --ipc, --uts) brings the host's network
        # back; oci isolation gives private pid, ipc and uts namespaces by default
        argv = ["buildah", "run", "--isolation=oci", f"--user={self.uid}:{self.uid}",
                f"--workingdir={step.cwd}", f"--mount=type=tmpfs,destination=/tmp,tmpfs-size={L.disk}"]
        if not self.network:
            argv += ["--network=none"]
        if step.gpu:
            argv += [a for node in gpu_device_nodes() for a in ("--device", node)]
        for m in step.mounts:
            argv += ["-v", f"{m.source}:{m.target}:{'rw' if m.writable else 'ro'}"]
        for key, value in step.env.items():
            argv += ["--env", f"{key}={value}"]
        argv += [name, "--", *step.argv]

        def cleanup():
            _quiet(["buildah", "rm", name], timeout=120)
        return Launch(argv, dict(os.environ), cleanup)


def choose_engine(requested=None):
    """The engine name for ``requested`` (or $ECE408_ENGINE): auto picks bubblewrap where it works,
    else podman, docker, buildah; host only by name."""
    requested = (requested or os.environ.get(ENGINE_ENV) or "auto").strip().lower()
    if requested not in ("auto",) + ENGINES:
        raise SandboxError(f"unknown engine {requested!r}; use auto, {', '.join(ENGINES)}")
    return requested


def open_sandbox(engine, limits, image=None, network=False, uid=None):
    """A checked Sandbox for ``engine`` (auto: the first that works here); SandboxError naming why
    none does."""
    if engine == "host":
        return HostSandbox(limits, image, network=network)
    candidates = ENGINES[:-1] if engine == "auto" else (engine,)
    reasons = []
    for name in candidates:
        if name == "bubblewrap":
            sandbox = BubblewrapSandbox(limits, image, uid, network)
        elif name == "buildah":
            sandbox = BuildahSandbox(limits, image, uid, network)
        else:
            sandbox = ContainerSandbox(name, limits, image, uid, network)
        try:
            return sandbox.check()
        except SandboxError as exc:
            reasons.append(str(exc))
    if engine == "auto":
        raise SandboxError("no sandbox engine works here (" + "; ".join(reasons) + "); install bubblewrap, or "
                           "run without isolation with --engine host")
    raise SandboxError(reasons[0])


def clean_stale(scratch_parent=None):
    """Remove what runners killed with SIGKILL left behind: their cgroups (and any process still
    in them), scratch folders (and the tmpfs mounted on their /build), containers. Returns a
    list of what was removed (one line each)."""
    removed = []
    for name, dirs in stale_cgroups().items():
        group = Cgroup(name, {str(d): d for d in dirs}, False)
        group.dirs = {("freezer" if "freezer" in str(d) else str(d)): d for d in dirs}
        group.remove()
        removed.append(f"cgroup {name}")
    from .scratch import stale_scratch
    for path in stale_scratch(scratch_parent):
        removed.append(f"scratch folder {path}")
    for engine in ("podman", "docker"):
        if shutil.which(engine) is None or (engine == "docker" and
                                            _quiet(["docker", "info"], 10).returncode != 0):
            continue
        out = _quiet([engine, "ps", "-a", "--filter", "label=ece408.runner", "--format",
                      '{{.Names}} {{index .Labels "ece408.runner"}}'], 30)
        for line in out.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and not tag_alive(parts[1]):
                _quiet([engine, "rm", "-f", parts[0]], 60)
                removed.append(f"{engine} container {parts[0]}")
    if shutil.which("buildah"):
        out = _quiet(["buildah", "containers", "--format", "{{.ContainerName}}"], 30)
        for line in out.stdout.split():
            if line.startswith("run-") and not tag_alive(line[4:]):
                _quiet(["buildah", "rm", line], 60)
                removed.append(f"buildah container {line}")
    return removed
