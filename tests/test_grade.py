"""Grading a class (python -m ece408_op grade) against real components started here: a one-node
Slurm cluster (munged, slurmctld, slurmd) and a PostgreSQL server on the loopback address.
20 crafted teams (correct, wrong Correctness, a failing build, one past its time limit) through
Slurm into PostgreSQL and through --local into SQLite: the same ranking; a task killed mid-run
is recorded; grading again is idempotent."""
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import ROOT, python_command
from services import Postgres, SlurmCluster, Unavailable
from submissions import HOST, cli, crafted_team, parallel_writers, reference_accuracies

from ece408_op.grading import grade, store as store_module
from ece408_op.grading.store import Record, open_store

SIZE = 100
COMMAND_LIMIT = 5          # seconds per command: the slow team sleeps past it
CORRECT = 15
WRONG = 3


@pytest.fixture(scope="module")
def expected():
    pytest.importorskip("mxnet")
    return reference_accuracies(SIZE)


@pytest.fixture(scope="module")
def classroom(tmp_path_factory, expected):
    """20 team folders; returns (folder, {team: what it should be})."""
    root = tmp_path_factory.mktemp("class")
    kinds = {}
    for i in range(CORRECT):                      # op times 0.015, 0.014, ... : t15 is fastest
        team = f"t{i + 1:02d}"
        crafted_team(root / team, expected, op_time=round(0.001 * (CORRECT - i), 6))
        kinds[team] = "correct"
    wrong = {m: round(v - 0.01, 4) for m, v in expected.items()}
    for i in range(WRONG):                         # fastest of all, but wrong: never ranked
        team = f"w{i + 1:02d}"
        crafted_team(root / team, wrong, op_time=0.0001)
        kinds[team] = "wrong"
    crafted_team(root / "x-fails", expected, kind="fail")
    kinds["x-fails"] = "failed"
    crafted_team(root / "y-slow", expected, kind="sleep", sleep=60)
    kinds["y-slow"] = "timeout"
    assert len(kinds) == 20
    return root, kinds


def expected_ranking(kinds):
    correct = sorted((t for t, k in kinds.items() if k == "correct"), key=lambda t: -int(t[1:]))
    return [(i + 1, t, round(0.002 * (CORRECT - int(t[1:]) + 1), 6)) for i, t in enumerate(correct)]


def ranking_of(db, env=None):
    out = cli("ranking", "--db", db, "--milestone", "m2", "--size", SIZE, "--json", env=env)
    assert out.returncode == 0, out.stderr
    return [(r["rank"], r["team"], round(r["op_time"], 6)) for r in json.loads(out.stdout)["ranking"]]


def check_records(records, kinds):
    by_team = {}
    for r in records:
        by_team.setdefault(r.team, []).append(r)
    assert sorted(by_team) == sorted(kinds) and all(len(v) == 1 for v in by_team.values())
    for team, (record,) in by_team.items():
        kind = kinds[team]
        assert record.status == {"correct": "ok", "wrong": "ok"}.get(kind, kind), (team, record.transcript)
        assert record.correct == (kind == "correct"), team
        assert record.transcript.startswith('* Running /bin/bash -c "cp -rv /src/* /build"\n')
    assert by_team["x-fails"][0].exit_code == 1 and "error: crafted failure" in by_team["x-fails"][0].transcript
    assert f"ran past its time limit of {COMMAND_LIMIT} s" in by_team["y-slow"][0].transcript


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


def grade_cli(classdir, db, *extra, env=None, timeout=900):
    return cli("grade", classdir, "--milestone", "m2", "--size", SIZE, *HOST, "--timeout", COMMAND_LIMIT,
               "--db", db, *extra, env=env, timeout=timeout)


# ---------------------------------------------------------------------------- the whole class

@pytest.fixture(scope="module")
def graded_slurm(classroom, slurm, postgres, tmp_path_factory):
    folder, kinds = classroom
    out = grade_cli(folder, postgres.url, "--gres", "none", "--time", "00:05:00",
                    "--workdir", tmp_path_factory.mktemp("work-slurm"), env=slurm.env)
    return out


def test_class_through_slurm_into_postgresql(classroom, graded_slurm, postgres):
    folder, kinds = classroom
    out = graded_slurm
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Submitted job array" in out.stderr and "pending" in out.stderr
    progress = [line for line in out.stderr.splitlines() if line.startswith("[")]
    assert progress[-1].endswith(f"20/20  pending 0  running 0  done {CORRECT + WRONG}  failed 2")
    with open_store(postgres.url) as store:
        check_records(store.records(), kinds)
        assert {r.host for r in store.records()} == {os.uname().nodename}
    assert ranking_of(postgres.url) == expected_ranking(kinds)
    assert out.stdout.rstrip().endswith(out.stdout.rstrip().splitlines()[-1])
    assert "Ranking: m2, 100 images (15 team(s); 5 run(s) not valid)" in out.stdout


def test_class_through_local_pool_into_sqlite_gives_the_same_ranking(classroom, graded_slurm, postgres, tmp_path):
    folder, kinds = classroom
    db = tmp_path / "class.db"
    out = grade_cli(folder, db, "--local", "--jobs", "2", "--workdir", tmp_path / "work")
    assert out.returncode == 0, out.stdout + out.stderr
    with open_store(str(db)) as store:
        check_records(store.records(), kinds)
    assert ranking_of(db) == ranking_of(postgres.url) == expected_ranking(kinds)
    def table(url):                 # the printed ranking, less the times of submission
        lines = cli("ranking", "--db", url).stdout.splitlines()
        return [line.rsplit("  ", 1)[0] for line in lines]
    assert table(db) == table(postgres.url)


def test_grading_again_is_idempotent(classroom, graded_slurm, slurm, postgres, tmp_path):
    folder, kinds = classroom
    with open_store(postgres.url) as store:
        before = len(store.records())
    again = grade_cli(folder, postgres.url, "--gres", "none", "--workdir", tmp_path / "w", env=slurm.env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("Skipped 20 team(s) whose submission is already graded")
    assert "Submitted job array" not in again.stderr and not (tmp_path / "w").exists()
    with open_store(postgres.url) as store:
        assert len(store.records()) == before
    # a team that changes its submission is graded again, and only that team
    script = folder / "t01" / "scripts" / "m2.1.py"
    script.write_text(script.read_text().replace("0.015", "0.0005"))
    try:
        third = grade_cli(folder, postgres.url, "--gres", "none", "--workdir", tmp_path / "w3", env=slurm.env)
        assert third.returncode == 0, third.stderr
        assert third.stdout.startswith("Skipped 19 team(s)") and "Grading 1 team(s)" in third.stdout
        with open_store(postgres.url) as store:
            assert len(store.records()) == before + 1
            assert [r.op_time for r in store.records(team="t01")][-1] == pytest.approx(0.001)
        assert ranking_of(postgres.url)[0][1:] == ("t01", 0.001)
    finally:
        script.write_text(script.read_text().replace("0.0005", "0.015"))


# ---------------------------------------------------------------------------- killed tasks

def _wait_file(path, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"grade ended early: {proc.communicate()}"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.2)
    return [int(v) for v in path.read_text().split()]


def killable_class(root, expected, pidfile):
    crafted_team(root / "a-ok", expected, op_time=0.002)
    crafted_team(root / "b-killed", expected, kind="pidfile", sleep=120, pidfile=pidfile)
    return root


def test_slurm_task_cancelled_mid_run_is_recorded(expected, slurm, postgres, tmp_path):
    pidfile = tmp_path / "pids"
    classdir = killable_class(tmp_path / "class", expected, pidfile)
    url = postgres.create_database("cancelled")                # a database of its own for this test
    proc = subprocess.Popen([*python_command(), "-m", "ece408_op", "grade", str(classdir), "--milestone", "m2",
                             "--size", str(SIZE), *HOST, "--gres", "none", "--db", url, "--workdir",
                             str(tmp_path / "work")], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **slurm.env, "ECE408_MODEL_DIR": str(ROOT / "models")})
    try:
        _wait_file(pidfile, proc)
        job = subprocess.run(["squeue", "-h", "-r", "-n", "ece408-grade", "-o", "%i"], capture_output=True,
                             text=True, env={**os.environ, **slurm.env}).stdout.split()
        task = [j for j in job if j.endswith("_1")]
        assert task, job
        subprocess.run(["scancel", task[0]], check=True, env={**os.environ, **slurm.env})
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
    assert "Loading fashion-mnist data..." in killed.transcript       # what it printed before
    # scancel sends SIGTERM first: the task stops its command and stores its own record
    assert killed.transcript.endswith("* The run was stopped from outside (SIGTERM); the build stopped.\n"), \
        killed.transcript
    assert "failed 1" in stderr.splitlines()[-1]


def test_local_task_killed_mid_run_gets_a_fallback_record(expected, tmp_path):
    pidfile = tmp_path / "pids"
    classdir = killable_class(tmp_path / "class", expected, pidfile)
    db = tmp_path / "k.db"
    proc = subprocess.Popen([*python_command(), "-m", "ece408_op", "grade", str(classdir), "--milestone", "m2",
                             "--size", str(SIZE), *HOST, "--local", "--jobs", "2", "--db", str(db), "--workdir",
                             str(tmp_path / "work")], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "ECE408_MODEL_DIR": str(ROOT / "models")})
    try:
        task_pid, script_pid = _wait_file(pidfile, proc)
        os.kill(task_pid, signal.SIGKILL)            # no chance to write its own record
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        try:
            os.kill(script_pid, signal.SIGKILL)      # the orphaned milestone script
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, stderr
    with open_store(str(db)) as store:
        records = {r.team: r for r in store.records()}
    assert set(records) == {"a-ok", "b-killed"} and records["a-ok"].status == "ok"
    killed = records["b-killed"]
    assert killed.status == "killed"
    assert "* The task ended without storing a record (killed by SIGKILL)" in killed.transcript
    assert "* Running python /build/scripts/m2.1.py ece408-high 100" in killed.transcript   # its log
    # killed is not a final outcome: --retry-stopped grades that team again, and only it
    again = cli("grade", classdir, "--milestone", "m2", "--size", SIZE, *HOST, "--local", "--db", db,
                "--retry-stopped", "--timeout", 2, "--workdir", tmp_path / "w2")
    assert again.stdout.startswith("Skipped 1 team(s) whose submission is already graded: a-ok"), again.stdout


# ---------------------------------------------------------------------------- the database

def test_postgresql_parallel_first_use_and_writers(postgres):
    import psycopg
    url = postgres.create_database("parallel")
    parallel_writers(url, workers=8, each=40)
    with psycopg.connect(url) as c:                                 # migrated once, not 8 times
        assert c.execute("SELECT version FROM schema_version").fetchall() == [(1,)]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_schema_is_migrated_on_first_use(backend, tmp_path, monkeypatch, request):
    if backend == "sqlite":
        url = str(tmp_path / "m.db")
    else:
        url = request.getfixturevalue("postgres").create_database("migrate")
    record = Record("r1", "2026-01-01", "t", "m2", 10, "ok", 0, 0.5, True, [], transcript="x")
    with open_store(url) as store:
        assert store.schema_version() == 1
        store.add(record)
    monkeypatch.setattr(store_module, "MIGRATIONS",
                        store_module.MIGRATIONS + [["ALTER TABLE runs ADD COLUMN note TEXT"]])
    with open_store(url) as store:                                  # an old database, a new program
        assert store.schema_version() == 2
        assert [r.id for r in store.records()] == ["r1"]
        store._execute("SELECT note FROM runs").fetchall()
        store.conn.commit()
    with open_store(url) as store:
        assert store.schema_version() == 2


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
    out = cli("grade", tmp_path / "empty", "--local", "--db", tmp_path / "g.db")
    assert out.returncode == 1 and out.stderr.strip() == \
        f"error: {tmp_path / 'empty'} has no team sub-folders; put each team's submission in its own folder"
    out = cli("grade", tmp_path / "empty", "--local", "--time", "soon")
    assert out.returncode == 2 and "--time 'soon': use [days-]hours:minutes:seconds" in out.stderr
    out = cli("grade", tmp_path, "--db", tmp_path / "g.db", env={"PATH": "/nonexistent"})
    assert out.returncode == 2 and "use --local to grade here" in out.stderr
