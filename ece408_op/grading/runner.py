"""Running submissions as the course's server did, with every team command in a sandbox.

Two kinds of run:

``run_development`` (``submit`` without ``--submit``): the commands of the submission's
rai_build.yml, each announced as ``* Running <command>``, each in its own sandbox
(``sandbox.py``) with the submission's copy at /src (read-only) and a shared /build. The
transcript is all it gives: no record, no ranking.

``submit`` (``submit --submit m2|m3|final``, and each task of ``grade``): a ranked run.
From the submission only the team's files are taken (``team/project.py``: new-forward.py for
m2; new-forward.cu and launch.py for m3 and final), hashed. Then, each in the run's sandbox:

    1. (m3, final) the build: nvcc compiles new-forward.cu to a cubin (device code only);
    2. the measuring process (``cli/measure.py``): the grader's own package, models, data and hidden
       model, which runs the milestone on every model with the team's forward and reports
       over a channel no team process can reach (``channel.py``).

The record is written by the runner after every process of the run has ended; it names the
team files it measured with their SHA-256, the engine and whether it isolates.
"""
import base64
import getpass
import hashlib
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from codecs import getincrementaldecoder
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..errors import Ece408Error
from ..team import project
from . import channel
from . import transcript as tx
from .config import load_config, split_command
from .names import printable, team_name
from .sandbox import Limits, Mount, Step, choose_engine, clean_stale, open_sandbox
from .scratch import Scratch, copy_submission
from .store import Record

MODELS = ("ece408-high", "ece408-low")
MILESTONES = ("m2", "m3", "final")
GPU_MILESTONES = ("m3", "final")
DEFAULT_SIZE = 10000
DEFAULT_TIMEOUT = 600.0
TEAM_ENV = "ECE408_TEAM"
STORED_TRANSCRIPT = 1 << 20        # bytes of a transcript kept in a record: head and tail
MAX_HIDDEN_BYTES = 256 << 20
ART_LIMIT = 64 << 20


class SubmitError(Ece408Error):
    """A submission that cannot be run here (no GPU for m3/final, a missing hidden model...)."""


class Stopped(BaseException):
    """SIGTERM/SIGHUP while a build runs (scancel, a Slurm time limit, a node shutting down)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signal_name = signal.Signals(signum).name


@dataclass
class CommandResult:
    command: str
    output: str = ""
    exit_code: int = None          # None: killed (time limit, output limit, stopped)
    status: str = "ok"             # ok, failed, timeout, output, memory, killed

    @property
    def timed_out(self):
        return self.status == "timeout"


@dataclass
class BuildResult:
    status: str                    # ok, failed, timeout, killed
    results: list = field(default_factory=list)
    transcript: str = ""
    engine: str = "host"
    image_id: str = None
    duration_s: float = 0.0

    @property
    def exit_code(self):
        return self.results[-1].exit_code if self.results else None


# ---------------------------------------------------------------------------- helpers

def gpu_query(field_name):
    """A field of the first visible NVIDIA GPU (nvidia-smi --query-gpu), or None where there is none."""
    if shutil.which("nvidia-smi") is None:
        return None
    argv = ["nvidia-smi", f"--query-gpu={field_name}", "--format=csv,noheader"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible:
        argv.append(f"--id={visible}")
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    values = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return values[0] if out.returncode == 0 and values else None


def gpu_name():
    return gpu_query("name")


def gpu_arch():
    """``sm_90`` for the first visible GPU (its compute capability), or None."""
    cap = gpu_query("compute_cap")
    try:
        major, minor = cap.split(".")
        return f"sm_{int(major)}{int(minor)}"
    except (AttributeError, ValueError):
        return None


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def default_team(folder=None):
    """A record's team name: the team folder's own name (``--name`` overrides it where given)."""
    if folder is not None:
        name = os.path.basename(os.path.abspath(os.fsdecode(folder)))
        if name:
            return name
    return os.environ.get(TEAM_ENV) or getpass.getuser()


@contextmanager
def stop_on_signals():
    """SIGTERM and SIGHUP raise Stopped in the main thread for the duration (elsewhere: nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Stopped(signum)
    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


class Transcript:
    """The transcript: written through to ``stream`` as it comes, and kept, up to ``cap`` bytes:
    its head (three quarters) and its tail, with a line saying how much was left out between."""

    def __init__(self, stream=None, cap=STORED_TRANSCRIPT):
        self.stream = stream if stream is not None else sys.stdout
        self.cap = cap
        self.head, self.head_bytes = [], 0
        self.tail, self.tail_bytes = deque(), 0
        self.dropped = 0
        self.shown_cut = False
        self.lock = threading.Lock()
        self.last = ""

    def _keep(self, text):
        n = len(text.encode("utf-8", "replace"))
        if self.head_bytes + n <= self.cap * 3 // 4 and not self.tail:
            self.head.append(text)
            self.head_bytes += n
            return True
        self.tail.append(text)
        self.tail_bytes += n
        while self.tail_bytes > self.cap // 4 and len(self.tail) > 1:
            gone = self.tail.popleft()
            size = len(gone.encode("utf-8", "replace"))
            self.tail_bytes -= size
            self.dropped += size
        return False

    def write(self, text):
        if not text:
            return
        with self.lock:
            in_head = self._keep(text)
            self.last = text
            try:
                if in_head:
                    self.stream.write(text)
                elif not self.shown_cut:
                    self.shown_cut = True
                    self.stream.write(f"\n[... more than {self.cap * 3 // 4} bytes of output: the rest is not "
                                      "shown as it comes; its end follows the run ...]\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass

    def line(self, text):
        self.write(("" if not self.last or self.last.endswith("\n") else "\n") + text + "\n")
        if self.shown_cut:
            try:
                self.stream.write(text + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass

    def text(self):
        with self.lock:
            cut = f"\n[... {self.dropped} bytes of output left out ...]\n" if self.dropped else ""
            return "".join(self.head) + cut + "".join(self.tail)


def _kill_group(proc):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=3)
            return
        except subprocess.TimeoutExpired:
            continue


def execute(sandbox, step, transcript, timeout, label=None, extra_time=None):
    """Run ``step`` in ``sandbox``, its output streamed into ``transcript`` with every control
    character escaped (``transcript.OutputEscaper``: no escape sequence of a team's ever reaches
    a terminal or a record), stopped past the output limit, killed past ``timeout`` seconds
    (plus ``extra_time()``: the time it waited for the timing lease); whatever it started is gone
    when this returns. Returns a CommandResult (Stopped and KeyboardInterrupt propagate, after
    cleanup)."""
    result = CommandResult(label or " ".join(step.argv))
    launch = sandbox.prepare(step)
    limit = sandbox.limits.output
    seen = [0]
    over = threading.Event()
    try:
        proc = subprocess.Popen(launch.argv, env=launch.env, cwd=launch.cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        if launch.cleanup:
            launch.cleanup()
        transcript.line(f"{launch.argv[0]}: {exc.strerror or exc}")
        result.exit_code, result.status = 127, "failed"
        return result
    start = len(transcript.text())

    def pump():
        decoder = getincrementaldecoder("utf-8")("replace")
        escaper = tx.OutputEscaper()
        for chunk in iter(lambda: proc.stdout.read1(65536), b""):
            if over.is_set():
                continue
            seen[0] += len(chunk)
            if seen[0] > limit:
                over.set()
                _kill_group(proc)
                continue
            transcript.write(escaper.escape(decoder.decode(chunk)))
        transcript.write(escaper.escape(decoder.decode(b"", final=True), final=True))
    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                code = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if over.is_set():
                    continue
                if time.monotonic() > deadline + (extra_time() if extra_time else 0.0):
                    _kill_group(proc)
                    code = None
                    result.status = "timeout"
                    break
                group = launch.cgroup
                if group is not None and group.cpu_seconds() > sandbox.limits.cpu_seconds:
                    _kill_group(proc)
                    code = None
                    result.status = "cpu"
                    break
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        if result.status == "ok" and launch.cgroup is not None:
            if launch.cgroup.out_of_memory():
                result.status = "memory"
            elif launch.cgroup.cpu_seconds() >= 0.95 * sandbox.limits.cpu_seconds:
                result.status = "cpu"
        if launch.cleanup:
            launch.cleanup()                       # every process left in its cgroup, the container
        reader.join(timeout=5)
        try:
            proc.stdout.close()
        except OSError:
            pass
    if over.is_set():
        result.status, code = "output", None
    elif result.status == "ok" and code != 0:
        result.status = "failed"
    result.exit_code = code
    result.output = transcript.text()[start:]
    line = _ending_line(result, sandbox.limits, timeout)
    if line:
        transcript.line(line)
    return result


def _ending_line(result, limits, timeout):
    if result.status == "timeout":
        return tx.timeout_line(timeout)
    if result.status == "output":
        return f"* The command wrote more than {limits.output >> 20} MiB of output and was stopped; the build stopped."
    if result.status == "cpu":
        return f"* The command used more than {limits.cpu_seconds} s of CPU time and was stopped; the build stopped."
    if result.status == "memory":
        return (f"* The command ran out of memory (the limit is {limits.memory >> 20} MiB) and was stopped; "
                "the build stopped.")
    if result.status == "failed" and result.exit_code is not None and result.exit_code < 0:
        name = signal.Signals(-result.exit_code).name if -result.exit_code in signal.valid_signals() else "a signal"
        why = {"SIGXCPU": f" (its CPU-time limit of {limits.cpu_seconds} s)",
               "SIGXFSZ": f" (a file past the size limit of {limits.file_size >> 20} MiB)"}.get(name, "")
        return f"* The command was killed by {name}{why}; the build stopped."
    if result.status == "failed":
        return tx.failed_line(result.exit_code)
    return None


# ---------------------------------------------------------------------------- options

@dataclass
class Options:
    engine: str = None            # auto (None), bubblewrap, podman, docker, buildah, host
    image: str = None             # overrides rai.image (container engines)
    timeout: float = DEFAULT_TIMEOUT
    scratch_parent: str = None
    keep_scratch: bool = False
    limits: Limits = field(default_factory=Limits)
    allow_network: bool = False   # development runs: honour rai_build.yml's network: true


def check_timeout(value):
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise SubmitError(f"the time limit must be a finite number of seconds above 0, not {value!r}")
    return float(value)


def model_dirs():
    """The folders the grader's models are in (as ``mx.models.model_dirs`` finds them, without MXNet)."""
    dirs = []
    if os.environ.get("ECE408_MODEL_DIR"):
        dirs.append(Path(os.environ["ECE408_MODEL_DIR"]))
    dirs.append(Path(__file__).resolve().parents[2] / "models")
    dirs.append(Path(sys.prefix) / "share" / "ece408_op" / "models")
    return [d for d in dirs if d.is_dir()]


def data_dir():
    """The folder the grader's Fashion-MNIST test split is in; SubmitError where there is none."""
    from ..data.lookup import inspect_folder, search_order
    for folder, role in search_order():
        try:
            if inspect_folder(folder, "test", role) is not None:
                return Path(folder).resolve()
        except Ece408Error as exc:
            raise SubmitError(f"the grader's data: {exc}") from exc
    raise SubmitError("no Fashion-MNIST test split here for the runs: python -m ece408_op fetch")


def harness_mounts(sandbox):
    """Read-only folders the grader's code needs inside a bubblewrap or host sandbox (models, data)."""
    if sandbox.engine not in ("bubblewrap", "host"):
        return [], {}
    mounts = [Mount(str(d), str(d)) for d in model_dirs()]
    data = data_dir()
    mounts.append(Mount(str(data), str(data)))
    env = {"ECE408_DATA_DIR": str(data)}
    if os.environ.get("ECE408_MODEL_DIR"):
        env["ECE408_MODEL_DIR"] = os.environ["ECE408_MODEL_DIR"]
    return mounts, env


def sandbox_import_path(sandbox):
    """The grader's import path as a command in ``sandbox`` sees it (bubblewrap: the package bound
    alone, never its checkout: ``sandbox.package_binding``)."""
    from ..team.client import trusted_path
    if sandbox.engine == "bubblewrap":
        from .sandbox import package_binding
        return package_binding()[0]
    return trusted_path()


def step_environment(sandbox, gpu=False):
    """The whole environment of a team command: nothing of the grader's (no database, no
    password, no paths of the grader's), what Python, CUDA and the harness need."""
    env = {"HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "USER": "team", "PYTHONUNBUFFERED": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "NUMBA_CACHE_DIR": "/tmp/numba", "PYCUDA_CACHE_DIR": "/tmp/pycuda"}
    if sandbox.engine in ("bubblewrap", "host"):
        bins = [os.path.dirname(sys.executable)] + [p for p in ("/usr/local/cuda/bin",) if os.path.isdir(p)]
        env["PATH"] = ":".join(bins + ["/usr/local/bin", "/usr/bin", "/bin"])
        env["PYTHONPATH"] = ":".join(sandbox_import_path(sandbox))
        if sandbox.engine == "host":
            env["HOME"] = env["TMPDIR"] = tempfile_dir()
            env["NUMBA_CACHE_DIR"] = os.path.join(env["TMPDIR"], "numba")
            env["PYCUDA_CACHE_DIR"] = os.path.join(env["TMPDIR"], "pycuda")
    if gpu:
        for key in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
            if os.environ.get(key):
                env[key] = os.environ[key]
    return env


def tempfile_dir():
    import tempfile
    return tempfile.gettempdir()


def _announce(transcript, sandbox):
    if not sandbox.isolated:
        transcript.line(f"* Engine {sandbox.engine}: not isolated (the commands run on this host, as its user)")


# ---------------------------------------------------------------------------- development runs

def run_development(folder, options, transcript=None):
    """Validate ``folder/rai_build.yml``, copy the submission, run its commands, each in a
    sandbox. Returns BuildResult (no record: a development run is not ranked)."""
    config = load_config(folder)
    transcript = transcript or Transcript()
    check_timeout(options.timeout)
    if config.network and not options.allow_network:
        raise SubmitError("rai_build.yml asks for network: true, and this grader gives commands no network "
                          "(the grading host's own services would be in reach); set network: false, or run "
                          "with --allow-network where the grader allows it")
    clean_stale(options.scratch_parent)
    engine = choose_engine(options.engine)
    sandbox = open_sandbox(engine, options.limits, options.image or config.image, config.network)
    _announce(transcript, sandbox)
    started = time.monotonic()
    results, status = [], "ok"
    with Scratch(options.scratch_parent, sandbox.uid, options.limits.disk, options.keep_scratch) as scratch:
        for note in copy_submission(folder, scratch.src):
            transcript.line(note)
        if options.keep_scratch:
            print(f"* Scratch folder kept: {scratch.root}", file=sys.stderr)
        mounts, env = harness_mounts(sandbox) if sandbox.engine in ("bubblewrap", "host") else ([], {})
        mounts = [Mount(str(scratch.src), "/src"), Mount(str(scratch.build), "/build", writable=True)] + mounts
        env = {**step_environment(sandbox, config.gpu_count > 0), **env}
        try:
            for command in config.commands:
                transcript.line(tx.running_line(command))
                step = Step(split_command(command), mounts, env, "/build", gpu=config.gpu_count > 0)
                result = execute(sandbox, step, transcript, options.timeout, label=command)
                results.append(result)
                if result.status != "ok":
                    status = "timeout" if result.status == "timeout" else "failed"
                    break
        except Stopped as exc:
            transcript.line(tx.killed_line(exc.signal_name))
            status = "killed"
        except KeyboardInterrupt:
            transcript.line(tx.killed_line("SIGINT"))
            status = "killed"
    return BuildResult(status, results, transcript.text(), sandbox.engine, sandbox.image_id,
                       time.monotonic() - started)


# ---------------------------------------------------------------------------- ranked runs

@dataclass
class SubmitRequest:
    folder: str
    milestone: str
    size: int = DEFAULT_SIZE
    team: str = None
    hidden_model: str = None
    record_id: str = None
    options: Options = field(default_factory=Options)
    repeats: int = None              # fresh timed runs per layer (default: the milestone's; final 5)


def hidden_files(prefix):
    """The checkpoint files of a hidden model prefix (``name-symbol.json`` + the newest ``name-NNNN.params``)."""
    prefix = Path(prefix)
    symbol = prefix.parent / f"{prefix.name}-symbol.json"
    params = sorted(prefix.parent.glob(f"{prefix.name}-[0-9][0-9][0-9][0-9].params"))
    if not symbol.is_file() or not params:
        raise SubmitError(f"hidden model {printable(str(prefix))}: needs {printable(symbol.name)} and "
                          f"{printable(prefix.name)}-NNNN.params beside it")
    return symbol, params[-1]


def read_hidden(prefix):
    """The hidden model as the job carries it: its name, symbol JSON and parameters (base64)."""
    symbol, params = hidden_files(prefix)
    for path in (symbol, params):
        if path.stat().st_size > MAX_HIDDEN_BYTES:
            raise SubmitError(f"hidden model file {printable(path.name)} is larger than {MAX_HIDDEN_BYTES >> 20} MiB")
    return {"name": "hidden", "symbol": symbol.read_text(encoding="utf-8"),
            "params": base64.b64encode(params.read_bytes()).decode("ascii")}


def check_device(milestone):
    """The device name to record; SubmitError where a GPU milestone has no GPU here."""
    if milestone in GPU_MILESTONES:
        name = gpu_name()
        if name is None:
            raise SubmitError(f"--submit {milestone} runs the GPU path and this host has no CUDA GPU "
                              f"(nvidia-smi lists none); run it on a GPU machine, or use --submit m2")
        return name
    return cpu_name()


def team_digest(folder, milestone):
    """SHA-256 over the team's files a milestone takes (name, size, bytes), each read once
    (``project.read_team_files``): what ``grade`` compares to skip a team already graded.
    TeamError (one line) where a file is missing or not a regular file."""
    return project.read_team_files(folder, project.MILESTONE_FILES[milestone]).digest


def _take_artifact(path, dest, limit=ART_LIMIT):
    """Copy the build's output ``path`` (a regular file, no link, at most ``limit``) into ``dest``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        import stat
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return False
        with open(dest, "wb") as out:
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                out.write(chunk)
        os.chmod(dest, 0o644)
        return True
    finally:
        os.close(fd)


def measure_argv(sandbox, sock):
    """The measuring process's command: the grader's own Python and package, isolated."""
    from ..team.client import isolated_python
    if sandbox.engine in ("bubblewrap", "host"):
        return isolated_python("ece408_op.cli.measure", "--channel", sock, paths=sandbox_import_path(sandbox))
    return ["python", "-I", "-m", "ece408_op.cli.measure", "--channel", sock]


@dataclass
class RankedRun:
    """What the build and measuring steps of a ranked run gave."""
    status: str                      # ok, failed, timeout
    reason: str = None               # one line where not ok
    report: dict = None              # the measuring process's report (None: none came)
    taken: list = field(default_factory=list)     # [TeamFile] the run measured
    digest: str = None               # SHA-256 of exactly those bytes (TeamFiles.digest)
    sandbox: object = None


def course_model_files(name):
    """{symbol, params (base64)} of the grader's course model ``name``, for the job."""
    for folder in model_dirs():
        if (folder / f"{name}-symbol.json").is_file():
            symbol, params = hidden_files(folder / name)
            return {"symbol": symbol.read_text(encoding="utf-8"),
                    "params": base64.b64encode(params.read_bytes()).decode("ascii")}
    raise SubmitError(f"the grader's model {name} is not installed here (looked in "
                      f"{', '.join(str(d) for d in model_dirs()) or 'no model folder'}); set $ECE408_MODEL_DIR")


def test_images(size):
    """{images, labels (base64), shape} of the first ``size`` test images, for the job: the
    measuring process gets them over its channel, never as a file its sandbox shows."""
    from ..data import load_fashion_mnist
    try:
        images, labels = load_fashion_mnist("test", size)
    except Ece408Error as exc:
        raise SubmitError(f"the grader's data: {exc}") from exc
    return {"images": base64.b64encode(images.tobytes()).decode("ascii"),
            "labels": base64.b64encode(labels.tobytes()).decode("ascii"), "shape": list(images.shape)}


def timing_key(milestone):
    """The machine's timing lock a run takes (channel.TimingLock): one per GPU, one for the CPU."""
    if milestone not in GPU_MILESTONES:
        return "cpu"
    return "gpu-" + (gpu_query("uuid") or os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0] or "0")


def build_team_kernels(sandbox, scratch, arch, transcript, timeout):
    """The ranked build: nvcc compiles the team's /src/new-forward.cu (device code only) in its own
    sandbox, which shows the team's files, the build folder and the read-only system (nvcc,
    CUDA's headers): nothing of the grader's or another team's. Returns (the cubin taken out of
    /build into the scratch folder's art/, None) or (None, reason)."""
    from ..team.build import CUBIN, SOURCE, nvcc_argv
    argv = nvcc_argv(f"/src/{SOURCE}", f"/build/{CUBIN}", arch)
    base = [Mount(str(scratch.src), "/src"), Mount(str(scratch.build), "/build", writable=True)]
    transcript.line(tx.running_line(" ".join(argv)))
    result = execute(sandbox, Step(argv, base, step_environment(sandbox, False), "/build"), transcript, timeout)
    if result.status != "ok":
        return None, f"{SOURCE} did not compile"
    if not _take_artifact(scratch.build / CUBIN, scratch.art / CUBIN):
        transcript.line(f"error: the build left no usable {CUBIN} (a regular file of at most {ART_LIMIT >> 20} MiB)")
        return None, f"no {CUBIN}"
    return scratch.art / CUBIN, None


def run_ranked(request, transcript):
    """The build and measuring steps of a ranked run: a RankedRun."""
    from .options import ranked_repeats
    options = request.options
    milestone = request.milestone
    check_timeout(options.timeout)
    gpu = milestone in GPU_MILESTONES
    arch = gpu_arch() if gpu else None
    if gpu and arch is None:
        raise SubmitError(f"--submit {milestone} needs the GPU's compute capability (nvidia-smi "
                          "--query-gpu=compute_cap) and none was read")
    hidden = read_hidden(request.hidden_model) if request.hidden_model else None
    job = {"milestone": milestone, "size": request.size, "repeats": ranked_repeats(milestone, request.repeats),
           "hidden": hidden, "data": test_images(request.size),
           "model_files": {name: course_model_files(name) for name in MODELS}, "time_limit": options.timeout}
    if gpu:
        from ..team.build import grader_cubin
        job["grader_kernels"] = base64.b64encode(grader_cubin(arch)).decode("ascii")
    clean_stale(options.scratch_parent)
    engine = choose_engine(options.engine)
    sandbox = open_sandbox(engine, options.limits, options.image or "ece408_op:latest", network=False)
    _announce(transcript, sandbox)
    run = RankedRun("failed", sandbox=sandbox)
    with Scratch(options.scratch_parent, sandbox.uid, options.limits.disk, options.keep_scratch) as scratch:
        scratch.src.mkdir(mode=0o755)
        try:
            files = project.read_team_files(request.folder, project.MILESTONE_FILES[milestone])
            run.taken, run.digest = files.write(scratch.src), files.digest
        except project.TeamError as exc:
            transcript.line(f"error: {exc}")
            run.reason = str(exc)
            return run
        for f in run.taken:
            transcript.line(f"* Team file {f.name}: {f.size} bytes, sha256 {f.sha256}")
        base = [Mount(str(scratch.src), "/src"), Mount(str(scratch.build), "/build", writable=True)]
        env = step_environment(sandbox, gpu)
        lock = channel.TimingLock(timing_key(milestone))
        if gpu:
            cubin, run.reason = build_team_kernels(sandbox, scratch, arch, transcript, options.timeout)
            if cubin is None:
                return run
            job["kernels"] = str(cubin) if sandbox.engine == "host" else f"/art/{cubin.name}"
        job["team"] = str(scratch.src) if sandbox.engine == "host" else "/src"
        listener = channel.Listener(scratch.channel, lock)
        sock = f"{channel.TARGET}/{channel.SOCKET}"
        models = list(MODELS) + (["hidden"] if hidden else [])
        job["models"] = models
        listener.start(job)
        argv = measure_argv(sandbox, sock)
        steps = base + [Mount(str(scratch.art), "/art"), Mount(str(scratch.channel), channel.TARGET, writable=True)]
        transcript.line(tx.running_line(f"python -m ece408_op {milestone} (the grader's harness) on "
                                        f"{', '.join(m if m != 'hidden' else 'the hidden model' for m in models)}, "
                                        f"{request.size} images"))
        result = execute(sandbox, Step(argv, steps, env, "/build", gpu=gpu), transcript, options.timeout,
                         label="measure", extra_time=lambda: listener.waited)
        report = listener.result()
        if report is None:
            why = {"timeout": "the time limit", "output": "the output limit", "memory": "the memory limit",
                   "cpu": "the CPU-time limit"}.get(result.status)
            run.status = "timeout" if result.status == "timeout" else "failed"
            run.reason = f"stopped at {why}" if why else f"no report: {listener.error}"
            return run
        run.report = report
        run.status = "ok" if report.get("status") == "ok" and result.status == "ok" else "failed"
        run.reason = report.get("reason")
        return run


def submit(request, store, transcript=None):
    """Run a ranked ``--submit`` and store its record (also when the run fails or is stopped).
    Returns the Record."""
    if request.milestone not in MILESTONES:
        raise SubmitError(f"--submit takes {', '.join(MILESTONES)}, not {request.milestone!r}")
    device = check_device(request.milestone)
    transcript = transcript or Transcript()
    created = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    record_id = request.record_id or uuid.uuid4().hex
    started = time.monotonic()
    run = RankedRun("failed")
    with stop_on_signals():
        try:
            run = run_ranked(request, transcript)
        except Stopped as exc:
            transcript.line(tx.killed_line(exc.signal_name))
            run.status, run.reason = "killed", f"stopped ({exc.signal_name})"
        except KeyboardInterrupt:
            transcript.line(tx.killed_line("SIGINT"))
            run.status, run.reason = "killed", "stopped (SIGINT)"
    record = make_record(request, record_id, created, run, device, transcript.text(), time.monotonic() - started)
    store.add(record)
    return record


def record_options(request, engine):
    """The run options the record keeps (grading/options.py), from the request and the engine it ran on."""
    from .options import hidden_digest, run_options
    hidden = hidden_digest(*hidden_files(request.hidden_model)) if request.hidden_model else None
    return run_options(request.milestone, request.size, request.repeats, hidden, engine)


def make_record(request, record_id, created, run, device, transcript, duration):
    """The Record of a finished (or stopped) ranked run, from the measuring process's report."""
    from .options import options_key
    status, reason, report, sandbox = run.status, run.reason, run.report, run.sandbox
    results = []
    for entry in (report or {}).get("models", []):
        results.append(tx.ModelResult(str(entry.get("model")), [float(t) for t in entry.get("op_times", [])],
                                      entry.get("correctness"), entry.get("expected")))
    complete = status == "ok" and len(results) == len(MODELS) + (1 if request.hidden_model else 0) and \
        all(r.correctness is not None and r.op_times for r in results)
    if status == "ok" and not complete:
        status, reason = "failed", reason or "the report lacks a model's Op Times or Correctness"
    correct = complete and all(r.correct for r in results)
    if status == "ok" and not correct:
        wrong = next(r for r in results if not r.correct)
        reason = (f"Correctness {wrong.correctness} on {printable(wrong.model, limit=40)} is not the "
                  f"{wrong.expected} of MXNet's own convolution")
    if reason and not (status == "ok" and correct):
        transcript += f"* Not ranked: {printable(reason, limit=500)}\n"
    engine = sandbox.engine if sandbox else None
    options = record_options(request, engine)
    return Record(
        id=record_id, created_at=created, team=team_name(request.team or default_team(request.folder)),
        milestone=request.milestone, size=request.size, status=status, exit_code=None,
        op_time=sum(r.op_time for r in results) if complete else None, correct=correct,
        models=[{**r.to_dict(), "layers": e.get("layers", [])} for r, e in zip(results, (report or {}).get("models", []))],
        git_commit=None, content_hash=run.digest,
        device=(report or {}).get("device") or device,
        engine=engine, image=sandbox.image_id if sandbox else None,
        host=socket.gethostname(), duration_s=round(duration, 3), transcript=transcript,
        team_files=[f.to_dict() for f in run.taken], isolated=bool(sandbox and sandbox.isolated),
        options=options, options_key=options_key(options),
        reason=None if status == "ok" and correct else printable(reason or status, limit=500))
