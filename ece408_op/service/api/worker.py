"""The workers' routes: claim a job (waiting for one), fetch its upload, post its transcript's
chunks (with the run's step: ``progress.step_of``) and heartbeats under the job's lease
(``X-Lease``), give it back, send a development run's build folder (``buildstore.receive``),
finish it with its record. Every route of this router takes a worker's token only (the router's
dependency)."""
import asyncio
import json
import re
import time

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, Response

from .. import buildstore, jobs
from ..auth import worker
from ..http import check_job_id, encodable, read_json
from ..jobs import Lost
from ..refused import Refused
from ..logs import log
from ..progress import step_of
from ..grading_door import Record, kind_of
from ...base.names import printable
from ..state import service_of
from . import models as m
from .models import LEASE, TOKEN, json_body, refusals

LEASED = {"parameters": [LEASE]}                 # a route under the job's lease (409 where it is not held)

STATUSES = ("ok", "failed", "timeout", "killed", "error")

router = APIRouter(prefix="/api/worker", dependencies=[Depends(worker)],
                   responses=refusals(400, 404, 408, 409, 413, *TOKEN))


def end_lines(job, record):
    """The service's closing lines of a job that ends without a record (a ranked run's are its
    record's summary, written by ``jobs.finish``)."""
    if record is None and job["kind"] == "development":
        return ["* Development run: no record is stored (ranked runs: --submit m2|m3|final)"]
    return []


def lease_of(request):
    lease = request.headers.get("x-lease", "")
    if not re.match(r"^[0-9a-f]{32}$", lease):
        raise Lost("no lease")
    return lease


@router.post("/claim", response_model=m.Claimed, responses={204: {"description": "no job within wait seconds"}},
             openapi_extra=json_body(m.ClaimBody, required=False))
async def claim(request: Request, principal=Depends(worker)):
    service = service_of(request)
    settings = service.settings
    data = await read_json(request)
    slot = printable(str(data.get("slot", "0")), 40)
    gpu = bool(data.get("gpu"))
    device = printable(str(data.get("device") or "unknown device"), 100)
    try:
        wait = float(data.get("wait") or 0)
    except (TypeError, ValueError, OverflowError):
        raise Refused(400, "wait is a number of seconds") from None
    wait = max(0.0, min(wait, settings.claim_wait)) if wait == wait else 0.0          # NaN: no wait
    name = f"{principal.name}/{slot}"
    deadline = time.monotonic() + wait
    while True:
        if service.draining:
            return Response(status_code=204)
        job = await service.run(jobs.claim, service.db, settings.rules, name, gpu, device)
        if job is not None:
            log("job.claimed", job=job["id"], team=job["team"], worker=name, attempt=job["attempts"])
            service.hub.job_changed(job["id"])
            service.hub.queue_changed()
            service.hub.wake_claim(gpu_needed=False)      # more may be waiting: the next claim looks
            return {"job": {k: job[k] for k in ("id", "team", "kind", "milestone", "size", "time_limit",
                                                "attempts", "next_seq", "upload_sha256", "record_id")},
                    "lease": job["lease"], "lease_seconds": settings.rules.lease, "worker": name}
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return Response(status_code=204)
        future = asyncio.get_running_loop().create_future()
        waiting = (future, gpu, kind_of(device))
        service.hub.claimers.append(waiting)
        try:
            await asyncio.wait_for(future, timeout=min(remaining, 10.0))
        except asyncio.TimeoutError:
            pass
        finally:
            if waiting in service.hub.claimers:
                service.hub.claimers.remove(waiting)


@router.get("/jobs/{job_id}/upload", response_class=m.Gzip, responses={
                **m.refusals(400, 404, 409, 410, *m.TOKEN), **m.text_answer("application/gzip", "the upload")},
            openapi_extra=LEASED)
async def job_upload(request: Request, job_id: str):
    service = service_of(request)
    data, sha256 = await service.run(jobs.upload, service.db, check_job_id(job_id), lease_of(request))
    if data is not None:                       # a BLOB of a database from before uploads were files
        return Response(data, media_type="application/gzip")
    store = service.upload_store
    path = store.path(sha256) if store is not None else None
    if path is None or not path.is_file():
        raise Refused(410, f"the upload of job {job_id} is no longer kept on this server")
    return FileResponse(path, media_type="application/gzip")


@router.post("/jobs/{job_id}/chunks", response_model=m.Cancel, openapi_extra={**LEASED, **json_body(m.ChunksBody)})
async def job_chunks(request: Request, job_id: str):
    service = service_of(request)
    data = await read_json(request)
    chunks = data.get("chunks")
    if not isinstance(chunks, list) or len(chunks) > jobs.MAX_CHUNKS or not all(
            isinstance(c, list) and len(c) == 2 and type(c[0]) is int and 0 <= c[0] < jobs.MAX_SEQ
            and isinstance(c[1], str) and len(c[1]) <= jobs.MAX_CHUNK and "\0" not in c[1] and encodable(c[1])
            for c in chunks):
        raise Refused(400, f"chunks is a list of at most {jobs.MAX_CHUNKS} [seq, text] pairs (seq from 0 to "
                           f"{jobs.MAX_SEQ - 1}, text without NUL or lone surrogates)")
    chunks = [(c[0], c[1]) for c in chunks]
    step = step_of(data)
    cancel = await service.run(jobs.add_chunks, service.db, check_job_id(job_id), lease_of(request), chunks)
    if chunks:
        service.hub.chunks_posted(job_id, chunks)
    service.hub.step_posted(job_id, step)
    return {"cancel": cancel}


@router.post("/jobs/{job_id}/heartbeat", response_model=m.Cancel, openapi_extra=LEASED)
async def job_heartbeat(request: Request, job_id: str):
    service = service_of(request)
    return {"cancel": await service.run(jobs.heartbeat, service.db, check_job_id(job_id), lease_of(request))}


@router.post("/jobs/{job_id}/release", response_model=m.Done,
             openapi_extra={**LEASED, **json_body(m.ReleaseBody, required=False)})
async def job_release(request: Request, job_id: str, principal=Depends(worker)):
    service = service_of(request)
    why = printable(str((await read_json(request)).get("why") or "it was stopped"), 200)
    await service.run(jobs.release, service.db, check_job_id(job_id), lease_of(request), why)
    log("job.released", job=job_id, worker=principal.name, why=why)
    service.hub.job_changed(job_id)
    service.hub.queue_changed()
    service.hub.wake_claim(gpu_needed=False)
    return {"ok": True}


@router.post("/jobs/{job_id}/build", response_model=m.BuildKept, responses=refusals(507),
             openapi_extra={**LEASED, **m.binary_body(what="the build folder, a tar.gz")})
async def job_build(request: Request, job_id: str):
    """The development run's build folder (the tar.gz body), under the job's lease, before its end."""
    return await buildstore.receive(service_of(request), request, check_job_id(job_id), lease_of(request))


@router.post("/jobs/{job_id}/finish", response_model=m.Finished, openapi_extra={**LEASED, **json_body(m.FinishBody)})
async def job_finish(request: Request, job_id: str):
    service = service_of(request)
    lease = lease_of(request)
    data = await read_json(request)
    status = data.get("status")
    if status not in STATUSES:
        raise Refused(400, f"status is one of {', '.join(STATUSES)}")
    exit_code = data.get("exit_code")
    if exit_code is not None and not of_type(exit_code, (WHOLE,)):
        raise Refused(400, "exit_code is a whole number from -2^31 to 2^31 - 1, or null")
    reason = data.get("reason")
    reason = None if reason is None else printable(str(reason), 500)
    job = await service.run(jobs.get, service.db, check_job_id(job_id))
    if job is None:
        raise Lost(job_id)
    try:
        record = check_record(job, data.get("record"))
    except Refused:
        if job["lease"] != lease:                  # not this worker's job (any more): that is the answer
            raise Lost(job_id) from None
        raise
    job = await service.run(jobs.finish, service.db, job_id, lease, status, exit_code, reason, record,
                            end_lines(job, record))
    if record is not None and job["state"] == jobs.DONE:
        service.hub.records_version += 1
    log("job.ended", job=job_id, team=job["team"], state=job["state"], status=job["status"], valid=job["valid"])
    service.hub.job_changed(job_id)
    service.hub.queue_changed()
    service.hub.wake_claim(gpu_needed=True)
    service.hub.wake_claim(gpu_needed=False)
    return {"ok": True, "state": job["state"]}


TEXT, NUMBER, WHOLE, FLAG, LIST, OBJECT, NONE = "text", "number", "whole", "flag", "list", "object", "none"
RECORD_FIELDS = {"id": (TEXT,), "created_at": (TEXT,), "team": (TEXT,), "milestone": (TEXT,), "size": (WHOLE,),
                 "status": (TEXT,), "exit_code": (WHOLE, NONE), "op_time": (NUMBER, NONE), "correct": (FLAG,),
                 "models": (LIST,), "git_commit": (TEXT, NONE), "content_hash": (TEXT, NONE),
                 "device": (TEXT, NONE), "engine": (TEXT, NONE), "image": (TEXT, NONE), "host": (TEXT, NONE),
                 "duration_s": (NUMBER, NONE), "transcript": (TEXT,), "team_files": (LIST,), "isolated": (FLAG,),
                 "options": (OBJECT, NONE), "options_key": (TEXT, NONE), "reason": (TEXT, NONE)}


def of_type(value, kinds):
    """Whether ``value`` (from JSON) is one of ``kinds`` (RECORD_FIELDS' names; a flag is no number)."""
    flag = isinstance(value, bool)
    return any({TEXT: isinstance(value, str), FLAG: flag, LIST: isinstance(value, list),
                OBJECT: isinstance(value, dict), NONE: value is None,
                WHOLE: isinstance(value, int) and not flag and -2 ** 31 <= value < 2 ** 31,
                NUMBER: isinstance(value, (int, float)) and not flag}[k] for k in kinds)


def check_record(job, data):
    if data is None:
        if job["kind"] == "ranked":
            raise Refused(400, "a ranked job ends with its record")
        return None
    if job["kind"] != "ranked" or not isinstance(data, dict):
        raise Refused(400, "only a ranked job has a record (a JSON object)")
    try:
        text = json.dumps(data, allow_nan=False, ensure_ascii=False)
    except ValueError:
        raise Refused(400, "the record holds a number that is not finite (NaN or infinity)") from None
    if "\\u0000" in text or not encodable(text):
        raise Refused(400, "the record holds a NUL character or a lone surrogate, which no text column stores")
    wrong = [name for name, kinds in RECORD_FIELDS.items() if name in data and not of_type(data[name], kinds)]
    if wrong:
        raise Refused(400, f"the record's {', '.join(wrong[:5])} {'is' if len(wrong) == 1 else 'are'} not of "
                           "their type")
    try:
        record = Record(**data)
    except TypeError as exc:
        raise Refused(400, f"the record does not fit: {exc}") from None
    if (record.id, record.team, record.milestone, record.size) != \
            (job["record_id"], job["team"], job["milestone"], job["size"]):   # the name as stored
        raise Refused(400, "the record is not this job's (id, team, milestone and size must match)")
    if not isinstance(record.transcript, str) or not isinstance(record.models, list) or \
            record.status not in STATUSES:
        raise Refused(400, "the record's transcript, models or status are not of their type")
    return record
