"""The class's pages in a real browser: headless Chromium (Debian's, driven by Playwright) against a
real ``serve`` on the loopback address (tests/servicekit.py).

Where the runs come from, test by test:
- the ranking's live update and the job page's live transcript: a real local worker running a
  ranked m2 and development runs in its bubblewrap sandbox, submitted by the real client;
- access, escaping, logout, no JavaScript, a phone's width, axe-core on every page, the team
  page's rows and the screenshots: records stored through the service's own routes
  (tests/pagekit.py: a team submits over the API, a worker token claims the job, posts its lines
  and ends it with a record), where a real run would only slow the test.

The screenshots (small PNGs) go to the test's folder; with ``PAGES_SCREENSHOTS=docs`` to docs/
(docs/service.md shows them): ``PAGES_SCREENSHOTS=docs pytest tests/service/test_pages_browser.py``.
"""
import io
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from suitekit import ROOT
from pagekit import FORWARD, Runs, chromium_or_skip, failed_record, record_of, wait_until
from servicekit import Service, job_id_of
from teams import PLAIN, team_project

pytestmark = pytest.mark.service
HOSTILE = "<script>alert('name')</script><img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def chromium():
    sync_playwright, launch = chromium_or_skip()
    with sync_playwright() as p:
        browser = p.chromium.launch(**launch)
        yield browser
        browser.close()


class Watched:
    """A browser context whose pages record every dialog (alert, confirm...), console error and
    uncaught exception: a page that runs injected code shows it here."""

    def __init__(self, browser, **options):
        self.context = browser.new_context(**options)
        self.dialogs, self.errors = [], []
        self.page = self.context.new_page()
        self.page.on("dialog", self._dialog)
        self.page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))

    def _dialog(self, dialog):
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def login(self, url, token):
        self.page.goto(url + "/login")
        self.page.fill("#token", token)
        self.page.click("form.login button[type=submit]")
        self.page.wait_for_load_state()
        return self.page

    def close(self):
        self.context.close()


def screenshot(page, tmp_path, name):
    """A small PNG of the page (a palette of 256 colours where Pillow is here), in the test's folder
    and with PAGES_SCREENSHOTS=docs in docs/."""
    data = page.screenshot(full_page=True)
    try:
        from PIL import Image
        image = Image.open(io.BytesIO(data)).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
        out = io.BytesIO()
        image.save(out, format="PNG", optimize=True)
        data = out.getvalue()
    except ImportError:
        pass
    path = tmp_path / name
    path.write_bytes(data)
    if os.environ.get("PAGES_SCREENSHOTS") == "docs":
        shutil.copy(path, ROOT / "docs" / name)
    assert 0 < len(data) < 400_000, f"{name}: {len(data)} bytes"
    return path


@pytest.fixture
def server(tmp_path):
    svc = Service(tmp_path / "svc", workers=0).start()
    yield svc
    svc.close()


def runs_of(svc):
    return Runs(svc.http, svc.worker_token("test-worker"))


# ---------------------------------------------------------------------------- with a real worker

@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the worker's sandbox needs bubblewrap")
@pytest.mark.timeout(600)
def test_the_ranking_page_shows_a_real_m2_run_as_it_lands(running_service, tmp_path, chromium):
    svc = running_service(tmp_path / "svc", workers=1, args=["--engine", "bubblewrap"])
    watched = Watched(chromium)
    try:
        tokens = svc.add_teams("alpha", "beta")
        page = watched.login(svc.url, tokens["alpha"])
        page.goto(svc.url + "/")
        assert "No records yet" in page.inner_text("#ranking")
        page.wait_for_selector("#live-status:not([hidden])")
        page.evaluate("window.stillThisPage = true")                  # gone if the page reloads
        for name in ("beta", "alpha"):
            folder = team_project(tmp_path / name, cpu=PLAIN)
            out = svc.cli("submit", "--submit", "m2", "--size", 100, cwd=folder, token=tokens[name])
            assert out.returncode == 0, out.stdout[-3000:] + out.stderr
            page.wait_for_selector(f"#ranking td.team:has-text('{name}')", timeout=30_000)
        assert page.evaluate("window.stillThisPage") is True
        rows = page.locator("table.ranking tbody tr")
        assert rows.count() == 2
        own = page.locator("table.ranking tr.own")
        assert own.count() == 1 and "alpha" in own.inner_text() and "your team" in own.inner_text()
        record = {r.team: r for r in svc.records()}
        for name in ("alpha", "beta"):
            assert f"{record[name].op_time:.6f}" in page.inner_text("#ranking")
        assert "m2, 100 images" in page.inner_text("#ranking") and "live, updated" in page.inner_text("#live-status")
        assert not watched.dialogs and not watched.errors, watched.errors
    finally:
        watched.close()
        svc.close()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the worker's sandbox needs bubblewrap")
@pytest.mark.timeout(600)
def test_the_job_page_shows_its_place_then_lines_as_they_arrive(running_service, tmp_path, chromium):
    svc = running_service(tmp_path / "svc", workers=1, args=["--engine", "bubblewrap"])
    watched = Watched(chromium)
    try:
        tokens = svc.add_teams("busy", "gamma")
        first = svc.cli("submit", "--detach", team_project(tmp_path / "busy", commands=["echo busy", "sleep 6"]),
                        token=tokens["busy"])
        svc.wait_for_text(job_id_of(first.stderr), "busy\n", timeout=120)           # the one worker is taken
        team = team_project(tmp_path / "gamma", commands=["echo first", "sleep 3", "echo second", "sleep 3",
                                                          "echo third"])
        job = job_id_of(svc.cli("submit", "--detach", team, token=tokens["gamma"]).stderr)
        page = watched.login(svc.url, tokens["gamma"])
        page.goto(f"{svc.url}/jobs/{job}")
        assert "Waiting in the queue: next in line (1 waiting, 1 running)" in page.inner_text("#place")
        seen = {}

        def arrived():
            text = page.inner_text("#transcript")
            for line in ("first", "second", "third"):
                if f"\n{line}\n" in text and line not in seen:
                    seen[line] = time.monotonic()
            return len(seen) == 3
        wait_until(arrived, 120, "the three lines")
        assert seen["second"] - seen["first"] > 2 and seen["third"] - seen["second"] > 2, seen
        page.wait_for_selector("#verdict .verdict", timeout=60_000)
        assert "Development run succeeded" in page.inner_text("#verdict")
        assert page.is_hidden("#place") and page.inner_text("#state") == "done"
        assert page.inner_text("#transcript").count("\nfirst\n") == 1           # each line once
        assert not watched.dialogs and not watched.errors, watched.errors
    finally:
        watched.close()
        svc.close()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the worker's sandbox needs bubblewrap")
@pytest.mark.timeout(600)
def test_the_job_page_shows_the_elapsed_time_and_step_then_its_end_without_a_reload(running_service, tmp_path, chromium):
    svc = running_service(tmp_path / "svc", workers=1, args=["--engine", "bubblewrap"])
    watched = Watched(chromium)
    try:
        token = svc.add_teams("zeta")["zeta"]
        team = team_project(tmp_path / "zeta", commands=["sleep 3", '/bin/sh -c "sleep 3; echo kept > /build/out.txt"',
                                                         "sleep 2"])
        job = job_id_of(svc.cli("submit", "--detach", team, token=token).stderr)
        page = watched.login(svc.url, token)
        page.goto(f"{svc.url}/jobs/{job}")
        page.evaluate("window.stillThisPage = true")                  # gone if the page reloads
        assert page.get_attribute("#step", "aria-live") == "polite"
        page.wait_for_selector("#step:has-text('build command 2 of 3')", timeout=120_000)
        assert page.is_visible("#progress") and page.inner_text("#state") == "running"
        first = page.inner_text("#elapsed")
        assert re.fullmatch(r"Running for \d+ s:", first), first
        page.wait_for_function("t => document.getElementById('elapsed').textContent !== t", arg=first, timeout=5_000)
        page.wait_for_selector("#step:has-text('build command 3 of 3: sleep 2')", timeout=60_000)
        assert "" == page.inner_text("#ended")
        page.wait_for_selector("#build-folder a[download]", timeout=60_000)            # the end, live
        assert re.fullmatch(r", ended \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", page.inner_text("#ended"))
        assert page.get_attribute("#build-folder a[download]", "href") == f"/jobs/{job}/build"
        assert "1 file(s)" in page.inner_text("#build") and f"jobs download {job}" in page.inner_text("#build")
        assert "Development run succeeded" in page.inner_text("#verdict") and page.inner_text("#state") == "done"
        assert page.is_hidden("#progress") and page.evaluate("window.stillThisPage") is True
        assert not watched.dialogs and not watched.errors, watched.errors
    finally:
        watched.close()
        svc.close()


def test_a_hostile_worker_s_step_shows_as_bounded_text(server, chromium):
    runs = runs_of(server)
    token = server.add_teams("theta")["theta"]
    job = runs.submit(token)
    claimed = runs.claim()
    watched = Watched(chromium, bypass_csp=True)            # the escaping alone must stop it
    try:
        page = watched.login(server.url, token)
        page.goto(f"{server.url}/jobs/{job['id']}")
        page.wait_for_selector("#live-status:not([hidden])")
        hostile = "<img src=x onerror=alert(1)><script>alert(2)</script>\x1b[31m" + "y" * 100_000
        with server.http(runs.worker) as worker:
            answer = worker.post(f"/api/worker/jobs/{job['id']}/chunks", headers={"X-Lease": claimed["lease"]},
                                 json={"chunks": [], "progress": hostile})
        assert answer.status_code == 200, answer.text
        page.wait_for_selector("#step:has-text('alert(2)')", timeout=30_000)
        step = page.inner_text("#step")
        assert step.startswith("<img src=x onerror=alert(1)><script>alert(2)</script>\\x1b[31myyy") and len(step) == 200
        assert page.locator("#step *").count() == 0 and page.locator("img").count() == 0
        page.reload()                                         # and as the server renders it
        assert page.inner_text("#step") == step and page.locator("#step *").count() == 0
        page.wait_for_timeout(300)
        assert not watched.dialogs and not watched.errors, (watched.dialogs, watched.errors)
    finally:
        watched.close()


# ---------------------------------------------------------------------------- records through the routes

def test_a_team_cannot_open_another_team_s_page_or_job(server, chromium):
    runs = runs_of(server)
    tokens = server.add_teams("alpha", "beta")
    runs.run(tokens["alpha"], [[0.01], [0.02]])
    theirs = runs.run(tokens["beta"], [[0.03], [0.04]], lines=["beta's private line\n"])
    watched = Watched(chromium)
    try:
        page = watched.login(server.url, tokens["alpha"])
        assert page.url.endswith("/team")
        for path in (f"/jobs/{theirs}", f"/jobs/{theirs}/transcript", "/team?name=beta"):
            answer = page.goto(server.url + path)
            assert answer.status == 404 and "private" not in page.content(), path
        assert page.goto(server.url + "/admin").status == 403
        page.goto(server.url + "/team")
        opened = page.evaluate("""id => new Promise(done => {
            const source = new EventSource('/jobs/' + id + '/events?after=-1');
            source.onmessage = () => done('message');
            source.addEventListener('line', () => done('line'));
            source.onerror = () => { done(source.readyState === EventSource.CLOSED ? 'refused' : 'retrying'); source.close(); };
        })""", theirs)
        assert opened == "refused"
        mine = page.context.cookies()
        session = [c for c in mine if c["name"] == "ece408_session"][0]
        for forged in ("beta", session["value"][:-1] + ("A" if session["value"][-1] != "A" else "B"), "x" * 43):
            page.context.clear_cookies()
            page.context.add_cookies([{**session, "value": forged}])
            page.goto(server.url + "/team")
            assert page.url.endswith("/login"), forged
            assert page.goto(f"{server.url}/jobs/{theirs}").url.endswith("/login")
        assert not watched.dialogs
    finally:
        watched.close()


def test_names_and_transcripts_with_markup_show_as_text_and_run_nothing(server, chromium):
    runs = runs_of(server)
    (hostile,) = server.admin("POST", "/api/admin/teams", json={"names": [HOSTILE + "\x1b[31m"]}).json()["teams"]
    other = server.add_teams("plain")["plain"]
    lines = ["<script>alert('transcript')</script>\n", "<img src=x onerror=alert(2)>\n",
             "\x1b[31mred\x1b[0m\x07 <b>bold</b>\n"]
    runs.run(hostile["token"], [[0.01], [0.02]], device="<img src=x onerror=alert(3)>")      # in the ranking
    done = runs.run(hostile["token"], [[0.01], [0.02]], lines=lines, correct=False, reason="<script>alert(4)</script>")
    runs.run(other, [[0.03], [0.04]])
    live = runs.submit(hostile["token"])
    claimed = runs.claim()
    for token in (hostile["token"], server.instructor_token):
        watched = Watched(chromium, bypass_csp=True)      # the escaping alone must stop it: no help from the CSP
        try:
            page = watched.login(server.url, token)
            for path in ("/", "/team" if token != server.instructor_token else "/admin", f"/jobs/{done}"):
                answer = page.goto(server.url + path)
                assert "script-src 'self'" in answer.headers["content-security-policy"]     # and the CSP is there
                page.wait_for_timeout(300)
                text = page.inner_text("body")
                assert "<script>alert('name')</script><img src=x onerror=alert(1)>\\x1b[31m" in text, path
                assert page.locator("script").count() <= 1                   # live.js only
                assert page.locator("img").count() <= (1 if path == "/team" else 0), path   # the plot only
                if path == "/":
                    assert "<img src=x onerror=alert(3)>" in page.inner_text("#ranking")   # its kind's tab, heading
            text = page.inner_text("#transcript")
            assert "<script>alert('transcript')</script>\n<img src=x onerror=alert(2)>\n" in text
            assert "\\x1b[31mred\\x1b[0m\\x07 <b>bold</b>" in text
            assert "<script>alert(4)</script>" in page.inner_text("#verdict")
            # lines that arrive live are text too
            page.goto(f"{server.url}/jobs/{live['id']}")
            page.wait_for_selector("#live-status:not([hidden])")
            runs.lines(claimed, ["<script>alert('live')</script>\n", "<img src=x onerror=alert(5)>\x1b[1m\n"],
                       first=claimed["job"]["next_seq"] + (0 if token == hostile["token"] else 2))
            page.wait_for_function("document.getElementById('transcript').textContent.includes('alert(5)')")
            assert "<img src=x onerror=alert(5)>\\x1b[1m" in page.inner_text("#transcript")
            assert page.locator("#transcript *").count() == 0                 # no element made from a line
            page.wait_for_timeout(500)
            assert not watched.dialogs, watched.dialogs
            assert not watched.errors, watched.errors
        finally:
            watched.close()


def test_logout_ends_the_session(server, chromium):
    token = server.add_teams("alpha")["alpha"]
    watched = Watched(chromium)
    try:
        page = watched.login(server.url, token)
        session = [c for c in page.context.cookies() if c["name"] == "ece408_session"][0]
        assert session["httpOnly"] and session["sameSite"] == "Strict" and not session["secure"]
        assert page.evaluate("document.cookie") == ""                        # no script reads it
        page.click("header button:has-text('log out')")
        page.wait_for_url("**/login")
        assert not [c for c in page.context.cookies() if c["name"] == "ece408_session"]
        page.goto(server.url + "/team")
        assert page.url.endswith("/login")
        page.context.add_cookies([session])                                   # the old cookie, put back
        page.goto(server.url + "/team")
        assert page.url.endswith("/login")
    finally:
        watched.close()


def test_the_pages_work_without_javascript_and_on_a_phone(server, chromium):
    runs = runs_of(server)
    tokens = server.add_teams("alpha", "a-team-with-a-rather-long-name-for-a-phone")
    runs.run(tokens["alpha"], [[0.01], [0.02]])
    queued = runs.submit(tokens["alpha"])
    watched = Watched(chromium, java_script_enabled=False, viewport={"width": 390, "height": 844})
    try:
        page = watched.login(server.url, tokens["alpha"])
        assert page.url.endswith("/team") and page.locator("table.runs tbody tr").count() == 2
        page.goto(server.url + "/")
        assert "alpha" in page.inner_text("table.ranking")
        assert "Reload the page to see new runs." in page.inner_text("main")
        page.goto(f"{server.url}/jobs/{queued['id']}")
        assert "Waiting in the queue: next in line" in page.inner_text("#place")
        assert "reload the page to see new lines" in page.inner_text("main")
        page.click("#cancel button")                                           # a plain form
        page.wait_for_load_state()
        assert "Cancelled" in page.inner_text("#verdict")
    finally:
        watched.close()
    phone = Watched(chromium, viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    try:
        page = phone.login(server.url, tokens["alpha"])
        for path in ("/", "/team", f"/jobs/{queued['id']}"):
            page.goto(server.url + path)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, f"{path} is {width} px wide on a 390 px phone (tables scroll inside their box)"
    finally:
        phone.close()


def test_the_your_team_tag_stays_on_one_line_on_a_phone(server, chromium, tmp_path):
    runs = runs_of(server)
    long = "a-team-with-a-rather-long-name-for-a-phone"
    tokens = server.add_teams(long, "beta")
    runs.run(tokens[long], [[0.01], [0.02]])
    runs.run(tokens["beta"], [[0.03], [0.04]])
    phone = Watched(chromium, viewport={"width": 375, "height": 812}, is_mobile=True, has_touch=True)
    try:
        page = phone.login(server.url, tokens[long])
        page.goto(server.url + "/")
        page.wait_for_selector("#live-status:has-text('updated')")            # the live table in place
        text, height, font = page.evaluate("() => { const e = document.querySelector('tr.own td.team .tag'); "
                                           "return [e.textContent, e.getBoundingClientRect().height, "
                                           "parseFloat(getComputedStyle(e).fontSize)]; }")
        assert text == "your team"
        page.locator("tr.own").screenshot(path=str(tmp_path / "own-row-375.png"))
        assert height < 2 * font, f"the tag is {height} px high at 375 px: it wraps (font {font} px)"
    finally:
        phone.close()


def test_the_service_runs_without_matplotlib(running_service, tmp_path):
    """serve where matplotlib cannot be imported (a finder refuses it, as on the GPU machine's kit):
    the pages work, the team page says there is no plot, the plot's address answers 404."""
    import httpx
    blocker = tmp_path / "no-matplotlib"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class NoMatplotlib:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'matplotlib':\n"
        "            raise ImportError('matplotlib is not installed here (the test says so)')\n"
        "sys.meta_path.insert(0, NoMatplotlib())\n")
    path = os.pathsep.join(filter(None, [str(blocker), os.environ.get("PYTHONPATH")]))
    svc = running_service(tmp_path / "svc", workers=0, env={"PYTHONPATH": path})
    token = svc.add_teams("alpha")["alpha"]
    runs_of(svc).run(token, [[0.01], [0.02]])
    with httpx.Client(base_url=svc.url, timeout=30) as browser:
        form = browser.get("/login")
        pair = re.search(r'name="login" value="([^"]+)"', form.text).group(1)
        assert browser.post("/login", data={"login": pair, "token": token}).status_code == 303
        team = browser.get("/team")
        assert team.status_code == 200 and "this server has no matplotlib" in team.text
        assert "plot.svg" not in team.text and "0.030000" in team.text
        assert browser.get("/team/plot.svg?milestone=m2&size=100").status_code == 404
        assert browser.get("/").status_code == 200
    assert "Traceback" not in svc.log()


# ---------------------------------------------------------------------------- the screenshots

@pytest.mark.timeout(300)
def test_screenshots_of_each_page(server, chromium, tmp_path):
    """A class of six teams (records posted through the worker routes, times made up), names
    anonymised; a screenshot of each page, as a team and as the instructor."""
    runs = runs_of(server)
    names = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
    tokens = server.add_teams(*names)
    for n, name in enumerate(names):
        for k in range(2 + n % 3):
            base = 0.0241 * (1 + 0.37 * n) * (1 - 0.17 * k)
            runs.run(tokens[name], [[base * 0.46], [base * 0.54]], correct=not (k == 1 and n % 2),
                     reason=None if not (k == 1 and n % 2) else "Correctness 0.86 on ece408-high, expected 0.91",
                     lines=["Loading fashion-mnist data... done\n", "Loading model... done\n", "New Inference\n"])
    watched = Watched(chromium, viewport={"width": 1100, "height": 640}, bypass_csp=True)    # for wait_for_function
    instructor = Watched(chromium, viewport={"width": 1100, "height": 640})
    try:
        page = instructor.login(server.url, server.instructor_token)
        page.check("input[value=anonymised]")
        page.click("form[action='/admin/names'] button")
        page.wait_for_url("**/admin?done=names")
        runs.cancel(tokens["charlie"], runs.submit(tokens["charlie"])["id"])         # the team page's other rows
        runs.submit_development(tokens["charlie"], {"new-forward.py": FORWARD, "custom/kernel.cu": "// k\n"})
        runs.finish(runs.claim())
        job = runs.submit(tokens["charlie"])
        claimed = runs.claim()
        runs.lines(claimed, ["* Team file new-forward.py: 1536 bytes\n", "Loading fashion-mnist data... done\n",
                             "Loading model... done\n", "New Inference\n", "Op Time: 0.009815\n"])
        runs.submit(tokens["delta"])
        page.goto(server.url + "/admin")
        screenshot(page, tmp_path, "pages-admin.png")
        page = watched.login(server.url, tokens["charlie"])
        page.wait_for_selector("img[src^='/team/plot.svg']")
        page.wait_for_function("[...document.images].every(i => i.complete && i.naturalWidth > 0)")
        screenshot(page, tmp_path, "pages-team.png")
        page.goto(server.url + "/")
        page.wait_for_selector("#live-status:not([hidden])")
        assert page.locator("tr.own td.team").inner_text().startswith("charlie")
        shown = page.locator("td.team").all_inner_texts()
        assert len([s for s in shown if re.fullmatch(r"Team [0-9a-f]{6}", s.strip())]) == 5, shown
        screenshot(page, tmp_path, "pages-ranking.png")
        page.goto(f"{server.url}/jobs/{job['id']}")
        page.wait_for_selector("#live-status:not([hidden])")
        runs.lines(claimed, ["Op Time: 0.011224\n", "Correctness: 0.91 Model: ece408-high\n"],
                   first=claimed["job"]["next_seq"] + 5)
        page.wait_for_function("document.getElementById('transcript').textContent.includes('Correctness: 0.91')")
        screenshot(page, tmp_path, "pages-job.png")
        page.context.clear_cookies()
        page.goto(server.url + "/login")
        screenshot(page, tmp_path, "pages-login.png")
        assert not watched.dialogs and not watched.errors and not instructor.errors, watched.errors
    finally:
        watched.close()
        instructor.close()
    phone = Watched(chromium, viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    try:                                                              # a phone's width: the tables scroll, marked
        page = phone.login(server.url, tokens["charlie"])
        page.wait_for_function("[...document.images].every(i => i.complete && i.naturalWidth > 0)")
        screenshot(page, tmp_path, "pages-team-390.png")
        page.goto(server.url + "/")
        screenshot(page, tmp_path, "pages-ranking-390.png")
    finally:
        phone.close()
    for name in ("pages-admin.png", "pages-team.png", "pages-ranking.png", "pages-job.png", "pages-login.png",
                 "pages-team-390.png", "pages-ranking-390.png"):
        assert Path(tmp_path / name).stat().st_size < 400_000


# ---------------------------------------------------------------------------- fit for a class: axe-core, a phone

DESKTOP, PHONE = {"width": 1280, "height": 800}, {"width": 390, "height": 844}


def a_class_with_every_kind_of_run(server):
    """Teams alpha and beta; alpha's runs of every kind a team page shows: valid, not valid, failed
    before any Op Time, a development run of several files, cancelled before it ran, cancelled
    while it ran, and one running now (its lines posted, no end yet); beta's one waiting behind it.
    Returns (tokens, runs, ids)."""
    runs = runs_of(server)
    tokens = server.add_teams("alpha", "beta")
    ids = {"valid": runs.run(tokens["alpha"], [[0.011, 0.002], [0.012]])}
    ids["not valid"] = runs.run(tokens["alpha"], [[0.009], [0.01]], correct=False,
                                reason="Correctness 0.1 on ece408-high, expected 0.91")
    runs.run(tokens["beta"], [[0.02], [0.03]])
    job = runs.submit(tokens["alpha"])
    claimed = runs.claim()
    runs.lines(claimed, ["* Running python -m ece408_op m2\n", "Traceback (most recent call last):\n"])
    runs.finish(claimed, failed_record({**job, "record_id": claimed["job"]["record_id"]}), status="failed")
    ids["failed"] = job["id"]
    files = {"new-forward.py": FORWARD, "custom/kernel.cu": "// a kernel\n" * 40, "custom/helper.cuh": "// helper\n",
             "README.md": "notes\n", "build.sh": "make\n"}
    job = runs.submit_development(tokens["alpha"], files)
    claimed = runs.claim()
    runs.lines(claimed, ["hi\n"])
    runs.finish(claimed)
    ids["development"] = job["id"]
    ids["cancelled before"] = runs.cancel(tokens["alpha"], runs.submit(tokens["alpha"])["id"])["id"]
    job = runs.submit(tokens["alpha"])
    claimed = runs.claim()
    runs.cancel(tokens["alpha"], job["id"])
    runs.finish(claimed, record_of({**job, "record_id": claimed["job"]["record_id"]}, [[0.01], [0.01]]))
    ids["cancelled while"] = job["id"]
    job = runs.submit(tokens["alpha"])
    claimed = runs.claim()
    runs.lines(claimed, ["* Running python -m ece408_op m2\n", "Loading model... done\n", "New Inference\n"])
    ids["running"], ids["claimed"] = job["id"], claimed
    ids["queued"] = runs.submit(tokens["beta"])["id"]                    # /admin's waiting jobs
    return tokens, runs, ids


def axe_violations(page, where):
    """axe-core's violations on ``page`` (every rule of its default set, colour contrast among them),
    as lines: id, impact, the nodes' targets."""
    from axe_playwright_python.sync_playwright import Axe
    found = Axe().run(page).response["violations"]
    return [f"{where}: {v['id']} ({v['impact']}) at {', '.join(' '.join(n['target']) for n in v['nodes'])}"
            for v in found]


@pytest.mark.timeout(300)
def test_every_page_passes_axe_core_at_desktop_and_phone_width(server, chromium):
    pytest.importorskip("axe_playwright_python", reason="pip install axe-playwright-python (the test extra)")
    tokens, runs, ids = a_class_with_every_kind_of_run(server)
    found, errors = [], []
    for size in (DESKTOP, PHONE):
        width = f"{size['width']} px"
        options = {"viewport": size, **({"is_mobile": True, "has_touch": True} if size is PHONE else {})}
        watched = Watched(chromium, **options)
        try:
            page = watched.page
            page.goto(server.url + "/login")
            found += axe_violations(page, f"/login at {width}")
            watched.login(server.url, tokens["alpha"])
            for path in ("/", "/team", *(f"/jobs/{ids[k]}" for k in ("valid", "failed", "development",
                                                                       "cancelled before")), "/jobs/" + "0" * 32):
                page.goto(server.url + path)
                found += axe_violations(page, f"{path} at {width}")
            page.goto(f"{server.url}/jobs/{ids['running']}")                  # live: its lines as they come
            page.wait_for_selector("#live-status:not([hidden])")
            found += axe_violations(page, f"the live job page at {width}")
            watched.context.clear_cookies()
            watched.login(server.url, server.instructor_token)
            for path in ("/admin", "/team?name=alpha", "/"):
                page.goto(server.url + path)
                found += axe_violations(page, f"{path} as the instructor at {width}")
        finally:
            watched.close()
        errors += [e for e in watched.errors if "status of 404" not in e]        # the error page's own 404
    watched = Watched(chromium, viewport=PHONE, is_mobile=True, has_touch=True)
    try:                                                          # the live page once its verdict has come
        page = watched.login(server.url, tokens["alpha"])
        page.goto(f"{server.url}/jobs/{ids['running']}")
        page.wait_for_selector("#live-status:not([hidden])")
        claimed = ids["claimed"]
        job = {"id": ids["running"], "team": "alpha", "milestone": "m2", "size": 100,
               "record_id": claimed["job"]["record_id"], "files": []}
        runs.finish(claimed, record_of(job, [[0.01], [0.02]]))
        page.wait_for_selector("#verdict .verdict")
        found += axe_violations(page, "the live job page once ended, at 390 px")
    finally:
        watched.close()
    assert not found, "axe-core found:\n" + "\n".join(found)
    assert not errors and not watched.errors, errors + watched.errors


def test_the_team_page_fits_a_desktop_and_a_phone_and_says_what_each_run_did(server, chromium, tmp_path):
    tokens, runs, ids = a_class_with_every_kind_of_run(server)
    from hashlib import sha256
    digest = sha256(FORWARD.encode()).hexdigest()
    desktop = Watched(chromium, viewport=DESKTOP, java_script_enabled=False)          # the pages need no script
    try:
        page = desktop.login(server.url, tokens["alpha"])
        row = page.locator("table.runs tr", has=page.locator(f"a[href='/jobs/{ids['development']}']"))
        box = row.bounding_box()
        row.screenshot(path=str(tmp_path / "development-row-1280.png"))
        assert box["height"] < 80, f"a development run's row is {box['height']} px tall at 1280 px"
        files = row.locator("td.files")
        assert files.inner_text().startswith("6 files") and not files.locator("ul").is_visible()
        cell = page.locator("table.runs tr", has=page.locator(f"a[href='/jobs/{ids['valid']}']")).locator("td.files")
        assert cell.locator("summary code.hash").inner_text() == digest[:12]             # the short hash
        assert digest not in cell.inner_text()
        cell.locator("summary").click()                                                  # the full one on demand
        assert digest in cell.inner_text()
        cells = {k: page.locator("table.runs tr", has=page.locator(f"a[href='/jobs/{ids[k]}']")).inner_text()
                 for k in ("failed", "cancelled before", "cancelled while")}
        assert "failed before any Op Time" in cells["failed"] and "the harness exited" in cells["failed"]
        assert " s, Correctness -" not in cells["failed"] and "ece408-high" not in cells["failed"]
        assert "cancelled before it ran" in cells["cancelled before"] and "killed" not in cells["cancelled before"]
        assert "cancelled while running (stopped)" in cells["cancelled while"]
        assert "Op Time over your runs" in page.inner_text("main")
        page.goto(f"{server.url}/jobs/{ids['failed']}")
        assert "ece408-high not timed, no Correctness" in " ".join(page.inner_text("#verdict").split())
        page.goto(f"{server.url}/jobs/{ids['cancelled before']}")
        assert "Cancelled before it ran." in page.inner_text("#verdict")
    finally:
        desktop.close()
    phone = Watched(chromium, viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        page = phone.login(server.url, tokens["alpha"])
        screenshot(page, tmp_path, "team-390.png")
        box = page.locator("table.runs tbody tr td.strong").first.bounding_box()
        assert 0 <= box["x"] and box["x"] + box["width"] <= PHONE["width"], f"Op Time at {box} on a 390 px phone"
        region = page.locator("div.scroll[role=region]", has=page.locator("table.runs"))
        assert region.get_attribute("tabindex") == "0" and region.get_attribute("aria-label") == "Your runs"
        assert region.evaluate("e => e.scrollWidth > e.clientWidth")                    # it scrolls...
        assert "radial-gradient" in region.evaluate("e => getComputedStyle(e).backgroundImage")   # ...and shows it
        region.focus()
        page.keyboard.press("ArrowRight")                                                # by the keyboard too
        wait_until(lambda: region.evaluate("e => e.scrollLeft") > 0, 5, "the runs' table scrolled by the keyboard")
    finally:
        phone.close()
    instructor = Watched(chromium, viewport=DESKTOP)
    try:
        page = instructor.login(server.url, server.instructor_token)
        page.goto(server.url + "/team?name=alpha")
        text = page.inner_text("main")
        assert "Op Time over this team's runs" in text and "your" not in text.lower(), text
        assert page.get_attribute("div.scroll[role=region]", "aria-label") == "This team's runs"
        svg = page.request.get(server.url + "/team/plot.svg?name=alpha&milestone=m2&size=100").text()
        assert "this team's valid runs" in svg and "your" not in svg
        page.goto(server.url + "/admin")
        recent = page.inner_text("#recent + .scroll")
        assert "cancelled before it ran" in recent and "cancelled while running (stopped)" in recent
        assert "(killed)" not in recent
    finally:
        instructor.close()
