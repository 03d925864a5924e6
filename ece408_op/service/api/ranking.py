"""The ranking, as ``ranking`` prints it (rankings.py keeps it between records), the deadlines
and the device kinds (devices.py): what a team or the instructor reads."""

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from .. import clock, devices, jobs
from ..auth import team_or_instructor
from ..http import int_param, kind_param
from ..refused import Refused
from ..grading_door import MILESTONES
from ..state import service_of
from .models import MILESTONE, TOKEN, Deadlines, Kinds, query, refusals

RANKING = {"parameters": [
    query("milestone", MILESTONE, "one milestone's table (default: every milestone's)"),
    query("size", {"type": "integer", "minimum": 1, "maximum": 10000}, "the run size (default: every size)"),
    query("format", {"type": "string", "enum": ["table", "csv", "json"], "default": "table"}, "how it is written"),
    query("device", {"type": "string", "maxLength": 200}, "one device kind's table (its name or its start)")],
    "responses": {"200": {"description": "the ranking: text (table, csv) or JSON (format=json)", "content": {
        "text/plain": {"schema": {"type": "string"}}, "application/json": {"schema": {}}}}}}

router = APIRouter(prefix="/api")


@router.get("/ranking", responses=refusals(400, *TOKEN), openapi_extra=RANKING)
async def ranking(request: Request, principal=Depends(team_or_instructor)):
    params = request.query_params
    milestone = params.get("milestone")
    if milestone is not None and milestone not in MILESTONES:
        raise Refused(400, f"milestone is one of {', '.join(MILESTONES)}")
    size = int_param(params, "size", 1, 10000)
    fmt = params.get("format", "table")
    if fmt not in ("table", "csv", "json"):
        raise Refused(400, "format is table, csv or json")
    device = kind_param(params, "device")
    body = await service_of(request).rankings.report(principal, milestone, size, fmt, device)
    return Response(body + "\n", media_type="application/json" if fmt == "json" else "text/plain")


@router.get("/deadlines", dependencies=[Depends(team_or_instructor)], response_model=Deadlines,
            responses=refusals(*TOKEN))
async def show_deadlines(request: Request):
    service = service_of(request)
    return {"deadlines": await service.run(jobs.deadlines, service.db), "now": clock.now()}


@router.get("/kinds", dependencies=[Depends(team_or_instructor)], response_model=Kinds, responses=refusals(*TOKEN))
async def show_kinds(request: Request):
    """The device kinds of the workers (seen in the last 7 days: what submit --gpu may name) and of
    the runs, the kind each milestone's grade counts, whether unknown GPU kinds are accepted, and
    with serve --slurm the kinds its --slurm-kind maps, each with its request (``slurm_kinds``;
    None: not Slurm)."""
    service = service_of(request)
    slurm = service.settings.slurm
    return {**await service.run(devices.settings, service.db),
            "slurm_kinds": None if slurm is None else [{"kind": k, "request": r} for k, r in slurm.requests.items()]}
