"""The HTTP application (FastAPI): the API's routers (api/: jobs, ranking, instructor, worker)
and the class's pages (pages/), assembled on one application with what they share.

``make_app(service)`` puts the Service (state.py) on ``app.state.service``, starts the live hub,
the lease reaper and the build folders' reaper with the application (``lifespan``) and maps the
service's exceptions to its one-line JSON errors: a refusal (refused.Refused) to its status, the database away to 503 with
``Retry-After``, a lease no longer held to 409, a bad upload to 400. ``/openapi.json`` serves the API's schema
(openapi.py, the models in api/models.py). Database work runs in
threads (``anyio.to_thread``), each transaction on a connection borrowed from a bounded pool
(db.py)."""
import asyncio
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.requests import ClientDisconnect

from . import buildstore, jobs, uploadstore
from . import pages
from . import upload as uploads
from .api import ROUTERS
from .db import Unavailable
from .http import DOWN_RETRY, AccessLog, EarlyRefusals, NoNul, ResponseHeaders, error
from .jobs import QUEUED, Lost
from .refused import Refused
from .live import Hub
from .logs import flush_repeats, log
from .openapi import serve_schema


async def reaper(service):
    """Every ``reap_every`` seconds: jobs past their lease or time limit taken back or ended."""
    while True:
        await asyncio.sleep(service.settings.reap_every)
        try:
            changed = await service.run(jobs.reap, service.db, service.settings.rules)
        except Unavailable as exc:
            service.down(exc)
            continue
        except Exception as exc:                       # noqa: BLE001  the reaper must go on
            log("reaper.error", level="error", reason=f"{type(exc).__name__}: {exc}")
            continue
        for job_id, state in changed:
            log("job.taken_back" if state == QUEUED else "job.ended", job=job_id, state=state)
            service.hub.job_changed(job_id)
            service.hub.wake_claim(gpu_needed=False)
        if changed:
            service.hub.queue_changed()
        service.hub.prune()
        flush_repeats()
        if service.tokens.stale():                         # another server process's token changes
            try:
                await service.run(service.tokens.refresh)
            except Unavailable as exc:
                service.down(exc)


def make_app(service):
    @asynccontextmanager
    async def lifespan(app):
        service.started(Hub())
        try:
            await service.run(jobs.restarted, service.db, service.settings.local_workers)
        except Unavailable as exc:
            service.down(exc)
        service.tasks.append(asyncio.ensure_future(reaper(service)))
        service.tasks.append(asyncio.ensure_future(buildstore.reaper(service)))
        service.tasks.append(asyncio.ensure_future(uploadstore.reaper(service)))
        log("server.ready", db=service.db.shown)
        try:
            yield
        finally:
            for task in service.tasks:
                task.cancel()
            service.checker.close()
            service.db.close_all()

    app = FastAPI(title="ece408_op submission service", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url="/openapi.json")           # openapi.py: the API's schema, no docs pages
    app.state.service = service
    app.add_middleware(NoNul)
    app.add_middleware(EarlyRefusals)
    app.add_middleware(AccessLog)
    app.add_middleware(ResponseHeaders)              # the outermost: on every answer, refusals too

    @app.exception_handler(Refused)
    async def refused(request, exc):
        return error(exc.status, str(exc), exc.retry_after, close=getattr(exc, "close", False))

    @app.exception_handler(Unavailable)
    async def unavailable(request, exc):
        service.down(exc)
        return error(503, f"the service's database cannot be reached right now; try again in {DOWN_RETRY} s",
                     DOWN_RETRY)

    @app.exception_handler(Lost)
    async def lost(request, exc):
        return error(409, "this worker no longer holds the job (taken back, cancelled or ended)")

    @app.exception_handler(ClientDisconnect)
    async def went_away(request, exc):                  # its body ended by the client (or closed for room):
        return error(400, "the client went away before its request's body ended")   # nobody reads this

    @app.exception_handler(RequestValidationError)
    async def malformed(request, exc):                  # no route lets FastAPI check its input; were one to:
        first = (exc.errors() or [{}])[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        return error(400, f"{where or 'the request'}: {first.get('msg', 'malformed')}")

    @app.exception_handler(uploads.UploadError)
    async def bad_upload(request, exc):
        return error(400, str(exc))

    for router in ROUTERS:
        app.include_router(router)
    pages.add_pages(app)                                  # the class's pages
    serve_schema(app)
    return app
