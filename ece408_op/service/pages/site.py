"""What every page shares: the templates (Jinja2, autoescaped, compiled at start) and static
files, the security headers, who is looking (a session, as a FastAPI dependency), forms with
their CSRF field, the checks of a board's parameters and of a file list."""
import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlencode

import jinja2
from fastapi import Request
from starlette.responses import HTMLResponse

from .. import sessions
from ..filters import ago, as_text, secs, utc
from ..http import read_body
from ..refused import Refused
from ..grading_door import MILESTONES
from ...base.names import printable, shown
from ..state import service_of
from ..tokens import Principal

HERE = Path(__file__).resolve().parent.parent          # service/: its templates/ and static/
MAX_FORM = 64 << 10                  # bytes of a form's body
FORM_SECONDS = 20.0                   # a form's body arrives within this, or 408
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin",
           "X-Frame-Options": "DENY", "Cache-Control": "no-store"}
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".svg": "image/svg+xml"}


class LoginNeeded(Exception):
    """No session (or it ended): the page sends the browser to the login form."""


@dataclass(frozen=True)
class Viewer:
    """Who looks at a page: the session's Principal and its cookie's value (the forms' CSRF)."""
    principal: Principal
    value: str


def load_static():
    """{name: (bytes, media type, version)} of static/."""
    out = {}
    for path in sorted((HERE / "static").iterdir()):
        if path.suffix in STATIC_TYPES:
            data = path.read_bytes()
            out[path.name] = (data, STATIC_TYPES[path.suffix], hashlib.sha256(data).hexdigest()[:10])
    return out


class Site:
    """The pages' own state: templates, static files, the team plots drawn so far."""

    PLOTS_KEPT = 512

    def __init__(self):
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True,
                                      undefined=jinja2.StrictUndefined, auto_reload=False, trim_blocks=True,
                                      lstrip_blocks=True)
        self.env.filters.update(utc=utc, secs=secs, ago=ago, text=as_text, shown=shown)
        self.static = load_static()
        self.env.globals.update(static=self.static_url, MILESTONES=MILESTONES, urlencode=urlencode)
        self.plots = OrderedDict()              # (team, milestone, size, viewer's kind) -> (standing's serial, SVG)
        for name in self.env.list_templates():  # compiled now, not by the first request
            self.env.get_template(name)

    def static_url(self, name):
        return f"/static/{name}?v={self.static[name][2]}"

    def render(self, name, viewer=None, status=200, headers=None, **context):
        html = self.env.get_template(name).render(me=viewer.principal if viewer else None,
                                                  csrf=sessions.csrf(viewer.value) if viewer else "", **context)
        return HTMLResponse(html, status_code=status, headers={**HEADERS, **(headers or {})})

    def fragment(self, name, **context):
        return self.env.get_template(name).render(**context)

    def keep_plot(self, key, serial, svg):
        self.plots[key] = (serial, svg)
        while len(self.plots) > self.PLOTS_KEPT:
            self.plots.popitem(last=False)


def site_of(request):
    return request.app.state.site


# ---------------------------------------------------------------------------- who is looking

async def session(request):
    """The Viewer of the request's session cookie, or None; kept on the request for the error
    page's header (errors.py)."""
    value = request.cookies.get(sessions.COOKIE)
    if not value:
        return None
    service = service_of(request)
    principal = await service.run(sessions.find, service.db, value)
    if not principal:
        return None
    request.state.viewer = Viewer(principal, value)
    return request.state.viewer


def viewer_of(*kinds, stream=False):
    """The dependency of a page for sessions of ``kinds``: its Viewer. Without a session a page
    sends the browser to the login form (a live stream or an image answers 401); a session of
    another kind is refused (403)."""
    async def viewer(request: Request):
        found = await session(request)
        if found is None:
            if stream:
                raise Refused(401, "this needs a session: log in at /login")
            raise LoginNeeded()
        if found.principal.kind not in kinds:
            raise Refused(403, "this page is the instructor's" if kinds == ("instructor",) else
                          "this page is for the class's teams and the instructor")
        return found
    viewer.__name__ = "viewer_of_" + "_or_".join(kinds) + ("_stream" if stream else "")
    return viewer


member = viewer_of("team", "instructor")                     # a page of the class
member_stream = viewer_of("team", "instructor", stream=True)  # its live part, its image, its text
instructor = viewer_of("instructor")


async def read_form(request, value=None):
    """The form's fields {name: text}; its CSRF field checked against the session ``value``."""
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        raise Refused(400, "this takes a form")
    body = await read_body(request, MAX_FORM, "form", FORM_SECONDS)
    fields = {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}
    if value is not None and not sessions.check_csrf(value, fields.get("csrf")):
        raise Refused(403, "the form is stale or came from another site; reload the page and try again")
    return fields


def set_cookie(request, response, name, value, max_age, path="/"):
    response.set_cookie(name, value, max_age=max_age, path=path, secure=request.url.scheme == "https",
                        httponly=True, samesite="strict")


def board_params(params, required=False):
    """(milestone, size) of ``?milestone=&size=`` (None, None where not given)."""
    milestone, size = params.get("milestone"), params.get("size")
    if milestone is None and size is None and not required:
        return None, None
    if milestone not in MILESTONES:
        raise Refused(400, f"milestone is one of {', '.join(MILESTONES)}")
    try:
        size = int(size)
    except (TypeError, ValueError):
        raise Refused(400, "size is a whole number of images from 1 to 10000") from None
    if not 1 <= size <= 10000:
        raise Refused(400, f"size is from 1 to 10000, not {size}")
    return milestone, size


def files_of(items):
    """[{name, size, sha256}] of a job's or a record's file list, each value of its type (a
    record is a worker's word: nothing in it is taken on trust by a template)."""
    out = []
    for f in items if isinstance(items, list) else []:
        if isinstance(f, dict):
            size = f.get("size")
            out.append({"name": shown(str(f.get("name", "?")), 200),
                        "size": size if isinstance(size, int) and not isinstance(size, bool) else 0,
                        "sha256": printable(str(f.get("sha256", "-")), 64)})
    return out
