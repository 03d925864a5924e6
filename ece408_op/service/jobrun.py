"""One job, in a child process of the worker: the ranked run (grading's ``runner.submit``) or the
development run (``runner.run_development``) of the unpacked upload, exactly as the local
``submit`` runs them, each team command in its sandbox.

    python -m ece408_op.service.jobrun    (the job's description as JSON on stdin)

The transcript goes to stdout as it comes (the runner's ``Transcript``: team output escaped,
``* Running ...`` lines), which the worker streams to the server. The outcome goes to file
descriptor the worker names (``result_fd``), which no team process inherits: for a ranked run the record the runner stores
through its store (``FdStore.add``), for a development run its status and what it packed of its
build folder into the file the worker names (``build_archive``, ``buildfolder.pack``); one JSON line.
Before it, as the run goes, the run's steps (``Transcript.progress``: ``{"progress": "build command
2 of 3: make"}``, a line each), which the worker sends on live.

The worker stops a job (cancelled, past its time limit, the worker itself stopping) with
SIGTERM: the runner ends every process of the run and writes a ``killed`` record.
"""
import ctypes
import functools
import json
import os
import signal
import socket
import sys
import threading
from dataclasses import asdict
from datetime import datetime, timezone

from ..errors import Ece408Error
from . import buildfolder
from ..base.terms import TeamError
from .grading_door import (Options, Record, Stopped, SubmitRequest, Transcript, killed_line, run_development,
                   stop_on_signals, submit)

PARENT_ENV = "ECE408_PARENT_PID"
WRITING = threading.Lock()              # one line at a time on the result descriptor (steps come from threads)


def die_with_parent():
    """Where $ECE408_PARENT_PID names this process's parent: SIGTERM when the parent dies, even
    by SIGKILL (PR_SET_PDEATHSIG), so that no run outlives the worker or server that started it;
    exit at once where the parent is already gone."""
    pid = os.environ.get(PARENT_ENV)
    if not pid:
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)       # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if str(os.getppid()) != pid:
        os._exit(1)


class FdStore:
    """The store a ranked run writes its record to: one JSON line on the result descriptor."""

    def __init__(self, out):
        self.out = out

    def add(self, record):
        write_line(self.out, {"record": asdict(record)})
        return True


def write_line(out, message):
    with WRITING:
        out.write(json.dumps(message) + "\n")
        out.flush()


def options_of(spec):
    return Options(engine=spec.get("engine"), timeout=float(spec["timeout"]), scratch_parent=spec.get("scratch"))


def run_ranked(spec, transcript, store):
    request = SubmitRequest(spec["folder"], spec["milestone"], int(spec["size"]), None, spec.get("hidden_model"),
                            spec["record_id"], options_of(spec), stored_team=spec["team"])    # already escaped
    try:
        submit(request, store, transcript)
    except Ece408Error as exc:                      # as grade's task does: a record, status failed or error
        for line in str(exc).splitlines():
            transcript.line(f"error: {line}")
        status = "failed" if isinstance(exc, TeamError) else "error"
        store.add(Record(spec["record_id"], datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                         spec["team"], spec["milestone"], int(spec["size"]), status, host=socket.gethostname(),
                         transcript=transcript.text(), reason=str(exc).splitlines()[0][:500]))


def keep_build(archive, kept, folder, transcript):
    """Pack the run's build folder into ``archive`` (``buildfolder.pack``), its lines of what was
    left out into the transcript; ``kept`` gets its summary, or the note of why there is none."""
    try:
        packed = buildfolder.pack(folder, archive)
    except Exception as exc:                        # noqa: BLE001  the run's result still goes back
        kept["note"] = one_line(f"it could not be packed ({getattr(exc, 'strerror', None) or exc})")
        return
    for line in packed.notes:
        transcript.line(line)
    kept["summary"] = packed.summary()


def run_dev(spec, transcript, out):
    kept = {}
    keep = functools.partial(keep_build, spec["build_archive"], kept) if spec.get("build_archive") else None
    try:
        with stop_on_signals():                     # SIGTERM: the runner stops every command of the run
            build = run_development(spec["folder"], options_of(spec), transcript, keep_build=keep)
        result = {"status": "ok" if build.status == "ok" else build.status, "exit_code": build.exit_code}
    except Ece408Error as exc:
        for line in str(exc).splitlines():
            transcript.line(f"error: {line.removeprefix('error: ')}")
        result = {"status": "failed", "exit_code": None, "reason": str(exc).splitlines()[0][:500]}
    except Stopped as exc:                          # before or after the commands (they catch it themselves)
        transcript.line(killed_line(exc.signal_name))
        result = {"status": "killed", "exit_code": None, "reason": f"stopped ({exc.signal_name})"}
    result["build"] = kept.get("summary")
    result["build_note"] = kept.get("note") or (None if "summary" in kept else "the run ended before its commands ran")
    write_line(out, {"development": result})


def one_line(text, limit=500):
    """``text`` as one line of at most ``limit`` characters (a job's reason, a log field)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def failed(spec, transcript, out, exc):
    """The outcome of a run this process could not carry out (a bug, a job it cannot read): the
    error's type and message as its reason, so that the job ends saying what went wrong."""
    reason = one_line(f"the run's process failed ({type(exc).__name__}: {exc})")
    transcript.line(f"error: {reason}")
    if spec.get("kind") != "ranked":
        write_line(out, {"development": {"status": "error", "exit_code": None, "reason": reason}})
        return
    FdStore(out).add(Record(spec.get("record_id"), datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                            spec.get("team"), spec.get("milestone"), spec.get("size"), "error",
                            host=socket.gethostname(), transcript=transcript.text(), reason=reason))


def main():
    die_with_parent()
    spec = json.load(sys.stdin)
    out = os.fdopen(int(spec["result_fd"]), "w")
    transcript = Transcript(stream=sys.stdout)
    transcript.on_progress = lambda step: write_line(out, {"progress": one_line(step, 200)})
    try:
        if spec["kind"] == "ranked":
            run_ranked(spec, transcript, FdStore(out))
        else:
            run_dev(spec, transcript, out)
    except Exception as exc:                        # noqa: BLE001  reported as the job's reason, not lost
        failed(spec, transcript, out, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
