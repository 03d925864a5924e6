"""Logging in and out: the login form takes a token once (checked as the API checks one, the
same failure limit) and opens a session (sessions.py); logging out ends it. The form carries its
own CSRF pair (a cookie on /login and a field), as there is no session yet."""
import secrets

from fastapi import Request
from starlette.responses import RedirectResponse

from .. import sessions
from ..auth import check_token
from ..http import address
from ..logs import log
from ..state import service_of
from ...base.terms import parse_token
from .errors import page_router
from .site import read_form, session, set_cookie, site_of

LOGIN_COOKIE = "ece408_login"        # the login form's own CSRF pair (no session yet)

router = page_router()


def home(principal):
    return "/team" if principal.kind == "team" else "/admin"


def login_answer(request, status=200, message=None):
    pair = secrets.token_urlsafe(24)
    response = site_of(request).render("login.html", status=status, login=pair, message=message)
    set_cookie(request, response, LOGIN_COOKIE, pair, 3600, path="/login")
    return response


@router.get("/login")
async def login_form(request: Request):
    viewer = await session(request)
    if viewer is not None:
        return RedirectResponse(home(viewer.principal), status_code=303)
    return login_answer(request)


@router.post("/login")
async def login(request: Request):
    service = service_of(request)
    where = address(request)
    fields = await read_form(request)
    token = (fields.get("token") or "").strip()
    pair = request.cookies.get(LOGIN_COOKIE, "")
    if not pair or not sessions.same_text(pair, fields.get("login", "")):
        return login_answer(request, 403, "the login form is stale or came from another site; "
                                          "try again on this one")
    principal, refusal = await check_token(service, token, where, request.url.path)
    if refusal:
        return login_answer(request, refusal.status, str(refusal))
    if principal.kind == "worker":
        return login_answer(request, 403, "a worker's token does not open the pages: log in with a team's "
                                          "token or the instructor's")
    value = await service.run(sessions.open_session, service.db, parse_token(token)[0], principal)
    log("page.login", kind=principal.kind, name=principal.name, address=where)
    response = RedirectResponse(home(principal), status_code=303)
    set_cookie(request, response, sessions.COOKIE, value, sessions.LIFETIME)
    response.delete_cookie(LOGIN_COOKIE, path="/login")
    return response


@router.post("/logout")
async def logout(request: Request):
    viewer = await session(request)
    if viewer is not None:
        service = service_of(request)
        await read_form(request, viewer.value)
        await service.run(sessions.close, service.db, viewer.value)
        log("page.logout", kind=viewer.principal.kind, name=viewer.principal.name)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(sessions.COOKIE, path="/")
    return response
