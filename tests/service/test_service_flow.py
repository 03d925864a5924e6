"""The submission service as a user meets it: a real server (uvicorn) on the loopback address,
its local worker running each job through grading's runner in a bubblewrap sandbox, and the real
client commands: ranked m2 runs of two teams ending in a ranking, live development runs, Ctrl-C
that detaches, cancelling, the queue's fairness, rate limits, deadlines, time limits and the
upload cap, the same on PostgreSQL; the client without MXNet."""
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from servicekit import Service, job_id_of, log_lines_are_structured, started_postgres
from teams import PLAIN, WRONG, team_project

from ece408_op.grading.kinds import kind_of
from ece408_op.grading.machine import cpu_name

pytestmark = [pytest.mark.service, pytest.mark.skipif(shutil.which("bwrap") is None, reason="the workers' sandbox needs bubblewrap")]


@pytest.fixture
def service(tmp_path):
    svc = Service(tmp_path / "svc", workers=1, args=["--engine", "bubblewrap"]).start()
    yield svc
    svc.close()


def dev_team(folder, commands):
    return team_project(folder, commands=commands)


# ---------------------------------------------------------------------------- the README's flow

@pytest.mark.timeout(600)
def test_two_teams_submit_m2_from_their_folders_and_are_ranked(tmp_path, service):
    tokens = service.cli("teams", "add", "alpha", "beta", "--token-dir", tmp_path / "tokens")
    assert tokens.returncode == 0, tokens.stderr
    assert tokens.stdout.splitlines() == [f"alpha: token written to {tmp_path / 'tokens' / 'alpha.token'}",
                                          f"beta: token written to {tmp_path / 'tokens' / 'beta.token'}"]
    assert oct((tmp_path / "tokens" / "alpha.token").stat().st_mode & 0o777) == "0o600"
    outs = {}
    for name in ("alpha", "beta"):
        folder = team_project(tmp_path / name, cpu=PLAIN if name == "beta" else None)
        out = service.cli("submit", "--submit", "m2", "--size", 100, cwd=folder,
                          env={"ECE408_TOKEN_FILE": str(tmp_path / "tokens" / f"{name}.token")})
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr
        outs[name] = out
        digest = hashlib.sha256((folder / "new-forward.py").read_bytes()).hexdigest()
        assert f"* Team file new-forward.py: {(folder / 'new-forward.py').stat().st_size} bytes, sha256 {digest}" \
            in out.stdout
        assert "* Running python -m ece408_op m2 (the grader's harness) on ece408-high, ece408-low, 100 images" \
            in out.stdout
        assert len(re.findall(r"^Op Time: \d+\.\d{6}$", out.stdout, re.M)) == 2
        assert re.search(rf"^\* Record [0-9a-f]{{32}} \({name}, m2, 100 images\): ok; total Op Time \d+\.\d+ s, "
                         r"Correctness as expected$", out.stdout, re.M), out.stdout
        assert f"* Uploading to {service.url}: ranked m2 on 100 images: new-forward.py" in out.stderr
    ranking = service.cli("ranking", token=(tmp_path / "tokens" / "alpha.token").read_text().strip())
    assert ranking.returncode == 0, ranking.stderr
    assert ranking.stdout.startswith(f"Ranking: m2, 100 images on {kind_of(cpu_name())} (2 team(s); 0 run(s) not "
                                     "valid)")
    assert {line.split()[1] for line in ranking.stdout.splitlines()[3:]} == {"alpha", "beta"}    # after the options line
    records = service.records()
    assert sorted(r.team for r in records) == ["alpha", "beta"]
    assert all(r.status == "ok" and r.correct and r.isolated and r.engine == "bubblewrap" for r in records)
    for record in records:
        job = service.job(record.id)                       # a record's id is its job's
        assert job["state"] == "done" and job["valid"] and job["attempts"] == 1
    assert not log_lines_are_structured(service.log()), service.log()[-3000:]


# ---------------------------------------------------------------------------- development runs

@pytest.mark.timeout(300)
def test_a_development_run_streams_its_transcript_live(tmp_path, service):
    token = service.add_teams("gamma")["gamma"]
    client = service.follow("submit", cwd=dev_team(tmp_path / "gamma", ["echo first", "sleep 4", "echo second"]),
                            token=token)
    code, err = client.finish(120)
    assert code == 0, err
    assert "* Running echo first\nfirst\n* Running sleep 4\n* Running echo second\nsecond\n" in client.text
    assert client.text.endswith("* Development run: no record is stored (ranked runs: --submit m2|m3|final)\n")
    arrived = dict(zip(client.lines, client.times))
    assert arrived["second\n"] - arrived["first\n"] > 3, "the first command's output came only at the end"
    assert service.records() == []


@pytest.mark.timeout(300)
def test_a_failing_command_ends_the_run_and_the_client_exits_1(tmp_path, service):
    token = service.add_teams("delta")["delta"]
    team = dev_team(tmp_path / "delta", ["echo first", '/bin/bash -c "echo partial; exit 3"', "echo never-run"])
    out = service.cli("submit", team, token=token)
    assert out.returncode == 1, out.stderr
    assert "* Running /bin/bash -c \"echo partial; exit 3\"\npartial\n* The command exited with code 3; the build " \
           "stopped.\n" in out.stdout
    assert "never-run\n" not in out.stdout
    job = service.job(job_id_of(out.stderr))
    assert job["state"] == "done" and job["status"] == "failed" and job["exit_code"] == 3


@pytest.mark.timeout(300)
def test_ctrl_c_detaches_and_the_job_goes_on(tmp_path, service):
    token = service.add_teams("eps")["eps"]
    client = service.follow("submit", cwd=dev_team(tmp_path / "eps", ["echo first", "sleep 5", "echo second"]),
                            token=token)
    client.wait_for(lambda lines: "first\n" in lines)
    client.proc.send_signal(signal.SIGINT)
    code, err = client.finish(30)
    assert code == 130
    job_id = job_id_of(err)
    assert f"* Detached: job {job_id} goes on without you. Follow it again with: python -m ece408_op jobs show " \
           f"{job_id} --follow" in err
    again = service.cli("jobs", "show", job_id, "--follow", token=token)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("\nfirst\n") == 1 and again.stdout.endswith(
        "second\n* The build folder is empty: nothing is kept\n* Development run: no record is stored (ranked runs: "
        "--submit m2|m3|final)\n")
    assert service.job(job_id)["state"] == "done"


@pytest.mark.timeout(300)
def test_cancel_a_queued_and_a_running_job(tmp_path, service):
    tokens = service.add_teams("zeta", "eta")
    slow = dev_team(tmp_path / "zeta", ["echo started", "sleep 600"])
    running = service.popen("submit", "--detach", cwd=slow, token=tokens["zeta"])
    assert running.wait(timeout=60) == 0
    running_id = job_id_of(running.stderr.read())
    service.wait_for_text(running_id, "started\n")
    queued = service.cli("submit", "--detach", dev_team(tmp_path / "eta", ["echo hi"]), token=tokens["eta"])
    queued_id = job_id_of(queued.stderr)
    assert service.job(queued_id)["state"] == "queued"
    out = service.cli("jobs", "cancel", queued_id, token=tokens["eta"])
    assert out.returncode == 0 and out.stdout == f"Job {queued_id} cancelled before it started.\n", out.stderr
    again = service.cli("jobs", "cancel", queued_id, token=tokens["eta"])
    assert again.returncode == 2 and again.stderr == f"error: job {queued_id} has already ended (cancelled)\n"
    out = service.cli("jobs", "cancel", running_id, token=tokens["zeta"])
    assert out.stdout == f"Job {running_id} is running; its worker stops it now.\n"
    job = service.wait_for_state(running_id, ("cancelled",), timeout=60)
    assert job["status"] == "killed"
    text = service.transcript(running_id)
    assert "* The run was stopped from outside (SIGTERM); the build stopped.\n" in text
    assert text.endswith("* Cancelled while it ran\n")
    follow = service.cli("jobs", "show", running_id, "--follow", token=tokens["zeta"])
    assert follow.returncode == 1


# ---------------------------------------------------------------------------- the queue and its rules

def test_the_queue_is_fair_between_teams_and_one_job_a_team_runs(running_service, tmp_path):
    svc = running_service(tmp_path / "svc", workers=0, args=["--max-waiting", "20"])
    tokens = svc.add_teams("busy", "quiet")
    team = dev_team(tmp_path / "busy", ["echo hi"])
    busy = [job_id_of(svc.cli("submit", "--detach", team, token=tokens["busy"]).stderr) for _ in range(10)]
    quiet = job_id_of(svc.cli("submit", "--detach", team, token=tokens["quiet"]).stderr)
    place = svc.cli("jobs", "show", quiet, token=tokens["quiet"])
    assert "next in line" not in place.stderr and "1 job(s) ahead of yours" in place.stderr, place.stderr
    worker = svc.worker_token("fake")
    with svc.http(worker) as http:
        def claim(slot):
            answer = http.post("/api/worker/claim", json={"slot": slot, "gpu": False, "device": "test"})
            return answer.json()["job"]["id"] if answer.status_code == 200 else None
        assert claim("a") == busy[0]
        assert claim("b") == quiet                     # not busy's second job: busy has one running
        assert claim("c") is None                      # nine of busy's wait, but busy has one running


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_claims_at_once_never_give_a_team_two_jobs(running_service, tmp_path, request, database):
    env = {"ECE408_DB": request.getfixturevalue("postgres").url} if database == "postgresql" else {}
    svc = running_service(tmp_path / "svc", workers=0, args=["--max-waiting", "20"], env=env)
    tokens = svc.add_teams("many", "one")
    upload = _upload(dev_team(tmp_path / "t", ["echo hi"]))
    with svc.http(tokens["many"]) as http:
        assert all(http.post("/api/jobs", content=upload).status_code == 201 for _ in range(10))
    with svc.http(tokens["one"]) as http:
        assert http.post("/api/jobs", content=upload).status_code == 201
    worker = svc.worker_token("many-slots")

    def claim(slot):
        with svc.http(worker) as http:
            answer = http.post("/api/worker/claim", json={"slot": f"s{slot}", "gpu": False, "wait": 0})
            return answer.json()["job"]["team"] if answer.status_code == 200 else None
    with ThreadPoolExecutor(20) as pool:
        claimed = [t for t in pool.map(claim, range(20)) if t]
    assert sorted(claimed) == ["many", "one"]               # one job a team, whatever the race
    assert sum(j["state"] == "running" for j in svc.jobs()) == 2


@pytest.mark.timeout(300)
def test_rate_limits_say_how_long_to_wait(running_service, tmp_path):
    svc = running_service(tmp_path / "svc", workers=0, args=["--development-per-hour", "2", "--max-waiting", "5"])
    token = svc.add_teams("theta")["theta"]
    team = dev_team(tmp_path / "theta", ["echo hi"])
    for _ in range(2):
        assert svc.cli("submit", "--detach", team, token=token).returncode == 0
    out = svc.cli("submit", "--detach", team, token=token)
    assert out.returncode == 2
    assert re.fullmatch(r"error: team theta has submitted 2 development runs in the last hour, the limit; the "
                        r"next is accepted in (59 min \d+ s|1 h 0 min)\n", out.stderr.splitlines(True)[-1]), out.stderr
    for body in (b"x", _upload(team)):                # the rules come before the upload is read
        with svc.http(token) as http:
            answer = http.post("/api/jobs", content=body)
        assert answer.status_code == 429 and 3500 <= int(answer.headers["retry-after"]) <= 3600


def _upload(folder):
    from ece408_op.service.upload import pack_development
    return pack_development(folder)[0]


@pytest.mark.timeout(300)
def test_after_a_deadline_ranked_runs_of_that_milestone_are_refused(tmp_path, service):
    token = service.add_teams("iota")["iota"]
    put = service.cli("deadlines", "set", "m2", "2020-05-01T23:59:00-05:00")
    assert put.returncode == 0 and put.stdout == "m2: ranked runs accepted until 2020-05-01 23:59:00-05:00\n", put.stderr
    team = team_project(tmp_path / "iota", commands=["echo still fine"])
    out = service.cli("submit", "--submit", "m2", "--size", 100, cwd=team, token=token)
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1] == ("error: the m2 deadline was 2020-05-01 23:59:00-05:00; ranked m2 runs are "
                                           "closed (development runs are still accepted)")
    assert service.cli("submit", cwd=team, token=token).returncode == 0
    shown = service.cli("deadlines", "list", token=token)
    assert shown.stdout == "m2: 2020-05-01 23:59:00-05:00\n", shown.stderr
    refused = service.cli("deadlines", "set", "m3", "2030-01-01T00:00:00Z", token=token)
    assert refused.returncode == 2 and refused.stderr == "error: this needs the instructor's token\n"
    naive = service.cli("deadlines", "set", "m3", "2030-01-01T00:00:00")
    assert naive.returncode == 2 and "needs its time zone" in naive.stderr


@pytest.mark.timeout(300)
def test_a_job_past_its_time_limit_is_stopped(running_service, tmp_path):
    svc = running_service(tmp_path / "svc", workers=1, args=["--engine", "bubblewrap", "--job-timeout", "4"])
    token = svc.add_teams("kappa")["kappa"]
    out = svc.cli("submit", dev_team(tmp_path / "kappa", ["echo begun", "sleep 300"]), token=token)
    assert out.returncode == 1, out.stderr
    assert "begun\n" in out.stdout and "* The job ran past its time limit of 4 s and was stopped\n" in out.stdout
    job = svc.job(job_id_of(out.stderr))
    assert job["state"] == "done" and job["status"] == "timeout"


def test_an_upload_over_the_cap_is_refused_before_it_is_read(running_service, tmp_path):
    svc = running_service(tmp_path / "svc", workers=0, args=["--max-upload", "0.05"])
    token = svc.add_teams("lam")["lam"]
    team = dev_team(tmp_path / "lam", ["echo hi"])
    (team / "data.bin").write_bytes(os.urandom(200_000))
    out = svc.cli("submit", team, token=token)
    assert out.returncode == 2
    assert re.fullmatch(r"error: the upload is 20\d KiB; this service takes at most 51 KiB\n",
                        out.stderr.splitlines(True)[-1]), out.stderr
    assert svc.jobs() == []


@pytest.mark.timeout(300)
def test_a_wrong_forward_runs_and_is_not_valid(tmp_path, service):
    token = service.add_teams("mu")["mu"]
    out = service.cli("submit", "--submit", "m2", "--size", 100, cwd=team_project(tmp_path / "mu", cpu=WRONG),
                      token=token)
    assert out.returncode == 1, out.stderr
    assert "the output differs from the reference" in out.stdout
    job = service.job(job_id_of(out.stderr))
    assert job["state"] == "done" and job["status"] == "failed" and job["valid"] is False
    (record,) = service.records()
    assert record.status == "failed" and not record.correct and record.id == job["id"]


# ---------------------------------------------------------------------------- PostgreSQL

@pytest.fixture
def postgres(tmp_path):
    server = started_postgres(tmp_path / "pg")
    yield server
    server.stop()


@pytest.mark.timeout(600)
def test_the_service_on_postgresql(running_service, tmp_path, postgres):
    svc = running_service(tmp_path / "svc", workers=1, args=["--engine", "bubblewrap"], env={"ECE408_DB": postgres.url})
    try:
        tokens = svc.add_teams("nu", "xi")
        out = svc.cli("submit", "--submit", "m2", "--size", 100, cwd=team_project(tmp_path / "nu", cpu=PLAIN),
                      token=tokens["nu"])
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr
        dev = svc.cli("submit", dev_team(tmp_path / "xi", ["echo on postgres"]), token=tokens["xi"])
        assert dev.returncode == 0 and "on postgres\n" in dev.stdout, dev.stderr
        (record,) = svc.records(postgres.url)
        assert record.team == "nu" and record.status == "ok" and record.correct
        assert all(len(m["repeats"]) >= 3 for m in record.models)               # every repeat kept, in PostgreSQL
        ranking = svc.cli("ranking", "--csv", token=tokens["xi"])
        assert ranking.stdout.splitlines()[1].startswith("1,nu,"), ranking.stdout
        assert "password" not in svc.log() and "grading@" not in svc.log()
    finally:
        svc.close()


# ---------------------------------------------------------------------------- the client alone

def test_the_client_needs_neither_mxnet_nor_pycuda(tmp_path, service):
    token = service.add_teams("omicron")["omicron"]
    team = dev_team(tmp_path / "omicron", ["echo no gpu needed"])
    code = ("import sys\nfor name in ('mxnet', 'pycuda', 'numba', 'torch'): sys.modules[name] = None\n"
            "from ece408_op.cli import main\nstatus = main(sys.argv[1:])\n"
            "assert not [m for m in ('mxnet', 'pycuda', 'numba', 'torch') if sys.modules.get(m)]\nsys.exit(status)\n")
    argv, env, _ = service.command("submit", team, token=token)
    out = subprocess.run([sys.executable, "-c", code, *argv[3:]], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "no gpu needed\n" in out.stdout


def test_local_flags_with_server_are_a_usage_error(tmp_path, service):
    out = service.cli("submit", "--engine", "host", token=service.add_teams("pi")["pi"])
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1].endswith("error: --engine: the service decides how runs are made; leave it out "
                                                 "(or run here: without $ECE408_SERVER, or with --local)")


def test_health_and_readiness(service):
    with service.http() as http:
        assert http.get("/health").json() == {"status": "ok", "draining": False}
        assert http.get("/ready").json() == {"status": "ready"}


def test_the_instructor_s_commands(running_service, tmp_path):
    svc = running_service(tmp_path / "svc", workers=0)
    roster = tmp_path / "roster.csv"
    roster.write_text("netid,team\nab1,rho\ncd2,sigma\nef3,rho\n")
    out = svc.cli("teams", "import", roster, "--token-dir", tmp_path / "tokens")
    assert out.returncode == 2 and out.stderr.splitlines()[-1] == (
        f"error: the roster {roster}, line 4: team rho is named twice (line 2 too); nothing was imported")
    roster.write_text("netid,team\nab1,rho\ncd2,sigma\n")
    assert svc.cli("teams", "import", roster, "--token-dir", tmp_path / "tokens").returncode == 0
    roster.write_text("team\nrho\ntau\n")
    again = svc.cli("teams", "import", roster)
    assert again.returncode == 0 and again.stdout == f"tau: token written to {tmp_path / 'roster-tokens' / 'tau.token'}\n"
    assert "1 team of the roster exists already without a token file" in again.stderr, again.stderr
    added = svc.cli("teams", "add", "rho", "upsilon")
    assert added.returncode == 2 and "already exist: rho; nothing was added" in added.stderr
    listed = svc.cli("teams", "list")
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["team", "rho", "sigma", "tau"]
    out = svc.cli("teams", "worker", "gpu-node-1", "--out", tmp_path / "worker.token")
    assert out.returncode == 0 and oct((tmp_path / "worker.token").stat().st_mode & 0o777) == "0o600"
    who = svc.cli("jobs", "list", env={"ECE408_TOKEN_FILE": str(tmp_path / "worker.token")})
    assert who.returncode == 2 and who.stderr == "error: this needs a team token or the instructor's token\n"
    token = (tmp_path / "tokens" / "rho.token").read_text().strip()
    svc.cli("submit", "--detach", team_project(tmp_path / "rho", commands=["echo hi"]), token=token)
    everyone = svc.cli("jobs", "list", "--team", "rho", env={"ECE408_TOKEN": svc.instructor_token})
    assert everyone.returncode == 0 and " rho " in everyone.stdout, everyone.stdout
    assert svc.cli("deadlines", "set", "final", "2030-12-04T23:59:00-06:00").returncode == 0
    assert svc.cli("deadlines", "clear", "final").stdout == "final: no deadline\n"
    assert svc.cli("deadlines", "list").stdout == "No deadlines set.\n"
