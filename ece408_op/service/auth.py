"""Who is asking: a token in ``Authorization: Bearer``, checked once per request by a FastAPI
dependency that names the kinds of token a route takes (``Depends(team_or_instructor)``,
``Depends(instructor)``, ``Depends(worker)``...), and answers with the ``Principal``.

Failed checks count per client address (IPv6 per /64) and for the whole service
(tokens.FailureLimiter): past either limit a wrong token is refused (429) until its window has
passed; a valid one always passes. The login
page checks its token through the same ``check_token``."""
import math

from fastapi import Request

from .jobs import duration
from .refused import Refused
from .logs import log
from .http import address, bearer_token
from .state import service_of

NEEDS = {"instructor": "the instructor's token", "worker": "a worker's token"}


async def check_token(service, token, where, path):
    """(the Principal of ``token``, None) where it is valid: from any address, limited or not, so
    that one student guessing behind a lab's address locks no classmate out; else (None, the
    refusal: 401, or 429 with its wait where ``where`` has failed too often). A failure counts
    against ``where`` while it is not limited; the check is in memory (``Tokens.lookup``), so a
    burst of guesses is decided one by one, the limit's first then refusals."""
    if service.tokens.stale():
        await service.run(service.tokens.refresh)
    principal = service.tokens.lookup(token) if token else None
    if principal:
        return principal, None
    wait, whose = service.failures.wait(where)
    if wait:
        many = "from this address" if whose == "address" else "on this service from many addresses at once"
        return None, Refused(429, f"too many failed token checks {many}; try again in {duration(wait)}",
                             retry_after=math.ceil(wait))
    service.failures.fail(where)
    log("auth.failed", level="warning", address=where, path=path)
    return None, Refused(401, "the token was not accepted (mistyped, revoked or rotated); ask the course staff "
                              "for a new one")


async def authenticate(request, kinds):
    """The Principal of the request's token, of one of ``kinds``; Refused (401, 403, 429) else."""
    service = service_of(request)
    token = bearer_token(request.headers.get("authorization"))
    if token is None:
        raise Refused(401, "this needs a token: python -m ece408_op login (or $ECE408_TOKEN)")
    principal, refusal = await check_token(service, token, address(request), request.url.path)
    if refusal:
        raise refusal
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
