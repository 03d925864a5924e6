"""What a submission is answered, on a real service (SQLite and PostgreSQL, no worker: jobs wait):
an ``Idempotency-Key`` sent again with another submission (another kind, milestone or size) must
not be answered with the first job as though it were the one asked for; a rule's refusal kept in
memory (limits.Refusals) must not outlive what it said (a job cancelled, a deadline cleared)."""
import time

import pytest

from hostilekit import (module_service, submit_development,
                        submit_ranked)
from pagekit import ranked_upload

pytestmark = pytest.mark.service

svc = module_service("counting2", "--max-waiting", "2", "--ranked-per-hour", "100", "--development-per-hour", "100")


def team(svc, name):
    name = f"{name}-{time.monotonic_ns() % 10**9}"
    return name, svc.add_teams(name)[name]


def submit(svc, token, kind, key, milestone="m2", size=100):
    if kind == "development":
        return submit_development(svc, token, key=key)
    with svc.http(token) as http:
        return http.post("/api/jobs", params={"kind": "ranked", "milestone": milestone, "size": size},
                         content=ranked_upload(), headers={"Idempotency-Key": key})


def cancel_all(svc, name):
    for job in svc.jobs():
        if job["team"] == name and job["state"] == "queued":
            svc.admin("POST", f"/api/jobs/{job['id']}/cancel")


SECOND = {                                  # the first submission, then another under the same key
    "a development run, then a ranked m2": (("development", "m2", 100), ("ranked", "m2", 100)),
    "a ranked m2, then a development run": (("ranked", "m2", 100), ("development", "m2", 100)),
    "a ranked m2 on 100 images, then on 10000": (("ranked", "m2", 100), ("ranked", "m2", 10000)),
}


@pytest.mark.parametrize("case", sorted(SECOND))
def test_a_key_sent_again_with_another_submission_is_not_answered_with_the_first_job(svc, case):
    """The team's first submission is queued under key K; its second, another submission, is sent
    under K too (a client or script that reuses its key). The answer must not be the first job
    passed off as the second (200, another kind or size: ``submit --submit m2`` would then follow
    a development run and exit 0 as though the ranked run were done): a 4xx saying the key names
    another submission, or a job of its own that is what was asked for."""
    name, token = team(svc, "rekeyed")
    (kind1, milestone1, size1), (kind2, milestone2, size2) = SECOND[case]
    first = submit(svc, token, kind1, "the-key", milestone1, size1)
    assert first.status_code == 201, first.text
    second = submit(svc, token, kind2, "the-key", milestone2, size2)
    try:
        assert second.status_code < 500, second.text
        if second.status_code < 400:
            job = second.json()
            asked = (kind2, milestone2 if kind2 == "ranked" else None, size2 if kind2 == "ranked" else None)
            got = (job["kind"], job.get("milestone"), job.get("size"))
            assert got == asked, (f"asked for {asked} under a key already used, answered {second.status_code} with "
                                  f"the first job {job['id'][:8]}: {got}")
    finally:
        cancel_all(svc, name)


def test_a_key_is_bound_to_its_upload_another_file_under_it_is_409_the_same_file_its_job(svc):
    """The same parameters under the same key, another file: the second file must not be answered
    with the first job (it would never be queued, and the client told it was); the same file again
    (a retry) gets the first job back."""
    name, token = team(svc, "rebound")
    try:
        with svc.http(token) as http:
            post = lambda text: http.post("/api/jobs", params={"kind": "ranked", "milestone": "m2", "size": 100},
                                          content=ranked_upload(text), headers={"Idempotency-Key": "bound-key"})
            first = post("def forward(y, x, k):\n    pass\n")
            assert first.status_code == 201, first.text
            other = post("def forward(y, x, k):\n    return None\n")
            assert other.status_code == 409 and "another upload" in other.json()["error"], other.text
            again = post("def forward(y, x, k):\n    pass\n")
            assert again.status_code == 200 and again.json()["id"] == first.json()["id"], again.text
        assert len([j for j in svc.jobs() if j["team"] == name]) == 1
    finally:
        cancel_all(svc, name)


def test_a_cancelled_job_frees_its_waiting_place_at_once(svc):
    """At the limit of 2 waiting jobs a third submission is refused (429, "has 2 jobs waiting");
    the team cancels one and submits again at once: accepted. A refusal kept a few seconds in
    memory answers instead, telling the team it has 2 jobs waiting when it has 1."""
    name, token = team(svc, "cancelled-then")
    try:
        for _ in range(2):
            assert submit_ranked(svc, token).status_code == 201
        refused = submit_ranked(svc, token)
        assert refused.status_code == 429, refused.text
        waiting = [j for j in svc.jobs() if j["team"] == name and j["state"] == "queued"]
        with svc.http(token) as http:
            assert http.post(f"/api/jobs/{waiting[0]['id']}/cancel").status_code == 200
        again = submit_ranked(svc, token)
        assert again.status_code == 201, (f"with 1 job waiting of 2, a submission right after the cancel was "
                                          f"answered {again.status_code}: {again.text}")
    finally:
        cancel_all(svc, name)


def test_a_cleared_deadline_opens_ranked_runs_at_once(svc):
    """The instructor sets the m2 deadline in the past (a mistake), a team's ranked m2 is refused
    (403); the instructor clears it and the team submits again at once: accepted. A refusal kept
    in memory answers instead with a deadline that no longer exists."""
    name, token = team(svc, "deadline-cleared")
    try:
        set_past = svc.admin("PUT", "/api/admin/deadlines", json={"milestone": "m2", "deadline": "2020-01-01T00:00:00Z"})
        assert set_past.status_code == 200, set_past.text
        assert submit_ranked(svc, token).status_code == 403
        assert svc.admin("PUT", "/api/admin/deadlines", json={"milestone": "m2", "deadline": None}).status_code == 200
        again = submit_ranked(svc, token)
        assert again.status_code == 201, (f"right after the deadline was cleared a ranked m2 was answered "
                                          f"{again.status_code}: {again.text}")
    finally:
        svc.admin("PUT", "/api/admin/deadlines", json={"milestone": "m2", "deadline": None})
        cancel_all(svc, name)


def test_the_same_submission_under_its_key_is_still_the_same_job(svc):
    """A control of the first test: the same submission sent again under its key is the job it
    made (200 or 201), one job stored."""
    name, token = team(svc, "same-again")
    try:
        first = submit(svc, token, "ranked", "k", "m2", 100)
        again = submit(svc, token, "ranked", "k", "m2", 100)
        assert first.status_code == 201 and again.status_code in (200, 201), (first.text, again.text)
        assert again.json()["id"] == first.json()["id"]
        assert len([j for j in svc.jobs() if j["team"] == name]) == 1
    finally:
        cancel_all(svc, name)
