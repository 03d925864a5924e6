"""The measuring process of a ranked run: the grader's code, in the run's sandbox.

    python -I -m ece408_op.grading.measure --channel /run/ece408/channel.sock

Its first act is to connect to the runner's channel (``grading/channel.py``) and to make itself
undumpable (no process of its user may read its memory, environment or descriptors); only then
does it start the team's process. Everything secret or private comes over the channel, never as
a file its sandbox shows (a team's process shares that sandbox): the test images, the models,
the hidden model, the grader's check kernels. For each model of the job it runs MXNet's own
convolution on the images (the Correctness to equal), then the milestone with the team's forward
(``team/runtime.py``), printing the course's lines, then repeats the model's timed forward on
fresh inputs until the rule of ``team/repeats.py`` stops it (the repeats print nothing: the
course's lines are those of the run the course made), and sends the figures back over the channel;
while the team's code runs it holds the machine's timing lease (``channel.Lease``).
A failure (the team's code, a check, a plan) is one ``error:`` line in the transcript and a
``failed`` report naming it.
"""
import argparse
import base64
import sys
import time

from ..errors import Ece408Error


def _device_name(milestone):
    if milestone == "m2":
        from .machine import cpu_name
        return cpu_name()
    from ..kernels import GpuDevice
    return GpuDevice.get().name


def failure_line(exc):
    """One line for what a run raised: our errors as they are, MXNet's as the reason our operator
    gave (``cli.errors``), anything else as the harness's own failure."""
    if isinstance(exc, Ece408Error):
        return str(exc).splitlines()[0]
    import sys
    mapped = None
    if "mxnet" in sys.modules:                     # only then can it be an MXNetError
        from ..mx.failures import mxnet_cause
        mapped = mxnet_cause(exc)
    if mapped is not None:
        return mapped[0].splitlines()[0]
    raise exc


def register_job_inputs(job):
    """The job's images, models and hidden model, registered in memory (never written)."""
    import numpy as np
    from ..data.lookup import register_memory_split
    from ..mx.models import register_memory_model
    data = job["data"]
    images = np.frombuffer(base64.b64decode(data["images"]), np.uint8).reshape(data["shape"])
    labels = np.frombuffer(base64.b64decode(data["labels"]), np.uint8)
    register_memory_split("test", images, labels)
    for name, files in job.get("model_files", {}).items():
        register_memory_model(name, files["symbol"], base64.b64decode(files["params"]))
    hidden = job.get("hidden")
    if hidden:
        register_memory_model(hidden["name"], hidden["symbol"], base64.b64decode(hidden["params"]))


def progress_of(lease, prefix):
    """A function telling the runner (over the lease's channel) where the run is: ``prefix: text``;
    one that does nothing where there is no channel. A channel gone is the report's to say."""
    def step(text):
        if lease is not None and hasattr(lease, "progress"):
            try:
                lease.progress(f"{prefix}: {text}")
            except OSError:
                pass
    return step


def run_job(job, console, lease=None, received=None):
    """The report of ``job`` (a dict from the runner), its transcript printed through ``console``;
    ``received``: when the job came (time.monotonic()), the moment its ``time_left`` was true."""
    import ece408_op
    ece408_op.require_mxnet()
    from ..course import MILESTONES
    from ..mx.inference import run_inference
    from ..mx.milestone import Args, run_milestone
    from ..team.harness import DEFAULT_TIME_LIMIT
    from ..team import repeats
    from ..team.runtime import TeamRuntime
    milestone = MILESTONES[job["milestone"]]
    register_job_inputs(job)
    image = None
    if job.get("kernels"):
        with open(job["kernels"], "rb") as f:
            image = f.read()
    grader_image = base64.b64decode(job["grader_kernels"]) if job.get("grader_kernels") else None
    report = {"status": "ok", "reason": None, "device": _device_name(job["milestone"]), "models": []}
    began = time.monotonic() if received is None else received     # when the job came: its time_left's moment

    def time_left():                              # what the job's limit leaves (its lease waits extend it)
        if not isinstance(job.get("time_left"), (int, float)):
            return None
        return job["time_left"] - (time.monotonic() - began) + getattr(lease, "waited", 0.0)

    for number, model in enumerate(job["models"], 1):
        model_began = time.monotonic()
        step = progress_of(lease, f"model {model if model != 'hidden' else 'the hidden model'} "
                                  f"({number} of {len(job['models'])})")
        step("MXNet's reference run (the Correctness to equal)")
        expected = run_inference(model, job["size"], use_custom=False)["accuracy"]
        step("the team's forward")
        runtime = TeamRuntime(job["team"], image, repeats=job.get("repeats", milestone.repeats), stdout=None,
                              grader_image=grader_image, time_limit=job.get("time_limit", DEFAULT_TIME_LIMIT),
                              lease=lease, on_fresh_run=lambda what, i, n: step(
                                  f"{what}, fresh run {i}" + (f" of {n}" if n else "")))
        args = Args(model=model, size=job["size"])
        entry = {"model": model, "expected": expected, "op_times": [], "correctness": None, "layers": []}
        report["models"].append(entry)
        try:
            with runtime.held():                  # the team's processes kept for the repeats
                accuracy = run_milestone(milestone, args, console, runtime=runtime)
                allowed = repeats.budget(time_left(), len(job["models"]) - number,
                                         time.monotonic() - model_began)
                timing = runtime.time_model(stop=lambda totals, timed, wall: repeats.stop_reason(
                    totals, timed, wall, budget_s=allowed))
        except Exception as exc:                  # noqa: BLE001  the team's failure, in one line
            line = failure_line(exc)
            console.say(("\n" if console.partial else "") + f"error: {line}")
            report.update(status="failed", reason=f"{model}: {line}")
            entry["layers"] = runtime.layers
            return report
        entry.update(correctness=float(accuracy), layers=runtime.layers,
                     op_times=[layer["op_time"] for layer in runtime.layers],
                     repeats=timing["totals"], stopped=timing["stopped"], repeats_window=timing["window"])
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="ece408_op.grading.measure")
    parser.add_argument("--channel", required=True)
    args = parser.parse_args(argv)
    from . import channel
    sock = channel.connect(args.channel)           # first: nothing of the team's runs yet
    from ..team.lockdown import make_undumpable
    make_undumpable()
    import os
    for key in ("PYCUDA_CACHE_DIR", "NUMBA_CACHE_DIR"):            # caches of this run only
        if os.environ.get(key):
            os.makedirs(os.environ[key], exist_ok=True)
    job = channel.recv(sock, channel.JOB_LIMIT)
    received = time.monotonic()
    from ..console import Console
    console = Console()
    try:
        report = run_job(job, console, channel.Lease(sock), received)
    except Ece408Error as exc:
        console.say(f"error: {exc}")
        report = {"status": "failed", "reason": str(exc).splitlines()[0], "models": []}
    except Exception as exc:                       # noqa: BLE001  reported, never a traceback on the runner
        console.say(f"error: the harness failed: {type(exc).__name__}: {exc}")
        report = {"status": "error", "reason": f"the harness failed: {type(exc).__name__}: {exc}", "models": []}
    sys.stdout.flush()
    channel.send(sock, report)
    sock.close()
    return 0 if report["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
