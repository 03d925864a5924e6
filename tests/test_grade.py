"""Grading a class (python -m ece408_op grade) against real components started here: a one-node
Slurm cluster (munged, slurmctld, slurmd) and a PostgreSQL server on the loopback address. A class
of team projects (honest, wrong, failing, slow, hostile, and teams whose folder names are hostile)
through Slurm into PostgreSQL and through --local into SQLite: the same outcomes; every team
command in a sandbox; a task killed mid-run is recorded and leaves nothing running; the database
going away or filling up loses no record; grading again is idempotent."""
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import ROOT, python_command, small_tmpfs
from services import Postgres, SlurmCluster, Unavailable
from submissions import parallel_writers
from teams import (CLOCK, EARLY_THREAD, EXECS, FAILS, FAKE_LINES, FORKS, PLAIN, REPLAY, SLOW, SNOOPS, WRITES_PTH, WRONG,
                   cli, team_project)
from test_sandbox import bubblewrap_missing, gone, processes_with

from ece408_op.grading import grade, store as store_module
from ece408_op.grading.store import Record, open_store

SIZE = 100
COMMAND_LIMIT = 60         # seconds per command: the slow team sleeps past it
ENGINE = ["--engine", "bubblewrap"]
EVIL = "evil\n1  t00  0.000001\x1b[31m"                       # a folder name that would print a fake row
BYTES = os.fsdecode(b"b\xffad")                                # a folder name that is not UTF-8
OUTCOMES = {"t01": "ok", "t02": "ok", "t03": "ok", EVIL: "ok", BYTES: "ok", "w-wrong": "failed", "x-fails": "failed",
            "y-slow": "timeout", "z-forks": "failed"}

pytestmark = [pytest.mark.skipif(bubblewrap_missing() is not None, reason=f"{bubblewrap_missing()}"),
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
    from ece408_op.grading.names import team_name
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
    assert "Ranking: m2, 100 images (5 team(s); 4 run(s) not valid)" in out.stdout
    table = out.stdout[out.stdout.index("Ranking:"):]
    assert "\x1b" not in table and "evil\\x0a1" in table and "b\\xffad" in table
    assert len(table.strip().splitlines()) == 2 + 5                   # no fake row


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
    proc = subprocess.Popen([*python_command(), "-m", "ece408_op", "grade", str(classdir), "--milestone", "m2",
                             "--size", str(SIZE), *ENGINE, "--gres", "none", "--db", url, "--workdir",
                             str(tmp_path / "work")], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        _wait_for(lambda: processes_with("--part cpu --dir /src") and
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
    assert gone("ece408_op.team.worker")                       # the team's process went with its task


def test_local_task_killed_mid_run_gets_a_fallback_record_and_leaves_nothing(tmp_path):
    classdir = killable_class(tmp_path / "class")
    db = tmp_path / "k.db"
    proc = subprocess.Popen([*python_command(), "-m", "ece408_op", "grade", str(classdir), "--milestone", "m2",
                             "--size", str(SIZE), *ENGINE, "--local", "--jobs", "2", "--db", str(db), "--workdir",
                             str(tmp_path / "work")], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "ECE408_MODEL_DIR": str(ROOT / "models")})
    try:
        def task_one():
            return [pid for pid, cmd in processes_with("--task-index 1")]
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
    assert gone("ece408_op.team.worker") and gone("ece408_op.grading.measure")   # died with their task
    with open_store(str(db)) as store:
        records = {r.team: r for r in store.records()}
    assert set(records) == {"a-ok", "b-killed"} and records["a-ok"].status == "ok"
    killed = records["b-killed"]
    assert killed.status == "killed"
    assert "* The task ended without storing a record (killed by SIGKILL)" in killed.transcript
    assert "* Team file new-forward.py" in killed.transcript                      # its log
    again = cli("grade", classdir, "--milestone", "m2", "--size", SIZE, *ENGINE, "--local", "--db", db,
                "--retry-stopped", "--timeout", 2, "--workdir", tmp_path / "w2")
    assert again.stdout.startswith("Skipped 1 team(s) whose submission is already graded: a-ok"), again.stdout


def test_local_task_time_limit_is_enforced_apart_from_the_command_limit(tmp_path):
    classdir = tmp_path / "class"
    team_project(classdir / "slow", cpu=SLOW)
    db = tmp_path / "t.db"
    start = time.monotonic()
    out = cli("grade", classdir, "--milestone", "m2", "--size", SIZE, *ENGINE, "--local", "--db", db,
              "--timeout", 600, "--time", "00:00:25", "--workdir", tmp_path / "w")
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - start < 120
    with open_store(str(db)) as store:
        (record,) = store.records()
    assert record.status == "killed" and "stopped from outside (SIGTERM)" in record.transcript


# ---------------------------------------------------------------------------- database faults

def test_postgresql_gone_mid_grade_loses_no_record(tmp_path):
    server = started(Postgres(tmp_path / "pg"))
    try:
        classdir = tmp_path / "class"
        team_project(classdir / "a", cpu=PLAIN)
        team_project(classdir / "b", cpu=PLAIN)
        spool = tmp_path / "spool"
        env = {"ECE408_SPOOL": str(spool), "ECE408_DB_RETRY": "3"}
        proc = subprocess.Popen([*python_command(), "-m", "ece408_op", "grade", str(classdir), "--milestone", "m2",
                                 "--size", str(SIZE), *ENGINE, "--local", "--jobs", "1", "--db", server.url,
                                 "--workdir", str(tmp_path / "w")], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env={**os.environ, **env, "ECE408_MODEL_DIR": str(ROOT / "models")})

        def first_stored():
            try:
                with open_store(server.url) as store:
                    return len(store.records()) == 1
            except Exception:            # noqa: BLE001
                return False
        _wait_for(first_stored, proc, "the first record")
        server.stop()                                            # PostgreSQL goes away mid-grade
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 1
        assert "Traceback" not in stderr and stderr.strip().splitlines()[-1].startswith("error: ")
        assert len(list(spool.glob("*.json"))) == 1              # the second record waits in the spool
        server.start_again()
        out = cli("ranking", "--db", server.url, "--milestone", "m2", "--size", SIZE, env=env)
        assert out.returncode == 0, out.stderr
        assert "1 spooled record(s) stored" in out.stderr and list(spool.glob("*.json")) == []
        with open_store(server.url) as store:
            assert sorted(r.team for r in store.records()) == ["a", "b"]
    finally:
        server.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs (root)")
def test_database_disk_full_spools_the_record(tmp_path):
    with small_tmpfs(tmp_path / "small", "1m") as small:
        db = small / "runs.db"
        with open_store(str(db)):
            pass
        free = os.statvfs(small).f_bavail * os.statvfs(small).f_frsize
        (small / "filler").write_bytes(b"x" * (free - (300 << 10)))          # 300 KiB left
        spool = tmp_path / "spool"
        env = {"ECE408_SPOOL": str(spool), "ECE408_DB_RETRY": "1"}
        # a team whose transcript (about 800 KB) no longer fits the disk
        team = team_project(tmp_path / "team", cpu=PLAIN.replace("    B, M, H_out, W_out = y.shape",
                                                                   "    print('x' * 4000 * 100)\n    B, M, H_out, W_out = y.shape"))
        out = cli("submit", team, "--submit", "m2", "--size", SIZE, *ENGINE, "--db", db, "--team", "team", env=env)
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
        assert c.execute("SELECT version FROM schema_version ORDER BY version").fetchall() == [(1,), (2,)]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_schema_is_migrated_on_first_use(backend, tmp_path, monkeypatch, request):
    if backend == "sqlite":
        url = str(tmp_path / "m.db")
    else:
        url = request.getfixturevalue("postgres").create_database("migrate")
    record = Record("r1", "2026-01-01", "t", "m2", 10, "ok", 0, 0.5, True, [], transcript="x")
    with open_store(url) as store:
        assert store.schema_version() == 2
        store.add(record)
    monkeypatch.setattr(store_module, "MIGRATIONS",
                        store_module.MIGRATIONS + [["ALTER TABLE runs ADD COLUMN note TEXT"]])
    with open_store(url) as store:                                  # an old database, a new program
        assert store.schema_version() == 3
        assert [r.id for r in store.records()] == ["r1"]
        store._execute("SELECT note FROM runs").fetchall()
        store.conn.commit()
    with open_store(url) as store:
        assert store.schema_version() == 3


def test_sbatch_command_passes_gres_time_partition_account(tmp_path):
    plan = grade.Plan("final", 10000, tasks=[grade.Task(i, f"t{i}", "/x", "r", "h") for i in range(12)])
    slurm = grade.SlurmOptions(partition="gpu", account="ece408", gres="gpu:1", time="00:20:00", max_parallel=4,
                               extra=["--qos=class"])
    argv = grade.sbatch_command(plan, tmp_path, slurm, "/usr/bin/python3")
    assert argv[:2] == ["sbatch", "--parsable"] and argv[-1] == str(tmp_path / "job.sh")
    assert {"--array=0-11%4", "--gres=gpu:1", "--time=00:20:00", "--partition=gpu", "--account=ece408",
            "--qos=class", f"--output={tmp_path}/logs/%a.out"} <= set(argv)
    none = grade.sbatch_command(plan, tmp_path, grade.SlurmOptions(gres=None), "python")
    assert not any(a.startswith("--gres") for a in none)


def test_slurm_time_format():
    assert grade.slurm_seconds("00:30:00") == 1800 and grade.slurm_seconds("1-00:00:00") == 86400
    assert grade.slurm_seconds("45") == 2700 and grade.slurm_seconds("2:30") == 150


def test_grade_bad_input_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    out = cli("grade", tmp_path / "empty", "--local", "--timeout", "nan")
    assert out.returncode == 2 and "--timeout: invalid finite positive number value: 'nan'" in out.stderr
    out = cli("grade", tmp_path / "empty", "--local", "--db", tmp_path / "g.db")
    assert out.returncode == 1 and out.stderr.strip() == \
        f"error: {tmp_path / 'empty'} has no team sub-folders; put each team's submission in its own folder"
    out = cli("grade", tmp_path / "empty", "--local", "--time", "soon")
    assert out.returncode == 2 and "--time 'soon': use [days-]hours:minutes:seconds" in out.stderr
    out = cli("grade", tmp_path, "--db", tmp_path / "g.db", env={"PATH": "/nonexistent"})
    assert out.returncode == 2 and "use --local to grade here" in out.stderr
