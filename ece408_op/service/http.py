"""What every route of the service shares: JSON errors, bounded bodies, the checks of ids, numbers
and deadlines, and the access log (one line a request, never a token)."""
import asyncio
import json
import re
import time
from datetime import datetime
from urllib.parse import urlsplit

from fastapi.responses import JSONResponse

from ..base.terms import redact_tokens
from . import upload as uploads
from .refused import Refused
from .logs import log
from ..base.names import printable

JOB_ID = re.compile(r"^[0-9a-f]{32}$")
DOWN_RETRY = 5                                   # seconds a client waits while the database is down
MAX_JSON = 16 << 20                              # bytes of a JSON request body (a record: 1 MiB of transcript, escaped)


def error(status, message, retry_after=None, close=False):
    """The service's one-line JSON error; a token's secret in ``message`` (one a client put in a
    path or a name, echoed back) is removed first. ``close``: the connection closes after it (a
    body left unread is not read to its end)."""
    headers = {"Retry-After": str(int(retry_after))} if retry_after is not None else {}
    if close:
        headers["Connection"] = "close"
    return JSONResponse({"error": redact_tokens(message)}, status_code=status, headers=headers or None)


def address(request):
    return request.client.host if request.client else "unknown"


def check_size(request, cap, what):
    """413 where the request declares a body larger than ``cap`` bytes (before any is read)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise Refused(413, f"the {what} is {uploads.size_text(int(declared))}; this service takes at most "
                           f"{uploads.size_text(cap)}")


STALL_SECONDS = 10.0                             # a body that sends nothing this long is dropped (408)
GRACE_SECONDS = 20.0                             # after this, a body must have come at MIN_RATE on average
MIN_RATE = 8 << 10                               # bytes a second


async def read_body(request, cap, what, seconds=None):
    """The request's body, at most ``cap`` bytes, as ``body_chunks`` receives it (its rules)."""
    return b"".join([chunk async for chunk in body_chunks(request, cap, what, seconds)])


async def body_chunks(request, cap, what, seconds=None):
    """The request's body as it arrives, chunk by chunk, at most ``cap`` bytes (413 before reading
    more), all of it within ``seconds`` where given; 408 where nothing comes for STALL_SECONDS, or
    where after GRACE_SECONDS it has come slower than MIN_RATE on average: a body trickled in (an
    attacker's way to hold a connection and a slot) is dropped within seconds, an honest one on a
    slow link (8 KiB/s: 16 MiB in half an hour) is not."""
    check_size(request, cap, what)
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = None if seconds is None else started + seconds
    size = 0
    chunks = request.stream().__aiter__()
    while True:
        now = loop.time()
        wait = STALL_SECONDS if deadline is None else min(STALL_SECONDS, deadline - now)
        if wait <= 0:
            raise Refused(408, f"the {what} did not arrive within {seconds:g} s; send it again")
        try:
            chunk = await asyncio.wait_for(chunks.__anext__(), wait)
        except StopAsyncIteration:
            return
        except asyncio.TimeoutError:
            why = (f"nothing of it came for {STALL_SECONDS:g} s" if deadline is None or loop.time() < deadline
                   else f"it did not arrive within {seconds:g} s")
            raise Refused(408, f"the {what} stopped coming ({why}); send it again") from None
        size += len(chunk)
        if size > cap:
            raise Refused(413, f"the {what} is larger than {uploads.size_text(cap)}, the most this service takes")
        yield chunk
        elapsed = loop.time() - started
        if elapsed > GRACE_SECONDS and size < MIN_RATE * elapsed:
            raise Refused(408, f"the {what} is coming slower than {MIN_RATE >> 10} KiB a second; send it again "
                               "over a faster link")


async def read_json(request, cap=MAX_JSON, what="request"):
    """The request's JSON object, its body at most ``cap`` bytes (a route's own bound where it
    takes more than MAX_JSON: a roster's import); Refused (400, 413) otherwise."""
    body = await read_body(request, cap, what)
    try:
        data = json.loads(body or b"{}")
    except (ValueError, RecursionError):
        raise Refused(400, "the request body is not JSON (or nests too deep)") from None
    if not isinstance(data, dict):
        raise Refused(400, "the request body is not a JSON object")
    return data


def text_field(data, name, what):
    """``data[name]`` where it is non-empty text without NUL; Refused (400) otherwise."""
    value = data.get(name)
    if not isinstance(value, str) or not value.strip() or "\0" in value or not encodable(value):
        raise Refused(400, f"{name} is {what} (text)")
    return value


def encodable(text):
    """Whether ``text`` is valid Unicode (no lone surrogate, which JSON's escapes can carry and
    neither the database nor a response can hold)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


IDEMPOTENCY = re.compile(r"^[\x21-\x7e]{1,200}$")


def idempotency_key(request):
    """The ``Idempotency-Key`` header's value (1 to 200 visible ASCII characters, e.g. a UUID), or
    None where there is none; Refused (400) where it is malformed."""
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    if not IDEMPOTENCY.match(key):
        raise Refused(400, "Idempotency-Key is 1 to 200 visible ASCII characters (the client makes one per "
                           "submission)")
    return key


def check_job_id(job_id):
    if not JOB_ID.match(job_id):
        raise Refused(404, f"no job {printable(job_id, 40)} here (jobs list shows yours)")
    return job_id


def after_param(request):
    """The chunk a live stream resumes after: ``Last-Event-ID`` or ``?after=`` (-1: from the start)."""
    after = request.headers.get("last-event-id") or request.query_params.get("after") or "-1"
    try:
        value = int(after) if len(after) <= 20 else None
    except ValueError:
        value = None
    if value is None or not -1 <= value < 2 ** 63:
        raise Refused(400, "after (or Last-Event-ID) is a chunk number, from -1 to 2^63 - 1")
    return value


def int_param(params, name, low, high, default=None):
    text = params.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise Refused(400, f"{name} must be a whole number from {low} to {high}") from None
    if not low <= value <= high:
        raise Refused(400, f"{name} must be from {low} to {high}, not {value}")
    return value


def kind_param(params, name):
    """``?name=`` as a device kind's name, or its start (grading/kinds.py), blanks normalised; None
    where not given or blank (a form's "any"); Refused (400) where longer than a device's name can be."""
    text = " ".join((params.get(name) or "").split())
    if not text:
        return None
    if len(text) > 200 or not encodable(text):
        raise Refused(400, f"{name} is a device kind's name (or its first characters), at most 200 characters")
    return text


def parse_deadline(text):
    """(epoch seconds, as shown) of an ISO 8601 time with its zone."""
    try:
        moment = datetime.fromisoformat(text[:-1] + "+00:00" if str(text).endswith("Z") else text)
    except (TypeError, ValueError):
        raise Refused(400, "a deadline is an ISO 8601 time with its zone, e.g. 2026-12-04T23:59:00-06:00") from None
    if moment.tzinfo is None:
        raise Refused(400, "a deadline needs its time zone (e.g. -06:00 or Z): the server's clock is UTC")
    return moment.timestamp(), moment.isoformat(sep=" ")


class NoNul:
    """A NUL in the request's address (raw or ``%00``) is answered at once: in the path 404 (no
    job, page or file has one in its name), in the query string 400. No text column of either
    database stores a NUL, and no name, id or number holds one."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            raw = (scope.get("raw_path") or scope["path"].encode("utf-8", "surrogateescape")).upper()
            query = scope.get("query_string", b"").upper()
            if b"\0" in raw or b"%00" in raw or "\0" in scope["path"]:
                return await error(404, "no such page or job here")(scope, receive, send)
            if b"\0" in query or b"%00" in query:
                return await error(400, "the request's query holds a NUL character")(scope, receive, send)
        return await self.app(scope, receive, send)


def bearer_token(header):
    """The token of an ``Authorization: Bearer TOKEN`` header's value, or None."""
    scheme, _, token = (header or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class EarlyRefusals:
    """A submission that a kept refusal answers (a team past its hourly limit, posting again
    without an Idempotency-Key) is refused here, from the token and the query alone: before the
    routes, their dependencies and the body, so that a team hammering the service costs it the
    least a request can (limits.Refusals keeps the refusals; the route refuses the same way)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/api/jobs":
            refusal = self.kept(scope)
            if refusal is not None:
                return await error(refusal.status, str(refusal), refusal.retry_after)(scope, receive, send)
        return await self.app(scope, receive, send)

    @staticmethod
    def kept(scope):
        service = scope["app"].state.service
        if not service.refusals.kept:
            return None
        token = None
        for name, value in scope["headers"]:
            if name == b"idempotency-key":
                return None
            if name == b"authorization":
                token = bearer_token(value.decode("latin-1"))
        if not token or service.tokens.stale():
            return None
        principal = service.tokens.lookup(token)
        if principal is None or principal.kind != "team":
            return None
        kind = "development"
        for part in scope.get("query_string", b"").split(b"&"):
            if part.startswith(b"kind="):
                kind = part[5:].decode("latin-1")
        return service.refusals.held(principal.name, kind)


HSTS = b"max-age=31536000"                      # a year: browsers keep to https:// for this host


class ResponseHeaders:
    """What every answer's headers must say, whatever route made it: a redirect's Location relative
    (an absolute one is built from the request's Host, which a client or a proxy forwarding it
    chooses: Starlette's trailing-slash redirect is one); HSTS where the request came over TLS (the
    scheme a trusted proxy's X-Forwarded-Proto gives, as serve --forwarded-allow-ips takes it); and
    ``Cache-Control: no-store`` on every API answer that sets none (new tokens, a team's jobs and
    transcripts: nothing of it for a cache on the way)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        api, tls = scope["path"].startswith("/api/"), scope.get("scheme") == "https"

        async def sending(message):
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", ())]
                names = {k.lower() for k, _ in headers}
                if 300 <= message["status"] < 400:
                    headers = [(k, relative(v) if k.lower() == b"location" else v) for k, v in headers]
                if tls and b"strict-transport-security" not in names:
                    headers.append((b"strict-transport-security", HSTS))
                if api and b"cache-control" not in names:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)
        return await self.app(scope, receive, sending)


def relative(location):
    """A Location header's value without its scheme and host: the path, query and fragment only."""
    parts = urlsplit(location.decode("latin-1"))
    path = parts.path if parts.path.startswith("/") else "/" + parts.path
    path = "/" + path.lstrip("/")                  # never //host: a path, not another host
    return (path + (f"?{parts.query}" if parts.query else "") + (f"#{parts.fragment}" if parts.fragment else "")
            ).encode("latin-1")


class AccessLog:
    """One ``http`` log line a request: method, path (never the query string or a header: no
    token can reach the log this way), status, milliseconds, client address. The workers' routine
    calls (claims, chunks, heartbeats) are logged at debug level unless they fail."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = {}

        async def sending(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)
        try:
            await self.app(scope, receive, sending)
        finally:
            code = status.get("code")
            routine = scope["path"].startswith("/api/worker/") and code is not None and code < 400
            client = scope.get("client")
            log("http", level="debug" if routine else "info", method=scope["method"], path=scope["path"],
                status=code, ms=round((time.perf_counter() - started) * 1000, 1), address=client[0] if client else None)
