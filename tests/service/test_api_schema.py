"""The API's schema as a client meets it: ``/openapi.json`` of a real serve (SQLite and PostgreSQL)
lists every API route with the service's own error shape, and schemathesis fuzzes every
operation of it with a team's and the instructor's token: no answer is a 5xx, every status, media
type and JSON answer is the one the schema gives, and no traceback reaches the server's log.

The fuzz needs schemathesis (the test extra: ``pip install -e '.[test]'``); without it, that test
is skipped saying so and the schema's own test still runs."""
import re
import time
from collections import Counter

import httpx
import pytest

from hostilekit import TRACEBACK, module_service  # noqa: F401 (svc takes it)
from pagekit import Runs

try:
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (content_type_conformance, response_headers_conformance,
                                                   response_schema_conformance, status_code_conformance)
except ImportError as exc:                          # not installed: the fuzz says so, the rest runs
    schemathesis, MISSING = None, f"schemathesis is not installed ({exc}); pip install -e '.[test]' brings it"
else:
    MISSING = None
    schemathesis.serializer.alias("application/gzip", "application/octet-stream")   # an upload: bytes as they come
    CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
              response_schema_conformance]

pytestmark = pytest.mark.service
EXAMPLES = 10                                       # per operation and token: the fuzz's bound (its time)
REFUSED_EXAMPLES = 3                                # where the token's kind is refused (403) before any input
API_ROUTE = re.compile(r"\b(GET|POST|PUT)\s+(/[^\s,\[?]+)")


def documented_routes():
    """(method, path) of every route api/__init__.py's table lists (the API as the code says it)."""
    from ece408_op.service import api
    found = set()
    for method, path in API_ROUTE.findall(api.__doc__):
        found.add((method, path.replace("{id}", "{job_id}")))
    assert len(found) >= 25, found
    return found


svc = module_service("schema")


def served_schema(svc):
    answer = httpx.get(f"{svc.url}/openapi.json", timeout=30)
    assert answer.status_code == 200, answer.text[:300]
    assert answer.headers["content-type"].startswith("application/json")
    return answer.json()


def test_the_schema_lists_every_route_with_the_services_error_shape(svc):
    schema = served_schema(svc)
    operations = {(method.upper(), path): op for path, ops in schema["paths"].items() for method, op in ops.items()}
    missing = {(m, p) for m, p in documented_routes() if (m, p) not in operations}
    assert not missing, f"routes of api/__init__.py not in /openapi.json: {sorted(missing)}"
    assert not [p for _, p in operations if not p.startswith(("/api/", "/health", "/ready"))], "pages in the schema"
    refusal = {"$ref": "#/components/schemas/Refusal"}
    for (method, path), op in operations.items():
        codes = op["responses"]
        assert "422" not in codes, f"{method} {path}: FastAPI's 422, which the service never answers"
        errors = [c for c in codes if c >= "400"]
        assert path in ("/health",) or errors, f"{method} {path} documents no refusal"
        for code in errors:
            assert codes[code]["content"]["application/json"]["schema"] == refusal, f"{method} {path} {code}"
        if path.startswith("/api/"):
            assert op["security"] == [{"bearer": []}], f"{method} {path}"
    submit = operations[("POST", "/api/jobs")]
    assert submit["requestBody"]["content"]["application/gzip"]["schema"] == {"type": "string", "format": "binary"}
    assert {p["name"] for p in submit["parameters"]} >= {"kind", "milestone", "size", "gpu", "Idempotency-Key"}
    names = operations[("POST", "/api/admin/teams")]["requestBody"]["content"]["application/json"]["schema"]
    assert names["properties"]["names"]["type"] == "array"
    job = schema["components"]["schemas"]["Job"]
    assert {"id", "team", "state", "files"} <= set(job["required"]) and job["additionalProperties"] is False
    assert schema["components"]["securitySchemes"] == {"bearer": {"type": "http", "scheme": "bearer"}}
    # a wrong answer's shape, as the schema says it
    answer = httpx.get(f"{svc.url}/api/jobs", headers={"Authorization": "Bearer nope"}, timeout=30)
    assert answer.status_code == 401 and list(answer.json()) == ["error"]


def test_the_ranking_as_json_is_json_before_the_first_record(svc):
    """The fuzz's first find: ``format=json`` answered the text line "No records yet" as JSON."""
    token = svc.add_teams("early")["early"]
    answer = httpx.get(f"{svc.url}/api/ranking", params={"format": "json"},
                       headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("application/json")
    data = answer.json()
    assert data["tables"] == [] and data["devices"] == [] and data["note"].startswith("No records yet")


@pytest.mark.skipif(schemathesis is None, reason=MISSING or "")
@pytest.mark.timeout(600)
def test_every_operation_fuzzed_answers_as_the_schema_says(svc):
    team = svc.add_teams("fuzzers")["fuzzers"]
    tokens = {"team": team, "worker": svc.worker_token("fuzz"), "instructor": svc.instructor_token}
    runs = Runs(svc.http, svc.worker_token("seeds"))
    done = runs.run(team, [[0.2], [0.3]])             # a ranked run ended with its record: the ranking has a row
    queued = runs.submit(team)["id"]                  # and one waiting (the worker's fuzz may claim it)
    schema = schemathesis.openapi.from_dict(served_schema(svc))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 25, [op.label for op in operations]
    failures, started, answered = [], time.monotonic(), {}
    for who, token in tokens.items():                 # the team first: the instructor may rotate names
        for operation in operations:
            taken = takes(who, operation)
            for job_id in (None, done, queued) if "{job_id}" in operation.path and taken else (None,):
                if job_id == queued and operation.path.endswith("/events"):
                    continue                          # a queued job's stream goes on: nothing to answer
                failure = fuzz(svc, who, token, operation, job_id, answered, EXAMPLES if taken else REFUSED_EXAMPLES)
                if failure:
                    failures.append(failure)
    seconds = time.monotonic() - started
    calls = sum(len(answers) for answers in answered.values())
    print(f"fuzzed {len(operations)} operations x {len(tokens)} tokens: {calls} requests in {seconds:.0f} s")
    for label, answers in sorted(answered.items()):
        print(f"  {label}: {dict(sorted(Counter(code for code, _ in answers).items()))}, "
              f"{sum(s for _, s in answers):.1f} s")
    log = svc.log()
    assert not failures, "\n\n".join(failures)
    unreached = [f"{who} {op.label}" for who in tokens for op in operations if f"{who} {op.label}" not in answered]
    assert not unreached, f"operations the fuzz never called: {unreached}"
    assert not TRACEBACK.search(log), log[-3000:]


def takes(who, operation):
    """Whether ``operation`` takes a token of kind ``who`` (auth.py's dependencies, as the API's table says)."""
    path = operation.path
    if path.startswith("/api/admin/"):
        return who == "instructor"
    if path.startswith("/api/worker/"):
        return who == "worker"
    if operation.method.upper() == "POST" and path == "/api/jobs":
        return who == "team"
    if path.startswith("/api/") and path != "/api/whoami":
        return who in ("team", "instructor")
    return True


def fuzz(svc, who, token, operation, job_id, answered, examples):
    """``examples`` requests to ``operation`` with ``token`` (``job_id``: that job's, the rest generated),
    each answer checked (CHECKS); its status kept in ``answered``; the failures found, or None."""
    label = f"{who} {operation.label}" + (" (a real job)" if job_id else "")

    @given(case=operation.as_strategy(path_parameters={"job_id": job_id} if job_id else None))
    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    def run(case):
        if operation.path == "/api/worker/claim" and isinstance(case.body, dict) and "wait" in case.body:
            case.body["wait"] = 0.2                   # a claim waits (up to 25 s) for a job: the fuzz's do not
        began = time.monotonic()
        answer = case.call_and_validate(base_url=svc.url, headers={"Authorization": f"Bearer {token}"},
                                        checks=CHECKS, timeout=30)
        answered.setdefault(label, []).append((answer.status_code, time.monotonic() - began))
    try:
        run()
    except (Exception, BaseExceptionGroup) as exc:     # noqa: BLE001  every operation's failure, in one report
        return f"{label}: {str(exc)[:1500]}"
    return None
