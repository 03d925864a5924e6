"""The API's answers and bodies as pydantic models: what ``/openapi.json`` says of every route
(``openapi.py`` assembles it). The server side only: the client (ece408_op/client/) reads the
answers as plain JSON and imports none of this (it stays one small package, httpx alone).

Rules:
- An answer's model is the route's ``response_model``, so that FastAPI checks every JSON answer
  against what the schema says (a drift is a 500 in the tests, not a lie in the schema). The
  models are strict (no 1 -> true, no 5 -> 5.0: the answer goes out as the route made it) and
  forbid keys they do not name; routes keep keys a job does not have out of the answer
  (``response_model_exclude_unset``), as they always did.
- A JSON body is read by the route itself (``http.read_json``: bounded, 413 and 408 before a slow
  or huge body is held) and checked there, each refusal a 400 with one line; its model here is
  the schema's ``requestBody`` only (``json_body``), never parsed by FastAPI (whose 422 answers
  are not the service's error shape).
- Query parameters and headers likewise: declared for the schema (``query``, ``header``), read
  and checked by the route with the service's 400 lines.
- Every refusal is ``{"error": "one line"}`` (``Refusal``), with ``Retry-After`` on 429 and 503.
"""
from typing import Annotated, Any, Literal, Optional, Union

from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, WithJsonSchema

Number = Annotated[Union[StrictInt, StrictFloat], WithJsonSchema({"type": "number"})]   # as it is, int or float
Text = StrictStr
Whole = StrictInt
Flag = StrictBool


class Answer(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class Refusal(Answer):
    """Every 4xx and 503 answer of the API: one line a person can act on (no token's secret in it)."""
    error: Text


REFUSALS = {400: "the request is malformed (the line says which part)",
            401: "no token, or one not accepted", 403: "a token of another kind",
            404: "no such job (or another team's), team or build folder", 408: "the body came too slowly",
            409: "a conflict: another upload under this Idempotency-Key, a job already ended, or the worker's "
                 "lease is gone",
            410: "the build folder was deleted, or the job's upload is no longer kept",
            413: "the body is larger than the service takes",
            429: "too many submissions or failed token checks; Retry-After says when to try again",
            503: "the database cannot be reached, the service is shutting down or busy checking uploads; "
                 "Retry-After", 507: "the server's disk could not store the upload or the build folder"}


def refusals(*codes):
    """The ``responses`` of a route that may refuse with ``codes``: the one error shape each."""
    return {code: {"model": Refusal, "description": REFUSALS[code]} for code in codes}


TOKEN = (401, 403, 429, 503)                         # what a route that takes a token may answer first


# ---------------------------------------------------------------------------- health and tokens
class Health(Answer):
    status: Literal["ok"]
    draining: Flag


class Ready(Answer):
    status: Literal["ready"]


class WhoAmI(Answer):
    kind: Literal["team", "worker", "instructor"]
    name: Text


# ---------------------------------------------------------------------------- jobs
class JobView(Answer):
    """A job as the API shows it (jobs.PUBLIC), with a queued job's place and a running one's step."""
    id: Text
    team: Text
    kind: Text = Field(description="development or ranked (a job written into the database by other means "
                                   "is shown as it is: the worker ends it in error)")
    milestone: Optional[Text]
    size: Optional[Whole]
    gpu: Flag
    state: Literal["queued", "running", "done", "failed", "cancelled"]
    submitted_at: Number
    started_at: Optional[Number]
    finished_at: Optional[Number]
    attempts: Whole
    worker: Optional[Text]
    status: Optional[Text]
    exit_code: Optional[Whole]
    valid: Optional[Flag]
    reason: Optional[Text]
    summary: Optional[Text]
    record_id: Optional[Text]
    cancel_requested: Flag
    time_limit: Optional[Number]
    gpu_kind: Optional[Text]
    place: Optional[Whole] = Field(None, description="a queued job: its place in the queue")
    waiting: Optional[Whole] = Field(None, description="a queued job: the jobs queued")
    running: Optional[Whole] = Field(None, description="a queued job: the jobs running")
    note: Optional[Text] = Field(None, description="a queued job: why it may wait (no worker able to run it)")
    progress: Optional[dict[str, Any]] = Field(None, description="a running job: its latest step")


class Job(JobView):
    files: list[dict[str, Any]] = Field(description="the upload's files: name, size, sha256")
    warning: Optional[Text] = Field(None, description="a new job no worker seen lately can take: why")


class JobSummary(JobView):
    file_count: Whole


class Jobs(Answer):
    jobs: list[JobSummary]


# ---------------------------------------------------------------------------- ranking, deadlines, kinds
class Deadline(Answer):
    milestone: Text
    deadline: Optional[Number]
    shown: Optional[Text]


class Deadlines(Answer):
    deadlines: list[Deadline]
    now: Number


class SlurmKind(Answer):
    kind: Text = Field(description="a device kind serve --slurm-kind maps")
    request: Text = Field(description="its Slurm request as shown, e.g. partition gpu-h100")


class Kinds(Answer):
    grading_kinds: dict[str, Optional[Text]]
    unknown_gpus: Literal["refused", "accepted"]
    unserved_jobs: Literal["refused", "accepted"]
    worker_kinds: list[Text]
    run_kinds: dict[str, list[Text]]
    slurm_kinds: Optional[list[SlurmKind]] = Field(None, description="serve --slurm: the kinds it maps (None: no Slurm)")


# ---------------------------------------------------------------------------- the instructor's
class TeamAdded(Answer):
    """A new team and its token (shown once), or an existing one left as it is (skip_existing)."""
    name: Text
    token: Optional[Text] = None
    skipped: Optional[Literal[True]] = None


class TeamsAdded(Answer):
    teams: list[TeamAdded]


class Team(Answer):
    name: Text
    created_at: Number
    active: Flag
    jobs: Whole
    last_job: Optional[Number]


class Teams(Answer):
    teams: list[Team]


class Uncounted(Answer):
    job_id: Text
    team: Text
    record_id: Optional[Text]
    received_at: Number
    why: Optional[Text]


class Uncounteds(Answer):
    uncounted: list[Uncounted]


class ImportCheck(Answer):
    names: list[Text] = Field(description="the roster's names as stored")
    existing: list[list[Any]] = Field(description="[row, [its active tokens' ids]] of each name that is a team")


class Imported(Answer):
    created: Whole
    already: Whole = Field(description="rows whose team exists with the row's token (left as they are)")
    seconds: Number


class Revoked(Answer):
    name: Text
    active: Literal[False]


class NewToken(Answer):
    name: Text
    token: Text


class DeadlineSet(Answer):
    milestone: Text
    deadline: Optional[Number]
    shown: Optional[Text]


# ---------------------------------------------------------------------------- the workers'
class Claimed(Answer):
    job: dict[str, Any]
    lease: Text
    lease_seconds: Number
    worker: Text


class Cancel(Answer):
    cancel: Flag


class Done(Answer):
    ok: Literal[True]


class Finished(Done):
    state: Text


class BuildKept(Answer):
    files: Whole
    folders: Whole
    data_bytes: Whole
    bytes: Whole
    sha256: Text
    expires_at: Optional[Number]
    expires: Optional[Text]
    deleted: Flag


# ---------------------------------------------------------------------------- bodies (schema only)
class Body(BaseModel):
    model_config = ConfigDict(extra="allow")


class Names(Body):
    names: list[Text] = Field(min_length=1, max_length=1000)
    skip_existing: Optional[bool] = False


class Roster(Body):
    names: list[Text]
    lines: Optional[list[Whole]] = None
    tokens: Optional[list[Text]] = Field(None, description="/teams/import only: the client's tokens, one a name")


class Name(Body):
    name: Text


class DeadlineBody(Body):
    milestone: Literal["m1", "m2", "m3", "final"]
    deadline: Optional[Text] = Field(None, description="ISO 8601 with its zone; null clears it")


class SettingsBody(Body):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})     # as the route refuses
    grading_kinds: Optional[dict[Literal["m1", "m2", "m3", "final"], Optional[Text]]] = None
    unknown_gpus: Optional[Literal["refused", "accepted"]] = None
    unserved_jobs: Optional[Literal["refused", "accepted"]] = None


class ClaimBody(Body):
    slot: Optional[Text] = None
    gpu: Optional[bool] = None
    device: Optional[Text] = None
    wait: Optional[float] = None


class ChunksBody(Body):
    chunks: list[tuple[int, Text]]
    progress: Optional[Text] = None


class ReleaseBody(Body):
    why: Optional[Text] = None


class FinishBody(Body):
    status: Literal["ok", "failed", "timeout", "killed", "error"]
    exit_code: Optional[int] = None
    reason: Optional[Text] = None
    record: Optional[dict[str, Any]] = None


def json_body(model, required=True):
    """``openapi_extra`` of a route whose JSON body is ``model`` (read by the route, not by FastAPI)."""
    schema = model.model_json_schema()
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": schema}}}}


def binary_body(media_type="application/gzip", what="the tar.gz"):
    return {"requestBody": {"required": True, "description": what,
                            "content": {media_type: {"schema": {"type": "string", "format": "binary"}}}}}


def query(name, schema, description, required=False):
    return {"name": name, "in": "query", "required": required, "schema": schema, "description": description}


def header(name, schema, description, required=False):
    return {"name": name, "in": "header", "required": required, "schema": schema, "description": description}


class Gzip(Response):
    """The ``response_class`` of a route that answers a tar.gz (the schema's media type)."""
    media_type = "application/gzip"


class EventStream(Response):
    media_type = "text/event-stream"


def text_answer(media_type="text/plain", description="text", schema=None):
    """``responses[200]`` of a route whose answer is not JSON."""
    return {200: {"description": description, "content": {media_type: {"schema": schema or {"type": "string"}}}}}


EVENT = {"type": "object", "required": ["data"], "description": "one server-sent event; its data is JSON text",
         "properties": {"event": {"enum": ["queued", "line", "notice", "progress", "end", "gone"]},
                        "id": {"type": "string", "description": "a line's chunk number (Last-Event-ID resumes)"},
                        "data": {"type": "string"}}}


MILESTONE = {"type": "string", "enum": ["m1", "m2", "m3", "final"]}
LEASE = header("X-Lease", {"type": "string", "pattern": "^[0-9a-f]{32}$"}, "the job's lease (its claim's answer)", True)
