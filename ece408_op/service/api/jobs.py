"""A team's jobs: queue an upload, list them, show one, its transcript, follow it live (SSE),
download a development run's build folder, cancel it. A team reaches its own jobs only (another
team's id answers 404, as no job does); the instructor reaches every job."""
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.background import BackgroundTask
from sse_starlette import EventSourceResponse

from .. import buildstore, capacity, devices, jobs, limits
from .. import upload as uploads
from ..auth import team, team_or_instructor
from ..http import address, after_param, check_job_id, check_size, idempotency_key, int_param, kind_param
from ..jobs import public
from ..refused import Refused
from ..live import follow, with_place
from ..logs import log
from ...base.terms import DEFAULT_SIZE, JOB_KINDS
from ..grading_door import GPU_MILESTONES, MILESTONES
from ...base.names import printable
from ..checker import check_upload
from ..state import service_of
from ..uploadstore import declared
from .models import (EVENT, MILESTONE, TOKEN, EventStream, Gzip, Job, Jobs, binary_body, header, query, refusals,
                     text_answer)

ONE = dict(response_model=Job, response_model_exclude_unset=True, responses=refusals(400, 404, *TOKEN))
CANCEL = {**ONE, "responses": refusals(400, 404, 409, *TOKEN)}            # 409: the job has already ended
SUBMIT = {**binary_body(what="the upload: a tar.gz of the team's files (the client packs it)"), "parameters": [
    query("kind", {"type": "string", "enum": ["development", "ranked"], "default": "development"}, "the run's kind"),
    query("milestone", MILESTONE, "a ranked run's milestone (needed there)"),
    query("size", {"type": "integer", "minimum": 1, "maximum": 10000}, "a ranked run's size (default 100)"),
    query("gpu", {"type": "string", "maxLength": 200}, "the device kind it runs on (its name or its start)"),
    header("Idempotency-Key", {"type": "string", "pattern": "^[\\x21-\\x7e]{1,200}$"},
           "one per submission: a retry with the same key and bytes answers the job it made")],
    "responses": {"200": {"description": "a retry: the job this key made", "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/Job"}}}}}}
LISTING = {"parameters": [query("limit", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50}, "jobs"),
                          query("team", {"type": "string"}, "the instructor: one team's jobs")]}
EVENTS = {"parameters": [query("after", {"type": "integer", "minimum": -1}, "the chunk it resumes after"),
                         header("Last-Event-ID", {"type": "integer", "minimum": -1}, "as after")]}

router = APIRouter(prefix="/api/jobs")


async def own_job(request: Request, job_id: str, principal=Depends(team_or_instructor)):
    """The job of the path (a team: its own only), else 404."""
    service = service_of(request)
    owner = principal.name if principal.kind == "team" else None
    job = await service.run(jobs.get, service.db, check_job_id(job_id), owner)
    if job is None:
        raise Refused(404, f"no job {job_id} here (jobs list shows yours)")
    return job


@router.post("", status_code=201, response_model=Job, response_model_exclude_unset=True,
             responses=refusals(400, 408, 409, 413, 507, *TOKEN), openapi_extra=SUBMIT)
async def submit(request: Request, principal=Depends(team)):
    """Cheap before expensive: the token, the parameters, the idempotency key and the team's rules
    (deadline, waiting jobs, hourly limits) are decided from the request's headers before a byte
    of its body is read, and so is, for a ranked run or one asking for a device kind, whether a
    worker seen lately can take it (capacity.py), and whether the bytes of uploads in flight leave
    room for this one (uploadstore.InFlight: 503 otherwise); then the body is written to a file as
    it comes (one upload per team at a time, within ``upload_seconds``) and checked from it (a
    bounded number at once, limits.Uploads), queued within the upload quotas, and a
    development run's rai_build.yml asking for a GPU is checked against the workers likewise. A
    job queued although no worker can take it now carries the line why (``warning``)."""
    service = service_of(request)
    settings = service.settings
    params = request.query_params
    kind = params.get("kind", "development")
    if kind not in JOB_KINDS:
        raise Refused(400, f"kind is ranked or development, not {printable(kind, 20)}")
    milestone = size = None
    if kind == "ranked":
        milestone = params.get("milestone")
        if milestone not in MILESTONES:
            raise Refused(400, f"a ranked run names its milestone: {', '.join(MILESTONES)}")
        size = int_param(params, "size", 1, 10000, DEFAULT_SIZE)
    gpu_kind = asked = kind_param(params, "gpu")
    if gpu_kind is not None:
        if milestone is not None and milestone not in GPU_MILESTONES:
            raise Refused(400, f"gpu goes with a GPU milestone or a development run: {milestone} is measured on the "
                               "CPU, and ranked by the CPU's kind")
        gpu_kind = await service.run(devices.wanted_kind, service.db, gpu_kind,
                                     settings.slurm.kinds if settings.slurm is not None else ())
    key = idempotency_key(request)
    warning = None
    check_size(request, settings.max_upload, "upload")
    earlier = await service.refusals.admit(service, principal.name, kind, milestone, key,
                                           {"kind": kind, "milestone": milestone, "size": size, "gpu_kind": gpu_kind})
    store = service.upload_store
    if store is None:
        raise Refused(503, "this server keeps no uploads (serve gives it STATE_DIR/uploads)")
    if earlier is None and (kind == "ranked" or gpu_kind is not None):
        warning = await service.run(capacity.check, service.db, capacity.Need(
            milestone in GPU_MILESTONES, gpu_kind, asked, milestone), settings.slurm)
    async with service.uploads.upload(principal.name) as team_slot_back:
        room = service.in_flight.take(declared(request, settings.max_upload))   # before a byte of the body
        incoming = None
        try:
            async with service.uploads.slot("reading"):
                incoming, upload_bytes, sha256 = await store.receive(request, settings.max_upload,
                                                                     settings.upload_seconds)
            if earlier is not None:          # a retry, where its upload is the same bytes: the key is bound to them
                if sha256 != earlier.get("upload_sha256"):
                    raise Refused(409, f"this Idempotency-Key was sent with another upload (job {earlier['id']}); "
                                       "a new submission needs a key of its own")
                return JSONResponse(await with_place(service, earlier), status_code=200)
            async with service.uploads.slot("checking"):
                gpu, files, asks = await service.checker.run(check_upload, incoming, kind, milestone,
                                                             settings.max_upload)
            if asks is not None:             # a development run's rai_build.yml asking for GPUs: (its line, how many)
                warning = await service.run(capacity.check, service.db, capacity.Need(
                    True, gpu_kind, asked, gpu_line=asks[0], gpu_count=asks[1]), settings.slurm)
            team_slot_back()                 # received and checked: a retry while the database is slow is no second upload
            async with store.lock.shared():  # the store's sweep held off while the file is placed and committed
                job = await service.run(queue_upload, service, principal.name, kind, milestone, size, gpu, incoming,
                                        (upload_bytes, sha256), files, key, gpu_kind, warning)
        finally:
            service.in_flight.give(room)
            if incoming is not None:
                incoming.unlink(missing_ok=True)
    if job.get("repeated"):
        return JSONResponse(await with_place(service, job), status_code=200)
    if warning:
        log("job.unserved", job=job["id"], team=principal.name, why=warning)
    log("job.queued", job=job["id"], team=principal.name, kind=kind, milestone=milestone, size=size,
        bytes=upload_bytes)
    service.hub.queue_changed()
    service.hub.wake_claim(gpu_needed=gpu, kind=gpu_kind)
    return JSONResponse({**await with_place(service, job), **({"warning": warning} if warning else {})},
                        status_code=201)


def queue_upload(service, team, kind, milestone, size, gpu, incoming, upload, files, key, gpu_kind, warning):
    """``jobs.submit`` of the checked upload file ``incoming`` ((bytes, SHA-256) ``upload``): the
    quotas checked and the file put in place inside its transaction (the caller holds the store's
    lock)."""
    store = service.upload_store
    return jobs.submit(service.db, service.settings.rules, team, kind, milestone, size, gpu, upload, files, key,
                       gpu_kind=gpu_kind, notes=[f"* Warning: {warning}"] if warning else (),
                       quota=store.check_quota, place=lambda: store.place(incoming, upload[1]))


@router.get("", response_model=Jobs, response_model_exclude_unset=True, responses=refusals(400, *TOKEN),
            openapi_extra=LISTING)
async def list_jobs(request: Request, principal=Depends(team_or_instructor)):
    service = service_of(request)
    limit = int_param(request.query_params, "limit", 1, 1000, 50)
    owner = principal.name if principal.kind == "team" else request.query_params.get("team")
    found = await service.run(jobs.listing, service.db, owner, limit)
    return {"jobs": [jobs.summary(j) for j in found]}


@router.get("/{job_id}", **ONE)
async def show_job(request: Request, job=Depends(own_job)):
    return await with_place(service_of(request), job)


@router.get("/{job_id}/transcript", response_class=PlainTextResponse, responses={
    **refusals(404, *TOKEN), **text_answer(description="the transcript so far")})
async def show_transcript(request: Request, job=Depends(own_job)):
    service = service_of(request)
    return PlainTextResponse(await service.run(jobs.transcript, service.db, job["id"]))


@router.get("/{job_id}/build", response_class=Gzip, responses={**refusals(400, 404, 410, *TOKEN), **text_answer(
    "application/gzip", "the build folder, a tar.gz")})
async def download_build(request: Request, job=Depends(own_job), principal=Depends(team_or_instructor)):
    """The development run's build folder as its worker sent it (a tar.gz), while it is kept."""
    return await buildstore.response(service_of(request), job, principal, address(request))


@router.post("/{job_id}/cancel", **CANCEL)
async def cancel_job(request: Request, job_id: str, principal=Depends(team_or_instructor)):
    job = await service_of(request).cancel(check_job_id(job_id), principal)
    if job is None:
        raise Refused(404, f"no job {job_id} here (jobs list shows yours)")
    return public(job)


@router.get("/{job_id}/events", response_class=EventStream, responses={**refusals(400, 404, *TOKEN), **text_answer(
    "text/event-stream", "server-sent events: queued, line, notice, progress, end, gone", EVENT)}, openapi_extra=EVENTS)
async def events(request: Request, job_id: str, principal=Depends(team_or_instructor)):
    """The job's transcript, live. Cheap before expensive: the stream caps (in memory) before the
    job is looked up, so that a team past its cap costs the database nothing."""
    service = service_of(request)
    after = after_param(request)
    ticket = service.streams.open(principal, address(request))
    try:
        job = await own_job(request, job_id, principal)
    except BaseException:
        service.streams.close(ticket)
        raise
    return EventSourceResponse(limits.stream(service.streams, ticket, follow(service, job["id"], after)), ping=15,
                               send_timeout=30, background=BackgroundTask(service.streams.close, ticket))
