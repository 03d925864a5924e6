"""The instructor's routes: the class's teams and their tokens, workers' tokens, deadlines, the
settings about device kinds and about jobs no worker can take now. Every route of this router
takes the instructor's token only (the router's dependency)."""
from fastapi import APIRouter, Depends, Request

from .. import choices, devices, imports, jobs
from ..auth import instructor
from ..http import parse_deadline, read_json, text_field
from ..refused import Refused
from ..logs import log
from ..grading_door import MILESTONES
from ..state import service_of
from . import models as m
from .models import TOKEN, json_body, refusals

router = APIRouter(prefix="/api/admin", dependencies=[Depends(instructor)], responses=refusals(*TOKEN))
BODY = refusals(400, 408, 413)                           # what a route reading a JSON body may refuse
TEAMS = refusals(400, 408, 409, 413)                     # ... and one adding teams (409: one exists already)
MAX_ADD = 1000                       # names of one teams add (its tokens travel in the answer alone)


@router.post("/teams", response_model=m.TeamsAdded, response_model_exclude_unset=True, responses=TEAMS,
             openapi_extra=json_body(m.Names))
async def add_teams(request: Request):
    """A few teams, their tokens made here and shown once in the answer (``teams add``; a roster
    goes through ``/teams/import``, whose tokens the client makes and keeps first)."""
    service = service_of(request)
    data = await read_json(request)
    names = data.get("names")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise Refused(400, "names is a list of team names")
    if len(names) > MAX_ADD:
        raise Refused(413, f"{len(names):,} teams at once: teams add takes at most {MAX_ADD:,} (teams import "
                           "ROSTER.csv takes a class)")
    if any("\0" in n for n in names):
        raise Refused(400, "a team name holds NUL (U+0000); nothing was added")
    added = await service.run(service.tokens.add_teams, names, bool(data.get("skip_existing")))
    log("teams.added", count=sum(1 for a in added if "token" in a))
    return {"teams": added}


@router.post("/teams/import/check", response_model=m.ImportCheck, responses=TEAMS, openapi_extra=json_body(m.Roster))
async def check_import(request: Request):
    """A roster's names as stored and which teams exist (their active tokens' ids): imports.py."""
    service = service_of(request)
    names, lines, _ = imports.rows_of(await read_json(request, imports.MAX_BODY, "roster"), with_tokens=False)
    return await service.run(imports.check, service.db, names, lines, service.settings.names)


@router.post("/teams/import", response_model=m.Imported, responses=TEAMS, openapi_extra=json_body(m.Roster))
async def import_teams(request: Request):
    """A roster's new teams with the tokens the client made, all or nothing: imports.py."""
    service = service_of(request)
    names, lines, tokens = imports.rows_of(await read_json(request, imports.MAX_BODY, "roster"), with_tokens=True)
    done = await service.run(imports.create, service.db, names, lines, tokens, service.settings.names)
    if done["created"]:
        await service.run(service.tokens.forget)
    log("teams.imported", **done)
    return done


@router.get("/teams", response_model=m.Teams)
async def list_teams(request: Request):
    service = service_of(request)
    return {"teams": await service.run(service.tokens.list_teams)}


@router.get("/uncounted", response_model=m.Uncounteds)
async def list_uncounted(request: Request):
    service = service_of(request)
    return {"uncounted": await service.run(jobs.uncounted, service.db)}


def by_name(path, method, event, key, answer, model, ends_streams=False):
    """``POST path``: reads ``{"name": ...}``, calls the Tokens method ``method`` with it, logs
    ``event`` (the name under ``key``) and answers the name and ``answer(what the method returned)``;
    ``ends_streams``: the team's live streams end at once (its old token no longer holds)."""
    async def route(request: Request):
        service = service_of(request)
        name = text_field(await read_json(request), "name", f"the {key}'s name")
        result = await service.run(getattr(service.tokens, method), name)
        if ends_streams:
            service.streams.end_team(name, f"the team's token was {event.split('.')[-1]}")
        log(event, **{key: name})
        return {"name": name, **answer(result)}
    router.add_api_route(path, route, methods=["POST"], name=method, response_model=model,
                         responses={**TEAMS, **refusals(404)}, openapi_extra=json_body(m.Name))


by_name("/teams/revoke", "revoke_team", "team.revoked", "team", lambda _: {"active": False}, m.Revoked,
        ends_streams=True)
by_name("/teams/rotate", "rotate_team", "team.rotated", "team", lambda token: {"token": token}, m.NewToken,
        ends_streams=True)
by_name("/workers", "worker_token", "worker.token", "worker", lambda token: {"token": token}, m.NewToken)


@router.put("/deadlines", response_model=m.DeadlineSet, responses=BODY, openapi_extra=json_body(m.DeadlineBody))
async def set_deadline(request: Request):
    service = service_of(request)
    data = await read_json(request)
    milestone = data.get("milestone")
    if milestone not in MILESTONES:
        raise Refused(400, f"milestone is one of {', '.join(MILESTONES)}")
    at, shown = parse_deadline(data["deadline"]) if data.get("deadline") is not None else (None, None)
    await service.run(jobs.set_deadline, service.db, milestone, at, shown)
    log("deadline.set", milestone=milestone, deadline=shown)
    return {"milestone": milestone, "deadline": at, "shown": shown}


@router.put("/settings", response_model=m.Kinds, responses=BODY, openapi_extra=json_body(m.SettingsBody))
async def put_settings(request: Request):
    """``{"grading_kinds": {milestone: a kind's name, or null to clear}, "unknown_gpus": "refused" |
    "accepted", "unserved_jobs": "refused" | "accepted"}``, any of them; answers the settings as
    ``GET /api/kinds`` does. ``unserved_jobs``: whether a job no worker seen lately can take is
    queued (with a warning) rather than refused (capacity.py)."""
    service = service_of(request)
    data = await read_json(request)
    unknown = [k for k in data if k not in ("grading_kinds", "unknown_gpus", "unserved_jobs")]
    if unknown or not data:
        raise Refused(400, "the settings are grading_kinds ({milestone: kind or null}), unknown_gpus "
                           f"({' or '.join(choices.UNKNOWN_GPUS)}) and unserved_jobs "
                           f"({' or '.join(choices.UNSERVED_JOBS)})")
    kinds = data.get("grading_kinds", {})
    if not isinstance(kinds, dict) or not all(m in MILESTONES and (k is None or isinstance(k, str))
                                              for m, k in kinds.items()):
        raise Refused(400, f"grading_kinds maps milestones ({', '.join(MILESTONES)}) to a device kind's name or null")
    if "unknown_gpus" in data and data["unknown_gpus"] not in choices.UNKNOWN_GPUS:
        raise Refused(400, f"unknown_gpus is {' or '.join(choices.UNKNOWN_GPUS)}")
    if "unserved_jobs" in data and data["unserved_jobs"] not in choices.UNSERVED_JOBS:
        raise Refused(400, f"unserved_jobs is {' or '.join(choices.UNSERVED_JOBS)}")
    chosen = {}
    for milestone, name in kinds.items():
        chosen[milestone] = await service.run(devices.set_grading_kind, service.db, milestone,
                                              text_field(kinds, milestone, "a device kind's name") if name else None)
    if "unknown_gpus" in data:
        await service.run(choices.set_unknown_gpus, service.db, data["unknown_gpus"])
    if "unserved_jobs" in data:
        await service.run(choices.set_unserved_jobs, service.db, data["unserved_jobs"])
    service.rankings.forget_choices()
    log("settings.set", **{f"grading_kind_{m}": k for m, k in chosen.items()},
        **{k: data[k] for k in ("unknown_gpus", "unserved_jobs") if k in data})
    return await service.run(devices.settings, service.db)
