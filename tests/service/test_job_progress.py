"""A running job's progress as its team watches it: the step its worker reports (a development
run's command k of n, a ranked run's model and fresh run i of n), the elapsed time and the end,
through a real ``serve`` and its worker (bubblewrap) to ``jobs show --follow``; a hostile worker's
step kept as bounded text; the follower's status line on a terminal (no server)."""
import io
import json
import re
import shutil
import time

import pytest

from pagekit import Runs, record_of
from servicekit import Service, job_id_of
from teams import PLAIN, team_project

from ece408_op.client.statusline import StatusLine

bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the worker's sandbox needs bubblewrap")
STEP_LINE = re.compile(r"^\* step: (.*) \(elapsed (\d+) s\)$", re.M)


@pytest.fixture
def service(tmp_path):
    svc = Service(tmp_path / "svc", workers=1, args=["--engine", "bubblewrap"]).start()
    yield svc
    svc.close()


@pytest.mark.service
@bwrap
@pytest.mark.timeout(300)
def test_a_development_run_s_commands_show_as_steps_with_the_elapsed_time(tmp_path, service):
    token = service.add_teams("gamma")["gamma"]
    last = '/bin/sh -c "sleep 2; echo built > /build/out.txt"'
    team = team_project(tmp_path / "gamma", commands=["sleep 2", "sleep 2", last])
    job = job_id_of(service.cli("submit", "--detach", team, token=token).stderr)
    follower = service.follow("jobs", "show", job, "--follow", token=token)
    deadline = time.monotonic() + 120
    while "2 of 3" not in str((service.job(job).get("progress") or {}).get("step")):       # the API's view
        assert time.monotonic() < deadline, service.job(job)
        time.sleep(0.2)
    shown = service.cli("jobs", "show", job, token=token)
    assert re.search(r"^\* Job [0-9a-f]{32}: running, elapsed \d+ s; step: build command [23] of 3: sleep 2$",
                     shown.stderr, re.M), shown.stderr
    code, err = follower.finish(120)
    assert code == 0, err
    steps = STEP_LINE.findall(err)
    assert [s for s, _ in steps] == ["build command 1 of 3: sleep 2", "build command 2 of 3: sleep 2",
                                     f"build command 3 of 3: {last}"], err
    elapsed = [int(e) for _, e in steps]
    assert elapsed == sorted(elapsed) and elapsed[2] - elapsed[0] >= 3, err           # two sleeps between
    assert re.search(r"^\* Ended \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: done, ok \(elapsed \d+ s\); build folder: "
                     rf"python -m ece408_op jobs download {job}$", err, re.M), err
    assert follower.text == service.transcript(job)                                   # stdout: the transcript exactly
    assert "step:" not in follower.text and service.job(job).get("progress") is None  # ended: no step


@pytest.mark.service
@pytest.mark.serial         # every step seen: the worker sends the latest step with its next post (calls.py), a loaded
@bwrap                      # machine's slow post skips one (failed in make test's parallel phase): alone
@pytest.mark.timeout(600)
def test_a_ranked_m2_shows_each_model_and_its_fresh_runs(tmp_path, service):
    token = service.add_teams("alpha")["alpha"]
    out = service.cli("submit", "--submit", "m2", "--size", 20, cwd=team_project(tmp_path / "alpha", cpu=PLAIN),
                      token=token)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    steps = [s for s, _ in STEP_LINE.findall(out.stderr)]
    assert "the grader's harness: starting m2 on 2 model(s)" in steps, out.stderr
    for number, model in enumerate(("ece408-high", "ece408-low"), 1):
        prefix = f"model {model} ({number} of 2): "
        assert prefix + "MXNet's reference run (the Correctness to equal)" in steps, out.stderr
        assert any(s.startswith(prefix + "layer ") and s.endswith(", fresh run 1 of 1") for s in steps), out.stderr
    assert steps.index("model ece408-low (2 of 2): MXNet's reference run (the Correctness to equal)") > \
        steps.index("model ece408-high (1 of 2): MXNet's reference run (the Correctness to equal)")
    assert len(re.findall(r"^Op Time: \d+\.\d{6}$", out.stdout, re.M)) == 2 and "step" not in out.stdout
    assert re.search(r"^\* Ended .* UTC: done, ok \(elapsed (\d+ min )?\d+ s\)$", out.stderr, re.M), out.stderr


@pytest.mark.service                                # a real server
def test_a_hostile_worker_s_step_is_bounded_escaped_text(running_service, tmp_path):
    svc = running_service(tmp_path / "svc", workers=0)
    token = svc.add_teams("delta")["delta"]
    runs = Runs(svc.http, svc.worker_token("hostile"))
    job = runs.submit(token)
    claimed = runs.claim()
    hostile = "<script>alert(1)</script>\x1b[31mred\x07\n" + "x" * 200_000
    lease = {"X-Lease": claimed["lease"]}
    with svc.http(runs.worker) as worker:
        for bad in (["a list"], {"an": "object"}, 7):
            answer = worker.post(f"/api/worker/jobs/{job['id']}/chunks", headers=lease,
                                 json={"chunks": [], "progress": bad})
            assert answer.status_code == 400 and "progress is a text" in answer.json()["error"]
        answer = worker.post(f"/api/worker/jobs/{job['id']}/chunks", content=json.dumps(
            {"chunks": [], "progress": "\x00\ud800\u202e"}), headers={**lease, "Content-Type": "application/json"})
        assert answer.status_code == 200, answer.text                   # NUL, a lone surrogate, a bidi mark
        assert svc.job(job["id"])["progress"]["step"] == "\\x00\\ud800\\u202e"
        answer = worker.post(f"/api/worker/jobs/{job['id']}/chunks", headers=lease,
                             json={"chunks": [], "progress": hostile})
        assert answer.status_code == 200, answer.text
    with svc.http(token) as team:                      # a team's token cannot post one
        answer = team.post(f"/api/worker/jobs/{job['id']}/chunks", headers=lease, json={"chunks": [],
                                                                                     "progress": "mine"})
        assert answer.status_code == 403
    step = svc.job(job["id"])["progress"]["step"]
    assert len(step) == 200 and step.startswith("<script>alert(1)</script>\\x1b[31mred\\x07 xxx")
    assert step.endswith("…") and "\x1b" not in step
    follower = svc.popen("jobs", "show", job["id"], "--follow", token=token)
    time.sleep(3)
    runs.finish(claimed, record_of({**job, "record_id": claimed["job"]["record_id"]}, [[0.01], [0.02]]))
    follower.wait(60)
    err = follower.stderr.read()
    assert "* step: <script>alert(1)</script>\\x1b[31mred\\x07 xxx" in err and "\x1b" not in err, err
    line = next(s for s in err.splitlines() if s.startswith("* step: "))
    assert len(line) < 260, line


class Terminal:
    """One of the two streams of a terminal both write to: every write recorded on ``screen``."""

    def __init__(self, name, screen):
        self.name, self.screen = name, screen

    def write(self, text):
        self.screen.append((self.name, text))

    def flush(self):
        pass

    def isatty(self):
        return True

    def text(self):
        return "".join(t for n, t in self.screen if n == self.name)


def test_on_a_terminal_the_status_line_is_rewritten_in_place_beside_an_exact_transcript():
    screen = []
    out, err = Terminal("out", screen), Terminal("err", screen)
    status = StatusLine(out, err, every=0.05)
    now = time.time()
    status.progress({"step": "build command 1 of 2: make", "started_at": now - 5, "now": now})
    status.transcript("* Running make\nhalf a line")
    inside = len(screen)
    time.sleep(0.3)                                          # ticks: nothing drawn inside a line
    assert len(screen) == inside
    status.transcript(" ends\n")
    status.progress({"step": "build command 2 of 2: ./run \x1b[31m", "started_at": now - 5, "now": now + 2})
    time.sleep(0.3)
    status.close()
    assert out.text() == "* Running make\nhalf a line ends\n"                     # the transcript, exactly
    drawn = err.text()
    assert "\r* elapsed 5 s: build command 1 of 2: make" in drawn and "\n" not in drawn
    assert "\r* elapsed 7 s: build command 2 of 2: ./run \\x1b[31m" in drawn     # the server's clock, escaped
    assert drawn.endswith("\r") and screen[-1][0] == "err"                       # cleared at the end
    for k, (name, text) in enumerate(screen):                  # each piece of the transcript on a cleared line
        if name == "out" and k and screen[k - 1][0] == "err":
            assert screen[k - 1][1].endswith("\r") and not screen[k - 1][1].strip(), screen
    plain = io.StringIO()
    status = StatusLine(io.StringIO(), plain)
    for step in ("one", "one", "two"):
        status.progress({"step": step, "started_at": now, "now": now})
    assert plain.getvalue() == "* step: one (elapsed 0 s)\n* step: two (elapsed 0 s)\n"


def read_events(client, job_id, stop):
    """(event, data) of the job's API stream until ``stop(event)``."""
    events, name = [], None
    with client.stream("GET", f"/api/jobs/{job_id}/events", params={"after": -1}) as stream:
        for line in stream.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: ") and name:
                events.append((name, json.loads(line[6:])))
                if stop(name):
                    return events
    return events


@pytest.mark.service                                # a real server
def test_the_api_stream_carries_the_step_then_an_end_with_its_time_and_record(running_service, tmp_path):
    svc = running_service(tmp_path / "svc", workers=0)
    token = svc.add_teams("eps")["eps"]
    runs = Runs(svc.http, svc.worker_token("w"))
    job = runs.submit(token)
    claimed = runs.claim()
    runs.lines(claimed, ["a line\n"])
    with svc.http(runs.worker) as worker:
        worker.post(f"/api/worker/jobs/{job['id']}/chunks", headers={"X-Lease": claimed["lease"]},
                    json={"chunks": [], "progress": "step one"})
    with svc.http(token) as team:
        events = read_events(team, job["id"], lambda name: name == "progress")
        progress = events[-1][1]
        assert [n for n, _ in events][-2:] == ["line", "progress"] and progress["step"] == "step one"
        assert progress["started_at"] == svc.job(job["id"])["started_at"] and abs(progress["now"] - time.time()) < 5
        runs.finish(claimed, record_of({**job, "record_id": claimed["job"]["record_id"]}, [[0.01], [0.02]]))
        end = read_events(team, job["id"], lambda name: name == "end")[-1]
    assert end[0] == "end" and end[1]["state"] == "done" and end[1]["finished_at"] >= progress["started_at"]
    assert end[1]["summary"].startswith(f"* Record {claimed['job']['record_id']}") and end[1]["build"] is None
    assert "progress" not in svc.job(job["id"])
