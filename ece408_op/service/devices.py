"""The device kinds a class knows (grading/kinds.py: a device's reported name, blanks normalised):
those of its workers (the name each slot reports when it asks for work) and those of its runs'
records; and the two choices about them that are the instructor's (choices.py): the kind each
milestone's grade counts, and whether a team may ask for a kind no worker has reported.

A team asks for a kind with ``submit --gpu NAME``: NAME names a kind of the workers seen in the
last ``jobs.KINDS_SEEN`` seconds (a week: a Slurm class's workers come and go with the queue), or
one that ``serve --slurm-kind`` maps, by grading/kinds.py's rule, and the job keeps the kind's
full name; a name that names none is
refused in one line listing them, unless the instructor accepts unknown names (the job then
keeps the name as typed, and only a worker reporting exactly that kind takes it)."""

from . import choices, clock
from .jobs import KINDS_SEEN
from .refused import Refused
from .grading_door import KindError, kind_of, matching_kinds, resolve_kind
from ..base.names import printable


def worker_kinds(db, since=KINDS_SEEN, now=None):
    """The kinds of the workers that asked for work in the last ``since`` seconds, in name order."""
    now = clock.now() if now is None else now
    with db.transaction(write=False) as tx:
        rows = tx.all("SELECT DISTINCT device FROM service_workers WHERE last_seen > ?", (now - since,))
    return sorted({k for k in (kind_of(d) for d, in rows) if k})


def run_kinds(db, milestone=None):
    """The kinds of the runs' records (of ``milestone``), in name order."""
    with db.transaction(write=False) as tx:
        if milestone is None:
            rows = tx.all("SELECT DISTINCT device FROM runs")
        else:
            rows = tx.all("SELECT DISTINCT device FROM runs WHERE milestone = ?", (milestone,))
    return sorted({k for k in (kind_of(d) for d, in rows) if k})


def wanted_kind(db, name, mapped=()):
    """The kind a job asking for ``name`` runs on (see the module docstring); Refused (400) where
    ``name`` names none of the workers' kinds and of ``mapped`` (Slurm's, serve --slurm-kind)
    (and unknown names are refused) or several."""
    kinds = sorted(set(worker_kinds(db)) | set(mapped))
    if not matching_kinds(name, kinds) and choices.unknown_gpus(db) == "accepted":
        return kind_of(printable(name, 100))           # as a worker's reported name is kept
    among = "device kind of this class's workers (seen in the last 7 days)" + (" or of its Slurm mapping" if mapped
                                                                                else "")
    try:
        return resolve_kind(name, kinds, "gpu", among)
    except KindError as exc:
        raise Refused(400, str(exc)) from None


def set_grading_kind(db, milestone, name):
    """Count the kind ``name`` names (among the milestone's runs' kinds and the workers' kinds)
    for ``milestone``'s grade, or none (``name`` None); returns the kind. Refused (400) where
    ``name`` names none of them or several."""
    kind = None
    if name is not None:
        kinds = sorted(set(run_kinds(db, milestone)) | set(worker_kinds(db)))
        try:
            kind = resolve_kind(name, kinds, "kind", f"device kind of the {milestone} runs or of the workers")
        except KindError as exc:
            raise Refused(400, str(exc)) from None
    choices.set_grading_kind(db, milestone, kind)
    return kind


def settings(db):
    """The instructor's choices about kinds, and the kinds known: {grading_kinds: {milestone:
    kind}, unknown_gpus, unserved_jobs (whether a job no worker seen lately can take is queued:
    capacity.py), worker_kinds: [kinds seen in the last 7 days], run_kinds: {milestone: [kinds]}}."""
    with db.transaction(write=False) as tx:
        rows = tx.all("SELECT DISTINCT milestone, device FROM runs")
    by_milestone = {}
    for milestone, device in rows:
        if kind_of(device):
            by_milestone.setdefault(milestone, set()).add(kind_of(device))
    return {"grading_kinds": choices.grading_kinds(db), "unknown_gpus": choices.unknown_gpus(db),
            "unserved_jobs": choices.unserved_jobs(db), "worker_kinds": worker_kinds(db), "run_kinds": {m: sorted(k) for m, k in sorted(by_milestone.items())}}
