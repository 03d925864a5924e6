"""Running submissions as the course's server did, with every team command in a sandbox.

Two kinds of run:

``run_development`` (``submit`` without ``--submit``; ``development.py``): the commands of the
submission's rai_build.yml, each in its own sandbox. The transcript is all it gives.

``submit`` (``submit --submit m2|m3|final``, and each task of ``grade``): a ranked run. From the
submission only the team's files are taken (``base/terms.py``: new-forward.py for m2;
new-forward.cu and launch.py for m3 and final), each read once; then the build and the
measuring process run in the run's sandbox (``ranked.py``). The record is written here, after
every process of the run has ended; it names the team files it measured with their SHA-256
(of the bytes that ran), the engine, whether it isolates, and the options it was measured with.
"""
import getpass
import os
import socket
import time
import uuid
from datetime import datetime, timezone

from ..base.terms import MILESTONE_FILES, read_team_files
from ..team.repeats import MIN_REPEATS
from . import transcript as tx
from .inputs import hidden_files
from .machine import check_device
from ..base.names import printable, team_name
from .ranked import RankedRun, run_ranked
from .request import MILESTONES, MODELS, SubmitError
from .steps import Stopped, stop_on_signals
from .record import Record
from .transcript import Transcript

TEAM_ENV = "ECE408_TEAM"


def default_team(folder=None):
    """A record's team name: the team folder's own name (``--name`` overrides it where given)."""
    if folder is not None:
        name = os.path.basename(os.path.abspath(os.fsdecode(folder)))
        if name:
            return name
    return os.environ.get(TEAM_ENV) or getpass.getuser()


def team_digest(folder, milestone):
    """SHA-256 over the team's files a milestone takes (name, size, bytes), each read once
    (``base/terms.read_team_files``): what ``grade`` compares to skip a team already graded.
    TeamError (one line) where a file is missing or not a regular file."""
    return read_team_files(folder, MILESTONE_FILES[milestone]).digest


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
                                      entry.get("correctness"), entry.get("expected"),
                                      [float(t) for t in entry.get("repeats") or []] or None,
                                      printable(str(entry.get("stopped")), 20) if entry.get("stopped") else None))
    complete = status == "ok" and len(results) == len(MODELS) + (1 if request.hidden_model else 0) and \
        all(r.correctness is not None and r.op_times and len(r.repeats or ()) >= MIN_REPEATS for r in results)
    if status == "ok" and not complete:
        status, reason = "failed", reason or "the report lacks a model's Op Times, repeats or Correctness"
    correct = complete and all(r.correct for r in results)
    if status == "ok" and not correct:
        wrong = next(r for r in results if not r.correct)
        reason = (f"Correctness {wrong.correctness} on {printable(wrong.model, limit=40)} is not the "
                  f"{wrong.expected} of MXNet's own convolution")
    if reason and not (status == "ok" and correct):
        transcript += f"* Not ranked: {printable(reason, limit=500)}\n"
    named = request.options.engine if request.options.engine not in (None, "auto") else None
    engine = sandbox.engine if sandbox else named          # a run stopped before its sandbox opened
    options = record_options(request, engine)
    return Record(
        id=record_id, created_at=created, team=request.stored_team or team_name(request.team or default_team(request.folder)),
        milestone=request.milestone, size=request.size, status=status, exit_code=None,
        op_time=sum(r.op_time for r in results) if complete else None, correct=correct,
        models=[{**r.to_dict(), "layers": e.get("layers", []), "repeats_window": e.get("repeats_window")}
                for r, e in zip(results, (report or {}).get("models", []))],
        git_commit=None, content_hash=run.digest,
        device=(report or {}).get("device") or device,
        engine=engine, image=sandbox.image_id if sandbox else None,
        host=socket.gethostname(), duration_s=round(duration, 3), transcript=transcript,
        team_files=[f.to_dict() for f in run.taken], isolated=bool(sandbox and sandbox.isolated),
        options=options, options_key=options_key(options),
        reason=None if status == "ok" and correct else printable(reason or status, limit=500))
