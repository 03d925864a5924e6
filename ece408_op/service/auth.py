"""Who is asking: a token in ``Authorization: Bearer``, checked once per request by a FastAPI
dependency that names the kinds of token a route takes (``Depends(team_or_instructor)``,
``Depends(instructor)``, ``Depends(worker)``...), and answers with the ``Principal``.

Failed checks count per client address (tokens.FailureLimiter): past the limit every request
from that address is refused (429) until its window has passed. The login page checks its token
through the same ``check_token``."""
import math

from fastapi import Request

from .jobs import Refused, duration
from .logs import log
from .http import address
from .state import service_of

NEEDS = {"instructor": "the instructor's token", "worker": "a worker's token"}


def limited(service, where, token=None):
    """The refusal's line while ``where`` has failed too often, else None (and its wait). Many
    students share one address (a campus's NAT): while it is limited, a token verified lately still
    passes, and one token a second is still checked (``FailureLimiter.slow_lane``), so that one
    student guessing cannot lock the others out, while guessing stays at one try a second."""
    wait = service.failures.wait(where)
    if not wait:
        return None, 0
    if token and (service.tokens.cached(token) or service.failures.slow_lane(where)):
        return None, 0
    return f"too many failed token checks from this address; try again in {duration(wait)}", wait


async def check_token(service, token, where, path):
    """The Principal of ``token``, or None (counted as a failure of ``where`` and logged)."""
    principal = service.tokens.cached(token) if token else None
    if principal is None and token:
        principal = await service.run(service.tokens.verify, token)
    if not principal:
        service.failures.fail(where)
        log("auth.failed", level="warning", address=where, path=path)
        return None
    return principal


async def authenticate(request, kinds):
    """The Principal of the request's token, of one of ``kinds``; Refused (401, 403, 429) else."""
    service = service_of(request)
    where = address(request)
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    refusal, wait = limited(service, where, token.strip() if scheme.lower() == "bearer" else None)
    if refusal:
        raise Refused(429, refusal, retry_after=math.ceil(wait))
    if scheme.lower() != "bearer" or not token.strip():
        raise Refused(401, "this needs a token: python -m ece408_op login (or $ECE408_TOKEN)")
    principal = await check_token(service, token.strip(), where, request.url.path)
    if principal is None:
        raise Refused(401, "the token was not accepted (mistyped, revoked or rotated); ask the course staff "
                           "for a new one")
    if principal.kind not in kinds:
        raise Refused(403, f"this needs {' or '.join(NEEDS.get(k, 'a team token') for k in kinds)}")
    return principal


def token_of(*kinds):
    """The dependency of a route that takes a token of ``kinds``: its Principal."""
    async def principal(request: Request):
        return await authenticate(request, kinds)
    principal.__name__ = "token_of_" + "_or_".join(kinds)
    return principal


team = token_of("team")
team_or_instructor = token_of("team", "instructor")
instructor = token_of("instructor")
worker = token_of("worker")
any_token = token_of("team", "worker", "instructor")
