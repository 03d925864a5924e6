"""Grading a class (python -m ece408_op grade) against real components started here: a one-node
Slurm cluster (munged, slurmctld, slurmd) and a PostgreSQL server on the loopback address. A class
of team projects (honest, wrong, failing, slow, hostile, and teams whose folder names are hostile)
through Slurm into PostgreSQL and through --local into SQLite: the same outcomes; every team
command in a sandbox; a task killed mid-run is recorded and leaves nothing running; the database
going away or filling up loses no record (a measured run is never replaced by error or killed);
grading again is idempotent for the same options and runs again for other ones; names that
printed alike are different teams; folders that are links and files that are not are reported;
grade ends saying which teams are not valid and why."""
import json
import os
import shutil
import signal
import stat
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from suitekit import ROOT, python_command, small_tmpfs
from services import Postgres, SlurmCluster, Unavailable
from submissions import parallel_writers
from teams import (CLOCK, EARLY_THREAD, EXECS, FAILS, FAKE_LINES, FORKS, PLAIN, REPLAY, SLOW, SNOOPS, WRITES_PTH, WRONG,
                   cli, team_project)
from test_sandbox_attacks import bubblewrap_missing, gone, processes_with

from ece408_op.grading import grade, slurm_array, store as store_module
from ece408_op.grading.kinds import kind_of
from ece408_op.grading.machine import cpu_name
from ece408_op.grading.store import Record, open_store

SIZE = 100
CPU = kind_of(cpu_name())  # m2's device kind here: every run of these tests is ranked in its table
COMMAND_LIMIT = 60         # seconds per command: the slow team sleeps past it
ENGINE = ["--engine", "bubblewrap"]
EVIL = "evil\n1  t00  0.000001\x1b[31m"                       # a folder name that would print a fake row
BYTES = os.fsdecode(b"b\xffad")                                # a folder name that is not UTF-8
OUTCOMES = {"t01": "ok", "t02": "ok", "t03": "ok", EVIL: "ok", BYTES: "ok", "w-wrong": "failed", "x-fails": "failed",
            "y-slow": "timeout", "z-forks": "failed"}

pytestmark = [pytest.mark.slow, pytest.mark.skipif(bubblewrap_missing() is not None, reason=f"{bubblewrap_missing()}"),
              pytest.mark.timeout(1800)]                   # a class of real runs through Slurm


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    """Nine team folders; returns (folder, {team name as stored: outcome})."""
    pytest.importorskip("mxnet")
    root = tmp_path_factory.mktemp("class")
    sources = {"t01": PLAIN, "t02": PLAIN, "t03": PLAIN, EVIL: PLAIN, BYTES: PLAIN, "w-wrong": WRONG,
               "x-fails": FAILS, "y-slow": SLOW, "z-forks": FORKS}
    for name, source in sources.items():
        team_project(root / name, cpu=source)
    from ece408_op.base.names import team_name
    return root, {team_name(name): outcome for name, outcome in OUTCOMES.items()}


def ranking_of(db, env=None):
    out = cli("ranking", "--db", db, "--milestone", "m2", "--size", SIZE, "--json", env=env)
    assert out.returncode == 0, out.stderr
    return sorted(r["team"] for r in json.loads(out.stdout)["ranking"])


def check_records(records, outcomes):
    by_team = {}
    for r in records:
        by_team.setdefault(r.team, []).append(r)
    assert sorted(by_team) == sorted(outcomes) and all(len(v) == 1 for v in by_team.values()), sorted(by_team)
    for team, (record,) in by_team.items():
        assert record.status == outcomes[team], (team, record.transcript[-2000:])
        assert record.correct == (outcomes[team] == "ok"), team
        assert record.engine == "bubblewrap" and record.isolated
        assert [f["name"] for f in record.team_files] == ["new-forward.py"]
    assert "differs from the reference" in by_team["w-wrong"][0].transcript
    assert "RuntimeError: this team forgot a colon" in by_team["x-fails"][0].transcript
    assert f"ran past its time limit of {COMMAND_LIMIT} s" in by_team["y-slow"][0].transcript
    assert "may not start processes" in by_team["z-forks"][0].transcript


def not_valid(stdout):
    """{team: status} of grade's closing lines ("  team: status: reason")."""
    lines = stdout[stdout.index("Not valid: "):].splitlines()[1:]
    return {line.strip().split(": ")[0]: line.strip().split(": ")[1] for line in lines if line.startswith("  ")}


def started(service):
    """``service`` started, or the test skipped with the reason it cannot start here."""
    try:
        return service.start()
    except Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = started(SlurmCluster(tmp_path_factory.mktemp("slurm")))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def postgres(tmp_path_factory):
    server = started(Postgres(tmp_path_factory.mktemp("pg")))
    yield server
    server.stop()


def grade_cli(classdir, db, *extra, env=None, timeout=1200):
    return cli("grade", classdir, "--milestone", "m2", "--size", SIZE, *ENGINE, "--timeout", COMMAND_LIMIT,
               "--db", db, *extra, env=env, timeout=timeout)


# ---------------------------------------------------------------------------- the whole class

@pytest.fixture(scope="module")
def graded_slurm(classroom, slurm, postgres, tmp_path_factory):
    folder, _ = classroom
    return grade_cli(folder, postgres.url, "--gres", "none", "--time", "00:05:00",
                     "--workdir", tmp_path_factory.mktemp("work-slurm"), env=slurm.env)


def test_class_through_slurm_into_postgresql(classroom, graded_slurm, postgres):
    folder, outcomes = classroom
    out = graded_slurm
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Submitted job array" in out.stderr and "pending" in out.stderr
    progress = [line for line in out.stderr.splitlines() if line.startswith("[")]
    assert progress[-1].endswith("9/9  pending 0  running 0  done 5  failed 4"), progress[-1]
    with open_store(postgres.url) as store:
        check_records(store.records(), outcomes)
        assert {r.host for r in store.records()} == {os.uname().nodename}
    assert ranking_of(postgres.url) == sorted(t for t, o in outcomes.items() if o == "ok")
    assert f"Ranking: m2, 100 images on {CPU} (5 team(s); 4 run(s) not valid)" in out.stdout
    table = out.stdout[out.stdout.index("Ranking:"):out.stdout.index("Not valid:")]
    assert "\x1b" not in out.stdout and "evil\\x0a1" in table and "b\\xffad" in table
    assert table.splitlines()[1].startswith("Options: m2, 100 images, 2 models, 1 fresh run(s) a layer, "
                                            "engine bubblewrap")
    body = [line for line in table.strip().splitlines()[3:] if not line.startswith("≈: ")]   # the ties' key aside
    assert len(body) == 5                                               # no fake row
    assert not_valid(out.stdout) == {"w-wrong": "failed", "x-fails": "failed", "y-slow": "timeout",
                                     "z-forks": "failed"}
    # m2 tasks through Slurm get a node each (--exclusive): never two timed at once on this 2-core node
    assert max(int(line.split("running ")[1].split()[0]) for line in progress) == 1, progress


def test_class_through_local_pool_into_sqlite_gives_the_same_outcomes(classroom, graded_slurm, postgres, tmp_path):
    folder, outcomes = classroom
    db = tmp_path / "class.db"
    out = grade_cli(folder, db, "--local", "--jobs", "2", "--workdir", tmp_path / "work")
    assert out.returncode == 0, out.stdout + out.stderr
    with open_store(str(db)) as store:
        check_records(store.records(), outcomes)
    assert ranking_of(db) == ranking_of(postgres.url)


def test_grading_again_is_idempotent(classroom, graded_slurm, slurm, postgres, tmp_path):
    folder, outcomes = classroom
    with open_store(postgres.url) as store:
        before = len(store.records())
    again = grade_cli(folder, postgres.url, "--gres", "none", "--workdir", tmp_path / "w", env=slurm.env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("Skipped 9 team(s) whose submission is already graded")
    assert "Submitted job array" not in again.stderr and not (tmp_path / "w").exists()
    # a team that changes its forward is graded again, and only that team
    source = folder / "t01" / "new-forward.py"
    source.write_text(source.read_text() + "\n# faster now\n")
    third = grade_cli(folder, postgres.url, "--gres", "none", "--workdir", tmp_path / "w3", env=slurm.env)
    assert third.returncode == 0, third.stderr
    assert third.stdout.startswith("Skipped 8 team(s)") and "Grading 1 team(s)" in third.stdout
    with open_store(postgres.url) as store:
        assert len(store.records()) == before + 1
        assert [r.status for r in store.records(team="t01")] == ["ok", "ok"]


def test_a_class_of_attackers_through_grade_local(tmp_path):
    """Every attack of the ranked run, as teams of one class graded with --local on the default
    engine: each fails in one line, or its record is what the harness measured."""
    pytest.importorskip("mxnet")
    fake = "print('Op Time: 0.000001'); print('Correctness: 0.99 Model: ece408-high')\n"
    root = tmp_path / "class"
    teams = {"clock": (CLOCK, "ok", None), "fake-lines": (FAKE_LINES, "ok", None),
             "forks": (FORKS, "failed", "may not start processes or programs"),
             "early-thread": (EARLY_THREAD, "failed", "differs from the reference"),
             "execs": (EXECS, "failed", "may not start processes or programs"),
             "pth": (WRITES_PTH, "ok", None), "snoops": (SNOOPS, "ok", None),
             "replay": (REPLAY, "failed", "fresh run 2: the output differs"),
             "package": (PLAIN, "ok", None)}
    for name, (source, _, _) in teams.items():
        team_project(root / name, cpu=source)
    for rel in ("scripts/m2.1.py", "ece408_op/__init__.py", "sitecustomize.py", "evil.pth"):
        (root / "package" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "package" / rel).write_text(fake)
    with open(root / "package" / "data.bin", "wb") as f:      # a 3 GB sparse file beside the team's files
        f.truncate(3 << 30)
    db = tmp_path / "a.db"
    out = cli("grade", root, "--milestone", "m2", "--size", SIZE, *ENGINE, "--local", "--jobs", "2", "--db", db,
              "--repeats", 2, "--workdir", tmp_path / "w", env={"PGPASSWORD": "hunter2"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    with open_store(str(db)) as store:
        records = {r.team: r for r in store.records()}
    assert sorted(records) == sorted(teams)
    for name, (_, status, reason) in teams.items():
        record = records[name]
        assert record.status == status, (name, record.transcript[-2000:])
        if reason:
            lines = [l for l in record.transcript.splitlines() if l.startswith("error: ")]
            assert len(lines) == 1 and reason in lines[0], (name, lines)
        else:
            assert record.correct and all(t > 1e-4 for m in record.models for t in m["op_times"]), name
        assert [f["name"] for f in record.team_files] == ["new-forward.py"]
        assert "hunter2" not in record.transcript
    assert "WROTE" not in records["pth"].transcript


# ---------------------------------------------------------------------------- names, options, reports

def grade_local(classdir, db, workdir, *extra, env=None):
    return cli("grade", classdir, "--milestone", "m2", "--size", 10, *ENGINE, "--local", "--jobs", 2, "--db", db,
               "--workdir", workdir, *extra, env=env)


def test_names_that_printed_alike_are_graded_as_four_teams(tmp_path):
    """A folder named team\\x07 (a backslash) and one named team<BEL>, two names sharing their first 199
    characters: four teams, none skipped as "already graded" (their files are the same)."""
    names = ["team\\x07", "team\x07", "a" * 199 + "1", "a" * 199 + "2"]
    for name in names:
        team_project(tmp_path / "class" / name, cpu=PLAIN)
    db = tmp_path / "n.db"
    out = grade_local(tmp_path / "class", db, tmp_path / "w")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Skipped" not in out.stdout and "Grading 4 team(s)" in out.stdout
    stored = ["team\\\\x07", "team\\x07", "a" * 199 + "1", "a" * 199 + "2"]
    with open_store(str(db)) as store:
        assert sorted(r.team for r in store.records()) == sorted(stored)
    data = json.loads(cli("ranking", "--db", db, "--json").stdout)
    assert sorted(r["team"] for r in data["ranking"]) == sorted(stored)
    table = out.stdout[out.stdout.index("Ranking:"):].splitlines()
    rows = [[cell for cell in line.split() if cell != "≈"] for line in table[3:]   # a tie's mark and key aside
            if line.strip() and not line.startswith("≈: ")]
    assert sorted(row[1] for row in rows) == sorted(stored)                       # shown in full


def test_grading_again_with_other_options_runs_the_teams_again(tmp_path):
    import shutil
    team_project(tmp_path / "class" / "a", cpu=PLAIN)
    staff = tmp_path / "staff"
    staff.mkdir()
    shutil.copy(ROOT / "models" / "ece408-low-symbol.json", staff / "secret-symbol.json")
    shutil.copy(ROOT / "models" / "ece408-low-0001.params", staff / "secret-0001.params")
    db, classdir = tmp_path / "o.db", tmp_path / "class"

    def again(name, *extra, env=None):
        out = grade_local(classdir, db, tmp_path / name, *extra, env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout
    again("w1")
    # auto is resolved before the skip: bubblewrap here, the same options
    auto = cli("grade", classdir, "--milestone", "m2", "--size", 10, "--local", "--db", db,
               "--workdir", tmp_path / "w2")
    assert auto.stdout.startswith("Skipped 1 team(s) whose submission is already graded with these options: a")
    assert "Grading 1 team(s)" in again("w3", "--repeats", 2)
    hidden = again("w4", "--hidden-model", staff / "secret")
    assert "Grading 1 team(s)" in hidden and "Options: m2, 10 images, 3 models (hidden " in hidden
    assert "Other option sets of m2 on 10 images, not compared with these: " in hidden
    skipped = again("w5", "--repeats", 2)
    assert skipped.startswith("Skipped 1 team(s)")
    # grade's ranking is the one of the options it graded with, not the newest set
    assert "Options: m2, 10 images, 2 models, 2 fresh run(s) a layer, engine bubblewrap" in skipped
    shutil.copy(ROOT / "models" / "ece408-high-symbol.json", staff / "secret-symbol.json")    # another hidden model
    shutil.copy(ROOT / "models" / "ece408-high-0001.params", staff / "secret-0002.params")
    assert "Grading 1 team(s)" in again("w6", "--hidden-model", staff / "secret")
    with open_store(str(db)) as store:
        records = store.records()
    assert [(len(r.models), r.options["repeats"]) for r in records] == [(2, 1), (2, 2), (3, 1), (3, 1)]
    assert len({r.options_key for r in records}) == 4 and all(r.status == "ok" for r in records)
    assert [r.options["engine"] for r in records] == ["bubblewrap"] * 4


def test_error_and_unrecorded_runs_are_graded_again(tmp_path):
    for name in ("a", "b", "c"):
        team_project(tmp_path / "class" / name, cpu=PLAIN)
    db = tmp_path / "e.db"
    assert grade_local(tmp_path / "class", db, tmp_path / "w1").returncode == 0
    with open_store(str(db)) as store:
        store._execute("UPDATE runs SET status = 'error' WHERE team = 'a'")      # the grading itself failed
        store._execute("UPDATE runs SET options = NULL, options_key = NULL WHERE team = 'b'")   # before migration 3
        store.conn.commit()
    out = grade_local(tmp_path / "class", db, tmp_path / "w2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("Skipped 1 team(s) whose submission is already graded with these options: c")
    assert "Grading 2 team(s)" in out.stdout
    with open_store(str(db)) as store:
        assert sorted(r.team for r in store.records() if r.status == "ok") == ["a", "b", "b", "c"]


def test_links_and_bad_team_files_are_reported_and_the_others_graded(tmp_path):
    classdir = tmp_path / "class"
    team_project(classdir / "a-good", cpu=PLAIN)
    team_project(tmp_path / "elsewhere", cpu=PLAIN)
    os.symlink(tmp_path / "elsewhere", classdir / "b-link")
    os.symlink(tmp_path / "nowhere", classdir / "c-dangling")
    bad = {"d-fifo": "is not a regular file (a FIFO)", "e-folder": "is not a regular file (a folder)",
           "f-linked-file": "cannot be taken: it is a symbolic link",
           "g-missing": "the submission has no new-forward.py"}
    for name in bad:
        team_project(classdir / name)
        (classdir / name / "new-forward.py").unlink()
    os.mkfifo(classdir / "d-fifo" / "new-forward.py")
    (classdir / "e-folder" / "new-forward.py").mkdir()
    os.symlink(tmp_path / "elsewhere" / "new-forward.py", classdir / "f-linked-file" / "new-forward.py")
    if os.geteuid() == 0:
        team_project(classdir / "h-device")
        (classdir / "h-device" / "new-forward.py").unlink()
        os.mknod(classdir / "h-device" / "new-forward.py", 0o666 | stat.S_IFCHR, os.makedev(1, 5))   # /dev/zero
        bad["h-device"] = "is not a regular file (a character device)"
    db = tmp_path / "l.db"
    out = grade_local(classdir, db, tmp_path / "w")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr and "Grading 1 team(s)" in out.stdout
    link = "the folder is a symbolic link; put the folder itself in SUBMISSIONS"
    assert f"Not graded: b-link: {link}" in out.stdout and f"Not graded: c-dangling: {link}" in out.stdout
    closing = not_valid(out.stdout)
    assert closing == {"b-link": "refused", "c-dangling": "refused", **{name: "failed" for name in bad}}
    with open_store(str(db)) as store:
        records = {r.team: r for r in store.records()}
    assert sorted(records) == sorted(["a-good", *bad]) and records["a-good"].status == "ok"
    for name, reason in bad.items():
        assert records[name].status == "failed" and reason in records[name].reason, (name, records[name].reason)
        assert f"  {name}: failed: " in out.stdout and reason in out.stdout


def test_a_class_without_a_valid_run_exits_non_zero_and_says_why(tmp_path):
    team_project(tmp_path / "class" / "w-wrong", cpu=WRONG)
    team_project(tmp_path / "class" / "x-fails", cpu=FAILS)
    out = grade_local(tmp_path / "class", tmp_path / "v.db", tmp_path / "w")
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stderr.strip().splitlines()[-1] == \
        f"error: no team of {tmp_path / 'class'} has a valid run with these options"
    closing = out.stdout[out.stdout.index("Not valid: 2 team(s)"):].splitlines()
    assert closing[1].startswith("  w-wrong: failed: ") and "differs from the reference" in closing[1], closing
    assert closing[2].startswith("  x-fails: failed: ") and "this team forgot a colon" in closing[2], closing


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this host may have a GPU")
@pytest.mark.parametrize("milestone", ["m3", "final"])
def test_gpu_milestone_graded_locally_without_gpu_is_one_line_before_any_record(tmp_path, milestone):
    team_project(tmp_path / "class" / "a")
    extra = [] if milestone == "final" else ["--milestone", milestone]            # final: the default
    out = cli("grade", tmp_path / "class", "--local", *extra, "--db", tmp_path / "g.db")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip() == (f"error: grade --local --milestone {milestone} runs the GPU path and this host has "
                                  "no CUDA GPU (nvidia-smi lists none); grade on a GPU machine (or through Slurm on "
                                  "GPU nodes), or use --milestone m2")
    assert not (tmp_path / "g.db").exists() and not (tmp_path / "class" / ".grade").exists()


# ---------------------------------------------------------------------------- killed tasks

def killable_class(root):
    team_project(root / "a-ok", cpu=PLAIN)
    team_project(root / "b-killed", cpu=SLOW.replace("time.sleep(600)", "time.sleep(4031)"))
    return root


def _wait_for(check, proc, what, timeout=180):
    deadline = time.monotonic() + timeout
    while not check():
        assert proc.poll() is None, f"grade ended early: {proc.communicate()}"
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.3)


def test_slurm_task_cancelled_mid_run_is_recorded_and_leaves_nothing(slurm, postgres, tmp_path):
    classdir = killable_class(tmp_path / "class")
    url = postgres.create_database("cancelled")
    env = {**os.environ, **slurm.env, "ECE408_MODEL_DIR": str(ROOT / "models")}
    scratch = tmp_path / "scratch"             # this test's sandboxes name it: other suites' are not counted
    proc = subprocess.Popen([*python_command(), "-m", "ece408_op", "grade", str(classdir), "--milestone", "m2",
                             "--size", str(SIZE), *ENGINE, "--gres", "none", "--db", url, "--workdir",
                             str(tmp_path / "work"), "--scratch", str(scratch)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        _wait_for(lambda: processes_with(str(scratch)) and
                  (tmp_path / "work" / "logs" / "1.out").exists() and
                  "Team file" in (tmp_path / "work" / "logs" / "1.out").read_text(), proc, "task 1 measuring")
        time.sleep(8)                                            # inside the team's forward now
        job = subprocess.run(["squeue", "-h", "-r", "-n", "ece408-grade", "-o", "%i"], capture_output=True,
                             text=True, env=env).stdout.split()
        task = [j for j in job if j.endswith("_1")]
        assert task, job
        subprocess.run(["scancel", task[0]], check=True, env=env)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    with open_store(url) as store:
        records = {r.team: r for r in store.records()}
    assert records["a-ok"].status == "ok"
    killed = records["b-killed"]
    assert killed.status == "killed" and not killed.correct
    assert "* The run was stopped from outside (SIGTERM); the build stopped." in killed.transcript, killed.transcript
    assert gone(str(scratch))            # its sandbox (bwrap names the scratch folder) and all inside it are gone


def test_local_task_killed_mid_run_gets_a_fallback_record_and_leaves_nothing(tmp_path):
    classdir = killable_class(tmp_path / "class")
    db = tmp_path / "k.db"
    proc = subprocess.Popen([*python_command(), "-m", "ece408_op", "grade", str(classdir), "--milestone", "m2",
                             "--size", str(SIZE), *ENGINE, "--local", "--jobs", "2", "--db", str(db), "--workdir",
                             str(tmp_path / "work"), "--scratch", str(tmp_path / "scratch")], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "ECE408_MODEL_DIR": str(ROOT / "models")})
    try:
        def task_one():
            return [pid for pid, cmd in processes_with("--task-index 1") if str(tmp_path / "work") in cmd]
        log = tmp_path / "work" / "logs" / "1.out"
        _wait_for(lambda: task_one() and log.exists() and "Team file" in log.read_text(), proc, "task 1 measuring")
        time.sleep(8)
        for pid in task_one():
            os.kill(pid, signal.SIGKILL)                         # no chance to write its own record
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert gone(str(tmp_path / "scratch"))   # the task's sandboxes, and the team's and measuring processes in them
    assert not any(str(tmp_path / "scratch") in line for line in Path("/proc/mounts").read_text().splitlines())
    assert list((tmp_path / "scratch").iterdir()) == []      # the killed task's scratch folder and its tmpfs
    with open_store(str(db)) as store:
        records = {r.team: r for r in store.records()}
    assert set(records) == {"a-ok", "b-killed"} and records["a-ok"].status == "ok"
    killed = records["b-killed"]
    assert killed.status == "killed"
    assert "* The task ended without storing a record (killed by SIGKILL)" in killed.transcript
    assert "* Team file new-forward.py" in killed.transcript                      # its log
    again = cli("grade", classdir, "--milestone", "m2", "--size", SIZE, *ENGINE, "--local", "--db", db,
                "--retry-stopped", "--timeout", 2, "--workdir", tmp_path / "w2")
    assert again.stdout.startswith("Skipped 1 team(s) whose submission is already graded with these options: a-ok"), \
        again.stdout


def test_local_task_time_limit_is_enforced_apart_from_the_command_limit(tmp_path):
    classdir = tmp_path / "class"
    team_project(classdir / "slow", cpu=SLOW)
    db = tmp_path / "t.db"
    start = time.monotonic()
    out = cli("grade", classdir, "--milestone", "m2", "--size", SIZE, *ENGINE, "--local", "--db", db,
              "--timeout", 600, "--time", "00:00:25", "--workdir", tmp_path / "w")
    assert out.returncode == 1, out.stderr                      # no team is valid
    assert out.stderr.strip().splitlines()[-1] == f"error: no team of {classdir} has a valid run with these options"
    assert out.stdout.splitlines()[-2:] == ["Not valid: 1 team(s)", "  slow: killed: stopped (SIGTERM)"], out.stdout
    assert time.monotonic() - start < 120
    with open_store(str(db)) as store:
        (record,) = store.records()
    assert record.status == "killed" and "stopped from outside (SIGTERM)" in record.transcript


# ---------------------------------------------------------------------------- database faults

def grade_process(classdir, url, workdir, *extra, env=None):
    """``grade`` started in the background (m2 on 10 images, one task at a time)."""
    return subprocess.Popen([*python_command(), "-m", "ece408_op", "grade", str(classdir), "--milestone", "m2",
                             "--size", "10", *ENGINE, "--db", url, "--workdir", str(workdir), *map(str, extra)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {}), "ECE408_MODEL_DIR": str(ROOT / "models")})


def stored_count(url):
    try:
        with open_store(url) as store:
            return len(store.records())
    except Exception:                    # noqa: BLE001  the server is down
        return -1


def check_measured(url, teams):
    """Every team of ``teams`` has one record, ok, with its Op Times: none turned into error or killed."""
    with open_store(url) as store:
        records = {r.team: r for r in store.records()}
        assert len(store.records()) == len(teams)
    assert sorted(records) == sorted(teams)
    for team, record in records.items():
        assert record.status == "ok" and record.correct and record.op_time > 0, (team, record.status, record.reason)
        assert len(record.models) == 2 and all(m["op_times"] for m in record.models)
    return records


def test_postgresql_gone_until_grade_ends_loses_no_run(tmp_path):
    server = started(Postgres(tmp_path / "pg"))
    try:
        classdir = tmp_path / "class"
        team_project(classdir / "a", cpu=PLAIN)
        team_project(classdir / "b", cpu=PLAIN)
        spool = tmp_path / "spool"
        env = {"ECE408_SPOOL": str(spool), "ECE408_DB_RETRY": "3"}
        proc = grade_process(classdir, server.url, tmp_path / "w", "--local", "--jobs", 1, env=env)
        try:
            _wait_for(lambda: stored_count(server.url) == 1, proc, "the first record")
            server.stop()                                            # PostgreSQL goes away mid-grade
            stdout, stderr = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 1 and "Traceback" not in stderr
        warnings = [line for line in stderr.splitlines() if line.startswith("warning: the database does not answer")]
        assert len(warnings) == 1, stderr
        assert stderr.strip().splitlines()[-1].startswith("error: no ranking: the database does not answer ")
        assert f"1 record(s) of this grade wait in the spool {spool}; the next command" in stdout
        (task_b,) = [t for t in grade.Plan.load(tmp_path / "w" / "tasks.json").tasks if t.team == "b"]
        waiting = store_module.spooled_record(store_module.spooled_files(spool)[task_b.record_id])
        assert waiting.status == "ok" and waiting.op_time > 0       # b's measured run, not an error record
        server.start_again()
        out = cli("ranking", "--db", server.url, "--milestone", "m2", "--size", 10, env=env)
        assert out.returncode == 0, out.stderr
        assert "1 spooled record(s) stored" in out.stderr and store_module.spooled_files(spool) == {}
        records = check_measured(server.url, ["a", "b"])
        assert records["b"].id == task_b.record_id and records["b"].op_time == waiting.op_time
    finally:
        server.stop()


@pytest.mark.parametrize("mode", ["local", "slurm"])
def test_postgresql_back_before_grade_ends_gets_every_run_stored(mode, tmp_path, request):
    """The database away while tasks end: grade keeps polling (one warning), the tasks spool into
    the work folder (shared with Slurm's nodes), grade stores what they spooled at its end."""
    cluster = request.getfixturevalue("slurm") if mode == "slurm" else None
    server = started(Postgres(tmp_path / "pg"))
    try:
        classdir = tmp_path / "class"
        for name in ("a", "b", "c"):
            team_project(classdir / name, cpu=PLAIN)
        spool, workdir = tmp_path / "spool", tmp_path / "w"
        env = {"ECE408_SPOOL": str(spool), "ECE408_DB_RETRY": "3", **(cluster.env if cluster else {})}
        extra = ["--local", "--jobs", 1] if mode == "local" else ["--gres", "none", "--time", "00:05:00"]
        proc = grade_process(classdir, server.url, workdir, *extra, env=env)
        try:
            _wait_for(lambda: stored_count(server.url) == 1, proc, "the first record", timeout=300)
            server.stop()
            _wait_for(lambda: store_module.spooled_files(workdir / "spool"), proc, "a task's spooled record",
                      timeout=300)
            server.start_again()
            stdout, stderr = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, stdout[-2000:] + stderr
        assert "Traceback" not in stderr
        warnings = [line for line in stderr.splitlines() if line.startswith("warning: the database does not answer")]
        assert len(warnings) == 1, stderr
        assert f"Ranking: m2, 10 images on {CPU} (3 team(s); 0 run(s) not valid)" in stdout
        check_measured(server.url, ["a", "b", "c"])
        assert store_module.spooled_files(workdir / "spool") == {} and store_module.spooled_files(spool) == {}
    finally:
        server.stop()


@contextmanager
def nearly_full_database(tmp_path):
    """(disk, db, spool, env): a SQLite database on a 1 MiB tmpfs with 300 KiB left, and where its
    records spool (a second of retries) when the disk fills up."""
    with small_tmpfs(tmp_path / "small", "1m") as small:
        db = small / "runs.db"
        with open_store(str(db)):
            pass
        free = os.statvfs(small).f_bavail * os.statvfs(small).f_frsize
        (small / "filler").write_bytes(b"x" * (free - (300 << 10)))          # 300 KiB left
        spool = tmp_path / "spool"
        yield small, db, spool, {"ECE408_SPOOL": str(spool), "ECE408_DB_RETRY": "1"}


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs (root)")
def test_database_disk_full_during_grade_keeps_the_measured_run(tmp_path):
    with nearly_full_database(tmp_path) as (small, db, spool, env):
        classdir = tmp_path / "class"
        # 400 KB on each of its first four forwards (the course's runs): a transcript past the 300 KiB
        # left, and no more over the ranked run's repeats (each model's forward again: team/repeats.py)
        loud = "CALLS = []\n" + PLAIN.replace(
            "    B, M, H_out, W_out = y.shape",
            "    CALLS.append(1)\n    if len(CALLS) <= 4:\n        print('x' * 4000 * 100)\n    B, M, H_out, W_out = y.shape")
        team_project(classdir / "loud", cpu=loud)
        out = cli("grade", classdir, "--milestone", "m2", "--size", 10, *ENGINE, "--local", "--db", db,
                  "--workdir", tmp_path / "w", env=env)
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
        (task,) = grade.Plan.load(tmp_path / "w" / "tasks.json").tasks
        assert f"1 record(s) of this grade wait in the spool {spool}; the next command" in out.stdout
        assert f"  loud: not stored: its record waits in {spool}" in out.stdout.splitlines()
        assert out.stderr.strip().splitlines()[-1] == f"error: no team of {classdir} has a valid run with these options"
        waiting = store_module.spooled_record(store_module.spooled_files(spool)[task.record_id])
        assert waiting.status == "ok" and waiting.op_time > 0, waiting.reason   # the measured run, not error, not killed
        (small / "filler").unlink()
        out = cli("ranking", "--db", db, "--milestone", "m2", "--size", 10, env=env)
        assert out.returncode == 0 and "1 spooled record(s) stored" in out.stderr
        with open_store(str(db)) as store:
            (record,) = store.records()
        assert (record.id, record.status, record.op_time) == (task.record_id, "ok", waiting.op_time)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs (root)")
def test_database_disk_full_spools_the_record(tmp_path):
    with nearly_full_database(tmp_path) as (small, db, spool, env):
        # a team whose transcript (about 800 KB) no longer fits the disk
        team = team_project(tmp_path / "team", cpu=PLAIN.replace("    B, M, H_out, W_out = y.shape",
                                                                   "    print('x' * 4000 * 100)\n    B, M, H_out, W_out = y.shape"))
        out = cli("submit", team, "--submit", "m2", "--size", SIZE, *ENGINE, "--db", db, "--name", "team", env=env)
        assert out.returncode == 1 and "Traceback" not in out.stderr
        (line,) = out.stderr.strip().splitlines()
        assert line.startswith("error: the record ") and "it waits in" in line and str(spool) in line
        (small / "filler").unlink()
        out = cli("ranking", "--db", db, "--milestone", "m2", "--size", SIZE, env=env)
        assert out.returncode == 0 and "1 spooled record(s) stored" in out.stderr
        assert out.stdout.splitlines()[2].split()[1] == "team"


# ---------------------------------------------------------------------------- the database

def test_postgresql_parallel_first_use_and_writers(postgres):
    import psycopg
    url = postgres.create_database("parallel")
    parallel_writers(url, workers=8, each=40)
    with psycopg.connect(url) as c:                                 # migrated once, not 8 times
        assert c.execute("SELECT version FROM schema_version ORDER BY version").fetchall() == \
            [(v,) for v in range(1, len(store_module.MIGRATIONS) + 1)]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_schema_is_migrated_on_first_use(backend, tmp_path, monkeypatch, request):
    if backend == "sqlite":
        url = str(tmp_path / "m.db")
    else:
        url = request.getfixturevalue("postgres").create_database("migrate")
    record = Record("r1", "2026-01-01", "t", "m2", 10, "ok", 0, 0.5, True, [], transcript="x")
    current = len(store_module.MIGRATIONS)
    with open_store(url) as store:
        assert store.schema_version() == current
        store.add(record)
    monkeypatch.setattr(store_module, "MIGRATIONS",
                        store_module.MIGRATIONS + [["ALTER TABLE runs ADD COLUMN note TEXT"]])
    with open_store(url) as store:                                  # an old database, a new program
        assert store.schema_version() == current + 1
        assert [r.id for r in store.records()] == ["r1"]
        store._execute("SELECT note FROM runs").fetchall()
        store.conn.commit()
    with open_store(url) as store:
        assert store.schema_version() == current + 1


def test_sbatch_command_passes_gres_time_partition_account(tmp_path):
    plan = grade.Plan("final", 10000, tasks=[grade.Task(i, f"t{i}", "/x", "r", "h") for i in range(12)])
    slurm = slurm_array.SlurmOptions(partition="gpu", account="ece408", gres="gpu:1", time="00:20:00", max_parallel=4,
                                     extra=["--qos=class"])
    argv = slurm_array.sbatch_command(plan, tmp_path, slurm, "/usr/bin/python3")
    assert argv[:2] == ["sbatch", "--parsable"] and argv[-1] == str(tmp_path / "job.sh")
    assert {"--array=0-11%4", "--gres=gpu:1", "--time=00:20:00", "--partition=gpu", "--account=ece408",
            "--qos=class", f"--output={tmp_path}/logs/%a.out"} <= set(argv)
    none = slurm_array.sbatch_command(plan, tmp_path, slurm_array.SlurmOptions(gres=None), "python")
    assert not any(a.startswith("--gres") for a in none) and "--exclusive" not in argv
    exclusive = slurm_array.sbatch_command(plan, tmp_path, slurm_array.SlurmOptions(gres=None, exclusive=True),
                                           "python")
    assert "--exclusive" in exclusive
    script = slurm_array.write_job_script(tmp_path, "/usr/bin/python3").read_text()
    assert f"export ECE408_SPOOL={tmp_path / 'spool'}\n" in script          # the work folder: shared with the nodes


def test_slurm_time_format():
    assert slurm_array.slurm_seconds("00:30:00") == 1800 and slurm_array.slurm_seconds("1-00:00:00") == 86400
    assert slurm_array.slurm_seconds("45") == 2700 and slurm_array.slurm_seconds("2:30") == 150


def test_grade_bad_input_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    out = cli("grade", tmp_path / "empty", "--local", "--timeout", "nan")
    assert out.returncode == 2 and "--timeout: invalid finite positive number value: 'nan'" in out.stderr
    out = cli("grade", tmp_path / "empty", "--local", "--milestone", "m2", "--db", tmp_path / "g.db")
    assert out.returncode == 1 and out.stderr.strip() == \
        f"error: {tmp_path / 'empty'} has no team sub-folders; put each team's submission in its own folder"
    out = cli("grade", tmp_path / "empty", "--local", "--time", "soon")
    assert out.returncode == 2 and "--time 'soon': use [days-]hours:minutes:seconds" in out.stderr
    out = cli("grade", tmp_path, "--db", tmp_path / "g.db", env={"PATH": "/nonexistent"})
    assert out.returncode == 2 and "use --local to grade here" in out.stderr
