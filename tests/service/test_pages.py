"""The class's pages, against the application in this process (Starlette's TestClient, a SQLite
file of the test's own): sessions and their cookie, who may open what, escaping, the ranking by
``ranking``'s rules, pseudonyms (also through /api/ranking), the instructor's actions and CSV with
the grade rule, plots with and without matplotlib, the job page's live events, and the render
benchmark at a small scale. Runs are stored through the service's own routes (tests/pagekit.py:
a team submits, a worker token claims, posts lines and ends the job with a record); the browser
tests (test_pages_browser.py) run a real server, a real worker and Chromium."""
import csv
import io
import json
import re
from contextlib import contextmanager

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("jinja2")

from pagekit import Runs, ranked_upload, record_of                           # noqa: E402

from ece408_op.service import pages as pages_module                        # noqa: E402
from ece408_op.service import plots, sessions                              # noqa: E402
from ece408_op.service.app import make_app                                  # noqa: E402
from ece408_op.service.state import Service, Settings                      # noqa: E402
from ece408_op.service.db import Database                                  # noqa: E402
from ece408_op.service.jobs import Rules                                   # noqa: E402
from ece408_op.service.tokens import new_token                             # noqa: E402

HOSTILE = "<script>alert('name')</script><img src=x onerror=alert(1)>"


class Browser:
    """One browser's cookies over the shared TestClient."""

    def __init__(self, client):
        self.client = client
        self.jar = httpx.Cookies()

    def request(self, method, url, **kwargs):
        self.client.cookies = self.jar
        try:
            answer = self.client.request(method, url, follow_redirects=False, **kwargs)
        finally:
            self.jar = httpx.Cookies(self.client.cookies)
            self.client.cookies = httpx.Cookies()
        return answer

    def get(self, url, **kwargs):
        return self.request("GET", url, **kwargs)

    def post(self, url, **kwargs):
        return self.request("POST", url, **kwargs)

    def login(self, token):
        form = self.get("/login")
        pair = re.search(r'name="login" value="([^"]+)"', form.text).group(1)
        return self.post("/login", data={"login": pair, "token": token})

    def csrf(self, page="/"):
        return re.search(r'name="csrf" value="([0-9a-f]+)"', self.get(page).text).group(1)

    @property
    def session(self):
        return self.jar.get(sessions.COOKIE)


class Class:
    """A service (the application in this process) with teams, a worker token and the instructor's."""

    def __init__(self, tmp_path, rules=None, names=("alpha", "beta")):
        from fastapi.testclient import TestClient
        self.service = Service(Database(str(tmp_path / "service.db")),
                               Settings(rules=rules or Rules(), upload_dir=str(tmp_path / "uploads")))
        self.tokens = {t["name"]: t["token"] for t in self.service.tokens.add_teams(list(names))}
        self.worker = self.service.tokens.worker_token("test-worker")
        self.instructor = new_token()[2]
        self.service.tokens.register("instructor", "instructor", self.instructor)
        self.client = TestClient(make_app(self.service))
        self.runs = Runs(self.http, self.worker)

    @contextmanager
    def http(self, token):
        client = self.client

        class Authed:
            def post(self, path, **kwargs):
                return client.post(path, headers={"Authorization": f"Bearer {token}", **kwargs.pop("headers", {})},
                                   **kwargs)

            def get(self, path, **kwargs):
                return client.get(path, headers={"Authorization": f"Bearer {token}", **kwargs.pop("headers", {})},
                                  **kwargs)
        yield Authed()

    def browser(self, token=None):
        browser = Browser(self.client)
        if token is not None:
            assert browser.login(token).status_code == 303
        return browser

    def add_team(self, name):
        (added,) = self.service.tokens.add_teams([name])                # its name as stored (escaped)
        self.tokens[added["name"]] = added["token"]
        return added["token"]


@pytest.fixture
def klass(tmp_path):
    k = Class(tmp_path)
    with k.client:
        yield k


def table_rows(html):
    """Every table row's cells, as text."""
    return [[text_of(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", html, re.S) if "<td" in row]


def text_of(html):
    """The page's text as a person reads it (tags dropped, entities decoded)."""
    import html as html_module
    return html_module.unescape(re.sub(r"<[^>]+>", "", html))


# ---------------------------------------------------------------------------- sessions

def test_every_page_needs_a_session(klass):
    anonymous = klass.browser()
    for path in ("/", "/team", "/admin", "/jobs/" + "0" * 32, "/team?name=alpha"):
        answer = anonymous.get(path)
        assert answer.status_code == 303 and answer.headers["location"] == "/login", path
    for path in ("/ranking/events?milestone=m2&size=100", "/jobs/" + "0" * 32 + "/events",
                 "/team/plot.svg?milestone=m2&size=100", "/admin/ranking.csv?milestone=m2&size=100"):
        assert anonymous.get(path).status_code in (401, 303), path
    login = anonymous.get("/login")
    assert login.status_code == 200 and 'type="password"' in login.text
    assert login.headers["content-security-policy"].startswith("default-src 'self'; script-src 'self'")


def test_login_gives_an_http_only_strict_cookie_and_logout_ends_the_session(klass):
    browser = klass.browser()
    answer = browser.login(klass.tokens["alpha"])
    assert answer.status_code == 303 and answer.headers["location"] == "/team"
    cookie = [c for c in answer.headers.get_list("set-cookie") if c.startswith(sessions.COOKIE + "=")][0]
    attributes = {a.strip().split("=")[0].lower() for a in cookie.split(";")[1:]}
    assert {"httponly", "path", "samesite", "max-age"} <= attributes and "secure" not in attributes   # plain HTTP
    assert "samesite=strict" in cookie.lower()
    assert klass.tokens["alpha"] not in cookie and klass.tokens["alpha"].split("_", 2)[2] not in cookie
    old = browser.session
    assert browser.get("/team").status_code == 200
    out = browser.post("/logout", data={"csrf": browser.csrf("/team")})
    assert out.status_code == 303 and out.headers["location"] == "/login"
    assert browser.get("/team").status_code == 303                       # the browser dropped the cookie
    replay = klass.browser()
    replay.jar.set(sessions.COOKIE, old)
    assert replay.get("/team").status_code == 303                        # and the server the session


def test_the_cookie_is_secure_over_tls(tmp_path):
    from fastapi.testclient import TestClient
    k = Class(tmp_path)
    with TestClient(make_app(k.service), base_url="https://rai.example.edu") as client:
        k.client = client
        answer = k.browser().login(k.tokens["alpha"])
        cookie = [c for c in answer.headers.get_list("set-cookie") if c.startswith(sessions.COOKIE + "=")][0]
        assert "secure" in cookie.lower()


def test_a_page_answers_head_as_get(klass):
    anonymous, alpha = klass.browser(), klass.browser(klass.tokens["alpha"])
    for browser, path, status in ((anonymous, "/login", 200), (anonymous, "/", 303), (alpha, "/", 200),
                                  (alpha, "/team", 200), (anonymous, "/static/style.css", 200)):
        answer = browser.request("HEAD", path)
        assert answer.status_code == status and answer.content == b"", path
        assert answer.status_code == browser.get(path).status_code, path


def test_wrong_tokens_do_not_log_in_and_guessing_is_limited(klass):
    browser = klass.browser()
    assert browser.login("ece408_0123456789abcdef_" + "A" * 43).status_code == 401
    assert "not accepted" in browser.login("not a token").text
    worker = browser.login(klass.worker)
    assert worker.status_code == 403 and "worker" in worker.text and sessions.COOKIE not in worker.headers.get(
        "set-cookie", "")
    for _ in range(20):
        browser.login("ece408_0123456789abcdef_" + "B" * 43)
    limited = browser.login("ece408_0123456789abcdef_" + "C" * 43)        # a 21st guess: refused, for a minute
    assert limited.status_code == 429 and "too many failed token checks" in limited.text
    assert browser.login(klass.tokens["alpha"]).status_code == 303      # a classmate's right token still passes
    assert browser.session is not None


def test_a_login_form_posted_from_another_site_is_refused(klass):
    browser = klass.browser()
    answer = browser.post("/login", data={"login": "forged", "token": klass.tokens["alpha"]})
    assert answer.status_code == 403 and browser.session is None


def test_revoking_or_rotating_a_token_ends_its_sessions(klass):
    alpha, beta = klass.browser(klass.tokens["alpha"]), klass.browser(klass.tokens["beta"])
    klass.service.tokens.revoke_team("alpha")
    klass.service.tokens.rotate_team("beta")
    assert alpha.get("/team").status_code == 303 and beta.get("/team").status_code == 303


def test_forms_need_their_csrf_field(klass):
    job = klass.runs.submit(klass.tokens["alpha"])
    alpha = klass.browser(klass.tokens["alpha"])
    assert alpha.post(f"/jobs/{job['id']}/cancel", data={"csrf": ""}).status_code == 403
    assert alpha.post(f"/jobs/{job['id']}/cancel", data={"csrf": "0" * 32}).status_code == 403
    beta = klass.browser(klass.tokens["beta"])                           # another session's field
    assert alpha.post(f"/jobs/{job['id']}/cancel", data={"csrf": beta.csrf()}).status_code == 403
    assert alpha.post("/logout", data={"csrf": ""}).status_code == 403
    ok = alpha.post(f"/jobs/{job['id']}/cancel", data={"csrf": alpha.csrf()})
    assert ok.status_code == 303
    assert "cancelled" in alpha.get(f"/jobs/{job['id']}").text


# ---------------------------------------------------------------------------- who sees what

def test_a_team_opens_only_its_own_page_and_jobs(klass):
    mine = klass.runs.run(klass.tokens["alpha"], [[0.01], [0.02]])
    theirs = klass.runs.run(klass.tokens["beta"], [[0.03], [0.04]], lines=["beta's secret line\n"])
    alpha = klass.browser(klass.tokens["alpha"])
    assert alpha.get(f"/jobs/{mine}").status_code == 200
    for path in (f"/jobs/{theirs}", f"/jobs/{theirs}/events", f"/jobs/{theirs}/transcript", "/team?name=beta",
                 "/team/plot.svg?milestone=m2&size=100&name=beta"):
        answer = alpha.get(path)
        assert answer.status_code == 404 and "secret" not in answer.text, path
    assert alpha.post(f"/jobs/{theirs}/cancel", data={"csrf": alpha.csrf()}).status_code == 404
    assert alpha.get("/admin").status_code == 403
    assert alpha.get("/admin/ranking.csv?milestone=m2&size=100").status_code == 403
    assert alpha.post("/admin/names", data={"csrf": alpha.csrf(), "names": "anonymised"}).status_code == 403
    team = alpha.get("/team").text
    assert mine in team and theirs not in team
    # changing the cookie: another team's name, a forged value, the session of a token of the instructor's kind
    for forged in ("beta", "alpha", alpha.session[:-1] + ("A" if alpha.session[-1] != "A" else "B"),
                   sessions.digest(alpha.session)[:43], "x" * 43):
        other = klass.browser()
        other.jar.set(sessions.COOKIE, forged)
        assert other.get("/team").status_code == 303 and other.get(f"/jobs/{mine}").status_code == 303, forged


def test_the_instructor_opens_every_team_page_and_job(klass):
    theirs = klass.runs.run(klass.tokens["beta"], [[0.03], [0.04]])
    instructor = klass.browser(klass.instructor)
    assert instructor.get("/team").headers["location"] == "/admin"
    page = instructor.get("/team?name=beta")
    assert page.status_code == 200 and theirs in page.text
    assert instructor.get(f"/jobs/{theirs}").status_code == 200
    assert instructor.get("/team?name=nobody").status_code == 404


# ---------------------------------------------------------------------------- escaping

def test_markup_and_control_characters_from_a_team_are_text(klass):
    token = klass.add_team(HOSTILE + "\x1b[31m")
    lines = ["<script>alert('transcript')</script>\n", "<img src=x onerror=alert(2)>\n",
             "\x1b[31mred\x1b[0m and a bell\x07 and \r a carriage return\n", "bidi \u202e reversed\n"]
    job = klass.runs.run(token, [[0.01], [0.02]], lines=lines, device="<b>GPU</b>", correct=False,
                         reason="<i>wrong</i>")
    from urllib.parse import quote
    for viewer, paths in ((klass.browser(token), ("/", f"/jobs/{job}", "/team")),
                          (klass.browser(klass.instructor), ("/", f"/jobs/{job}", "/admin",
                                                             "/team?name=" + quote(HOSTILE + "\\x1b[31m")))):
        for path in paths:
            answer = viewer.get(path)
            assert answer.status_code == 200, path
            html = answer.text
            assert "<script>alert" not in html and "<img src=x" not in html and "<b>GPU" not in html, path
            assert "\x1b" not in html and "\x07" not in html and "\u202e" not in html, path
        page = viewer.get(f"/jobs/{job}").text
        assert "&lt;script&gt;alert(&#39;name&#39;)" in page
        assert "&lt;script&gt;alert(&#39;transcript&#39;)&lt;/script&gt;" in page
        assert "\\x1b[31mred\\x1b[0m and a bell\\x07 and \\x0d a carriage return" in page
        assert "bidi \\u202e reversed" in page
        assert "&lt;i&gt;wrong&lt;/i&gt;" in page
    team_page = klass.browser(token).get("/team").text
    assert "&lt;script&gt;alert(&#39;name&#39;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;\\x1b[31m" in team_page
    # the live events carry the same text: JSON strings of escaped text, added as text by the page
    with klass.client.stream("GET", f"/jobs/{job}/events?after=-1",
                             cookies={sessions.COOKIE: klass.browser(token).session}) as stream:
        events = read_events(stream)
    texts = [json.loads(data) for kind, data in events if kind == "line"]
    assert "\\x1b[31mred\\x1b[0m and a bell\\x07 and \\x0d a carriage return\n" in texts
    assert "<script>alert('transcript')</script>\n" in texts           # text: the page adds it as a text node
    verdict = [json.loads(data) for kind, data in events if kind == "verdict"][0]
    assert "Not valid" in verdict and "&lt;i&gt;wrong&lt;/i&gt;" in verdict and "<i>" not in verdict


def read_events(stream):
    """[(event, data)] of a server-sent event stream until its end."""
    events, kind, data = [], None, []
    for line in stream.iter_lines():
        if line.startswith("event:"):
            kind = line.split(":", 1)[1].strip()
        elif line.startswith("data:"):
            data.append(line.split(":", 1)[1].strip())
        elif not line and kind:
            events.append((kind, "\n".join(data)))
            if kind == "end":
                break
            kind, data = None, []
    return events


# ---------------------------------------------------------------------------- the ranking

def test_the_ranking_page_ranks_as_ranking_does(klass):
    gamma = klass.add_team("gamma")
    klass.runs.run(klass.tokens["alpha"], [[0.03], [0.02]])
    klass.runs.run(klass.tokens["alpha"], [[0.01], [0.01]])                 # alpha's best: 0.02
    klass.runs.run(klass.tokens["beta"], [[0.001], [0.001]], correct=False)  # not valid: beta not ranked
    klass.runs.run(klass.tokens["beta"], [[0.02], [0.02]])
    klass.runs.run(gamma, [[0.004, 0.005], [0.003]], model_names=("ece408-2019", "ece408-low"))   # two layers
    klass.runs.run(klass.tokens["alpha"], [[0.5], [0.5]], milestone="m2", size=1000)   # another board
    page = klass.browser(klass.instructor).get("/?milestone=m2&size=100").text
    with klass.http(klass.instructor) as http:
        expected = json.loads(http.get("/api/ranking", params={"milestone": "m2", "size": 100,
                                                                "format": "json"}).text)["ranking"]
    assert [r["team"] for r in expected] == ["gamma", "alpha", "beta"]
    shown = re.findall(r'<td class="team">([^<]+)', page)
    assert [s.strip() for s in shown] == ["gamma", "alpha", "beta"]
    for row in expected:
        assert f"{row['op_time']:.6f}" in page
    assert "0.004000 + 0.005000" in page                                    # per layer, where a model has several
    assert "3 team(s); 1 run(s) not valid" in page
    assert 'href="/?milestone=m2&amp;size=1000"' in page                    # the other board
    default = klass.browser(klass.instructor).get("/").text                # the newest board by default
    assert "m2, 1000 images" in default and "0.500000" in default


def test_the_ranking_page_shows_the_spread_and_a_tie_within_noise(klass):
    """The total's cell: the median with its standard error and the repeats (team/repeats.py), ≈
    where the team is within the noise of the one above; a run without repeats: (n=1)."""
    gamma = klass.add_team("gamma")
    klass.runs.run(klass.tokens["alpha"], [[0.02], [0.03]], timing=[[0.0200, 0.0201, 0.0199], [0.0300] * 3])
    klass.runs.run(klass.tokens["beta"], [[0.02], [0.03]], timing=[[0.0201, 0.0202, 0.0200], [0.0300] * 3])
    klass.runs.run(gamma, [[0.05], [0.05]])
    page = klass.browser(klass.instructor).get("/?milestone=m2&size=100").text
    cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r'<td class="num strong">(.*?)</td>', page)]
    assert re.fullmatch(r"0\.050000 ± 0\.0000\d\d \(n=3\)", cells[0]) and cells[1].startswith("≈ 0.050")
    assert cells[2] == "0.100000 (n=1)" and "total Op Time (s, median ± s.e.)" in page
    with klass.http(klass.instructor) as http:
        ranked = json.loads(http.get("/api/ranking", params={"milestone": "m2", "size": 100, "format": "json"}).text)[
            "ranking"]
    assert [(r["team"], r["within_noise_of_above"]) for r in ranked] == [("alpha", False), ("beta", True),
                                                                        ("gamma", False)]


def test_the_api_ranking_is_unchanged_while_names_are_shown(klass):
    from ece408_op.grading.ranking import ranking_report
    from ece408_op.grading.store import open_store
    klass.runs.run(klass.tokens["alpha"], [[0.03], [0.02]])
    klass.runs.run(klass.tokens["beta"], [[0.01], [0.02]])
    with open_store(klass.service.db.url) as store:
        for fmt in ("table", "csv", "json"):
            with klass.http(klass.tokens["alpha"]) as http:
                got = http.get("/api/ranking", params={"format": fmt}).text
            assert got == ranking_report(store, None, None, fmt).text + "\n", fmt


def test_the_pages_rank_with_grading_s_own_steps(klass):
    # standings.py reads the records its own way (no transcripts, no JSON where ranking needs none):
    # its report must stay what `ranking` prints, option sets and runs not valid included
    from ece408_op.grading.ranking import ranking_report
    from ece408_op.grading.store import open_store
    from ece408_op.service import standings
    gamma = klass.add_team("gamma")
    klass.runs.run(klass.tokens["alpha"], [[0.03], [0.02]], repeats=3)      # an older option set
    klass.runs.run(klass.tokens["alpha"], [[0.01], [0.02]])
    klass.runs.run(klass.tokens["beta"], [[0.001], [0.002]], correct=False, reason="wrong")
    klass.runs.run(klass.tokens["beta"], [[0.02], [0.02]])
    klass.runs.run(gamma, [[0.004, 0.005], [0.003]], model_names=("ece408-2019", "ece408-low"))
    found = standings.board(klass.service.db, "m2", 100)
    (st,) = found.tables
    assert len(st.sets) == 2 and st.others and st.excluded == 1
    with open_store(klass.service.db.url) as store:
        for fmt in ("table", "csv", "json"):
            assert standings.report(found, fmt) == ranking_report(store, "m2", 100, fmt).text, fmt


def test_anonymised_names_each_team_sees_its_own(klass):
    klass.runs.run(klass.tokens["alpha"], [[0.03], [0.02]])
    klass.runs.run(klass.tokens["beta"], [[0.01], [0.02]])
    instructor = klass.browser(klass.instructor)
    out = instructor.post("/admin/names", data={"csrf": instructor.csrf("/admin"), "names": "anonymised"})
    assert out.status_code == 303 and out.headers["location"] == "/admin?done=names"
    alpha, beta = klass.browser(klass.tokens["alpha"]), klass.browser(klass.tokens["beta"])
    seen_by_alpha = re.findall(r'<td class="team">([^<]+)', alpha.get("/").text)
    seen_by_beta = re.findall(r'<td class="team">([^<]+)', beta.get("/").text)
    assert seen_by_alpha[1].strip() == "alpha" and re.fullmatch(r"Team [0-9a-f]{6}", seen_by_alpha[0].strip())
    assert seen_by_beta[0].strip() == "beta" and re.fullmatch(r"Team [0-9a-f]{6}", seen_by_beta[1].strip())
    assert "beta" not in alpha.get("/").text and "alpha" not in beta.get("/").text.replace("alpha(", "")
    assert seen_by_beta[1] == re.findall(r'<td class="team">([^<]+)', beta.get("/").text)[1]   # stable
    with klass.http(klass.tokens["alpha"]) as http:
        for fmt in ("table", "csv", "json"):
            text = http.get("/api/ranking", params={"format": fmt}).text
            assert "beta" not in text and "alpha" in text and seen_by_alpha[0].strip() in text, fmt
    assert "beta" in instructor.get("/").text                              # the instructor sees every name
    with klass.http(klass.instructor) as http:
        assert "beta" in http.get("/api/ranking").text
    instructor.post("/admin/names", data={"csrf": instructor.csrf("/admin"), "names": "shown"})
    klass.service.rankings.forget_choices()
    assert "beta" in alpha.get("/").text


def test_pseudonyms_never_look_alike():
    from ece408_op.service.choices import pseudonyms
    names = [f"team{i}" for i in range(3000)]
    made = pseudonyms("k" * 64, names)
    assert len(set(made.values())) == len(names)
    assert made == pseudonyms("k" * 64, names) and made != pseudonyms("j" * 64, names)


def test_the_ranking_streams_its_table_when_it_changes(klass):
    klass.runs.run(klass.tokens["alpha"], [[0.03], [0.02]])
    alpha = klass.browser(klass.tokens["alpha"])
    import threading
    got = []

    def listen():
        with klass.client.stream("GET", "/ranking/events?milestone=m2&size=100",
                                 cookies={sessions.COOKIE: alpha.session}) as stream:
            kind = None
            for line in stream.iter_lines():
                if line.startswith("event:"):
                    kind = line.split(":", 1)[1].strip()
                elif line.startswith("data:") and kind == "ranking":
                    got.append(json.loads(line.split(":", 1)[1]))
                    if len(got) == 2:
                        return
    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    from pagekit import wait_until
    wait_until(lambda: got, 20, "the first table")
    assert "beta" not in got[0]
    klass.runs.run(klass.tokens["beta"], [[0.001], [0.002]])
    listener.join(20)
    assert len(got) == 2 and got[1].index("beta") < got[1].index("alpha")


# ---------------------------------------------------------------------------- a team's page, a job's page

def test_a_team_page_lists_its_runs_with_the_files_and_why_not_valid(klass):
    good = klass.runs.run(klass.tokens["alpha"], [[0.011], [0.012]])
    bad = klass.runs.run(klass.tokens["alpha"], [[0.001], [0.002]], correct=False,
                         reason="Correctness 0.1 on ece408-high, expected 0.91")
    page = klass.browser(klass.tokens["alpha"]).get("/team").text
    assert f'href="/jobs/{good}"' in page and f'href="/jobs/{bad}"' in page
    assert "0.023000" in page and "0.011000" in page and "0.012000" in page
    assert "Correctness 0.1 on ece408-high, expected 0.91" in text_of(page)
    from hashlib import sha256
    from pagekit import FORWARD
    assert sha256(FORWARD.encode()).hexdigest() in page
    assert "AMD EPYC 7B13" in page


def test_a_team_page_says_what_each_run_did_in_a_compact_row(klass):
    from hashlib import sha256
    from pagekit import FORWARD, failed_record
    runs, alpha = klass.runs, klass.tokens["alpha"]
    good = runs.run(alpha, [[0.011], [0.012]])
    job = runs.submit(alpha)
    claimed = runs.claim()
    runs.finish(claimed, failed_record({**job, "record_id": claimed["job"]["record_id"]}), status="failed")
    before = runs.cancel(alpha, runs.submit(alpha)["id"])["id"]
    development = runs.submit_development(alpha, {f"f{n}.cu": f"// {n}\n" for n in range(30)})["id"]
    rows = {re.search(r'href="/jobs/([0-9a-f]+)"', row).group(1): text_of(row)
            for row in re.findall(r"<tr>(.*?)</tr>", klass.browser(alpha).get("/team").text, re.S) if "/jobs/" in row}
    digest = sha256(FORWARD.encode()).hexdigest()
    assert f'<code class="hash" title="SHA-256 {digest}">{digest[:12]}</code></summary>' in \
        klass.browser(alpha).get("/team").text                             # the short hash, the full one in details
    assert "failed before any Op Time" in rows[job["id"]] and " s, Correctness -" not in rows[job["id"]]
    assert "no: the harness exited with status 1 before any Op Time" in rows[job["id"]]
    assert "cancelled before it ran" in rows[before] and "killed" not in rows[before]
    assert "31 files" in rows[development] and "and 11 more" in rows[development]       # 20 listed on demand
    assert "Op Time over your runs" in klass.browser(alpha).get("/team").text
    verdict = text_of(klass.browser(alpha).get(f"/jobs/{job['id']}").text)
    assert "ece408-high not timed, no Correctness" in " ".join(verdict.split())
    instructor = klass.browser(klass.instructor).get("/team?name=alpha").text
    assert "Op Time over this team&#39;s runs" in instructor and "your" not in text_of(instructor).lower()
    assert good in instructor


@pytest.mark.skipif(not plots.available(), reason="matplotlib is not installed")
def test_the_team_plot_is_an_svg_drawn_by_matplotlib(klass):
    klass.runs.run(klass.tokens["alpha"], [[0.03], [0.02]])
    klass.runs.run(klass.tokens["alpha"], [[0.02], [0.01]])
    klass.runs.run(klass.tokens["beta"], [[0.005], [0.005]])
    alpha = klass.browser(klass.tokens["alpha"])
    assert 'src="/team/plot.svg?milestone=m2&amp;size=100"' in alpha.get("/team").text
    answer = alpha.get("/team/plot.svg?milestone=m2&size=100")
    assert answer.status_code == 200 and answer.headers["content-type"] == "image/svg+xml"
    svg = answer.text
    assert svg.lstrip().startswith("<?xml") and "Matplotlib" in svg and "<script" not in svg
    assert "class best 0.010000 s" in svg and "class median 0.020000 s" in svg and "your valid runs" in svg
    assert alpha.get("/team/plot.svg?milestone=m2&size=100").text == svg        # cached, and the same
    theirs = klass.browser(klass.instructor).get("/team/plot.svg?name=alpha&milestone=m2&size=100").text
    assert "this team's valid runs" in theirs and "your" not in theirs          # the instructor's own legend
    assert alpha.get("/team/plot.svg?milestone=m2&size=100").text == svg


def test_without_matplotlib_the_team_page_says_so(klass, monkeypatch):
    monkeypatch.setattr(plots, "_available", False)
    klass.runs.run(klass.tokens["alpha"], [[0.03], [0.02]])
    alpha = klass.browser(klass.tokens["alpha"])
    page = alpha.get("/team")
    assert page.status_code == 200 and "no matplotlib" in page.text and "plot.svg" not in page.text
    assert alpha.get("/team/plot.svg?milestone=m2&size=100").status_code == 404


def test_a_matplotlib_that_fails_to_import_means_no_plots(klass, monkeypatch):
    def broken(*args, **kwargs):
        raise ImportError("libfreetype.so.6: cannot open shared object file")
    monkeypatch.setattr(plots, "_available", True)
    monkeypatch.setattr(plots, "op_time_svg", broken)
    klass.runs.run(klass.tokens["alpha"], [[0.03], [0.02]])
    alpha = klass.browser(klass.tokens["alpha"])
    assert "plot.svg" in alpha.get("/team").text
    assert alpha.get("/team/plot.svg?milestone=m2&size=100").status_code == 404
    assert "no matplotlib" in alpha.get("/team").text


def test_the_job_page_shows_the_place_then_the_transcript_and_verdict(klass):
    running = klass.runs.submit(klass.tokens["beta"])
    claimed = klass.runs.claim()
    waiting = klass.runs.submit(klass.tokens["alpha"])
    alpha = klass.browser(klass.tokens["alpha"])
    page = alpha.get(f"/jobs/{waiting['id']}").text
    assert "Waiting in the queue: next in line (1 waiting, 1 running)" in page
    assert f'data-live="/jobs/{waiting["id"]}/events?after=0"' in page
    klass.runs.finish(claimed, record_of({**running, "record_id": claimed["job"]["record_id"]}, [[0.1], [0.1]]))
    second = klass.runs.claim()
    klass.runs.lines(second, ["first line\n", "second line\n"])
    job = {**waiting, "record_id": second["job"]["record_id"]}
    klass.runs.finish(second, record_of(job, [[0.01], [0.02]]))
    with klass.client.stream("GET", f"/jobs/{waiting['id']}/events?after=0",
                             cookies={sessions.COOKIE: alpha.session}) as stream:
        events = read_events(stream)
    kinds = [k for k, _ in events]
    assert kinds[-2:] == ["verdict", "end"] and json.loads(events[-1][1]) == "done"
    lines = [json.loads(d) for k, d in events if k == "line"]
    assert lines[1:3] == ["first line\n", "second line\n"] and "took the job" in lines[0]
    assert "Valid: counts for the ranking, total Op Time 0.030000 s" in json.loads(events[-2][1])
    ended = alpha.get(f"/jobs/{waiting['id']}").text
    assert "data-live" not in ended and "Valid: counts for the ranking" in ended and "cancel this job" not in ended
    plain = alpha.get(f"/jobs/{waiting['id']}/transcript")
    assert plain.headers["content-type"].startswith("text/plain") and "first line\nsecond line\n" in plain.text


# ---------------------------------------------------------------------------- the instructor

def test_the_instructor_page_shows_the_queue_workers_and_rate_limits(tmp_path):
    k = Class(tmp_path, rules=Rules(ranked_per_hour=2), names=("alpha", "beta", "gamma"))
    with k.client:
        k.runs.run(k.tokens["alpha"], [[0.03], [0.02]])
        waiting = k.runs.submit(k.tokens["alpha"])
        running = k.runs.submit(k.tokens["beta"])
        k.runs.claim(device="NVIDIA H100 80GB HBM3")                    # beta's: never served, it goes first
        page = k.browser(k.instructor).get("/admin").text
        assert "1 waiting, 1 running" in text_of(page)
        rows = table_rows(page)
        assert ["test-worker/s0", running["id"][:12], "beta", "m2, 100"] == rows[0][:4]     # running, per worker
        assert ["0", waiting["id"][:12], "alpha", "m2, 100"] == rows[1][:4]                 # waiting: next in line
        rows = {row[0]: row for row in rows}
        assert rows["test-worker/s0"][1:4] == ["yes", "no", "NVIDIA H100 80GB HBM3"]        # the workers' table
        assert rows["test-worker/s0"][4] == f"{running['id'][:12]} (beta)"
        assert rows["alpha"][1:3] == ["active", "2"] and rows["alpha"][4:6] == ["1", "2 / 0"]
        assert rows["alpha"][6].startswith("ranked 2/2 this hour; next at 20")
        assert rows["beta"][4:7] == ["0 (+1 running)", "1 / 0", "ok"]
        assert rows["gamma"][1:7] == ["active", "0", "-", "0", "0 / 0", "ok"]


def test_the_instructor_cancels_revokes_and_sets_deadlines(klass):
    queued = klass.runs.submit(klass.tokens["alpha"])
    instructor = klass.browser(klass.instructor)
    field = instructor.csrf("/admin")
    out = instructor.post(f"/admin/jobs/{queued['id']}/cancel", data={"csrf": field})
    assert out.status_code == 303 and out.headers["location"] == "/admin?done=cancelled"
    assert "Cancelled" in instructor.get(f"/jobs/{queued['id']}").text
    beta = klass.browser(klass.tokens["beta"])
    assert instructor.post("/admin/teams/revoke", data={"csrf": field, "name": "beta"}).status_code == 303
    assert beta.get("/team").status_code == 303
    with klass.http(klass.tokens["beta"]) as http:
        assert http.get("/api/whoami").status_code == 401
    assert "revoked" in text_of(instructor.get("/admin").text)
    out = instructor.post("/admin/deadlines", data={"csrf": field, "milestone": "m2", "action": "set",
                                                    "deadline": "2020-05-01T23:59:00-05:00"})
    assert out.status_code == 303
    assert "m2: 2020-05-01 23:59:00-05:00 (passed" in text_of(instructor.get("/admin").text)
    with klass.http(klass.tokens["alpha"]) as http:
        refused = http.post("/api/jobs", params={"kind": "ranked", "milestone": "m2", "size": 100},
                            content=ranked_upload())
    assert refused.status_code == 403 and "deadline was 2020-05-01 23:59:00-05:00" in refused.text
    bad = instructor.post("/admin/deadlines", data={"csrf": field, "milestone": "m2", "deadline": "tomorrow"})
    assert bad.status_code == 400 and "ISO 8601" in bad.text
    assert instructor.post("/admin/deadlines", data={"csrf": field, "milestone": "m2",
                                                     "action": "clear"}).status_code == 303
    assert "No deadline set" in instructor.get("/admin").text
    assert instructor.post("/admin/teams/revoke", data={"csrf": field, "name": "nobody"}).status_code == 404


def test_the_csv_export_with_the_grade_rule(klass):
    formula = klass.add_team("=HYPERLINK(\"http://evil\")")
    klass.add_team("idle")
    klass.runs.run(klass.tokens["alpha"], [[0.01], [0.01]])                # 0.02 s: full credit
    klass.runs.run(klass.tokens["beta"], [[0.03], [0.03]])                  # 0.06 s: halfway
    klass.runs.run(formula, [[0.2], [0.2]])                                 # 0.4 s: none
    instructor = klass.browser(klass.instructor)
    plain = instructor.get("/admin/ranking.csv?milestone=m2&size=100")
    assert plain.status_code == 200 and plain.headers["content-type"].startswith("text/csv")
    assert 'filename="ranking-m2-100.csv"' in plain.headers["content-disposition"]
    rows = list(csv.reader(io.StringIO(plain.text)))
    assert rows[0][:3] == ["rank", "team", "op_time"] and "grade_percent" not in rows[0]
    assert [r[1] for r in rows[1:]] == ["alpha", "beta", "'=HYPERLINK(\"http://evil\")", "idle"]
    assert rows[-1][0] == "" and rows[-1][2] == ""                          # a team without a valid run
    graded = list(csv.reader(io.StringIO(instructor.get("/admin/ranking.csv?milestone=m2&size=100&full=0.02"
                                                          "&zero=0.1").text)))
    assert graded[0][-1] == "grade_percent"
    assert [r[-1] for r in graded[1:]] == ["100.00", "50.00", "0.00", "0.00"]
    for query, message in (("&full=0.1", "needs both"), ("&full=0.2&zero=0.1", "below"), ("&full=x&zero=1", "number"),
                           ("&full=-1&zero=1", "positive")):
        answer = instructor.get("/admin/ranking.csv?milestone=m2&size=100" + query)
        assert answer.status_code == 400 and message in answer.text, query


def test_the_grade_rule():
    from ece408_op.service.standings import grade
    assert [grade(t, 0.1, 0.5) for t in (0.05, 0.1, 0.3, 0.5, 0.9, None)] == [100.0, 100.0, 50.0, 0.0, 0.0, 0.0]


# ---------------------------------------------------------------------------- what a new student meets

def brand_of(html):
    """The header's brand line, as text."""
    return " ".join(text_of(re.search(r'<(\w+)[^>]* class="brand"[^>]*>(.*?)</\1>', html, re.S).group(2)).split())


def title_of(html):
    return " ".join(text_of(re.search(r"<title>(.*?)</title>", html, re.S).group(1)).split())


def test_each_page_names_itself_in_its_title_and_brand(klass):
    job = klass.runs.run(klass.tokens["alpha"], [[0.01], [0.02]])
    alpha, instructor = klass.browser(klass.tokens["alpha"]), klass.browser(klass.instructor)
    pages = {"ranking": alpha.get("/").text, "team alpha": alpha.get("/team").text,
             f"job {job[:8]}": alpha.get(f"/jobs/{job}").text, "instructor": instructor.get("/admin").text,
             "log in": klass.browser().get("/login").text, "error 404": alpha.get("/jobs/" + "0" * 32).text}
    for name, html in pages.items():
        assert brand_of(html) == f"ECE 408 · {name}", name
        assert title_of(html).startswith(name) and title_of(html).endswith(" · ECE 408"), (name, title_of(html))
    assert title_of(pages["ranking"]) == "ranking m2, 100 images · ECE 408"


def test_an_error_page_s_header_shows_who_is_logged_in(klass):
    alpha, instructor = klass.browser(klass.tokens["alpha"]), klass.browser(klass.instructor)
    for browser, path, status, who in ((alpha, "/jobs/" + "0" * 32, 404, 'href="/team">alpha</a>'),
                                       (alpha, "/team?name=beta", 404, 'href="/team">alpha</a>'),
                                       (alpha, "/admin", 403, 'href="/team">alpha</a>'),
                                       (instructor, "/team?name=nobody", 404, 'href="/admin">instructor</a>')):
        answer = browser.get(path)
        header = answer.text.split("</header>")[0]
        assert answer.status_code == status, path
        assert who in header and "log out" in header and 'href="/login"' not in header, (path, header)
    anonymous = klass.browser().post("/login", data={"login": "x", "token": "y"}, headers={"content-type": "text/plain"})
    assert anonymous.status_code == 400 and 'href="/login">log in</a>' in anonymous.text.split("</header>")[0]


def test_the_your_team_tag_never_wraps():
    # at a phone's width the team's cell is narrow; the tag beside the name must stay one line
    # (test_pages_browser.py looks at it in Chromium at 375 px)
    css = (pages_module.site.HERE / "static" / "style.css").read_text()
    rules = {m.group(1).strip(): m.group(2) for m in re.finditer(r"([^{}]+)\{([^}]*)\}", css)}
    tag = rules[".tag"]
    assert re.search(r"white-space:\s*nowrap", tag), tag


def x_ticks(svg):
    """The numbers under the x axis of a matplotlib SVG."""
    axis = svg[svg.index('<g id="matplotlib.axis_1">'):svg.index('<g id="matplotlib.axis_2">')]
    found = []
    for text in re.findall(r"<text[^>]*>([^<]*)</text>", axis):
        try:
            found.append(float(text.replace("\u2212", "-")))
        except ValueError:
            pass                                                            # the axis's label
    return found


@pytest.mark.skipif(not plots.available(), reason="matplotlib is not installed")
@pytest.mark.parametrize("runs", [1, 2, 7])
def test_a_team_plot_counts_its_runs_in_whole_numbers(klass, runs):
    for k in range(runs):
        klass.runs.run(klass.tokens["alpha"], [[0.01 + k / 1000], [0.02]])
    svg = klass.browser(klass.tokens["alpha"]).get("/team/plot.svg?milestone=m2&size=100").text
    ticks = x_ticks(svg)
    assert ticks and all(t == int(t) and 1 <= t <= runs for t in ticks), ticks
    assert 1.0 in ticks


# ---------------------------------------------------------------------------- on PostgreSQL, and the benchmark

@pytest.mark.slow
def test_the_pages_on_postgresql(tmp_path):
    from servicekit import started_postgres
    server = started_postgres(tmp_path / "pg")
    try:
        k = Class.__new__(Class)
        from fastapi.testclient import TestClient
        k.service = Service(Database(server.url), Settings(upload_dir=str(tmp_path / "uploads")))
        k.tokens = {t["name"]: t["token"] for t in k.service.tokens.add_teams(["alpha", "beta"])}
        k.worker = k.service.tokens.worker_token("w")
        k.instructor = new_token()[2]
        k.service.tokens.register("instructor", "instructor", k.instructor)
        k.client = TestClient(make_app(k.service))
        k.runs = Runs(k.http, k.worker)
        with k.client:
            job = k.runs.run(k.tokens["alpha"], [[0.01], [0.02]])
            alpha, instructor = k.browser(k.tokens["alpha"]), k.browser(k.instructor)
            for browser, paths in ((alpha, ("/", "/team", f"/jobs/{job}")),
                                   (instructor, ("/admin", "/team?name=alpha",
                                                 "/admin/ranking.csv?milestone=m2&size=100"))):
                for path in paths:
                    assert browser.get(path).status_code == 200, path
            instructor.post("/admin/names", data={"csrf": instructor.csrf("/admin"), "names": "anonymised"})
            assert "Team " not in alpha.get("/").text.split("<tbody>")[1]        # its own row: its name
            alpha.post("/logout", data={"csrf": alpha.csrf()})
            assert alpha.get("/team").status_code == 303
    finally:
        server.stop()


def test_the_render_benchmark_runs(tmp_path):
    from ece408_op.service import pagebench
    figures = pagebench.run(tmp_path / "bench.db", teams=12, runs=120, repeats=2)
    assert {f.page for f in figures} >= {"ranking", "team", "job", "admin", "team plot", "ranking csv"}
    assert all(f.median_ms > 0 and f.status == 200 for f in figures)
    assert "| page |" in pagebench.markdown(figures, teams=12, runs=120)


def test_the_pages_docstring_lists_every_page_route(klass):
    documented = {path.replace("{id}", "{job_id}")
                  for path in re.findall(r"(?:GET|POST)\s+(/[^\s,]*)", pages_module.__doc__)}
    pages = {r.path for router in pages_module.ROUTERS for r in router.routes}
    assert pages - {"/static/{name}"} == documented
    api = ("/api/", "/health", "/ready", "/openapi.json")                  # the API and its schema
    served = {r.path for r in served_routes(klass.client.app) if not r.path.startswith(api)}
    assert served == pages                                                  # no page outside the pages' routers


def served_routes(app):
    """The application's routes, those of included routers among them."""
    found = []
    for route in app.routes:
        inner = getattr(route, "original_router", None)
        found += served_routes(inner) if inner is not None else [route]
    return found
