"""The instructor's page (``/admin``): the queue, the workers, the teams against the rate
limits, deadlines, names shown or pseudonyms, the device kinds (which counts for each milestone's
grade, whether teams may ask for one no worker reported), whether a job no worker can take now is
queued (each such waiting job marked in the queue), the CSV export of one kind's table with the
grade rule, recent jobs; and its forms (cancel a job, revoke a team's token, set or clear a
deadline, choose names, choose the grading kind, accept or refuse unknown GPU kinds, accept or
refuse jobs no worker can take now)."""
import math
import re

from fastapi import Depends, Request
from starlette.responses import RedirectResponse, Response

from .. import choices, clock, devices, jobs, overview, standings
from ..http import kind_param, parse_deadline, text_field
from ..refused import Refused
from ..logs import log
from ..grading_door import MILESTONES, KindError, Table, listed_kinds, resolve_kind
from ...base.names import printable
from ..state import service_of
from .errors import page_router
from .job import cancel, own_job
from .site import board_params, instructor, read_form, site_of

DONE = {"names": "The ranking's names setting was saved.", "deadline": "The deadline was saved.",
        "cleared": "The deadline was cleared.", "revoked": "The team's token was revoked; its sessions ended.",
        "cancelled": "The job was cancelled (a running job stops at its worker's next report).",
        "grading": "The kind that counts for the grade was saved.", "unknown": "The GPU kinds setting was saved.",
        "unserved": "The setting for jobs no worker can take now was saved."}

router = page_router()


def seconds_param(form, name):
    text = (form.get(name) or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise Refused(400, f"{name} is a number of seconds, not {printable(text, 30)}") from None
    if not math.isfinite(value) or value <= 0:
        raise Refused(400, f"{name} is a positive number of seconds")
    return value


def milestone_of(fields):
    """The form's milestone; Refused (400) where it names none."""
    milestone = fields.get("milestone")
    if milestone not in MILESTONES:
        raise Refused(400, f"milestone is one of {', '.join(MILESTONES)}")
    return milestone


def admin_overview(db, rules, slurm=None):
    """(the queue, the workers, the teams, the deadlines, the device kinds' settings) as the page shows them."""
    return (overview.queue(db, jobs.snapshot(db), slurm), overview.workers(db), overview.teams(db, rules),
            jobs.deadlines(db), devices.settings(db))


@router.get("/admin")
async def admin_page(request: Request, viewer=Depends(instructor)):
    service = service_of(request)
    rules = service.settings.rules
    queue, workers, teams, deadlines, kinds = await service.run(admin_overview, service.db, rules,
                                                                service.settings.slurm)
    done = DONE.get(request.query_params.get("done"))
    known = sorted({k for ks in kinds["run_kinds"].values() for k in ks} | set(kinds["worker_kinds"]))
    return site_of(request).render("admin.html", viewer, queue=queue, workers=workers, teams=teams,
                                   deadlines=deadlines, boards=await service.rankings.boards(),
                                   names=await service.rankings.names(), rules=rules, done=done, now=clock.now(),
                                   kinds=kinds, known_kinds=known)


@router.post("/admin/names")
async def admin_names(request: Request, viewer=Depends(instructor)):
    fields = await read_form(request, viewer.value)
    try:
        await service_of(request).rankings.set_names(fields.get("names"))
    except ValueError as exc:
        raise Refused(400, str(exc)) from None
    log("ranking.names", names=fields["names"])
    return RedirectResponse("/admin?done=names", status_code=303)


@router.post("/admin/grading-kind")
async def admin_grading_kind(request: Request, viewer=Depends(instructor)):
    service = service_of(request)
    fields = await read_form(request, viewer.value)
    milestone = milestone_of(fields)
    name = None if fields.get("action") == "clear" else text_field(fields, "kind", "a device kind's name")
    kind = await service.run(devices.set_grading_kind, service.db, milestone, name)
    service.rankings.forget_choices()
    log("grading.kind", milestone=milestone, kind=kind, via="page")
    return RedirectResponse("/admin?done=grading", status_code=303)


async def _either_choice(request, viewer, setter, field, event, done):
    """A form that sets one of the instructor's two-way choices (choices.py), then back to /admin."""
    service = service_of(request)
    fields = await read_form(request, viewer.value)
    try:
        await service.run(setter, service.db, fields.get(field))
    except ValueError as exc:
        raise Refused(400, str(exc)) from None
    log(event, **{field: fields[field]}, via="page")
    return RedirectResponse(f"/admin?done={done}", status_code=303)


@router.post("/admin/unknown-gpus")
async def admin_unknown_gpus(request: Request, viewer=Depends(instructor)):
    return await _either_choice(request, viewer, choices.set_unknown_gpus, "unknown_gpus", "gpus.unknown", "unknown")


@router.post("/admin/unserved-jobs")
async def admin_unserved_jobs(request: Request, viewer=Depends(instructor)):
    return await _either_choice(request, viewer, choices.set_unserved_jobs, "unserved_jobs", "jobs.unserved",
                                "unserved")


@router.post("/admin/deadlines")
async def admin_deadlines(request: Request, viewer=Depends(instructor)):
    service = service_of(request)
    fields = await read_form(request, viewer.value)
    milestone = milestone_of(fields)
    if fields.get("action") == "clear":
        at, when = None, None
    else:
        at, when = parse_deadline((fields.get("deadline") or "").strip())
    await service.run(jobs.set_deadline, service.db, milestone, at, when)
    log("deadline.set", milestone=milestone, deadline=when, via="page")
    return RedirectResponse(f"/admin?done={'cleared' if at is None else 'deadline'}", status_code=303)


@router.post("/admin/teams/revoke")
async def admin_revoke(request: Request, viewer=Depends(instructor)):
    service = service_of(request)
    fields = await read_form(request, viewer.value)
    name = text_field(fields, "name", "a team's name")
    await service.run(service.tokens.revoke_team, name)
    service.streams.end_team(name, "the team's token was revoked")
    log("team.revoked", team=name, via="page")
    return RedirectResponse("/admin?done=revoked", status_code=303)


@router.post("/admin/jobs/{job_id}/cancel")
async def admin_cancel(request: Request, job_id: str, viewer=Depends(instructor)):
    job = await own_job(request, viewer.principal, job_id)
    await read_form(request, viewer.value)
    await cancel(request, viewer.principal, job["id"])
    return RedirectResponse("/admin?done=cancelled", status_code=303)


@router.get("/admin/ranking.csv", dependencies=[Depends(instructor)])
async def admin_csv(request: Request):
    """One device kind's table as CSV: the kind ``device=`` names, else the kind that counts for
    the milestone's grade, else the board's only kind; with ``full`` and ``zero``, the grade
    column, by the kind that counts (Refused 400 where that is another kind, or none is chosen
    while the board has several)."""
    service = service_of(request)
    params = request.query_params
    milestone, size = board_params(params, required=True)
    device = kind_param(params, "device")
    full, zero = seconds_param(params, "full"), seconds_param(params, "zero")
    if (full is None) != (zero is None):
        raise Refused(400, "the grade rule needs both Op Times: full credit (full) and zero credit (zero)")
    if full is not None and full >= zero:
        raise Refused(400, "the full-credit Op Time must be below the zero-credit one")
    _, found = await service.rankings.board(milestone, size)
    counted = (await service.rankings.grading_kinds()).get(milestone) or \
        (found.kinds[0] if len(found.kinds) == 1 else None)
    choose = f"choose the kind that counts for the {milestone} grade on /admin (or: python -m ece408_op kinds grade " \
             f"{milestone} KIND)"
    if device is not None:
        try:
            kind = resolve_kind(device, found.kinds, "device", f"device kind of {milestone} on {size} images")
        except KindError as exc:
            raise Refused(400, str(exc)) from None
    elif counted is None and len(found.kinds) > 1:
        raise Refused(400, f"{milestone} on {size} images has runs on several device kinds "
                           f"({listed_kinds(found.kinds)}): name one (device=), or {choose}")
    else:
        kind = counted
    if full is not None and kind != counted:
        raise Refused(400, f"the {milestone} grade counts the runs on {counted}: leave device out, or name that kind"
                      if counted else f"no device kind counts for the {milestone} grade yet: {choose}")
    st = next((t for t in found.tables if t.device == kind), None) or Table(kind, [], None, [], 0, None)
    roster = await service.run(overview.team_names, service.db)
    text = standings.graded_csv(st, roster, full, zero)
    named = f"-{re.sub(r'[^A-Za-z0-9._-]+', '_', kind)}" if kind and len(found.kinds) > 1 else ""
    return Response(text, media_type="text/csv; charset=utf-8", headers={
        "Content-Disposition": f'attachment; filename="ranking-{milestone}-{size}{named}.csv"',
        "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"})
