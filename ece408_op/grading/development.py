"""Development runs (``submit`` without ``--submit``): the commands of the submission's
rai_build.yml, each announced as ``* Running <command>``, each in its own sandbox with the
submission's copy at /src (read-only, links outside it left out) and a shared /build. The
transcript is all it gives (no record, no ranking), and to a caller that asks, the /build folder
as the commands left it (``keep_build``: the service's worker sends it to the server)."""
import os
import sys
import time
from dataclasses import dataclass, field

from . import profilers
from . import transcript as tx
from .config import load_config, split_command
from ..course import COURSE_MODELS
from .inputs import data_dir, hidden_files, model_dirs
from .request import SubmitError, check_timeout
from .sandbox import Mount, Step, choose_engine, clean_stale, open_sandbox
from .scratch import Scratch, copy_submission
from .steps import Stopped, _announce, execute, step_environment
from .transcript import Transcript

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


MODELS_TARGET = "/ece408-models"           # where a development run's sandbox sees the course models


def harness_mounts(sandbox):
    """What the milestones need inside a bubblewrap or host sandbox: the Fashion-MNIST folder (public
    data) and the course's own checkpoints, each file bound alone at MODELS_TARGET, never a model
    folder (an instructor may keep a hidden model beside them)."""
    if sandbox.engine not in ("bubblewrap", "host"):
        return [], {}
    data = data_dir()
    mounts, env = [Mount(str(data), str(data))], {"ECE408_DATA_DIR": str(data)}
    if sandbox.engine == "host":                 # not isolated: the host's own folders, as they are
        if os.environ.get("ECE408_MODEL_DIR"):
            env["ECE408_MODEL_DIR"] = os.environ["ECE408_MODEL_DIR"]
        return mounts, env
    for name in COURSE_MODELS:
        folder = next((d for d in model_dirs() if (d / f"{name}-symbol.json").is_file()), None)
        if folder is not None:
            for path in hidden_files(folder / name):
                mounts.append(Mount(str(path), f"{MODELS_TARGET}/{path.name}"))
    env["ECE408_MODEL_DIR"] = MODELS_TARGET
    return mounts, env


def run_development(folder, options, transcript=None, keep_build=None):
    """Validate ``folder/rai_build.yml``, copy the submission, run its commands, each in a
    sandbox (a profiler's command as ``profilers.prepare`` says). Returns BuildResult (no record: a
    development run is not ranked). ``keep_build(folder, transcript)``, where given, is called with
    the host's folder that was /build once the commands have ended (however they ended), before the
    scratch folder is removed: the service's worker packs it there."""
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
            for number, command in enumerate(config.commands, 1):
                transcript.progress(f"build command {number} of {len(config.commands)}: {command}")
                transcript.line(tx.running_line(command))
                argv, note = profilers.prepare(split_command(command), sandbox.engine, env.get("PATH"))
                if argv is None:
                    transcript.line(note)                # a profiler this worker cannot run: the run goes on
                    continue
                out = profilers.CounterErrors(transcript) if profilers.tool_of(argv) == "ncu" else transcript
                step = Step(argv, mounts, env, "/build", gpu=config.gpu_count > 0)
                result = execute(sandbox, step, out, options.timeout, label=command)
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
        if keep_build is not None:
            keep_build(scratch.build, transcript)
    return BuildResult(status, results, transcript.text(), sandbox.engine, sandbox.image_id,
                       time.monotonic() - started)


# ---------------------------------------------------------------------------- ranked runs
