"""Where a submission's commands run: inside the image through a container engine, or on the host.

A ``Session`` holds one container for a whole build (commands share its file system, as on the
course's servers), with the submission at ``/src`` (read-only), an empty ``/build`` as the
working folder and, for staff runs, the hidden model at ``/hidden``:

* docker (with a reachable daemon) or podman: ``run -d ... sleep infinity`` then ``exec`` per command;
* buildah: ``from`` then ``run --isolation chroot`` per command (no daemon, works as root);
* host: no engine. ``/src``, ``/build`` and ``/hidden`` in the commands stand for the scratch
  folders, and ``python`` is the interpreter running this package.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from ..errors import Ece408Error

ENGINES = ("docker", "podman", "buildah")
ENGINE_ENV = "ECE408_ENGINE"
MOUNTS = ("src", "build", "hidden")            # /src, /build, /hidden inside the container


class EngineError(Ece408Error):
    """No usable engine, a missing image, or an engine command that failed."""


def _quiet(argv, timeout=30):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(argv, 127, "", str(exc))


def engine_usable(name):
    """True where ``name`` is installed and, for docker, its daemon answers."""
    if shutil.which(name) is None:
        return False
    if name == "docker":
        return _quiet(["docker", "info", "--format", "{{.ServerVersion}}"], timeout=15).returncode == 0
    return True


def choose_engine(requested=None):
    """(engine, chosen automatically) for ``requested`` (or $ECE408_ENGINE): auto, host, docker,
    podman, buildah. auto picks the first usable engine, else host."""
    requested = (requested or os.environ.get(ENGINE_ENV) or "auto").lower()
    if requested not in ("auto", "host", *ENGINES):
        raise EngineError(f"unknown engine {requested!r}; use auto, host, {', '.join(ENGINES)}")
    if requested in ENGINES and not engine_usable(requested):
        what = "its daemon does not answer (docker info)" if shutil.which(requested) else "it is not installed"
        raise EngineError(f"engine {requested} is not usable: {what}; install it or use --engine host")
    if requested != "auto":
        return requested, False
    return next((name for name in ENGINES if engine_usable(name)), "host"), True


def _first_line(text, fallback):
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else fallback


class Session:
    """Runs commands for one build. ``argv(command)`` gives what to start for a command line;
    ``close()`` removes the container."""

    engine = "host"

    def __init__(self, scratch, image=None, network=False, gpus=0):
        self.scratch = Path(scratch)
        self.image = image
        self.network = network
        self.gpus = gpus
        self.image_id = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def start(self):
        pass

    def close(self):
        pass

    def cwd(self):
        return None

    def env(self):
        return None

    def argv(self, command):
        raise NotImplementedError


class HostSession(Session):
    """No container: the paths /src, /build, /hidden are rewritten to the scratch folders."""

    engine = "host"
    # /src, /build or /hidden as a whole path component, not part of a longer path (/usr/src)
    PATHS = re.compile(r"(?<![\w.~/-])/(%s)(?![\w.-])" % "|".join(MOUNTS))

    def rewrite(self, word):
        return self.PATHS.sub(lambda m: str(self.scratch / m.group(1)), word)

    def argv(self, command):
        return [self.rewrite(word) for word in shlex.split(command)]

    def cwd(self):
        return str(self.scratch / "build")

    def env(self):
        here = str(Path(sys.executable).parent)        # `python` is this package's interpreter
        return {**os.environ, "PATH": here + os.pathsep + os.environ.get("PATH", "")}


def _volumes(scratch):
    out = []
    for name in MOUNTS:
        folder = scratch / name
        if folder.is_dir():
            out += ["-v", f"{folder}:/{name}" + (":ro" if name != "build" else "")]
    return out


class DaemonSession(Session):
    """docker or podman: one detached container, ``exec`` per command."""

    def __init__(self, engine, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.engine = engine
        self.name = f"ece408-{uuid.uuid4().hex[:12]}"

    def start(self):
        inspect = _quiet([self.engine, "image", "inspect", "--format", "{{.Id}}", self.image])
        if inspect.returncode != 0:
            raise EngineError(f"image {self.image} not found by {self.engine}; build it first "
                              f"({self.engine} build -t {self.image} .) or name another one with --image")
        self.image_id = inspect.stdout.strip()
        argv = [self.engine, "run", "-d", "--rm", "--name", self.name, "-w", "/build", *_volumes(self.scratch)]
        if not self.network:
            argv += ["--network", "none"]
        if self.gpus:
            argv += ["--gpus", str(self.gpus)] if self.engine == "docker" else ["--device", "nvidia.com/gpu=all"]
        started = _quiet([*argv, "--entrypoint", "sleep", self.image, "infinity"], timeout=300)
        if started.returncode != 0:
            raise EngineError(f"{self.engine} could not start {self.image}: {_first_line(started.stderr, 'no reason given')}")

    def argv(self, command):
        return [self.engine, "exec", "-w", "/build", self.name, *shlex.split(command)]

    def close(self):
        _quiet([self.engine, "rm", "-f", self.name], timeout=60)


class BuildahSession(Session):
    """buildah: a working container from the image, ``buildah run --isolation chroot`` per command."""

    engine = "buildah"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.container = None

    def start(self):
        inspect = _quiet(["buildah", "inspect", "--type", "image", "--format", "{{.FromImageID}}", self.image])
        if inspect.returncode != 0:
            raise EngineError(f"image {self.image} not found by buildah; build it first "
                              f"(buildah bud -t {self.image} .) or name another one with --image")
        self.image_id = inspect.stdout.strip()
        created = _quiet(["buildah", "from", "--pull=never", self.image], timeout=300)
        if created.returncode != 0:
            raise EngineError(f"buildah could not start {self.image}: {_first_line(created.stderr, 'no reason given')}")
        self.container = created.stdout.strip().splitlines()[-1]

    def argv(self, command):
        argv = ["buildah", "run", "--isolation", "chroot", "--workingdir", "/build", *_volumes(self.scratch)]
        if self.gpus:
            argv += [arg for dev in sorted(Path("/dev").glob("nvidia*")) if not dev.is_dir()
                     for arg in ("--device", str(dev))]
        return [*argv, self.container, "--", *shlex.split(command)]

    def close(self):
        if self.container:
            _quiet(["buildah", "rm", self.container], timeout=60)


def open_session(engine, scratch, image, network=False, gpus=0):
    """A Session for ``engine`` (from choose_engine)."""
    if engine == "host":
        return HostSession(scratch, image, network, gpus)
    if engine == "buildah":
        return BuildahSession(scratch, image, network, gpus)
    return DaemonSession(engine, scratch, image, network, gpus)
