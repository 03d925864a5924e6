"""The class's pages, rendered on the server from Jinja2 templates (``templates/``, autoescaped)
with one small stylesheet and one small script (``static/``), no build step:

    GET  /                       the ranking of a milestone and size (?milestone=&size=), live (SSE)
    GET  /ranking/events         its live part: the ranking's HTML, sent again when it changes
                                 (?milestone=&size=; without them the newest board)
    GET  /team                   a team's runs and plots (the instructor: ?name=TEAM)
    GET  /team/plot.svg          its Op Time over its runs against the class's best and median (matplotlib)
    GET  /jobs/{id}              a job: its place in the queue, its transcript live, its verdict
    GET  /jobs/{id}/events       its live part (the transcript's lines as text, the place, the verdict)
    GET  /jobs/{id}/transcript   the transcript as plain text
    POST /jobs/{id}/cancel
    GET  /admin                  the instructor: queue, workers, teams, deadlines, names, CSV export
    POST /admin/names            whether teams see the other teams' names or pseudonyms
    POST /admin/deadlines        set or clear a milestone's deadline
    POST /admin/teams/revoke     revoke a team's token (its sessions end with it)
    POST /admin/jobs/{id}/cancel
    GET  /admin/ranking.csv      the ranking as CSV, optionally with the course's grade rule
    GET  /login                  the login form
    POST /login                  a token, given once, opens a session (sessions.py)
    POST /logout                 ends it

Every page needs a session (a team's or the instructor's); a team sees its own page and jobs
only (another team's answers 404, as the API does). Nothing a team wrote reaches a page as markup:
templates escape every value, transcripts have their control characters written as escapes
(``as_text``: an ANSI colour shows as ``\\x1b[31m``), live parts set text, and the pages' Content
Security Policy allows scripts from this server only. Pages work without JavaScript; the script
only makes the ranking and a job's transcript live (EventSource).
"""
import asyncio
import hashlib
import hmac
import json
import math
import secrets
import time
from collections import OrderedDict
from pathlib import Path
from urllib.parse import parse_qs, urlencode

import jinja2
from sse_starlette import EventSourceResponse
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from . import choices, jobs, overview, plots, sessions, standings
from .db import Unavailable
from .filters import ago, as_text, place_text, secs, utc
from .http import DOWN_RETRY, JOB_ID, parse_deadline
from .jobs import ENDED, QUEUED, Refused, duration
from .logs import log
from .runs import MILESTONES, printable, shown
from .tokens import parse as parse_token

HERE = Path(__file__).resolve().parent
TEAM_JOBS = 100                      # jobs listed on a team's page (newest)
MAX_FORM = 64 << 10                  # bytes of a form's body
LOGIN_COOKIE = "ece408_login"        # the login form's own CSRF pair (no session yet)
STREAM_CHECK = 60.0                  # seconds between checks that a live page's session still counts
PLOTS_KEPT = 512
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin",
           "X-Frame-Options": "DENY", "Cache-Control": "no-store"}
DONE = {"names": "The ranking's names setting was saved.", "deadline": "The deadline was saved.",
        "cleared": "The deadline was cleared.", "revoked": "The team's token was revoked; its sessions ended.",
        "cancelled": "The job was cancelled (a running job stops at its worker's next report)."}


class LoginNeeded(Exception):
    """No session (or it ended): the page sends the browser to the login form."""


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


def load_static():
    """{name: (bytes, media type, version)} of static/."""
    types = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}
    out = {}
    for path in sorted((HERE / "static").iterdir()):
        if path.suffix in types:
            data = path.read_bytes()
            out[path.name] = (data, types[path.suffix], hashlib.sha256(data).hexdigest()[:10])
    return out


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


def seconds_param(form, name):
    text = (form.get(name) or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise Refused(400, f"{name} is a number of seconds, not {printable(text, 30)}") from None
    if not math.isfinite(value) or value <= 0:
        raise Refused(400, f"{name} is a positive number of seconds")
    return value


class Web:
    """The pages' shared state: templates, static files, caches of the ranking and plots."""

    def __init__(self, service, follow, with_place):
        self.service = service
        self.db = service.db
        self.follow = follow
        self.with_place = with_place
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True,
                                      undefined=jinja2.StrictUndefined, auto_reload=False, trim_blocks=True,
                                      lstrip_blocks=True)
        self.env.filters.update(utc=utc, secs=secs, ago=ago, text=as_text, shown=shown)
        self.static = load_static()
        self.env.globals.update(static=self.static_url, MILESTONES=MILESTONES, urlencode=urlencode)
        self._cache = {}                        # key -> (records version, monotonic time, value)
        self._locks = {}
        self._serial = 0
        self._names = (0.0, None)
        self._key = None
        self._plots = OrderedDict()
        self._records = {}                      # (milestone, size) -> {record id: Record} read so far
        for name in self.env.list_templates():  # compiled now, not by the first request
            self.env.get_template(name)

    def static_url(self, name):
        return f"/static/{name}?v={self.static[name][2]}"

    # ------------------------------------------------------------ cached reads
    async def _cached(self, key, compute):
        """``compute()`` (in a thread), again when a record was added through this server (at most
        once a second) and at least every ``ranking_seconds`` (records written by others). It
        returns (fingerprint, ...): where the fingerprint is unchanged, the value kept is the old one."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            version, at, value = self._cache.get(key, (None, 0.0, None))
            age = time.monotonic() - at
            hub = self.service.hub
            if value is None or age > self.service.settings.ranking_seconds or \
                    (version != hub.records_version and age > 1.0):
                version = hub.records_version
                value = await self.service.run(compute)
                old = self._cache.get(key)
                if old is not None and old[2][0] == value[0]:
                    value = old[2]                                   # unchanged: the same serial
                self._cache[key] = (version, time.monotonic(), value)
            return value

    async def boards(self):
        """[(milestone, size, runs)], the newest board first."""
        def compute():
            found = standings.boards(self.db)
            return tuple(found), found
        return (await self._cached("boards", compute))[1]

    async def standing(self, milestone, size):
        """(serial, Standing) of a board; the serial changes only when the ranking does."""
        known = self._records.setdefault((milestone, size), {})

        def compute():
            st = standings.standing(self.db, milestone, size, known)
            fingerprint = (tuple((r.team, r.op_time, r.record_id, r.runs, r.submitted_at) for r in st.rows),
                           st.excluded, st.others, st.chosen.key if st.chosen else None)
            self._serial += 1
            return fingerprint, self._serial, st
        _, serial, st = await self._cached(("standing", milestone, size), compute)
        return serial, st

    async def class_names(self):
        """{a record's team: its name in the class} where they differ (standings.class_names)."""
        def compute():
            names = standings.class_names(overview.team_names(self.db))
            return tuple(sorted(names.items())), names
        return (await self._cached("class names", compute))[1]

    async def names(self):
        """``shown`` or ``anonymised`` (read again every 2 s)."""
        at, value = self._names
        if value is None or time.monotonic() - at > 2.0:
            value = await self.service.run(choices.names, self.db)
            self._names = (time.monotonic(), value)
        return value

    async def anonymised_for(self, principal):
        return principal.kind == "team" and await self.names() == "anonymised"

    async def pseudonyms(self, st, principal):
        """{name: pseudonym} of the board's teams where ``principal`` sees pseudonyms, else None."""
        return await self.key_pseudonyms(st) if await self.anonymised_for(principal) else None

    async def key_pseudonyms(self, st):
        if self._key is None:
            self._key = await self.service.run(choices.pseudonym_key, self.db)
        return choices.pseudonyms(self._key, [r.team for r in st.rows])

    async def api_ranking(self, milestone, size, fmt, team):
        """``/api/ranking`` for ``team`` where names are anonymised: as ``ranking`` prints it, the
        other teams under their pseudonyms."""
        if milestone is None or size is None:
            found = await self.boards()
            if not found:
                return "No records yet: run 'python -m ece408_op submit --submit m2' first."
            milestone, size = milestone or found[0][0], size or found[0][1]
        _, st = await self.standing(milestone, size)
        return standings.report(st, fmt, team, await self.key_pseudonyms(st))

    async def ranking_view(self, principal, milestone, size):
        found = await self.boards()
        if milestone is None and found:
            milestone, size = found[0][0], found[0][1]
        serial, st = (None, None)
        rows = []
        if milestone is not None:
            serial, st = await self.standing(milestone, size)
            rows = standings.named(st.rows, principal.name if principal.kind == "team" else None,
                                   await self.pseudonyms(st, principal), await self.class_names())
        models = list(dict.fromkeys(layer.model for r in rows for layer in r.layers))
        for r in rows:
            by_model = {layer.model: layer for layer in r.layers}
            r.cells = [by_model.get(m) for m in models]
        anonymised = await self.anonymised_for(principal)
        return {"boards": found, "milestone": milestone, "size": size, "st": st, "rows": rows, "models": models,
                "anonymised": anonymised,
                "fingerprint": (serial, tuple((m, s) for m, s, _ in found), anonymised)}

    # ------------------------------------------------------------ sessions
    async def session(self, request):
        """(Principal, cookie value) of the request's session, or (None, None)."""
        value = request.cookies.get(sessions.COOKIE)
        if not value:
            return None, None
        principal = await self.service.run(sessions.find, self.db, value)
        return (principal, value) if principal else (None, None)

    async def require(self, request, *kinds, stream=False):
        principal, value = await self.session(request)
        if principal is None:
            if stream:
                raise Refused(401, "this needs a session: log in at /login")
            raise LoginNeeded()
        if principal.kind not in kinds:
            raise Refused(403, "this page is the instructor's" if kinds == ("instructor",) else
                          "this page is for the class's teams and the instructor")
        return principal, value

    async def form(self, request, value=None):
        """The form's fields {name: text}; its CSRF field checked against the session ``value``."""
        if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            raise Refused(400, "this takes a form")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM:
                raise Refused(413, "the form is too large")
        fields = {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}
        if value is not None and not sessions.check_csrf(value, fields.get("csrf")):
            raise Refused(403, "the form is stale or came from another site; reload the page and try again")
        return fields

    async def own_job(self, principal, job_id):
        """The job (a team: its own only), else 404 as the API answers."""
        if not JOB_ID.match(job_id):
            raise Refused(404, f"no job {printable(job_id, 40)} here")
        job = await self.service.run(jobs.get, self.db, job_id, principal.name if principal.kind == "team" else None)
        if job is None:
            raise Refused(404, f"no job {job_id} here")
        return job

    # ------------------------------------------------------------ responses
    def render(self, name, principal=None, value=None, status=200, headers=None, **context):
        html = self.env.get_template(name).render(me=principal, csrf=sessions.csrf(value) if value else "",
                                                  **context)
        return HTMLResponse(html, status_code=status, headers={**HEADERS, **(headers or {})})

    def fragment(self, name, **context):
        return self.env.get_template(name).render(**context)

    def error(self, status, message, retry_after=None, principal=None, value=None):
        headers = {"Retry-After": str(int(retry_after))} if retry_after is not None else None
        return self.render("error.html", principal, value, status=status, headers=headers, status_code=status,
                           message=message)

    def page(self, handler):
        """A route: its Refused and database faults as pages, a missing session as the login form."""
        async def endpoint(request):
            try:
                return await handler(request)
            except LoginNeeded:
                return RedirectResponse("/login", status_code=303, headers=HEADERS)
            except Refused as exc:
                return self.error(exc.status, str(exc), exc.retry_after)
            except Unavailable as exc:
                self.service.down(exc)
                return self.error(503, f"the service's database cannot be reached right now; try again in "
                                       f"{DOWN_RETRY} s", DOWN_RETRY)
        return endpoint

    @staticmethod
    def set_cookie(request, response, name, value, max_age, path="/"):
        response.set_cookie(name, value, max_age=max_age, path=path, secure=request.url.scheme == "https",
                            httponly=True, samesite="strict")

    # ------------------------------------------------------------ login and logout
    async def login_form(self, request):
        principal, value = await self.session(request)
        if principal is not None:
            return RedirectResponse("/team" if principal.kind == "team" else "/admin", status_code=303)
        return self.login_answer(request)

    def login_answer(self, request, status=200, message=None):
        pair = secrets.token_urlsafe(24)
        response = self.render("login.html", status=status, login=pair, message=message)
        self.set_cookie(request, response, LOGIN_COOKIE, pair, 3600, path="/login")
        return response

    async def login(self, request):
        where = request.client.host if request.client else "unknown"
        wait = self.service.failures.wait(where)
        if wait:
            return self.login_answer(request, 429, f"too many failed token checks from this address; try again in "
                                                   f"{duration(wait)}")
        fields = await self.form(request)
        pair = request.cookies.get(LOGIN_COOKIE, "")
        if not pair or not hmac.compare_digest(pair, fields.get("login", "")):
            return self.login_answer(request, 403, "the login form is stale or came from another site; "
                                                   "try again on this one")
        token = (fields.get("token") or "").strip()
        principal = self.service.tokens.cached(token) if token else None
        if principal is None and token:
            principal = await self.service.run(self.service.tokens.verify, token)
        if not principal:
            self.service.failures.fail(where)
            log("auth.failed", level="warning", address=where, path=request.url.path)
            return self.login_answer(request, 401, "the token was not accepted (mistyped, revoked or rotated); "
                                                   "ask the course staff for a new one")
        if principal.kind == "worker":
            return self.login_answer(request, 403, "a worker's token does not open the pages: log in with a team's "
                                                   "token or the instructor's")
        value = await self.service.run(sessions.open_session, self.db, parse_token(token)[0], principal)
        log("page.login", kind=principal.kind, name=principal.name, address=where)
        response = RedirectResponse("/team" if principal.kind == "team" else "/admin", status_code=303)
        self.set_cookie(request, response, sessions.COOKIE, value, sessions.LIFETIME)
        response.delete_cookie(LOGIN_COOKIE, path="/login")
        return response

    async def logout(self, request):
        principal, value = await self.session(request)
        if principal is not None:
            await self.form(request, value)
            await self.service.run(sessions.close, self.db, value)
            log("page.logout", kind=principal.kind, name=principal.name)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(sessions.COOKIE, path="/")
        return response

    # ------------------------------------------------------------ the ranking
    async def ranking_page(self, request):
        principal, value = await self.require(request, "team", "instructor")
        milestone, size = board_params(request.query_params)
        view = await self.ranking_view(principal, milestone, size)
        return self.render("ranking.html", principal, value, **view)

    async def ranking_events(self, request):
        principal, value = await self.require(request, "team", "instructor", stream=True)
        milestone, size = board_params(request.query_params)           # none: the newest board, once there is one

        async def stream():
            sent, checked = None, time.monotonic()
            while True:
                try:
                    view = await self.ranking_view(principal, milestone, size)
                    if view["fingerprint"] != sent:
                        yield {"event": "ranking", "data": json.dumps(self.fragment("ranking_table.html", **view))}
                        sent = view["fingerprint"]
                    if time.monotonic() - checked > STREAM_CHECK:
                        checked = time.monotonic()
                        if await self.service.run(sessions.find, self.db, value) != principal:
                            yield {"event": "gone", "data": json.dumps("the session ended; log in again")}
                            return
                except Unavailable as exc:
                    self.service.down(exc)
                    await asyncio.sleep(DOWN_RETRY)
                    continue
                await asyncio.sleep(1.0)
        return EventSourceResponse(stream(), ping=15, send_timeout=30, headers={"Cache-Control": "no-store"})

    # ------------------------------------------------------------ a team's page
    async def team_of(self, request, principal):
        """The team whose page this is: a team's own; the instructor's ?name=."""
        name = request.query_params.get("name")
        if principal.kind == "team":
            if name is not None and name != principal.name:
                raise Refused(404, "no such team page here (your own is at /team)")
            return principal.name
        if name is None:
            return None
        if not await self.service.run(overview.team_exists, self.db, name):
            raise Refused(404, f"no team named {printable(name)}")
        return name

    async def team_page(self, request):
        principal, value = await self.require(request, "team", "instructor")
        team = await self.team_of(request, principal)
        if team is None:
            return RedirectResponse("/admin", status_code=303)

        def read():
            found, total = overview.team_jobs(self.db, team, TEAM_JOBS)
            ids = [j["record_id"] for j in found if j["record_id"] and j["state"] in ENDED]
            records = {r.id: r for r in standings.light_records(self.db, ids=ids)}
            with self.db.transaction(write=False) as tx:
                mine = [(m, int(s), int(n)) for m, s, n in tx.all(
                    "SELECT milestone, size, COUNT(*) FROM runs WHERE team IN (?, ?) GROUP BY milestone, size "
                    "ORDER BY milestone, size", tuple(standings.record_teams(team)))]
            return found, total, records, mine
        found, total, records, mine = await self.service.run(read)
        runs = []
        for j in found:
            record = records.get(j["record_id"])
            runs.append({"job": j, "record": record, "layers": standings.layers_of(record.models) if record else [],
                         "files": files_of(record.team_files if record and record.team_files else j["files"])})
        query = {"name": team} if principal.kind == "instructor" else {}
        return self.render("team.html", principal, value, team=team, runs=runs, total=total, boards=mine,
                           plots=plots.available(), query=query)

    async def team_plot(self, request):
        principal, _ = await self.require(request, "team", "instructor", stream=True)
        team = await self.team_of(request, principal)
        if team is None:
            raise Refused(404, "name the team: ?name=")
        milestone, size = board_params(request.query_params, required=True)
        if not plots.available():
            raise Refused(404, "this server has no matplotlib: no plots (pip install matplotlib)")
        serial, st = await self.standing(milestone, size)
        key = (team, milestone, size)
        cached = self._plots.get(key)
        if cached is None or cached[0] != serial:
            names = standings.record_teams(team)
            runs = [(r.created_at, r.op_time, standings.valid(r)) for r in (st.chosen.records if st.chosen else [])
                    if r.team in names]
            best, median = st.best_and_median()
            try:
                svg = await self.service.run(plots.op_time_svg, runs, best, median,
                                             f"{milestone}, {size} images: total Op Time of each run")
            except ImportError as exc:                       # a broken install: no plots from now on
                plots.missing()
                log("plots.unavailable", level="warning", reason=str(exc))
                raise Refused(404, "this server cannot import matplotlib: no plots") from None
            cached = self._plots[key] = (serial, svg)
            while len(self._plots) > PLOTS_KEPT:
                self._plots.popitem(last=False)
        self._plots.move_to_end(key)
        return Response(cached[1], media_type="image/svg+xml", headers={
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'", "X-Content-Type-Options":
            "nosniff", "Cache-Control": "private, max-age=5"})

    # ------------------------------------------------------------ a job's page
    async def job_page(self, request):
        principal, value = await self.require(request, "team", "instructor")
        job = await self.own_job(principal, request.path_params["job_id"])
        view = await self.with_place(job)
        chunks = await self.service.run(overview.chunks, self.db, job["id"])
        record = await self.record_of(job)
        return self.render("job.html", principal, value, job=job, place=place_text(view) if job["state"] == QUEUED
                           else None, transcript=as_text("".join(t for _, t in chunks)),
                           after=chunks[-1][0] if chunks else -1, record=record,
                           layers=standings.layers_of(record.models) if record else [], ended=job["state"] in ENDED,
                           files=files_of(job["files"]))

    async def record_of(self, job):
        if not job.get("record_id") or job["state"] not in ENDED:
            return None
        found = await self.service.run(standings.light_records, self.db, ids=[job["record_id"]])
        return found[0] if found else None

    async def job_events(self, request):
        principal, _ = await self.require(request, "team", "instructor", stream=True)
        job = await self.own_job(principal, request.path_params["job_id"])
        after = request.headers.get("last-event-id") or request.query_params.get("after") or "-1"
        try:
            after = int(after)
        except ValueError:
            raise Refused(400, "after (or Last-Event-ID) is a chunk number") from None

        async def stream():
            waiting = False
            async for event in self.follow(job["id"], after):
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
                elif kind == "end":
                    ended = await self.service.run(jobs.get, self.db, job["id"])
                    record = await self.record_of(ended)
                    html = self.fragment("verdict.html", job=ended, record=record,
                                         layers=standings.layers_of(record.models) if record else [])
                    yield {"event": "place", "data": json.dumps("")}
                    yield {"event": "verdict", "data": json.dumps(html)}
                    yield {"event": "end", "data": json.dumps(ended["state"])}
                    return
        return EventSourceResponse(stream(), ping=15, send_timeout=30, headers={"Cache-Control": "no-store"})

    async def job_transcript(self, request):
        principal, _ = await self.require(request, "team", "instructor", stream=True)
        job = await self.own_job(principal, request.path_params["job_id"])
        text = await self.service.run(jobs.transcript, self.db, job["id"])
        return PlainTextResponse(text, headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store",
                                                "Content-Security-Policy": "default-src 'none'"})

    async def job_cancel(self, request):
        principal, value = await self.require(request, "team", "instructor")
        job = await self.own_job(principal, request.path_params["job_id"])
        await self.form(request, value)
        await self.cancel(job["id"], principal)
        return RedirectResponse(f"/jobs/{job['id']}", status_code=303)

    async def admin_cancel(self, request):
        principal, value = await self.require(request, "instructor")
        job = await self.own_job(principal, request.path_params["job_id"])
        await self.form(request, value)
        await self.cancel(job["id"], principal)
        return RedirectResponse("/admin?done=cancelled", status_code=303)

    async def cancel(self, job_id, principal):
        team = principal.name if principal.kind == "team" else None
        job = await self.service.run(jobs.cancel, self.db, job_id, team)
        if job is None:
            raise Refused(404, f"no job {job_id} here")
        log("job.cancel", job=job_id, by=principal.kind, state=job["state"], via="page")
        self.service.hub.job_changed(job_id)
        self.service.hub.queue_changed()

    # ------------------------------------------------------------ the instructor
    async def admin_page(self, request):
        principal, value = await self.require(request, "instructor")
        rules = self.service.settings.rules

        def read():
            return (overview.queue(self.db, jobs.snapshot(self.db)), overview.workers(self.db),
                    overview.teams(self.db, rules), jobs.deadlines(self.db))
        queue, workers, teams, deadlines = await self.service.run(read)
        done = DONE.get(request.query_params.get("done"))
        return self.render("admin.html", principal, value, queue=queue, workers=workers, teams=teams,
                           deadlines=deadlines, boards=await self.boards(), names=await self.names(), rules=rules,
                           done=done, now=time.time())

    async def admin_names(self, request):
        principal, value = await self.require(request, "instructor")
        fields = await self.form(request, value)
        try:
            await self.service.run(choices.set_names, self.db, fields.get("names"))
        except ValueError as exc:
            raise Refused(400, str(exc)) from None
        self._names = (time.monotonic(), fields["names"])
        log("ranking.names", names=fields["names"])
        return RedirectResponse("/admin?done=names", status_code=303)

    async def admin_deadlines(self, request):
        principal, value = await self.require(request, "instructor")
        fields = await self.form(request, value)
        milestone = fields.get("milestone")
        if milestone not in MILESTONES:
            raise Refused(400, f"milestone is one of {', '.join(MILESTONES)}")
        if fields.get("action") == "clear":
            at, when = None, None
        else:
            at, when = parse_deadline((fields.get("deadline") or "").strip())
        await self.service.run(jobs.set_deadline, self.db, milestone, at, when)
        log("deadline.set", milestone=milestone, deadline=when, via="page")
        return RedirectResponse(f"/admin?done={'cleared' if at is None else 'deadline'}", status_code=303)

    async def admin_revoke(self, request):
        principal, value = await self.require(request, "instructor")
        fields = await self.form(request, value)
        name = fields.get("name") or ""
        await self.service.run(self.service.tokens.revoke_team, name)
        log("team.revoked", team=name, via="page")
        return RedirectResponse("/admin?done=revoked", status_code=303)

    async def admin_csv(self, request):
        await self.require(request, "instructor")
        milestone, size = board_params(request.query_params, required=True)
        full, zero = seconds_param(request.query_params, "full"), seconds_param(request.query_params, "zero")
        if (full is None) != (zero is None):
            raise Refused(400, "the grade rule needs both Op Times: full credit (full) and zero credit (zero)")
        if full is not None and full >= zero:
            raise Refused(400, "the full-credit Op Time must be below the zero-credit one")
        _, st = await self.standing(milestone, size)
        roster = await self.service.run(overview.team_names, self.db)
        text = standings.graded_csv(st, roster, full, zero)
        return Response(text, media_type="text/csv; charset=utf-8", headers={
            "Content-Disposition": f'attachment; filename="ranking-{milestone}-{size}.csv"',
            "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"})

    # ------------------------------------------------------------ static files
    async def static_file(self, request):
        found = self.static.get(request.path_params["name"])
        if found is None:
            return PlainTextResponse("no such file", status_code=404)
        return Response(found[0], media_type=found[1], headers={"Cache-Control": "public, max-age=86400",
                                                                 "X-Content-Type-Options": "nosniff"})


def add_pages(app, service, follow, with_place):
    """The pages' routes on ``app``; returns the Web (also ``service.web``)."""
    web = Web(service, follow, with_place)
    service.web = web
    routes = [
        ("/", web.ranking_page, ["GET"]),
        ("/ranking/events", web.ranking_events, ["GET"]),
        ("/team", web.team_page, ["GET"]),
        ("/team/plot.svg", web.team_plot, ["GET"]),
        ("/jobs/{job_id}", web.job_page, ["GET"]),
        ("/jobs/{job_id}/events", web.job_events, ["GET"]),
        ("/jobs/{job_id}/transcript", web.job_transcript, ["GET"]),
        ("/jobs/{job_id}/cancel", web.job_cancel, ["POST"]),
        ("/admin", web.admin_page, ["GET"]),
        ("/admin/names", web.admin_names, ["POST"]),
        ("/admin/deadlines", web.admin_deadlines, ["POST"]),
        ("/admin/teams/revoke", web.admin_revoke, ["POST"]),
        ("/admin/jobs/{job_id}/cancel", web.admin_cancel, ["POST"]),
        ("/admin/ranking.csv", web.admin_csv, ["GET"]),
        ("/login", web.login_form, ["GET"]),
        ("/login", web.login, ["POST"]),
        ("/logout", web.logout, ["POST"]),
        ("/static/{name}", web.static_file, ["GET"]),
    ]
    for path, handler, methods in routes:
        app.router.add_route(path, web.page(handler), methods=methods, include_in_schema=False)
    return web

