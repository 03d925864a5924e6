"""Numbers the worker routes take as they come, on a real service (SQLite and PostgreSQL): a
claim's ``wait`` and a finish's ``exit_code`` are checked for their type only, so an integer past
what a float or a database column holds reaches ``float()`` or the database and the answer is a
500 (docs/service.md: "Malformed requests get a 4xx with a one-line JSON error ... never a 500").
The first round's table of values sent these fields with a lease nobody held (refused before the
database) or skipped waits above a second; here each is sent where it is used."""
import json

import pytest

from hostilekit import (Worker, is_error_body, module_service, submit_development,
                        tracebacks)

pytestmark = pytest.mark.service

svc = module_service("requests2", "--development-per-hour", "1000", "--max-waiting", "100")


def answered(response):
    """A problem line, or None where the answer is below 500 and a 4xx is the service's one line."""
    if response.status_code >= 500:
        return f"{response.status_code} {response.text[:100]}"
    if response.status_code >= 400 and not is_error_body(response.status_code, response.headers, response.content):
        return f"{response.status_code} not a one-line error: {response.text[:100]}"
    return None


@pytest.mark.parametrize("wait", [10**400, -10**400], ids=["ten to the 400", "minus ten to the 400"])
def test_a_claim_s_wait_past_a_float_is_a_4xx(svc, wait):
    """``{"wait": 10**400}``: JSON's integers have no bound; ``float()`` of this one raises
    OverflowError, which the route does not take for a bad value."""
    worker = Worker(svc)
    log_before = len(svc.log())
    try:
        body = b'{"slot": "s", "gpu": false, "device": "d", "wait": ' + str(wait).encode() + b"}"
        answer = worker.http.post("/api/worker/claim", content=body, headers={"Content-Type": "application/json"})
    finally:
        worker.close()
    problem = answered(answer)
    assert problem is None and not tracebacks(svc.log()[log_before:]), problem


@pytest.mark.parametrize("code", [2**31, 2**63, -2**63 - 1, 10**30])
def test_a_finish_s_exit_code_past_a_column_is_a_4xx(svc, code):
    """A development run ended by the worker that holds it, its ``exit_code`` an integer that no
    INTEGER column stores (2^31 already on PostgreSQL, 2^63 on SQLite): a 4xx, and the worker's
    next finish with a plain code ends the job (nothing half-written)."""
    token = svc.add_teams(f"exit-{abs(code) % 10**6}-{len(str(code))}").popitem()[1]
    worker = Worker(svc)
    log_before = len(svc.log())
    try:
        job_id = submit_development(svc, token).json()["id"]
        claim = worker.claim(wait=5)
        assert claim["job"]["id"] == job_id
        answer = worker.http.post(f"/api/worker/jobs/{job_id}/finish", headers={
            "X-Lease": claim["lease"], "Content-Type": "application/json"},
            content=json.dumps({"status": "failed", "exit_code": code, "reason": None, "record": None}).encode())
        problem = answered(answer)
        again = worker.call(claim, "finish", body={"status": "failed", "exit_code": 1, "reason": None, "record": None})
    finally:
        worker.close()
    assert problem is None and not tracebacks(svc.log()[log_before:]), problem
    assert again.status_code == 200 and svc.job(job_id)["state"] == "done", again.text
