"""The sandbox's parts every engine shares: what a command may use (``Limits``), what it sees
(``Mount``), one command (``Step``) and how the runner starts it (``Launch``); the engine base
class and the registry the engines fill (``engine``), in the order ``auto`` tries them."""
import os
import random
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import Ece408Error
from ..owner import owner_tag

ENGINE_ENV = "ECE408_ENGINE"
UID_BASE = 1_000_000            # a run's uid: UID_BASE + a random number below UID_SPAN
UID_SPAN = 1_000_000
ENGINES = {}                    # name -> Sandbox class, in the order auto tries them (host: by name only)


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


def gpu_device_nodes():
    return sorted(str(p) for p in Path("/dev").glob("nvidia*") if not p.is_dir()) + \
        sorted(str(p) for p in Path("/dev").glob("nvidia-caps/*"))


def run_uid():
    """A uid for one run: fresh when this process may switch users, else its own."""
    if os.geteuid() != 0:
        return os.getuid()
    return UID_BASE + random.SystemRandom().randrange(UID_SPAN)


def engine(cls):
    """Class decorator: register a Sandbox subclass under its ``engine`` name."""
    ENGINES[cls.engine] = cls
    return cls


class Sandbox:
    """One engine, for the commands of one run (they share ``uid``). Subclasses set ``engine``
    (the name), ``isolated``, ``auto`` (tried by ``--engine auto``), and give ``check``, ``launch``
    and, where they leave things a killed runner cannot remove, ``clean_stale``."""

    engine = "host"
    isolated = False
    auto = False

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

    @classmethod
    def clean_stale(cls):
        """Remove what runners that no longer run left with this engine (containers); lines saying what."""
        return []


def _prlimit(limits):
    """The limits of a command as rlimits, and death with the runner from its very start (bwrap's
    own --die-with-parent is set only once bwrap has begun: a runner killed before that moment
    would leave it running)."""
    death = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []
    return death + ["prlimit", "--as=unlimited", f"--nproc={limits.processes}",
                    f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}", f"--fsize={limits.file_size}",
                    "--core=0", "--nofile=4096"]


ATTACH = 'for f in $ECE408_CGROUP; do echo $$ > "$f" || exit 126; done; unset ECE408_CGROUP; exec "$@"'


