"""Device kinds (grading/kinds.py): a class whose workers report two GPU kinds, against a real
``serve`` (SQLite and PostgreSQL) with protocol-level workers (HTTP claims and ends, as
tests/pagekit.py's) and real workers standing for two kinds ($ECE408_DEVICE_NAME): ranked per kind
in every view (``ranking`` local and --server, /api/ranking as table, CSV and JSON, the ranking
page's tabs and its live part, the instructor's CSV and its grade column, ``grade``); jobs that
ask for a kind (``submit --gpu``) go to that kind's workers only, however idle the others; a
kind no worker reported is refused in one line, unless the instructor accepts it."""
import csv
import html
import io
import json
import re
import shutil
import subprocess
import time
from contextlib import contextmanager

import httpx
import pytest

from suitekit import python_command
from pagekit import record_of
from servicekit import Service, job_id_of, service_env, started_postgres
from teams import team_project

from ece408_op.grading.kinds import KindError, kind_of, matching, resolve
from ece408_op.grading.options import options_key, run_options
from ece408_op.grading.store import Record, open_store
from ece408_op.service.upload import Entry, _tar

H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"
BOTH = f"{A100}; {H100}"                                # as a refusal lists them, in name order


@pytest.fixture(params=["sqlite", "postgresql"])
def svc(request, tmp_path):
    env = {}
    if request.param == "postgresql":
        server = started_postgres(tmp_path / "pg")
        request.addfinalizer(server.stop)
        env = {"ECE408_DB": server.url}
    service = Service(tmp_path / "svc", workers=0, args=["--max-waiting", "20"], env=env).start()
    service.db = env.get("ECE408_DB") or service.sqlite_path
    yield service
    service.close()


def m3_upload():
    return _tar([Entry("new-forward.cu", b"__global__ void conv() {}\n"),
                 Entry("launch.py", b"def launch():\n    pass\n")])


def queue(svc, token, gpu=None, expect=201):
    params = {"kind": "ranked", "milestone": "m3", "size": 100, **({"gpu": gpu} if gpu else {})}
    with svc.http(token) as http:
        answer = http.post("/api/jobs", params=params, content=m3_upload())
    assert answer.status_code == expect, answer.text
    return answer.json()


def claim(svc, worker, device, slot="s0"):
    """The claim of a GPU worker slot reporting ``device`` (None where it gets no job)."""
    with svc.http(worker) as http:
        answer = http.post("/api/worker/claim", json={"slot": slot, "gpu": True, "device": device, "wait": 0})
    assert answer.status_code in (200, 204), answer.text
    return answer.json() if answer.status_code == 200 else None


def run(svc, worker, token, op_times, device):
    """A ranked m3 job of the token's team, claimed by a worker on ``device`` and ended with its record."""
    job = queue(svc, token)
    claimed = claim(svc, worker, device, slot=device.split()[1])        # a slot of each kind
    assert claimed["job"]["id"] == job["id"]
    record = record_of({**job, "record_id": claimed["job"]["record_id"]}, op_times, device=device)
    with svc.http(worker) as http:
        answer = http.post(f"/api/worker/jobs/{job['id']}/finish", headers={"X-Lease": claimed["lease"]},
                           json={"status": "ok", "exit_code": 0, "reason": None, "record": record})
    assert answer.status_code == 200, answer.text


def local(*args, root):
    """``python -m ece408_op ARGS`` without the service (its own environment, no $ECE408_SERVER)."""
    return subprocess.run([*python_command(), "-m", "ece408_op", *map(str, args)], capture_output=True, text=True,
                          env=service_env(root), timeout=300)


def tables(text):
    """{kind: [(rank, team)]} of ``ranking``'s tables (None: a table naming no kind)."""
    found, kind = {}, None
    for line in text.splitlines():
        header = re.match(r"Ranking: \w+, \d+ images(?: on (.+))? \(", line)
        if header:
            kind = header.group(1)
            found[kind] = []
        elif re.match(r"\d+ {2,}\S", line) and kind in found:         # a row: columns two blanks apart at least
            found[kind].append((int(line.split()[0]), line.split()[1]))
    return found


@contextmanager
def login(svc, token):
    """An HTTP client holding a page session of ``token``."""
    with httpx.Client(base_url=svc.url, timeout=30) as http:
        pair = re.search(r'name="login" value="([^"]+)"', http.get("/login").text).group(1)
        assert http.post("/login", data={"login": pair, "token": token}).status_code == 303
        yield http


def team_cells(html):
    return [t.strip() for t in re.findall(r'<td class="team">([^<]+)', html)]


def class_on_two_kinds(svc):
    """alpha fastest of all on the H100; gamma, on the A100, faster than beta on the H100; beta on both."""
    tokens = svc.add_teams("alpha", "beta", "gamma")
    worker = svc.worker_token("nodes")
    run(svc, worker, tokens["alpha"], [[0.004], [0.006]], H100)            # 0.010 s
    run(svc, worker, tokens["beta"], [[0.010], [0.010]], H100)             # 0.020 s
    run(svc, worker, tokens["beta"], [[0.015], [0.015]], A100)             # 0.030 s
    run(svc, worker, tokens["gamma"], [[0.006], [0.006]], A100)            # 0.012 s
    return tokens


PER_KIND = {A100: [(1, "gamma"), (2, "beta")], H100: [(1, "alpha"), (2, "beta")]}


# ---------------------------------------------------------------------------- the ranking

@pytest.mark.service                                # svc: a real server (and PostgreSQL)
def test_a_class_on_two_gpu_kinds_is_ranked_per_kind_in_every_view(svc):
    tokens = class_on_two_kinds(svc)
    remote = svc.cli("ranking", "--milestone", "m3", "--size", 100, token=tokens["alpha"])
    assert remote.returncode == 0, remote.stderr
    assert tables(remote.stdout) == PER_KIND                              # alpha (0.010 s) not in the A100's
    assert f"Ranking: m3, 100 images on {A100} (2 team(s); 0 run(s) not valid)" in remote.stdout
    own = local("ranking", "--db", svc.db, "--milestone", "m3", "--size", 100, root=svc.root)
    assert own.returncode == 0 and own.stdout == remote.stdout, own.stderr
    for prefix in ("H100", "nvidia h100 80gb", H100):                      # a word's start, any case, the name
        for out in (svc.cli("ranking", "--milestone", "m3", "--size", 100, "--device", prefix, token=tokens["beta"]),
                    local("ranking", "--db", svc.db, "--milestone", "m3", "--size", 100, "--device", prefix,
                          root=svc.root)):
            assert out.returncode == 0 and tables(out.stdout) == {H100: PER_KIND[H100]}, (prefix, out.stderr)
    for name, problem in (("NVIDIA", f"names more than one device kind of these runs: {BOTH}; give more of the name"),
                          ("V100", f"names no device kind of these runs; the kinds: {BOTH}")):
        out = svc.cli("ranking", "--milestone", "m3", "--size", 100, "--device", name, token=tokens["beta"])
        assert out.returncode == 2 and out.stderr == f"error: --device {name} {problem}\n", out.stderr
        out = local("ranking", "--db", svc.db, "--milestone", "m3", "--size", 100, "--device", name, root=svc.root)
        assert out.returncode == 1 and out.stderr == f"error: --device {name} {problem}\n", out.stderr

    with svc.http(tokens["gamma"]) as http:
        def api(**params):
            answer = http.get("/api/ranking", params={"milestone": "m3", "size": 100, **params})
            assert answer.status_code == 200, answer.text
            return answer.text
        data = json.loads(api(format="json"))
        assert data["devices"] == [A100, H100] and "ranking" not in data
        assert {t["device"]: [(r["rank"], r["team"]) for r in t["ranking"]] for t in data["tables"]} == PER_KIND
        one = json.loads(api(format="json", device="A100"))
        assert one["device"] == A100 and [r["team"] for r in one["ranking"]] == ["gamma", "beta"]
        rows = list(csv.reader(io.StringIO(api(format="csv"))))
        column = rows[0].index("device")
        assert [(int(r[0]), r[1], r[column]) for r in rows[1:]] == [
            (1, "gamma", A100), (2, "beta", A100), (1, "alpha", H100), (2, "beta", H100)]
        assert api() == remote.stdout                                     # the table, as `ranking` prints it
        refused = http.get("/api/ranking", params={"milestone": "m3", "size": 100, "device": "V100"})
        assert refused.status_code == 400 and refused.json() == {
            "error": f"--device V100 names no device kind of these runs; the kinds: {BOTH}"}


@pytest.mark.service                                # svc: a real server (and PostgreSQL)
def test_the_ranking_page_has_a_tab_per_kind_and_its_live_part_keeps_the_tab(svc):
    tokens = class_on_two_kinds(svc)
    with login(svc, tokens["beta"]) as beta:
        page = beta.get("/?milestone=m3&size=100").text
        for kind in (A100, H100):
            assert f'href="/?milestone=m3&amp;size=100&amp;device={kind.replace(" ", "+")}"' in page, kind
        assert team_cells(page) == ["gamma", "beta"] and f"m3, 100 images on {A100}" in page    # the first by name
        tab = beta.get("/?milestone=m3&size=100&device=H100").text
        assert team_cells(tab) == ["alpha", "beta"] and f"m3, 100 images on {H100}" in tab
        assert re.search(r'class="current" aria-current="page">' + re.escape(H100), tab)
        assert 'data-live="/ranking/events?milestone=m3&amp;size=100&amp;device=H100"' in tab
        with beta.stream("GET", "/ranking/events?milestone=m3&size=100&device=H100") as stream:
            event = None
            for line in stream.iter_lines():
                if line.startswith("event:"):
                    event = line.split(":", 1)[1].strip()
                elif line.startswith("data:") and event == "ranking":
                    live = json.loads(line.split(":", 1)[1])
                    break
        assert team_cells(live) == ["alpha", "beta"] and "gamma" not in live
        missing = beta.get("/?milestone=m3&size=100&device=V100")
        assert missing.status_code == 404 and "names no device kind of m3 on 100 images" in missing.text
    from ece408_op.service import plots
    if plots.available():
        with login(svc, tokens["gamma"]) as gamma:                       # its plot: the kind it ran on
            svg = gamma.get("/team/plot.svg?milestone=m3&size=100").text
        assert f"m3, 100 images on {A100}: total Op Time of each run" in svg and "class best 0.012000 s" in svg


@pytest.mark.service                                # svc: a real server (and PostgreSQL)
def test_the_instructor_s_csv_is_per_kind_and_grades_by_the_kind_chosen(svc):
    class_on_two_kinds(svc)
    with login(svc, svc.instructor_token) as instructor:
        def export(query, status=200):
            answer = instructor.get("/admin/ranking.csv?milestone=m3&size=100" + query)
            assert answer.status_code == status, answer.text
            return list(csv.reader(io.StringIO(answer.text))) if status == 200 else html.unescape(answer.text)
        assert (f"m3 on 100 images has runs on several device kinds ({BOTH}): name one (device=), "
                                   "or choose the kind that counts for the m3 grade on /admin (or: python -m "
                "ece408_op kinds grade m3 KIND)") in export("", 400)
        assert "no device kind counts for the m3 grade yet" in export("&full=0.01&zero=0.03&device=H100", 400)
        refused = svc.cli("kinds", "grade", "m3", "V100")
        assert refused.returncode == 2 and refused.stderr == (
            "error: kind V100 names no device kind of the m3 runs or of the workers; the kinds: "
            f"{BOTH}\n"), refused.stderr
        chosen = svc.cli("kinds", "grade", "m3", "h100")
        assert chosen.returncode == 0 and chosen.stdout == f"m3: the grade counts the runs on {H100}\n", chosen.stderr
        graded = export("&full=0.01&zero=0.03")                           # the H100's table, by default
        assert [(r[0], r[1], r[-1]) for r in graded[1:]] == [("1", "alpha", "100.00"), ("2", "beta", "50.00"),
                                                             ("", "gamma", "0.00")]   # gamma's A100 run: not graded
        assert f"the m3 grade counts the runs on {H100}: leave device out, or name that kind" in export(
            "&full=0.01&zero=0.03&device=A100", 400)
        other = export("&device=A100")
        assert [(r[0], r[1]) for r in other[1:]] == [("1", "gamma"), ("2", "beta"), ("", "alpha")]
        assert "grade_percent" not in other[0]
        admin = instructor.get("/admin").text
        assert f"m3: the grade counts the runs on {H100}" in admin
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', admin).group(1)
        cleared = instructor.post("/admin/grading-kind", data={"csrf": csrf, "milestone": "m3", "action": "clear"})
        assert cleared.status_code == 303 and "m3: no kind chosen for the grade" in instructor.get("/admin").text
        assert "name one (device=)" in export("", 400)
        chosen = instructor.post("/admin/grading-kind", data={"csrf": csrf, "milestone": "m3", "action": "set",
                                                              "kind": H100})
        assert chosen.status_code == 303 and [r[1] for r in export("")[1:]] == ["alpha", "beta", "gamma"]
    for body, problem in (({}, "the settings are grading_kinds"), ({"colour": "red"}, "the settings are"),
                          ({"grading_kinds": {"m9": H100}}, "grading_kinds maps milestones"),
                          ({"grading_kinds": ["m3"]}, "grading_kinds maps milestones"),
                          ({"unknown_gpus": "sometimes"}, "unknown_gpus is refused or accepted"),
                          ({"grading_kinds": {"m3": "NVIDIA"}}, "names more than one device kind")):
        answer = svc.admin("PUT", "/api/admin/settings", json=body)
        assert answer.status_code == 400 and problem in answer.json()["error"], (body, answer.text)
    with login(svc, svc.instructor_token) as instructor:                 # the page opens on the kind that counts
        assert team_cells(instructor.get("/?milestone=m3&size=100").text) == ["alpha", "beta"]
    listed = svc.cli("kinds", "list")
    assert listed.returncode == 0 and listed.stdout.splitlines() == [
        f"Workers' device kinds (seen in the last 7 days; submit --gpu names one): {BOTH}",
        f"Runs' device kinds: m3 on {BOTH}", f"The grade counts: m3: {H100}", "A GPU kind no worker reported: refused"]


# ---------------------------------------------------------------------------- jobs that ask for a kind

@pytest.mark.service                                # svc: a real server (and PostgreSQL)
def test_a_job_asking_for_a_kind_goes_only_to_that_kind_s_workers(svc, tmp_path):
    tokens = svc.add_teams("alpha", "beta")
    worker = svc.worker_token("nodes")
    assert claim(svc, worker, H100, "h") is None and claim(svc, worker, A100, "a") is None   # seen, idle
    folder = team_project(tmp_path / "alpha")
    out = svc.cli("submit", "--submit", "m3", "--gpu", "A100", "--detach", cwd=folder, token=tokens["alpha"])
    assert out.returncode == 0, out.stderr
    wanted = svc.job(job_id_of(out.stderr))
    assert wanted["gpu_kind"] == A100 and "; on A100" in out.stderr
    assert svc.transcript(wanted["id"]).startswith(f"* Job {wanted['id']} queued at ")
    assert f"ranked m3, 10000 images, on {A100}, team alpha" in svc.transcript(wanted["id"])
    anywhere = queue(svc, tokens["beta"])
    assert claim(svc, worker, H100, "h")["job"]["id"] == anywhere["id"]     # the job asking for none
    for _ in range(3):
        assert claim(svc, worker, H100, "h2") is None                     # idle, and never the A100's job
    took = claim(svc, worker, A100, "a")
    assert took["job"]["id"] == wanted["id"]
    assert f"* Worker nodes/a ({A100}) took the job" in svc.transcript(wanted["id"])
    for name, line in (("V100", f"gpu V100 names no device kind of this class's workers (seen in the last 7 days); "
                                f"the kinds: {BOTH}"),
                       ("NVIDIA", "gpu NVIDIA names more than one device kind of this class's workers (seen in the "
                                  f"last 7 days): {BOTH}; give more of the name")):
        out = svc.cli("submit", "--submit", "m3", "--gpu", name, "--detach", cwd=folder, token=tokens["alpha"])
        assert out.returncode == 2 and out.stderr.splitlines()[-1] == f"error: {line}", out.stderr
    m2 = svc.cli("submit", "--submit", "m2", "--gpu", "H100", cwd=folder, token=tokens["alpha"])
    assert m2.returncode == 2 and m2.stderr.splitlines()[-1].endswith(
        "error: --gpu goes with --submit m3, final or a development run: m2 is measured on the CPU (and ranked by "
        "the CPU's kind)"), m2.stderr
    with svc.http(tokens["alpha"]) as http:
        answer = http.post("/api/jobs", params={"kind": "ranked", "milestone": "m2", "gpu": "H100"},
                           content=m3_upload())
    assert answer.status_code == 400 and "m2 is measured on the CPU" in answer.json()["error"]
    assert len(svc.jobs()) == 2                                           # nothing queued by the refusals


@pytest.mark.service                                # svc: a real server (and PostgreSQL)
def test_an_unknown_kind_the_instructor_accepts_waits_saying_why(svc, tmp_path):
    tokens = svc.add_teams("alpha", "beta")
    worker = svc.worker_token("nodes")
    assert claim(svc, worker, H100) is None
    folder = team_project(tmp_path / "alpha")
    refused = svc.cli("submit", "--submit", "final", "--gpu", "B200", "--detach", cwd=folder, token=tokens["alpha"])
    assert refused.returncode == 2 and refused.stderr.splitlines()[-1] == (
        "error: gpu B200 names no device kind of this class's workers (seen in the last 7 days); the kinds: "
        f"{H100}"), refused.stderr
    assert svc.cli("kinds", "unknown", "accepted").stdout == "a GPU kind no worker reported: accepted\n"
    out = svc.cli("submit", "--submit", "final", "--gpu", "NVIDIA  B200", "--detach", cwd=folder,
                  token=tokens["alpha"])
    assert out.returncode == 0, out.stderr
    job_id = job_id_of(out.stderr)
    queue(svc, tokens["beta"])                                            # beta's, for any worker
    shown = svc.cli("jobs", "show", job_id, token=tokens["alpha"])
    assert ("next in line" in shown.stderr and "no worker on NVIDIA B200 (the device kind asked for) has asked for "
            "work in the last 2 minutes; the job waits for one") in shown.stderr, shown.stderr
    assert claim(svc, worker, H100)["job"]["team"] == "beta"
    assert claim(svc, worker, H100, "s1") is None
    assert claim(svc, worker, "NVIDIA B200", "b")["job"]["id"] == job_id


@pytest.mark.timeout(600)
@pytest.mark.service                                # a real server and workers
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the workers' sandbox needs bubblewrap")
def test_real_workers_of_two_kinds_take_only_the_jobs_asking_for_theirs(running_service, tmp_path):
    svc = running_service(tmp_path / "svc", workers=0)
    tokens = svc.add_teams("alpha")
    for name, device in (("h100", H100), ("a100", A100)):
        argv = [*python_command(), "-m", "ece408_op", "worker", "--server", svc.url, "--gpus", "none",
                "--engine", "bubblewrap"]
        log = open(svc.root / f"{name}.log", "ab")
        svc.others.append(subprocess.Popen(argv, env={**svc.env, "ECE408_TOKEN": svc.worker_token(name),
                                                      "ECE408_DEVICE_NAME": device},
                                           stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        log.close()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with svc.http(tokens["alpha"]) as http:
            if http.get("/api/kinds").json()["worker_kinds"] == [A100, H100]:
                break
        time.sleep(0.5)
    else:
        raise AssertionError("the workers did not ask for work:\n" + (svc.root / "h100.log").read_text())
    folder = team_project(tmp_path / "alpha", commands=["echo on the asked kind"])
    for prefix, kind, name in (("A100", A100, "a100"), ("H100", H100, "h100"), ("a100-sxm4", A100, "a100")):
        out = svc.cli("submit", "--gpu", prefix, cwd=folder, token=tokens["alpha"])
        assert out.returncode == 0 and "on the asked kind\n" in out.stdout, out.stdout + out.stderr
        job = svc.job(job_id_of(out.stderr))
        assert (job["gpu_kind"], job["worker"]) == (kind, f"{name}/cpu0"), job
        assert f"* Worker {name}/cpu0 ({kind}) took the job" in out.stdout


# ---------------------------------------------------------------------------- grade, and runs without a device

def stored(db, team, op_time, device, content_hash="h", milestone="m2", size=100, status="ok", repeats=None,
           at="2026-01-01T00:00:00"):
    options = run_options(milestone, size, repeats, None, "bubblewrap")
    models = [{"model": "ece408-high", "op_times": [op_time / 2], "op_time": op_time / 2, "correctness": 0.91,
               "expected": 0.91, "correct": True},
              {"model": "ece408-low", "op_times": [op_time / 2], "op_time": op_time / 2, "correctness": 0.68,
               "expected": 0.68, "correct": True}]
    ok = status == "ok"
    with open_store(str(db)) as store:
        store.add(Record(f"{team}-{op_time}-{device}", at, team, milestone, size, status,
                         0 if ok else 1, op_time if ok else None, ok, models if ok else [], device=device,
                         content_hash=content_hash, options=options, options_key=options_key(options),
                         reason=None if ok else "files refused"))


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="grade resolves its sandbox: bubblewrap")
def test_grade_prints_a_table_per_kind(tmp_path):
    pytest.importorskip("mxnet")
    from ece408_op.grading.runner import team_digest
    db = tmp_path / "class.db"
    kinds = {"t1": ("AMD EPYC 9654", 0.010), "t2": ("Intel Xeon  Gold 6338", 0.030),      # two blanks: one kind
             "t3": ("Intel Xeon Gold 6338", 0.020)}
    for team, (device, op_time) in kinds.items():
        folder = team_project(tmp_path / "class" / team)
        stored(db, team, op_time, device, content_hash=team_digest(folder, "m2"))      # graded already: skipped
    out = local("grade", tmp_path / "class", "--milestone", "m2", "--size", 100, "--local", "--engine", "bubblewrap",
                "--db", db, root=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("Skipped 3 team(s)")
    assert tables(out.stdout) == {"AMD EPYC 9654": [(1, "t1")], "Intel Xeon Gold 6338": [(1, "t3"), (2, "t2")]}


def test_runs_without_a_device_join_the_only_kind_else_are_counted_apart(tmp_path):
    db = tmp_path / "runs.db"
    stored(db, "fast", 0.01, "AMD EPYC 9654")
    stored(db, "refused", 0.0, None, status="failed")                     # its files refused: no device
    one = local("ranking", "--db", db, root=tmp_path)
    assert one.stdout.startswith("Ranking: m2, 100 images on AMD EPYC 9654 (1 team(s); 1 run(s) not valid)")
    stored(db, "other", 0.02, "Intel Xeon Gold 6338")
    two = local("ranking", "--db", db, root=tmp_path)
    assert tables(two.stdout) == {"AMD EPYC 9654": [(1, "fast")], "Intel Xeon Gold 6338": [(1, "other")]}
    assert "(1 team(s); 0 run(s) not valid)" in two.stdout
    assert two.stdout.rstrip().endswith("1 run(s) reached no device (files refused, or stopped before the run): not "
                                        "valid, in no table")
    data = json.loads(local("ranking", "--db", db, "--json", root=tmp_path).stdout)
    assert data["runs_without_device"] == 1 and data["devices"] == ["AMD EPYC 9654", "Intel Xeon Gold 6338"]


def test_each_kind_ranks_its_newest_option_set_and_options_picks_one_for_every_kind(tmp_path):
    db = tmp_path / "runs.db"
    stored(db, "old-a", 0.01, "Kind A", at="2026-01-01T00:00:00")                   # 1 repeat
    stored(db, "old-b", 0.02, "Kind B", at="2026-01-01T00:00:01")
    stored(db, "new-a", 0.03, "Kind A", repeats=5, at="2026-01-02T00:00:00")       # A's newest set: 5 repeats
    newest = local("ranking", "--db", db, root=tmp_path).stdout
    assert tables(newest) == {"Kind A": [(1, "new-a")], "Kind B": [(1, "old-b")]}
    key = options_key(run_options("m2", 100, None, None, "bubblewrap"))
    chosen = local("ranking", "--db", db, "--options", key[:6], root=tmp_path).stdout
    assert tables(chosen) == {"Kind A": [(1, "old-a")], "Kind B": [(1, "old-b")]}
    five = local("ranking", "--db", db, "--options", options_key(run_options("m2", 100, 5, None, "bubblewrap")),
                 root=tmp_path).stdout
    assert tables(five) == {"Kind A": [(1, "new-a")]}                              # B has no run of that set


def test_a_kind_is_the_reported_name_with_its_blanks_normalised():
    assert kind_of("  NVIDIA  H100 80GB\tHBM3 ") == H100 and kind_of("") is None and kind_of(None) is None
    kinds = [H100, "NVIDIA H100 PCIe", A100]
    assert matching("h100 80gb", kinds) == [H100]                         # a word's start, any case
    assert matching("H100", kinds) == [H100, "NVIDIA H100 PCIe"]          # memory variants are kinds of their own
    assert matching("100", kinds) == [] and matching("", kinds) == []     # within a word: no
    assert resolve("nvidia h100 pcie", kinds) == "NVIDIA H100 PCIe"
    with pytest.raises(KindError, match=r"^--device H100 names more than one device kind of these runs: "):
        resolve("H100", kinds)
