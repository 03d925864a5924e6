"""The build and measuring steps of a ranked run, each in the run's sandbox:

    1. (m3, final) the build: nvcc compiles new-forward.cu to a cubin (device code only), in a
       sandbox that shows the team's files and the read-only system alone;
    2. the measuring process (``grading/measure.py``): the grader's own package, which gets the
       job (images, models, hidden model, check kernels) over a channel no team process can
       reach (``channel.py``), runs the milestone on every model with the team's forward and
       reports back; while the team's code runs it holds the machine's timing lease.
"""
import base64
import os
from dataclasses import dataclass, field

from ..base.files import Refused, read_regular
from ..base.terms import MILESTONE_FILES, TeamError, read_team_files
from . import channel
from . import transcript as tx
from .inputs import course_model_files, read_hidden, test_images
from .machine import gpu_arch, gpu_query
from .request import GPU_MILESTONES, MODELS, SubmitError, check_timeout
from .sandbox import Mount, Step, choose_engine, clean_stale, open_sandbox
from .scratch import Scratch
from .steps import _announce, execute, sandbox_import_path, step_environment

ART_LIMIT = 64 << 20


@dataclass
class RankedRun:
    """What the build and measuring steps of a ranked run gave."""
    status: str                      # ok, failed, timeout
    reason: str = None               # one line where not ok
    report: dict = None              # the measuring process's report (None: none came)
    taken: list = field(default_factory=list)     # [TeamFile] the run measured
    digest: str = None               # SHA-256 of exactly those bytes (TeamFiles.digest)
    sandbox: object = None


def timing_key(milestone):
    """The machine's timing lock a run takes (channel.TimingLock): one per GPU, one for the CPU."""
    if milestone not in GPU_MILESTONES:
        return "cpu"
    return "gpu-" + (gpu_query("uuid") or os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0] or "0")


def _take_artifact(path, dest, limit=ART_LIMIT):
    """Copy the build's output ``path`` (a regular file, no link, at most ``limit``) into ``dest``."""
    try:
        data = read_regular(path, limit)
    except (Refused, OSError):
        return False
    with open(dest, "wb") as out:
        out.write(data)
    os.chmod(dest, 0o644)
    return True


def measure_argv(sandbox, sock):
    """The measuring process's command: the grader's own Python and package, isolated."""
    from ..team.harness import isolated_python
    if sandbox.engine in ("bubblewrap", "host"):
        return isolated_python("ece408_op.grading.measure", "--channel", sock, paths=sandbox_import_path(sandbox))
    return ["python", "-I", "-m", "ece408_op.grading.measure", "--channel", sock]


def build_team_kernels(sandbox, scratch, arch, transcript, timeout):
    """The ranked build: nvcc compiles the team's /src/new-forward.cu (device code only) in its own
    sandbox, which shows the team's files, the build folder and the read-only system (nvcc,
    CUDA's headers): nothing of the grader's or another team's. Returns (the cubin taken out of
    /build into the scratch folder's art/, None) or (None, reason)."""
    from ..team.build import CUBIN, SOURCE, nvcc_argv
    argv = nvcc_argv(f"/src/{SOURCE}", f"/build/{CUBIN}", arch)
    base = [Mount(str(scratch.src), "/src"), Mount(str(scratch.build), "/build", writable=True)]
    transcript.progress(f"the build: nvcc {SOURCE}")
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
            files = read_team_files(request.folder, MILESTONE_FILES[milestone])
            run.taken, run.digest = files.write(scratch.src), files.digest
        except TeamError as exc:
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
        listener = channel.Listener(scratch.channel, lock, on_progress=transcript.progress)
        sock = f"{channel.TARGET}/{channel.SOCKET}"
        models = list(MODELS) + (["hidden"] if hidden else [])
        job["models"] = models
        listener.start(job)
        argv = measure_argv(sandbox, sock)
        steps = base + [Mount(str(scratch.art), "/art"), Mount(str(scratch.channel), channel.TARGET, writable=True)]
        transcript.line(tx.running_line(f"python -m ece408_op {milestone} (the grader's harness) on "
                                        f"{', '.join(m if m != 'hidden' else 'the hidden model' for m in models)}, "
                                        f"{request.size} images"))
        transcript.progress(f"the grader's harness: starting {milestone} on {len(models)} model(s)")
        result = execute(sandbox, Step(argv, steps, env, "/build", gpu=gpu), transcript, options.timeout,
                         label="measure", extra_time=listener.waited)
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
