"""One attack for each security point of the service, tried for real against a
running server: another team's jobs, tokens where they must never be, the token check's timing,
guessing tokens, hostile uploads, the instructor's and the workers' routes, plain HTTP to another
machine; and hostile teams' files (tests/teams.py) through the service."""
import gzip
import hmac
import io
import re
import shutil
import subprocess
import tarfile
import time

import pytest

from servicekit import Service, job_id_of
from teams import FAKE_LINES, FORKS, PLAIN, SNOOPS, team_project

from ece408_op.service import tokens as tokens_module
from ece408_op.service import upload as uploads
from ece408_op.service.db import Database

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the workers' sandbox needs bubblewrap")


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    service = Service(tmp_path_factory.mktemp("security") / "svc", workers=1, args=["--engine", "bubblewrap"]).start()
    yield service
    service.close()


@pytest.fixture(scope="module")
def teams(svc):
    return svc.add_teams("red", "blue")


def dev_upload(tmp_path, commands=("echo hi",)):
    return uploads.pack_development(team_project(tmp_path / "t", commands=list(commands)))[0]


# ---------------------------------------------------------------------------- 1. a team sees only its own jobs

@pytest.mark.service
@pytest.mark.timeout(300)
def test_another_team_s_job_is_404_everywhere(tmp_path, svc, teams):
    mine = svc.cli("submit", team_project(tmp_path / "red", commands=["echo red-secret"]), token=teams["red"])
    assert mine.returncode == 0, mine.stderr
    red_job = job_id_of(mine.stderr)
    with svc.http(teams["blue"]) as blue:
        answers = [blue.get(f"/api/jobs/{red_job}"), blue.get(f"/api/jobs/{red_job}/transcript"),
                   blue.get(f"/api/jobs/{red_job}/events"), blue.post(f"/api/jobs/{red_job}/cancel")]
        nowhere = blue.get(f"/api/jobs/{'0' * 32}")
        assert red_job not in blue.get("/api/jobs").text
    for answer in answers:
        assert answer.status_code == 404
        assert answer.json() == {"error": f"no job {red_job} here (jobs list shows yours)"}  # as for no job at all
    assert nowhere.status_code == 404
    out = svc.cli("jobs", "show", red_job, token=teams["blue"])
    assert out.returncode == 2 and "red-secret" not in out.stdout + out.stderr


# ---------------------------------------------------------------------------- 2. tokens never shown

@pytest.mark.service
@pytest.mark.timeout(600)
def test_tokens_never_reach_logs_urls_transcripts_or_errors(tmp_path, svc, teams):
    wrong = teams["blue"][:-4] + "AAAA"
    outs = [svc.cli("jobs", "list", token=wrong), svc.cli("ranking", token=wrong)]
    assert all(o.returncode == 2 and o.stderr == "error: the token was not accepted (mistyped, revoked or rotated); "
               "ask the course staff for a new one\n" for o in outs), outs
    team = team_project(tmp_path / "blue", commands=['/bin/bash -c "env; cat /proc/*/environ /proc/*/cmdline; '
                                                     'ls -a /root /tmp"'])
    outs.append(svc.cli("submit", team, token=teams["blue"]))
    login = svc.cli("login", input=teams["blue"] + "\n")
    assert login.returncode == 0, login.stderr
    assert oct((svc.root / "config" / "ece408_op" / "login.json").stat().st_mode & 0o777) == "0o600"
    outs.append(svc.cli("jobs", "list"))
    secrets = [t.split("_", 2)[2] for t in (*teams.values(), svc.instructor_token, wrong)]
    every_text = [o.stdout + o.stderr for o in outs] + [svc.log()]
    every_text += [svc.transcript(j["id"]) for j in svc.jobs()] + [r.transcript for r in svc.records()]
    for text in every_text:
        for secret in secrets:
            assert secret not in text
    assert "ECE408_TOKEN" not in every_text[2] and "ECE408_DB" not in every_text[2]
    paths = re.findall(r" http .*path=(\S+)", svc.log())
    assert paths and not [p for p in paths if "?" in p or "ece408_" in p]


@pytest.mark.service
def test_a_token_is_never_sent_over_plain_http_to_another_machine(tmp_path, svc, teams):
    started = time.monotonic()
    out = svc.cli("jobs", "list", token=teams["red"], env={"ECE408_SERVER": "http://192.0.2.1:8408"})
    assert out.returncode == 2 and time.monotonic() - started < 20
    assert out.stderr == ("error: refusing to send a token to http://192.0.2.1:8408 over plain HTTP: it would cross "
                          "the network readable by anyone on the way; use https:// (the service behind a TLS proxy)\n")


@pytest.mark.service
def test_secrets_are_refused_on_the_command_line(tmp_path):
    out = subprocess.run(Service(tmp_path).command("serve", "--db", "postgresql://u:pw@127.0.0.1/x")[0],
                         capture_output=True, text=True, env=Service(tmp_path).env)
    assert out.returncode == 2 and "put it in $ECE408_DB" in out.stderr
    assert "--token" not in Service(tmp_path).cli("login", "--help").stdout.replace("--token-file", "")


# ---------------------------------------------------------------------------- 3. constant time

def test_every_token_check_compares_digests_in_constant_time(tmp_path, monkeypatch):
    db = Database(str(tmp_path / "t.db"))
    checks = tokens_module.Tokens(db)
    (added,) = checks.add_teams(["t"])
    calls = []
    real = hmac.compare_digest
    monkeypatch.setattr(tokens_module.hmac, "compare_digest", lambda a, b: calls.append((len(a), len(b))) or real(a, b))
    good = added["token"]
    attempts = [good[:-1] + ("A" if good[-1] != "A" else "B"),        # the right id, a wrong secret
                f"ece408_{'f' * 16}_{good.split('_', 2)[2]}",          # an unknown id
                "not a token at all", good]
    results = [checks.verify(t) for t in attempts]
    assert results[:3] == [None, None, None] and results[3].name == "t"
    assert calls == [(64, 64)] * 4                                    # every check: one comparison of two digests
    assert checks.verify(attempts[0]) is None and calls[-1] == (64, 64)   # also against a cached token


# ---------------------------------------------------------------------------- 4. guessing is rate-limited

@pytest.mark.service
def test_failed_token_checks_are_rate_limited_per_address(running_service, tmp_path):
    svc = running_service(tmp_path / "svc", workers=0, args=["--max-failures", "5"])
    good = svc.add_teams("green")["green"]
    with svc.http() as http:
        for i in range(5):
            guess = f"ece408_{i:016x}_{'x' * 43}"
            answer = http.get("/api/jobs", headers={"Authorization": f"Bearer {guess}",
                                                    "X-Forwarded-For": f"10.0.0.{i}"})
            assert answer.status_code == 401
        answers = [http.get("/api/jobs", headers={"Authorization": f"Bearer ece408_{i:016x}_{'y' * 43}",
                                                  "X-Forwarded-For": "10.9.9.9"}) for i in range(10)]
        for answer in answers:                        # every further guess refused while limited
            assert answer.status_code == 429, answer.text
            assert re.fullmatch(r"too many failed token checks from this address; try again in (\d+ s|1 min)",
                                answer.json()["error"])
            assert 1 <= int(answer.headers["retry-after"]) <= 60
        answer = http.get("/api/jobs", headers={"Authorization": f"Bearer {good}"})   # a valid token gets in
        assert answer.status_code == 200, answer.text
    assert svc.log().count("auth.failed") == 5 and good.split("_", 2)[2] not in svc.log()


# ---------------------------------------------------------------------------- 5. hostile uploads

def tar_gz(members, trailer=b""):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return gzip.compress(raw.getvalue()) + trailer


def member(name, data=b"x", kind=tarfile.REGTYPE, link=""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data if kind == tarfile.REGTYPE else None


CONFIG = member("rai_build.yml", b"rai:\n  version: 0.2\n  image: x\ncommands:\n  build:\n    - echo hi\n")
HOSTILE = {
    "absolute path": ([CONFIG, member("/etc/cron.d/evil")], "the absolute path /etc/cron.d/evil"),
    "dot dot": ([CONFIG, member("a/../../evil")], "climbs out of the folder (..)"),
    "symbolic link": ([CONFIG, member("link", kind=tarfile.SYMTYPE, link="/etc/shadow")], "link, a symbolic link"),
    "hard link": ([CONFIG, member("hard", kind=tarfile.LNKTYPE, link="rai_build.yml")], "hard, a hard link"),
    "device": ([CONFIG, member("dev", kind=tarfile.CHRTYPE)], "dev, a character device"),
    "FIFO": ([CONFIG, member("fifo", kind=tarfile.FIFOTYPE)], "fifo, a FIFO"),
    "named twice": ([CONFIG, member("a"), member("a")], "names a twice"),
    "file under a file": ([CONFIG, member("a"), member("a/b")], "puts a/b under a file"),
    "dot part": ([CONFIG, member("./x")], "not a plain relative path"),
    "no rai_build.yml": ([member("a")], "rai_build.yml: not found at the top of the upload"),
    "not UTF-8": ([CONFIG, member("bad\udcff")], "which is not UTF-8 text"),
}


@pytest.mark.service
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_upload_refused_before_anything_is_unpacked(svc, teams, case):
    members, message = HOSTILE[case]
    with svc.http(teams["red"]) as http:
        before = len(svc.jobs())
        answer = http.post("/api/jobs", content=tar_gz(members))
    assert answer.status_code == 400 and message in answer.json()["error"], answer.text
    assert len(svc.jobs()) == before


@pytest.mark.service
def test_compression_bombs_and_broken_streams_are_refused(svc, teams):
    bomb = gzip.compress(b"\0" * (200 << 20))                           # 200 MiB of zeros in about 200 KB
    cases = {
        "a bomb": (bomb, "development", "unpacks to more than"),
        "a small bomb for a ranked run": (gzip.compress(b"\0" * (5 << 20)), "ranked", "unpacks to more than"),
        "not gzip": (b"PK\x03\x04 a zip", "development", "not a gzip-compressed tar"),
        "cut short": (tar_gz([CONFIG])[:-12], "development", "ends before its gzip stream does"),
        "data after it": (tar_gz([CONFIG], trailer=b"more"), "development", "data after its gzip stream"),
        "too many entries": (tar_gz([CONFIG] + [member(f"f{i}") for i in range(10001)]), "development",
                             "more than 10000 files and folders"),
        "extra file in a ranked run": (tar_gz([member("new-forward.py"), member("evil.pth")]), "ranked",
                                       "holds exactly new-forward.py (files)"),
    }
    with svc.http(teams["red"]) as http:
        for name, (body, kind, message) in cases.items():
            params = {"kind": kind, **({"milestone": "m2", "size": 10} if kind == "ranked" else {})}
            started = time.monotonic()
            answer = http.post("/api/jobs", params=params, content=body)
            assert answer.status_code == 400 and message in answer.json()["error"], (name, answer.text)
            assert time.monotonic() - started < 20, name


def test_the_worker_checks_again_and_unpacks_inside_its_folder(tmp_path):
    checked = uploads.check(tar_gz([CONFIG, member("d/e/f.txt", b"ok")]), "development")
    dest = tmp_path / "dest"
    dest.mkdir()
    uploads.unpack(checked, dest)
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == ["d", "d/e", "d/e/f.txt", "rai_build.yml"]
    for members, message in HOSTILE.values():
        with pytest.raises(uploads.UploadError, match=re.escape(message)):
            uploads.check(tar_gz(members), "development")


# ---------------------------------------------------------------------------- 6, 7. the instructor's and the workers' routes

ADMIN = [("POST", "/api/admin/teams", {"names": ["x"]}), ("GET", "/api/admin/teams", None),
         ("POST", "/api/admin/teams/revoke", {"name": "red"}), ("POST", "/api/admin/teams/rotate", {"name": "red"}),
         ("POST", "/api/admin/workers", {"name": "w"}), ("PUT", "/api/admin/deadlines", {"milestone": "m2",
                                                                                       "deadline": None})]
WORKER = [("POST", "/api/worker/claim", {"slot": "x"}), ("GET", f"/api/worker/jobs/{'a' * 32}/upload", None),
          ("POST", f"/api/worker/jobs/{'a' * 32}/chunks", {"chunks": []}),
          ("POST", f"/api/worker/jobs/{'a' * 32}/finish", {"status": "ok"}),
          ("POST", f"/api/worker/jobs/{'a' * 32}/release", {})]


@pytest.mark.service
def test_administration_needs_the_instructor_s_token(svc, teams):
    worker = svc.worker_token("probe")
    for method, path, body in ADMIN:
        for token, status in ((None, 401), (teams["red"], 403), (worker, 403)):
            with svc.http(token) as http:
                answer = http.request(method, path, json=body)
            assert answer.status_code == status, (method, path, token, answer.text)
    with svc.http(teams["red"]) as http:
        assert http.get("/api/jobs").status_code == 200          # the team's token still works: nothing was done


@pytest.mark.service
def test_the_workers_routes_need_a_worker_token_and_its_lease(svc, teams):
    for method, path, body in WORKER:
        for token in (teams["red"], svc.instructor_token):
            with svc.http(token) as http:
                answer = http.request(method, path, json=body)
            assert answer.status_code == 403 and answer.json() == {"error": "this needs a worker's token"}
    worker = svc.worker_token("probe2")
    with svc.http(worker) as http:
        for method, path, body in WORKER[1:]:
            answer = http.request(method, path, json=body, headers={"X-Lease": "b" * 32})
            assert answer.status_code in (404, 409), (path, answer.text)
        assert http.get("/api/jobs").status_code == 403            # a worker sees no team's jobs


@pytest.mark.service
def test_team_names_are_stored_and_shown_escaped(svc):
    added = svc.admin("POST", "/api/admin/teams", json={"names": ["ev\x1b[31mil\nrow"]}).json()["teams"]
    assert added[0]["name"] == "ev\\x1b[31mil\\x0arow"
    listed = svc.cli("teams", "list")
    assert "ev\\x1b[31mil\\x0arow" in listed.stdout and "\x1b" not in listed.stdout


# ---------------------------------------------------------------------------- hostile teams through the service

@pytest.mark.service
@pytest.mark.timeout(600)
def test_hostile_teams_through_the_service(tmp_path, svc):
    tokens = svc.add_teams("snoop", "faker", "forker")
    snoop = svc.cli("submit", "--submit", "m2", "--size", 100, cwd=team_project(tmp_path / "snoop", cpu=SNOOPS),
                    token=tokens["snoop"], env={"SNOOP_TARGET": str(svc.root / "state")})
    assert "SNOOP" in snoop.stdout, snoop.stdout[-2000:]
    for secret in (*tokens.values(), svc.instructor_token):
        assert secret.split("_", 2)[2] not in snoop.stdout
    assert "ECE408_TOKEN" not in snoop.stdout and "instructor.token" not in snoop.stdout
    faker = svc.cli("submit", "--submit", "m2", "--size", 100, cwd=team_project(tmp_path / "faker", cpu=FAKE_LINES),
                    token=tokens["faker"])
    assert faker.returncode == 0 and "Op Time: 0.000001" in faker.stdout
    record = next(r for r in svc.records() if r.team == "faker")
    assert all(t > 1e-5 for m in record.models for t in m["op_times"])
    forker = svc.cli("submit", "--submit", "m2", "--size", 100, cwd=team_project(tmp_path / "forker", cpu=FORKS),
                     token=tokens["forker"])
    assert forker.returncode == 1
    assert "a team's forward may not start processes or programs" in forker.stdout
    assert next(r for r in svc.records() if r.team == "forker").status == "failed"
    reach = team_project(tmp_path / "reach", commands=[
        f"python -c \"import urllib.request; urllib.request.urlopen('{svc.url}/health', timeout=5)\""])
    out = svc.cli("submit", reach, token=tokens["snoop"])
    assert out.returncode == 1 and "URLError" in out.stdout                # no network in the sandbox


@pytest.mark.service
def test_a_dev_run_may_not_pose_as_a_ranked_one(tmp_path, svc, teams):
    team = team_project(tmp_path / "poser", cpu=PLAIN, commands=["echo 'Op Time: 0.000001'",
                                                                 "echo 'Correctness: 0.91 Model: ece408-high'"])
    before = len(svc.records())
    out = svc.cli("submit", team, token=teams["blue"])
    assert out.returncode == 0 and len(svc.records()) == before
    job = svc.job(job_id_of(out.stderr))
    assert job["kind"] == "development" and job["valid"] is None


@pytest.mark.service
def test_revoked_and_rotated_tokens_stop_working(svc):
    token = svc.add_teams("purple")["purple"]
    assert svc.cli("teams", "revoke", "purple").returncode == 0
    time.sleep(0.1)
    assert svc.cli("jobs", "list", token=token).returncode == 2
    rotated = svc.cli("teams", "rotate", "purple")
    name, new = rotated.stdout.strip().split("\t")
    assert name == "purple" and new != token
    assert svc.cli("jobs", "list", token=new).returncode == 0
    assert svc.cli("jobs", "list", token=token).returncode == 2
