"""A curious team against a real service (SQLite and PostgreSQL): another team's jobs, transcripts,
streams, pages and plots by a leaked id, session fixation and CSRF on the pages, a team's token
and session on the workers' and the instructor's routes, cancel storms, a queue flooded by one
team (the fair claim must hold: a team with one job waits behind one job at most), many logins, file
lists that swell every job listing, wrong tokens from an address other teams share."""
import re
import threading
import time

import httpx
import pytest

from hostilekit import (CONFIG, Worker, bystander_during, csrf_of, login, member, module_service, percentile,
                        submit_development, submit_ranked, tar_gz, timed, tracebacks)

pytestmark = [pytest.mark.service, pytest.mark.slow]


svc = module_service("access", "--max-waiting", "60", "--development-per-hour", "1000", "--ranked-per-hour", "1000",
                     "--max-failures", "100000")


def session_get(svc, cookie, path, **kwargs):
    return httpx.get(svc.url + path, cookies={"ece408_session": cookie}, timeout=30, follow_redirects=False, **kwargs)


def session_post(svc, cookie, path, data):
    return httpx.post(svc.url + path, cookies={"ece408_session": cookie}, data=data, timeout=30,
                      follow_redirects=False)


# ---------------------------------------------------------------------------- another team's things

def test_another_team_s_job_by_a_leaked_id_opens_nothing(svc):
    """Team B knows team A's job id (a screenshot, a shared log): every API route and page of that
    job answers as for no job at all, the id in any case or with anything around it; A's job runs on."""
    tokens = svc.add_teams("owner-a", "snoop-b")
    worker = Worker(svc)
    job_id = submit_ranked(svc, tokens["owner-a"]).json()["id"]
    claim = worker.claim(wait=5)
    assert claim["job"]["id"] == job_id
    assert worker.lines(claim, ["owner-a's secret line\n"]).status_code == 200
    cookie = login(svc.url, tokens["snoop-b"])
    csrf = csrf_of(svc.url, cookie, "/team")
    problems = []
    for variant in (job_id, job_id.upper(), f"{job_id}/", f" {job_id}", f"{job_id}%00", f"{job_id[:31]}"):
        with svc.http(tokens["snoop-b"]) as http:
            for method, path in (("GET", f"/api/jobs/{variant}"), ("GET", f"/api/jobs/{variant}/transcript"),
                                 ("GET", f"/api/jobs/{variant}/events"), ("POST", f"/api/jobs/{variant}/cancel")):
                answer = http.request(method, path, timeout=10)
                if answer.status_code not in (404, 307, 405) or "secret" in answer.text:
                    problems.append(f"API {method} {path}: {answer.status_code} {answer.text[:80]}")
        for path in (f"/jobs/{variant}", f"/jobs/{variant}/events", f"/jobs/{variant}/transcript"):
            answer = session_get(svc, cookie, path)
            if answer.status_code not in (404, 307) or "secret" in answer.text:
                problems.append(f"page {path}: {answer.status_code}")
        answer = session_post(svc, cookie, f"/jobs/{variant}/cancel", {"csrf": csrf})
        if answer.status_code not in (404, 307, 405):
            problems.append(f"page cancel {variant}: {answer.status_code}")
    for path in ("/team?name=owner-a", "/team/plot.svg?name=owner-a&milestone=m2&size=100", "/admin",
                 "/admin/ranking.csv?milestone=m2&size=100"):
        answer = session_get(svc, cookie, path)
        if answer.status_code not in (403, 404) or "owner-a" in answer.text.replace("name=owner-a", ""):
            problems.append(f"page {path}: {answer.status_code}")
    with svc.http(tokens["snoop-b"]) as http:
        listed = http.get("/api/jobs", params={"team": "owner-a", "limit": 1000}).json()["jobs"]
        if any(j["id"] == job_id for j in listed):
            problems.append("/api/jobs?team=owner-a lists owner-a's job to snoop-b")
    job = svc.job(job_id)
    if job["state"] != "running" or job["cancel_requested"]:
        problems.append(f"owner-a's job was touched: {job['state']}, cancel requested {job['cancel_requested']}")
    worker.finish(claim)
    worker.close()
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------- sessions, CSRF, routes of others

def test_a_session_cannot_be_fixed_or_carried_over(svc):
    """A browser holding team X's session (planted by X) logs in with team Y's token: Y gets a new
    session value, and X's value never opens Y's pages. A cookie value made up by X opens nothing;
    a login form posted without its pair (another site's form) is refused."""
    tokens = svc.add_teams("fixer-x", "victim-y")
    planted = login(svc.url, tokens["fixer-x"])
    with httpx.Client(base_url=svc.url, timeout=30, cookies={"ece408_session": planted}) as browser:
        form = browser.get("/login")
        if form.status_code == 303:                                   # the planted session is logged in: log in anyway
            form = httpx.get(svc.url + "/login", timeout=30)
            browser.cookies.set("ece408_login", form.cookies["ece408_login"], path="/login")
        pair = re.search(r'name="login" value="([^"]+)"', form.text).group(1)
        answer = browser.post("/login", data={"token": tokens["victim-y"], "login": pair})
        given = answer.cookies.get("ece408_session")
    assert answer.status_code == 303 and given and given != planted
    page = session_get(svc, planted, "/team")
    assert "victim-y" not in page.text
    made_up = "A" * 43
    assert session_get(svc, made_up, "/team").status_code == 303
    forged = httpx.post(svc.url + "/login", data={"token": tokens["victim-y"], "login": "p" * 32}, timeout=30)
    assert forged.status_code == 403 and "ece408_session" not in forged.cookies


def test_csrf_fields_are_checked_on_every_form(svc):
    """Each form that changes something, posted with no CSRF field, another session's field, a
    field of the right length but wrong, or as JSON: refused (403/400), nothing changed."""
    tokens = svc.add_teams("csrf-team", "csrf-other")
    team = login(svc.url, tokens["csrf-team"])
    other = login(svc.url, tokens["csrf-other"])
    admin = login(svc.url, svc.instructor_token)
    job_id = submit_development(svc, tokens["csrf-team"]).json()["id"]
    wrong = {"none": {}, "another session's": {"csrf": csrf_of(svc.url, other, "/team")}, "made up": {"csrf": "0" * 32}}
    problems = []
    for label, extra in wrong.items():
        for cookie, path, data in ((team, f"/jobs/{job_id}/cancel", {}), (team, "/logout", {}),
                                   (admin, "/admin/names", {"names": "anonymised"}),
                                   (admin, "/admin/deadlines", {"milestone": "m2", "deadline": "2020-01-01T00:00:00Z"}),
                                   (admin, "/admin/teams/revoke", {"name": "csrf-team"}),
                                   (admin, f"/admin/jobs/{job_id}/cancel", {})):
            answer = session_post(svc, cookie, path, {**data, **extra})
            if answer.status_code not in (400, 403):
                problems.append(f"{path} with {label} CSRF field: {answer.status_code}")
    assert svc.job(job_id)["state"] == "queued", "the job was cancelled by a forged form"
    assert session_get(svc, team, "/team").status_code == 200, "the team was logged out or revoked by a forged form"
    assert svc.admin("GET", "/api/deadlines").json()["deadlines"] == []
    svc.admin("POST", f"/api/jobs/{job_id}/cancel")
    assert not problems, "\n".join(problems)


def test_a_team_s_token_and_session_open_no_worker_or_instructor_route(svc):
    token = svc.add_teams("climber")["climber"]
    job_id = submit_ranked(svc, token).json()["id"]
    cookie = login(svc.url, token)
    csrf = csrf_of(svc.url, cookie, "/team")
    problems = []
    with svc.http(token) as http:
        for method, path, body in (
                ("POST", "/api/worker/claim", {"slot": "x", "wait": 0}),
                ("GET", f"/api/worker/jobs/{job_id}/upload", None), ("POST", f"/api/worker/jobs/{job_id}/chunks",
                                                                     {"chunks": [[5, "forged\n"]]}),
                ("POST", f"/api/worker/jobs/{job_id}/heartbeat", None), ("POST", f"/api/worker/jobs/{job_id}/finish",
                                                                         {"status": "ok"}),
                ("POST", f"/api/worker/jobs/{job_id}/release", {}), ("POST", "/api/admin/teams", {"names": ["x"]}),
                ("GET", "/api/admin/teams", None), ("POST", "/api/admin/workers", {"name": "mine"}),
                ("PUT", "/api/admin/deadlines", {"milestone": "m2", "deadline": None}),
                ("GET", "/api/jobs?team=someone-else", None)):
            answer = http.request(method, path, json=body, headers={"X-Lease": "0" * 32})
            allowed = path.startswith("/api/jobs?")
            if (answer.status_code != 403 and not allowed) or (allowed and answer.status_code != 200):
                problems.append(f"{method} {path}: {answer.status_code}")
    for path, data in (("/admin/names", {"names": "anonymised"}), ("/admin/teams/revoke", {"name": "climber"}),
                       (f"/admin/jobs/{job_id}/cancel", {}), ("/admin/deadlines", {"milestone": "m2",
                                                                                  "deadline": "2030-01-01T00:00:00Z"})):
        answer = session_post(svc, cookie, path, {**data, "csrf": csrf})
        if answer.status_code != 403:
            problems.append(f"page {path}: {answer.status_code}")
    assert svc.job(job_id)["state"] == "queued"
    svc.admin("POST", f"/api/jobs/{job_id}/cancel")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------- storms and floods

@pytest.mark.timeout(300)
def test_a_cancel_storm_ends_each_job_once_and_slows_no_one(svc):
    """A team sends 200 cancels at once of its running job and 200 of its ten waiting jobs (and 100
    of another team's job): no 500; each job ends once (one cancellation line); the other team's
    requests stay fast; its job untouched."""
    tokens = svc.add_teams("stormer", "calm")
    worker = Worker(svc)
    running = submit_ranked(svc, tokens["stormer"]).json()["id"]
    claim = worker.claim(wait=5)
    assert claim["job"]["id"] == running
    waiting = [submit_development(svc, tokens["stormer"]).json()["id"] for _ in range(10)]
    calm = submit_development(svc, tokens["calm"]).json()["id"]
    quiet = [timed("GET", svc.url, "/api/jobs", token=tokens["calm"])[1] for _ in range(10)]
    log_before = len(svc.log())
    statuses = []

    def storm(ids):
        with httpx.Client(base_url=svc.url, headers={"Authorization": f"Bearer {tokens['stormer']}"},
                          timeout=60) as http:
            for job_id in ids:
                statuses.append(http.post(f"/api/jobs/{job_id}/cancel").status_code)
    targets = [running] * 200 + [waiting[i % 10] for i in range(200)] + [calm] * 100
    during = [took for _, took in bystander_during(
        svc, tokens["calm"], [threading.Thread(target=storm, args=(targets[i::20],)) for i in range(20)])]
    worker.lines(claim, ["after the storm\n"])
    worker.finish(claim)
    worker.close()
    problems = [f"{statuses.count(s)} cancels answered {s}" for s in set(statuses) if s >= 500]
    for job_id in [running] + waiting:
        text = svc.transcript(job_id)
        ends = [line for line in text.splitlines() if line.startswith("* Cancelled")]
        if len(ends) != 1:
            problems.append(f"job {job_id} has {len(ends)} cancellation lines ({svc.job(job_id)['state']})")
    if svc.job(calm)["state"] != "queued":
        problems.append("the calm team's job was cancelled by another team")
    if max(during) > 2.0:
        problems.append(f"the calm team's requests: quiet p50 {percentile(quiet, 50):.3f} s, during the storm max "
                        f"{max(during):.3f} s")
    problems += tracebacks(svc.log()[log_before:])
    svc.admin("POST", f"/api/jobs/{calm}/cancel")
    assert not problems, "\n".join(problems)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("floods", [1, 3])
def test_a_flooded_queue_stays_fair(svc, floods):
    """``floods`` teams queue 50 (or 20 each) development jobs; then a team with one job submits:
    it is told at most ``floods`` jobs are ahead of it, and the worker's next claims reach it
    within ``floods`` + 1 claims (each flooding team one job at most)."""
    names = [f"flood{floods}-{i}" for i in range(floods)]
    tokens = svc.add_teams(*names, f"single{floods}")
    per = 50 if floods == 1 else 20
    for name in names:
        for _ in range(per):
            assert submit_development(svc, tokens[name]).status_code == 201
    answer = submit_development(svc, tokens[f"single{floods}"])
    single = answer.json()["id"]
    place = answer.json().get("place")
    worker = Worker(svc)
    order = []
    try:
        for _ in range(floods + 3):
            claim = worker.claim(wait=5)
            if claim is None:
                break
            order.append(claim["job"]["team"])
            worker.finish(claim)
            if claim["job"]["id"] == single:
                break
    finally:
        worker.close()
        for job in svc.jobs():
            if job["state"] == "queued":
                svc.admin("POST", f"/api/jobs/{job['id']}/cancel")
    assert place is not None and place <= floods, f"told {place} jobs are ahead"
    assert f"single{floods}" in order[:floods + 1], f"claimed in this order: {order}"


@pytest.mark.timeout(300)
@pytest.mark.serial                                 # a page under 2 s: alone
def test_many_logins_keep_the_sessions_bounded(svc):
    """One team logs in 150 times (a script in a loop): the pages stay fast, and its live sessions
    stay bounded (at most 100; the oldest let go); another address still logs in."""
    token = svc.add_teams("logger")["logger"]
    cookies = [login(svc.url, token) for _ in range(150)]
    status, took = timed("GET", svc.url, "/team", cookie=cookies[-1])
    assert status == 200 and took < 2.0
    live = sum(1 for c in cookies if session_get(svc, c, "/team").status_code == 200)
    assert login(svc.url, token, source="127.0.0.4")                   # another address is not held back
    assert live <= 100, f"{live} of 150 sessions of one team are live at once"


@pytest.mark.timeout(200)
@pytest.mark.serial                                 # the job list under 1 s: alone
def test_a_team_s_file_lists_do_not_swell_everyone_s_job_lists(svc):
    """A team queues ten development runs of 9,890 empty files with long names (100 KB each as
    sent): the instructor's job list (``jobs list``, 50 jobs) and page stay small and fast; a job's
    file list is not carried by every listing."""
    token = svc.add_teams("many-files")["many-files"]
    body = tar_gz([member("rai_build.yml", CONFIG)] + [member(f"d{i // 100}/{'n' * 200}{i}", b"")   # with its 99
                                                       for i in range(9_890)], level=9)       # folders: 9,990 entries
    assert len(body) < 200_000
    jobs = [submit_development(svc, token, body=body) for _ in range(10)]
    assert all(j.status_code == 201 for j in jobs), [j.text[:100] for j in jobs if j.status_code != 201]
    admin = login(svc.url, svc.instructor_token)
    try:
        with svc.http(svc.instructor_token) as http:
            started = time.monotonic()
            listing = http.get("/api/jobs")
            took = time.monotonic() - started
        page = [timed("GET", svc.url, "/admin", cookie=admin)[1] for _ in range(3)]
        assert listing.status_code == 200
        assert len(listing.content) < 2 << 20, f"the instructor's job list is {len(listing.content) >> 20} MiB"
        assert took < 1.0 and min(page) < 1.0, f"the job list took {took:.2f} s, /admin {min(page):.2f} s"
    finally:
        for job in jobs:
            svc.admin("POST", f"/api/jobs/{job.json()['id']}/cancel")


def test_wrong_tokens_from_a_shared_address_lock_out_no_other_team(running_service, tmp_path):
    """Students behind one campus NAT share an address: one of them sends 25 wrong tokens (the
    limit is 20 a minute); another team at that address, with its valid token, is still served
    (the API and the login form), while the guesser stays limited."""
    svc = running_service.on(tmp_path / "nat", "sqlite", None)
    token = svc.add_teams("behind-nat")["behind-nat"]
    nat = "127.0.0.6"
    guesses = [timed("GET", svc.url, "/api/jobs", token=f"ece408_{i:016x}_{'G' * 43}", source=nat)[0]
               for i in range(25)]
    assert guesses[:20] == [401] * 20 and 429 in guesses[20:], guesses
    status, _ = timed("GET", svc.url, "/api/jobs", token=token, source=nat)
    assert status == 200, f"a valid token at the shared address: {status}"
    assert login(svc.url, token, source=nat)
