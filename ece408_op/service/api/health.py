"""Liveness, readiness, and who a token is: what a supervisor or a client asks first."""
from fastapi import APIRouter, Depends, Request

from ..auth import any_token
from ..http import DOWN_RETRY, error
from ..state import service_of
from .models import TOKEN, Health, Ready, WhoAmI, refusals

router = APIRouter()


@router.get("/health", response_model=Health)
async def health(request: Request):
    return {"status": "ok", "draining": service_of(request).draining}


@router.get("/ready", response_model=Ready, responses=refusals(503))
async def ready(request: Request):
    service = service_of(request)
    await service.run(service.db.ping)
    if service.draining:
        return error(503, "the service is shutting down", DOWN_RETRY)
    return {"status": "ready"}


@router.get("/api/whoami", response_model=WhoAmI, responses=refusals(*TOKEN))
async def whoami(principal=Depends(any_token)):
    return {"kind": principal.kind, "name": principal.name}
