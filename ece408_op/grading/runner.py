"""Running one submission as the course server did.

``run_build``: the commands of ``rai_build.yml`` (or a milestone's fixed commands), each
announced as ``* Running <command>``, on a scratch copy of the submission (``/src``) with an
empty ``/build`` as working folder, inside the image when an engine is there, else on the host.
The first failing command stops the build (its exit code shown); a command past the time limit
is killed (its whole process group) and stops the build too.

``submit``: ``--submit m2|m3|final``: the fixed commands on both models (and staff's hidden
model), the Op Times and Correctness parsed from the output, a record stored.
"""
import getpass
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..errors import Ece408Error
from . import transcript as tx
from .config import load_config
from .engine import choose_engine, open_session
from .store import Record

MODELS = ("ece408-high", "ece408-low")
SCRIPTS = {"m2": "m2.1.py", "m3": "m3.1.py", "final": "final.py"}
GPU_MILESTONES = ("m3", "final")
DEFAULT_SIZE = 10000
DEFAULT_TIMEOUT = 600.0
REFERENCE_TIMEOUT = 1800.0      # the staff's reference run is not held to the submission's limit
TEAM_ENV = "ECE408_TEAM"
# Left out of the scratch copy and of the content hash: version control, caches, environments.
IGNORED = (".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".pytest_cache", ".mypy_cache")


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
    output: str
    exit_code: int = None          # None: killed (time limit or stopped)
    timed_out: bool = False


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

def _ignore(folder, names):
    return [n for n in names if n in IGNORED or n.endswith(".pyc")]


def content_hash(folder):
    """sha256 over the submission's files (relative path, size, bytes), IGNORED left out."""
    folder = Path(folder)
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _ignore(root, dirs))
        for name in sorted(set(files) - set(_ignore(root, files))):
            path = Path(root) / name
            rel = path.relative_to(folder).as_posix()
            data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
            digest.update(f"{rel}\0{len(data)}\0".encode())
            digest.update(data)
    return digest.hexdigest()


def git_commit(folder):
    """HEAD of the git work tree whose top is ``folder`` (``+dirty`` with local changes), or None."""
    def git(*args):
        try:
            return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
    top = git("rev-parse", "--show-toplevel")
    if top is None or top.returncode != 0 or Path(top.stdout.strip()).resolve() != Path(folder).resolve():
        return None
    head = git("rev-parse", "HEAD")
    if head is None or head.returncode != 0:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    dirty = status is not None and status.stdout.strip() != ""
    return head.stdout.strip() + ("+dirty" if dirty else "")


def gpu_name():
    """The name of the first visible NVIDIA GPU (nvidia-smi), or None where there is none."""
    if shutil.which("nvidia-smi") is None:
        return None
    argv = ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible:
        argv.append(f"--id={visible}")
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return names[0] if out.returncode == 0 and names else None


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def default_team():
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
    """The transcript: written through to ``stream`` as it comes, and kept."""

    def __init__(self, stream=None):
        self.stream = stream if stream is not None else sys.stdout
        self.parts = []
        self.lock = threading.Lock()

    def write(self, text):
        with self.lock:
            self.parts.append(text)
            self.stream.write(text)
            self.stream.flush()

    def line(self, text):
        current = "".join(self.parts[-1:])
        self.write(("" if not current or current.endswith("\n") else "\n") + text + "\n")

    def text(self):
        return "".join(self.parts)


def _kill_group(proc):
    """SIGTERM to the command's process group, SIGKILL after 3 s."""
    for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_command(argv, transcript, timeout, cwd=None, env=None):
    """Run ``argv`` in its own process group, its output streamed into ``transcript``.
    Returns (exit code or None, timed out)."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=cwd, env=env, start_new_session=True)
    except OSError as exc:
        transcript.line(f"{argv[0]}: {exc.strerror or exc}")
        return 127, False

    def pump():
        for chunk in iter(lambda: proc.stdout.read1(65536), b""):
            transcript.write(chunk.decode("utf-8", errors="replace"))
    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        reader.join(timeout=10)
        return None, True
    except BaseException:
        _kill_group(proc)
        reader.join(timeout=10)
        raise
    reader.join(timeout=30)
    return code, False


# ---------------------------------------------------------------------------- the build

class Scratch:
    """A private scratch folder: ``src`` (copy of the submission), ``build`` (empty, writable by the
    container's user), ``hidden`` (the staff's hidden model, if any). Removed on exit."""

    def __init__(self, submission, hidden_model=None, parent=None, keep=False):
        self.root = Path(tempfile.mkdtemp(prefix="ece408-submit-", dir=parent))
        self.keep = keep
        try:
            shutil.copytree(submission, self.root / "src", symlinks=True, ignore=_ignore)
            (self.root / "build").mkdir()
            os.chmod(self.root / "build", 0o777)           # the image's unprivileged user writes here
            os.chmod(self.root, 0o755)
            os.chmod(self.root / "src", 0o755)
            if hidden_model is not None:
                (self.root / "hidden").mkdir()
                for path in hidden_files(hidden_model):
                    shutil.copy2(path, self.root / "hidden" / path.name)
        except BaseException:
            self.remove()
            raise

    def remove(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.keep:
            self.remove()


def hidden_files(prefix):
    """The checkpoint files of a hidden model prefix (``name-symbol.json`` + ``name-NNNN.params``)."""
    prefix = Path(prefix)
    symbol = prefix.parent / f"{prefix.name}-symbol.json"
    params = sorted(prefix.parent.glob(f"{prefix.name}-[0-9][0-9][0-9][0-9].params"))
    if not symbol.is_file() or not params:
        raise SubmitError(f"hidden model {prefix}: needs {symbol.name} and {prefix.name}-NNNN.params beside it")
    return [symbol, *params]


def run_build(session, commands, transcript, timeout):
    """Run ``commands`` in ``session`` with the course's transcript; returns (status, [CommandResult])."""
    results = []
    for command in commands:
        transcript.line(tx.running_line(command))
        start = len(transcript.text())
        try:
            code, timed_out = run_command(session.argv(command), transcript, timeout, session.cwd(), session.env())
        except Stopped as exc:
            results.append(CommandResult(command, transcript.text()[start:], None))
            transcript.line(tx.killed_line(exc.signal_name))
            return "killed", results
        except KeyboardInterrupt:
            results.append(CommandResult(command, transcript.text()[start:], None))
            transcript.line(tx.killed_line("SIGINT"))
            return "killed", results
        results.append(CommandResult(command, transcript.text()[start:], code, timed_out))
        if timed_out:
            transcript.line(tx.timeout_line(timeout))
            return "timeout", results
        if code != 0:
            transcript.line(tx.failed_line(code))
            return "failed", results
    return "ok", results


@dataclass
class Options:
    engine: str = None            # auto (None), host, docker, podman, buildah
    image: str = None             # overrides rai.image
    timeout: float = DEFAULT_TIMEOUT
    scratch_parent: str = None
    keep_scratch: bool = False


def run_submission(folder, options, commands=None, transcript=None, hidden_model=None, before=None, gpus=None):
    """Validate ``folder/rai_build.yml``, copy the submission, run ``commands`` (default: the
    file's build list). ``before(session)`` runs first inside the session (reference runs).
    Returns BuildResult."""
    config = load_config(folder)
    transcript = transcript or Transcript()
    engine, automatic = choose_engine(options.engine)
    if engine == "host" and automatic:
        print("warning: no container engine (docker with a daemon, podman, buildah): "
              "running the commands on this host", file=sys.stderr)
    elif engine == "buildah" and not config.network:
        print("warning: buildah's chroot isolation shares the host's network: network: false "
              "is not enforced", file=sys.stderr)
    image = options.image or config.image
    started = time.monotonic()
    with Scratch(folder, hidden_model, options.scratch_parent, options.keep_scratch) as scratch, \
            open_session(engine, scratch.root, image, config.network,
                         config.gpu_count if gpus is None else gpus) as session:
        if before is not None:
            before(session)
        status, results = run_build(session, commands or config.commands, transcript, options.timeout)
    return BuildResult(status, results, transcript.text(), engine, session.image_id,
                       time.monotonic() - started)


# ---------------------------------------------------------------------------- --submit

def fixed_commands(milestone, size, hidden_name=None):
    """The commands a ``--submit`` runs: copy the submission, then the milestone on each model."""
    script = SCRIPTS[milestone]
    models = [*MODELS, *([f"/hidden/{hidden_name}"] if hidden_name else [])]
    return ['/bin/bash -c "cp -rv /src/* /build"',
            *[f"python /build/scripts/{script} {model} {size}" for model in models]], models


def reference_accuracy(session, model, size, timeout=REFERENCE_TIMEOUT):
    """MXNet's built-in Convolution (m1) with the staff's package on the same images: the
    Correctness a submission must print. ``-I``: the submission's copy is never imported."""
    out = Transcript(stream=_Null())
    code, timed_out = run_command(session.argv(f"python -I -m ece408_op m1 {model} {size}"), out, timeout,
                                  session.cwd(), session.env())
    accuracy = tx.parse_eval_metric(out.text())
    if code != 0 or accuracy is None:
        last = [line for line in out.text().strip().splitlines() if line.strip()][-1:] or ["no output"]
        why = "time limit" if timed_out else last[0]
        raise SubmitError(f"the reference run (m1) of {model} on {size} images failed: {why}")
    return accuracy


class _Null:
    def write(self, text):
        pass

    def flush(self):
        pass


def model_key(model, hidden_model):
    """The name a model's expected value is stored under: shipped names as they are, a hidden
    model by the digest of its files (another checkpoint under the same name is another model)."""
    if not model.startswith("/hidden/"):
        return model
    digest = hashlib.sha256()
    for path in hidden_files(hidden_model):
        digest.update(path.read_bytes())
    return f"hidden:{Path(hidden_model).name}:{digest.hexdigest()[:16]}"


@dataclass
class SubmitRequest:
    folder: str
    milestone: str
    size: int = DEFAULT_SIZE
    team: str = None
    hidden_model: str = None
    record_id: str = None
    options: Options = field(default_factory=Options)


def check_device(milestone):
    """The device name to record; SubmitError where a GPU milestone has no GPU here."""
    if milestone in GPU_MILESTONES:
        name = gpu_name()
        if name is None:
            raise SubmitError(f"--submit {milestone} runs the GPU path and this host has no CUDA GPU "
                              f"(nvidia-smi lists none); run it on a GPU machine, or use --submit m2")
        return name
    return cpu_name()


def submit(request, store, transcript=None):
    """Run a ``--submit`` and store its record (also when the build fails or is stopped).
    Returns the Record."""
    folder = Path(request.folder)
    device = check_device(request.milestone)
    hidden_name = Path(request.hidden_model).name if request.hidden_model else None
    if request.hidden_model:
        hidden_files(request.hidden_model)
    commands, models = fixed_commands(request.milestone, request.size, hidden_name)
    expected = {}

    def references(session):
        environment = (f"{session.engine}:{session.image_id}" if session.engine != "host"
                       else f"host:{socket.gethostname()}:{sys.executable}")
        for model in models:
            key = model_key(model, request.hidden_model)
            value = store.expected(key, request.size, environment)
            if value is None:
                value = reference_accuracy(session, model, request.size)
                store.set_expected(key, request.size, environment, value)
            expected[model] = value

    transcript = transcript or Transcript()
    created = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    record_id = request.record_id or uuid.uuid4().hex
    with stop_on_signals():
        try:
            build = run_submission(folder, request.options, commands, transcript, request.hidden_model,
                                   before=references, gpus=1 if request.milestone in GPU_MILESTONES else 0)
        except Stopped as exc:                       # stopped before the first command
            transcript.line(tx.killed_line(exc.signal_name))
            build = BuildResult("killed", [], transcript.text())
        record = make_record(request, record_id, created, build, models, expected, device)
        store.add(record)
    return record


def make_record(request, record_id, created, build, models, expected, device):
    """The Record of a finished (or stopped) ``--submit`` build."""
    results = []
    status = build.status
    model_outputs = build.results[1:]                # the first command is the copy
    for model, result in zip(models, model_outputs):
        op_times, correctness, _ = tx.parse_model_output(result.output)
        display = Path(model).name
        results.append(tx.ModelResult(display, op_times, correctness, expected.get(model)))
    transcript = build.transcript
    if status == "ok":
        missing = [r.model for r in results if r.correctness is None or not r.op_times]
        if missing:
            status = "failed"
            line = (f"* No Op Time or no 'Correctness: ... Model: ...' line for {', '.join(missing)}: "
                    f"the run cannot be ranked.")
            transcript += line + "\n"
            print(line)
    complete = status == "ok" and len(results) == len(models)
    return Record(
        id=record_id, created_at=created, team=request.team or default_team(), milestone=request.milestone,
        size=request.size, status=status, exit_code=build.exit_code,
        op_time=sum(r.op_time for r in results) if complete else None,
        correct=complete and all(r.correct for r in results),
        models=[r.to_dict() for r in results], git_commit=git_commit(request.folder),
        content_hash=content_hash(request.folder), device=device, engine=build.engine, image=build.image_id,
        host=socket.gethostname(), duration_s=round(build.duration_s, 3), transcript=transcript)
