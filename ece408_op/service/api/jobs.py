"""A team's jobs: queue an upload, list them, show one, its transcript, follow it live (SSE),
cancel it. A team reaches its own jobs only (another team's id answers 404, as no job does);
the instructor reaches every job."""
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from sse_starlette import EventSourceResponse

from .. import jobs
from .. import upload as uploads
from ..auth import team, team_or_instructor
from ..http import after_param, check_job_id, int_param, read_body
from ..jobs import Refused, public
from ..live import follow, with_place
from ..logs import log
from ..runs import ConfigError, DEFAULT_SIZE, GPU_MILESTONES, MILESTONES, check_build_config, printable
from ..state import service_of

router = APIRouter(prefix="/api/jobs")


async def own_job(request: Request, job_id: str, principal=Depends(team_or_instructor)):
    """The job of the path (a team: its own only), else 404."""
    service = service_of(request)
    owner = principal.name if principal.kind == "team" else None
    job = await service.run(jobs.get, service.db, check_job_id(job_id), owner)
    if job is None:
        raise Refused(404, f"no job {job_id} here (jobs list shows yours)")
    return job


@router.post("")
async def submit(request: Request, principal=Depends(team)):
    service = service_of(request)
    settings = service.settings
    params = request.query_params
    kind = params.get("kind", "development")
    if kind not in jobs.KINDS:
        raise Refused(400, f"kind is ranked or development, not {printable(kind, 20)}")
    milestone = size = None
    if kind == "ranked":
        milestone = params.get("milestone")
        if milestone not in MILESTONES:
            raise Refused(400, f"a ranked run names its milestone: {', '.join(MILESTONES)}")
        size = int_param(params, "size", 1, 10000, DEFAULT_SIZE)
    body = await read_body(request, settings.max_upload, "upload")
    checked = await service.run(uploads.check, body, kind, milestone, settings.max_upload)
    if kind == "ranked":
        gpu = milestone in GPU_MILESTONES
    else:
        try:
            config = await service.run(check_build_config, uploads.config_text(checked))
        except ConfigError as exc:
            raise Refused(400, "; ".join(f"rai_build.yml: {p}" for p in exc.problems)) from None
        gpu = config.gpu_count > 0
    job = await service.run(jobs.submit, service.db, settings.rules, principal.name, kind, milestone, size, gpu,
                            body, checked.files())
    log("job.queued", job=job["id"], team=principal.name, kind=kind, milestone=milestone, size=size,
        bytes=len(body))
    service.hub.queue_changed()
    service.hub.wake_claim(gpu_needed=gpu)
    return JSONResponse(await with_place(service, job), status_code=201)


@router.get("")
async def list_jobs(request: Request, principal=Depends(team_or_instructor)):
    service = service_of(request)
    limit = int_param(request.query_params, "limit", 1, 1000, 50)
    owner = principal.name if principal.kind == "team" else request.query_params.get("team")
    found = await service.run(jobs.listing, service.db, owner, limit)
    return {"jobs": [public(j) for j in found]}


@router.get("/{job_id}")
async def show_job(request: Request, job=Depends(own_job)):
    return await with_place(service_of(request), job)


@router.get("/{job_id}/transcript")
async def show_transcript(request: Request, job=Depends(own_job)):
    service = service_of(request)
    return PlainTextResponse(await service.run(jobs.transcript, service.db, job["id"]))


@router.post("/{job_id}/cancel")
async def cancel_job(request: Request, job_id: str, principal=Depends(team_or_instructor)):
    job = await service_of(request).cancel(check_job_id(job_id), principal)
    if job is None:
        raise Refused(404, f"no job {job_id} here (jobs list shows yours)")
    return public(job)


@router.get("/{job_id}/events")
async def events(request: Request, job=Depends(own_job)):
    return EventSourceResponse(follow(service_of(request), job["id"], after_param(request)), ping=15, send_timeout=30)
