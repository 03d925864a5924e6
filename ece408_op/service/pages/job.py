"""A job's page (``/jobs/{id}``): its place in the queue while it waits, while it runs its elapsed
time (counted by live.js from the start the server gives) and its worker's step, its transcript
live as its worker sends it (``/jobs/{id}/events``: lines as escaped text, the place, the step, the
verdict, and at the end the end time and the build folder's link), the verdict at its end; the
transcript as plain text; a development run's build folder while it is kept (``/jobs/{id}/build``,
the tar.gz ``jobs download`` fetches); cancelling it. A team opens its own jobs only (another
team's answers 404, as the API does)."""
import json

from fastapi import Depends, Request
from sse_starlette import EventSourceResponse
from starlette.background import BackgroundTask
from starlette.responses import PlainTextResponse, RedirectResponse

from .. import buildstore, clock, jobs, limits, overview, standings
from ..filters import as_text, place_text, utc
from ..http import JOB_ID, address, after_param
from ..jobs import ENDED, QUEUED, RUNNING
from ..refused import Refused
from ..live import follow, with_place
from ...base.names import printable
from ..state import service_of
from .errors import page_router
from .site import files_of, member, member_stream, read_form, site_of

router = page_router()


async def own_job(request, principal, job_id):
    """The job (a team: its own only), else 404 as the API answers."""
    if not JOB_ID.match(job_id):
        raise Refused(404, f"no job {printable(job_id, 40)} here")
    service = service_of(request)
    job = await service.run(jobs.get, service.db, job_id, principal.name if principal.kind == "team" else None)
    if job is None:
        raise Refused(404, f"no job {job_id} here")
    return job


async def record_of(service, job):
    if not job.get("record_id") or job["state"] not in ENDED:
        return None
    found = await service.run(standings.light_records, service.db, ids=[job["record_id"]])
    return found[0] if found else None


async def cancel(request, principal, job_id):
    """Cancel ``job_id`` from a page's form; 404 where there is no such job."""
    if await service_of(request).cancel(job_id, principal, via="page") is None:
        raise Refused(404, f"no job {job_id} here")


@router.get("/jobs/{job_id}")
async def job_page(request: Request, job_id: str, viewer=Depends(member)):
    service = service_of(request)
    job = await own_job(request, viewer.principal, job_id)
    view = await with_place(service, job)
    chunks = await service.run(overview.chunks, service.db, job["id"])
    record = await record_of(service, job)
    kept = await service.run(buildstore.lookup, service.db, job["id"]) if job["kind"] == "development" else None
    return site_of(request).render(
        "job.html", viewer, job=job, place=place_text(view) if job["state"] == QUEUED else None,
        transcript=as_text("".join(t for _, t in chunks)), after=chunks[-1][0] if chunks else -1, record=record,
        layers=standings.layers_of(record.models) if record else [], ended=job["state"] in ENDED,
        files=files_of(job["files"]), build=build_view(kept, service), now=f"{clock.now():.3f}",
        step=service.hub.steps.get(job["id"]) if job["state"] == RUNNING else None)


def build_view(row, service):
    """What the page says of the job's build folder: None (none kept), else its counts, size and
    expiry, and whether it is still there (where not: when it went, after how long, and why)."""
    if row is None:
        return None
    gone = row["deleted_at"] is not None
    return {**buildstore.shown(row), "gone": gone or row["expires_at"] < clock.now(),
            "mib": f"{row['data_bytes'] / 2**20:.1f}", "why": row["deleted_why"], "deleted_at": row["deleted_at"],
            "after": buildstore.deleted_after(row) if gone else None, "total": buildstore.total_text(service)}


@router.get("/jobs/{job_id}/build")
async def job_build(request: Request, job_id: str, viewer=Depends(member)):
    """The build folder's tar.gz, as ``jobs download`` fetches it (the error page where there is none)."""
    job = await own_job(request, viewer.principal, job_id)
    return await buildstore.response(service_of(request), job, viewer.principal, address(request))


@router.get("/jobs/{job_id}/events")
async def job_events(request: Request, job_id: str, viewer=Depends(member_stream)):
    service, site = service_of(request), site_of(request)
    after = after_param(request)
    ticket = service.streams.open(viewer.principal, address(request), viewer.value)   # the caps first
    try:
        job = await own_job(request, viewer.principal, job_id)
    except BaseException:
        service.streams.close(ticket)
        raise

    async def stream():
        waiting = False
        async for event in follow(service, job["id"], after):
            kind = event["event"]
            if kind == "line":
                if waiting:
                    yield {"event": "place", "data": json.dumps("")}
                    waiting = False
                yield {"event": "line", "id": event["id"], "data": json.dumps(as_text(json.loads(event["data"])))}
            elif kind == "queued":
                waiting = True
                yield {"event": "place", "data": json.dumps(place_text(json.loads(event["data"])))}
            elif kind == "notice":
                yield {"event": "notice", "data": json.dumps(as_text(json.loads(event["data"])))}
            elif kind == "progress":
                if waiting:
                    yield {"event": "place", "data": json.dumps("")}
                    waiting = False
                progress = json.loads(event["data"])
                yield {"event": "progress", "data": json.dumps({**progress, "started": utc(progress["started_at"]),
                                                                "step": as_text(progress["step"] or "")})}
            elif kind == "end":
                ended = await service.run(jobs.get, service.db, job["id"])
                record = await record_of(service, ended)
                html = site.fragment("verdict.html", job=ended, record=record,
                                     layers=standings.layers_of(record.models) if record else [])
                kept = await service.run(buildstore.lookup, service.db, job["id"]) \
                    if ended["kind"] == "development" else None
                yield {"event": "place", "data": json.dumps("")}
                yield {"event": "ended", "data": json.dumps({
                    "ended": utc(ended["finished_at"]) if ended["finished_at"] else "",
                    "build": site.fragment("build.html", job=ended, build=build_view(kept, service))})}
                yield {"event": "verdict", "data": json.dumps(html)}
                yield {"event": "end", "data": json.dumps(ended["state"])}
                return
    return EventSourceResponse(limits.stream(service.streams, ticket, stream()), ping=15, send_timeout=30,
                               headers={"Cache-Control": "no-store"},
                               background=BackgroundTask(service.streams.close, ticket))


@router.get("/jobs/{job_id}/transcript")
async def job_transcript(request: Request, job_id: str, viewer=Depends(member_stream)):
    service = service_of(request)
    job = await own_job(request, viewer.principal, job_id)
    text = await service.run(jobs.transcript, service.db, job["id"])
    return PlainTextResponse(text, headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store",
                                            "Content-Security-Policy": "default-src 'none'"})


@router.post("/jobs/{job_id}/cancel")
async def job_cancel(request: Request, job_id: str, viewer=Depends(member)):
    job = await own_job(request, viewer.principal, job_id)
    await read_form(request, viewer.value)
    await cancel(request, viewer.principal, job["id"])
    return RedirectResponse(f"/jobs/{job['id']}", status_code=303)
