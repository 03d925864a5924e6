"""The submission runner (python -m ece408_op submit) and the ranking: schema errors, the
transcript of a development run (every command in a bubblewrap sandbox), failing and slow
commands, the scratch copy; ranked runs (--submit): the record of a team made by init, the
team files it names, the hidden model, and every attack a team could try on the ranking,
each expected to fail, be refused in one line, or leave the record as measured."""
import hashlib
import json
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from suitekit import ROOT, python_command
from submissions import parallel_writers
from teams import (CLOCK, EARLY_THREAD, EXECS, FAILS, FAKE_LINES, FORKS, PLAIN, REPLAY, SNOOPS, WRITES_PTH, WRONG,
                   cli, rai_yaml, reference_accuracies, team_project)

from ece408_op.grading import machine
from ece408_op.grading.ranking import rank
from ece408_op.grading.store import Record, open_store
from ece408_op.team import repeats

GOOD = rai_yaml(["echo hello"])
HOST = ["--engine", "bubblewrap"]         # the default engine here, named so that a failure to start it shows


def write_config(folder, text):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rai_build.yml").write_text(text)
    return folder


# ---------------------------------------------------------------------------- schema

SCHEMA_CASES = {
    "missing key": (GOOD.replace("  image: ece408_op:latest\n", ""), ["missing key rai.image"]),
    "wrong type": (GOOD.replace("count: 0", "count: one"), ["resources.gpu.count must be an integer (0 for CPU-only milestones), not a string"]),
    "unknown gpu architecture": (GOOD.replace("architecture: hopper", "architecture: fermi2"),
                                 ["unknown resources.gpu.architecture 'fermi2'; use one of kepler"]),
    "unknown cpu architecture": (GOOD.replace("architecture: amd64", "architecture: sparc"),
                                 ["unknown resources.cpu.architecture 'sparc'"]),
    "empty build list": (GOOD.replace('    - "echo hello"\n', "").replace("  build:", "  build: []"),
                         ["commands.build is empty"]),
    "network not a boolean": (GOOD.replace("network: false", "network: \"no\""),
                              ["resources.network must be a boolean (true or false), not a string"]),
    "build not a list": (GOOD.replace('  build:\n    - "echo hello"', '  build: "echo hello"'),
                         ["commands.build must be a list of commands, not a string"]),
    "several at once": (GOOD.replace("  image: ece408_op:latest\n", "").replace("network: false", "network: 1")
                        .replace("architecture: hopper", "architecture: fermi2"),
                        ["missing key rai.image", "unknown resources.gpu.architecture 'fermi2'",
                         "resources.network must be a boolean (true or false), not an integer"]),
    "not YAML": ("rai: [unclosed\n", ["not valid YAML"]),
    "not a mapping": ("- a\n- b\n", ["the file must be a mapping"]),
}


@pytest.mark.parametrize("case", sorted(SCHEMA_CASES))
def test_schema_error_one_message_each(tmp_path, case):
    text, messages = SCHEMA_CASES[case]
    out = cli("submit", write_config(tmp_path / "team", text), *HOST)
    assert out.returncode == 1 and out.stdout == "", out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == len(messages), out.stderr
    for line, message in zip(lines, messages):
        assert line.startswith("error: rai_build.yml: ") and message in line, out.stderr


def test_missing_config_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    out = cli("submit", tmp_path / "empty", *HOST)
    assert out.returncode == 1
    assert out.stderr.strip() == f"error: rai_build.yml: not found in {tmp_path / 'empty'}; " \
                                 "every submission needs one at its top level"


def test_repository_rai_build_is_valid():
    from ece408_op.grading.config import load_config
    config = load_config(ROOT)
    assert config.commands[0] == '/bin/bash -c "cp -rv /src/* /build"'
    assert config.gpu_count == 1 and config.network is False and any("m3.1.py" in c for c in config.commands)
    template = load_config(team_project_dir())
    assert template.commands[:2] == ('/bin/bash -c "cp -rv /src/* /build"', "python -m ece408_op m2 1000")
    assert "then python -m ece408_op m3 1000; else echo No GPU here" in template.commands[2]   # m3 where a GPU is


def team_project_dir():
    from ece408_op.team.project import TEMPLATE
    return TEMPLATE


# ---------------------------------------------------------------------------- the build

def test_transcript_format(tmp_path):
    team = write_config(tmp_path / "team", rai_yaml(["echo hello", "python -c \"print('from python')\""]))
    out = cli("submit", team, *HOST)
    assert out.returncode == 0, out.stderr
    assert out.stdout == ("* Running echo hello\nhello\n"
                          "* Running python -c \"print('from python')\"\nfrom python\n"
                          "* Development run: no record is stored (ranked runs: --submit m2|m3|final)\n")


def test_failing_command_stops_the_build_with_its_exit_code(tmp_path):
    team = write_config(tmp_path / "team", rai_yaml(
        ["echo first", "/bin/bash -c \"echo partial; exit 3\"", "echo never-run"]))
    out = cli("submit", team, *HOST)
    assert out.returncode == 3
    assert out.stdout == ("* Running echo first\nfirst\n"
                          "* Running /bin/bash -c \"echo partial; exit 3\"\npartial\n"
                          "* The command exited with code 3; the build stopped.\n"
                          "* Development run: no record is stored (ranked runs: --submit m2|m3|final)\n")


@pytest.mark.slow                                   # measured 2 s (loaded machine)
def test_command_past_its_time_limit_is_killed_with_its_children(tmp_path):
    team = write_config(tmp_path / "team", rai_yaml(
        ['/bin/bash -c "sleep 4021 & echo started; wait"', "echo never-run"]))
    start = time.monotonic()
    out = cli("submit", team, *HOST, "--timeout", "1.5")
    elapsed = time.monotonic() - start
    assert out.returncode == 1 and elapsed < 30, (elapsed, out.stderr)
    assert "started\n* The command ran past its time limit of 1.5 s and was killed; the build stopped.\n" in out.stdout
    assert "never-run\n" not in out.stdout
    from test_sandbox_attacks import gone
    assert gone("sleep 4021")                        # the background sleep went with it


def alive(pid, wait=5.0):
    """True while ``pid`` runs after ``wait`` s (a zombie left for init to reap counts as gone)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        if state == "Z":
            return False
        time.sleep(0.1)
    return True


def _tree(folder):
    return {p.relative_to(folder).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_scratch_copy_leaves_the_source_untouched(tmp_path):
    team = write_config(tmp_path / "team", rai_yaml([
        '/bin/bash -c "cp -rv /src/* /build"',
        '/bin/bash -c "echo changed > /build/a.txt; rm -f /src/b.txt /build/b.txt; touch /src/new; ls /build"']))
    (team / "a.txt").write_text("original\n")
    (team / "b.txt").write_text("keep me\n")
    (team / "sub").mkdir()
    (team / "sub" / "c.txt").write_text("nested\n")
    before = _tree(team)
    out = cli("submit", team, *HOST)
    assert out.returncode == 0, out.stderr
    assert re.search(r"-> '/build/sub/c.txt'", out.stdout), out.stdout     # cp -rv did copy
    assert "a.txt\nrai_build.yml\nsub\n* Development run" in out.stdout, out.stdout  # b.txt gone from /build only
    assert _tree(team) == before


# ---------------------------------------------------------------------------- ranked runs (--submit)

@pytest.fixture(scope="module")
def expected_100():
    pytest.importorskip("mxnet")
    return reference_accuracies(100)


def ranked(team, db, *extra, name="team"):
    return cli("submit", team, "--submit", "m2", "--size", 100, "--name", name, "--db", db, *HOST, *extra)


def only_record(db):
    with open_store(str(db)) as store:
        (record,) = store.records()
    return record


@pytest.mark.slow
def test_ranked_m2_of_a_team_made_by_init(tmp_path, expected_100):
    team = team_project(tmp_path / "team")
    db = tmp_path / "runs.db"
    out = ranked(team, db, name="tigers")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    record = only_record(db)
    assert record.status == "ok" and record.correct and record.team == "tigers" and record.size == 100
    digest = hashlib.sha256((team / "new-forward.py").read_bytes()).hexdigest()
    assert record.team_files == [{"name": "new-forward.py", "sha256": digest,
                                  "size": (team / "new-forward.py").stat().st_size}]
    assert record.engine == "bubblewrap" and record.isolated and record.device == machine.cpu_name()
    assert [m["model"] for m in record.models] == ["ece408-high", "ece408-low"]
    assert {m["model"]: m["expected"] for m in record.models} == expected_100
    for model in record.models:
        (layer,) = model["layers"]
        assert layer["layer"] == {"B": 100, "M": 50, "C": 1, "H": 28, "W": 28, "K": 5} and layer["path"] == "cpu"
        assert model["op_times"] == [layer["op_time"]] and layer["checked"] == 2048 and len(layer["fresh"]) == 1
        # the repeats that time the model (team/repeats.py): every one kept, stopped by the rule
        assert repeats.MIN_REPEATS <= len(model["repeats"]) <= repeats.MAX_REPEATS
        assert layer["repeats"] == model["repeats"]
        assert model["op_time"] == pytest.approx(statistics.median(model["repeats"]))
        assert model["stopped"] in ("bound", "cap", "wall", "max", "limit")
        if model["stopped"] == "bound":
            assert repeats.relative_error(model["repeats"]) < repeats.TARGET_RSE
        elif model["stopped"] == "cap":
            assert sum(model["repeats"]) >= repeats.TIME_CAP_S
    assert record.op_time == pytest.approx(sum(m["op_time"] for m in record.models))
    assert record.options["timing"] == repeats.rule()
    printed = [float(v) for v in re.findall(r"^Op Time: (\S+)$", out.stdout, re.M)]
    assert printed == [round(t, 6) for m in record.models for t in m["op_times"]]
    assert f"* Team file new-forward.py: {record.team_files[0]['size']} bytes, sha256 {digest}" in out.stdout
    assert f"* Record {record.id} (tigers, m2, 100 images): ok; total Op Time {record.op_time:.6f} s" in out.stdout


@pytest.mark.slow
def test_ranked_run_on_the_host_engine_is_marked_not_isolated(tmp_path, expected_100):
    team = team_project(tmp_path / "team", cpu=PLAIN)
    db = tmp_path / "runs.db"
    out = cli("submit", team, "--submit", "m2", "--size", 100, "--db", db, "--engine", "host")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    assert "* Engine host: not isolated" in out.stdout
    record = only_record(db)
    assert record.engine == "host" and not record.isolated and record.status == "ok" and record.correct


@pytest.mark.slow
def test_a_ranked_run_takes_only_the_team_files(tmp_path, expected_100):
    """A submission holding the harness's own scripts, a package named ece408_op, sitecustomize.py,
    a .pth, an LD_PRELOAD library and a rai_build.yml that uses them, all printing fake lines: none
    of it is taken; the record is what the harness measured."""
    fake = "print('Op Time: 0.000001'); print('Correctness: 0.99 Model: ece408-high')\n"
    team = team_project(tmp_path / "team", cpu=FAKE_LINES, commands=["LD_PRELOAD=/src/fake.so python scripts/m2.1.py"],
                        files={"scripts/m2.1.py": fake, "scripts/final.py": fake, "ece408_op/__init__.py": fake,
                               "ece408_op/__main__.py": fake, "sitecustomize.py": fake, "usercustomize.py": fake,
                               "evil.pth": "import sys; " + fake, "fake.so": "not really"})
    db = tmp_path / "runs.db"
    out = ranked(team, db)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    record = only_record(db)
    assert [f["name"] for f in record.team_files] == ["new-forward.py"]
    assert record.status == "ok" and record.correct
    assert all(t > 1e-5 for m in record.models for t in m["op_times"])          # not the printed 0.000001
    assert "Op Time: 0.000001" in record.transcript                              # printed, and only printed


@pytest.mark.slow
@pytest.mark.parametrize("attack, extra, outcome", [
    (FORKS, (), "new-forward.py line 6: PermissionError: [Errno 1] Operation not permitted; a team's forward may not "
                "start processes or programs"),
    (EXECS, (), "new-forward.py line 7: PermissionError"),
    (EARLY_THREAD, (), "the output differs from the reference at"),
    (REPLAY, ("--repeats", "2"), "fresh run 2: the output differs from the reference"),
    (FAILS, (), "new-forward.py line 11: RuntimeError: this team forgot a colon"),
])
def test_attacks_on_the_ranked_run_fail_in_one_line(tmp_path, expected_100, attack, extra, outcome):
    team = team_project(tmp_path / "team", cpu=attack)
    db = tmp_path / "runs.db"
    out = ranked(team, db, *extra)
    assert out.returncode == 1, out.stdout[-3000:]
    record = only_record(db)
    assert record.status == "failed" and not record.correct and record.op_time is None
    errors = [line for line in out.stdout.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and outcome in errors[0], out.stdout[-3000:]
    assert f"* Not ranked: ece408-high: {errors[0][len('error: '):]}" in record.transcript


@pytest.mark.slow
def test_a_wrong_forward_is_stored_but_not_valid(tmp_path, expected_100):
    team = team_project(tmp_path / "team", cpu=WRONG)
    out = ranked(team, tmp_path / "r.db")
    assert out.returncode == 1 and "the output differs from the reference" in out.stdout
    assert only_record(tmp_path / "r.db").status == "failed"


@pytest.mark.slow
def test_the_clock_is_the_harness_s(tmp_path, expected_100):
    """A forward that replaces perf_counter, monotonic and time in its own process: the Op Time is
    still the harness's (the physical floor would refuse a time of 0)."""
    team = team_project(tmp_path / "team", cpu=CLOCK)
    out = ranked(team, tmp_path / "r.db")
    assert out.returncode == 0, out.stdout[-3000:]
    record = only_record(tmp_path / "r.db")
    assert record.status == "ok" and all(t > 1e-4 for m in record.models for t in m["op_times"])


@pytest.mark.slow
def test_a_pth_cannot_be_planted_for_the_next_team(tmp_path, expected_100):
    import site
    team = team_project(tmp_path / "team", cpu=WRITES_PTH)
    out = ranked(team, tmp_path / "r.db")
    assert out.returncode == 0, out.stdout[-3000:]
    assert "WROTE" not in out.stdout
    assert not any(Path(p, "zz_ece408_attack.pth").exists() for p in site.getsitepackages() + sys.path if p)
    nxt = ranked(team_project(tmp_path / "next", cpu=PLAIN), tmp_path / "r2.db")
    assert nxt.returncode == 0 and only_record(tmp_path / "r2.db").op_time > 1e-4


@pytest.mark.slow
def test_no_secret_of_the_grader_is_in_reach(tmp_path, expected_100):
    db = tmp_path / "secret-place" / "runs.db"
    db.parent.mkdir()
    team = team_project(tmp_path / "team", cpu=SNOOPS.replace("/nonexistent", str(db)))
    out = cli("submit", team, "--submit", "m2", "--size", 100, "--db", db, *HOST,
              env={"PGPASSWORD": "hunter2", "ECE408_SECRET": "hunter2"})
    assert out.returncode == 0, out.stdout[-3000:]
    snooped = next(line for line in out.stdout.splitlines() if line.startswith("SNOOP "))
    assert "hunter2" not in snooped and "PGPASSWORD" not in snooped and "ECE408_DB" not in snooped
    assert f"{db} FileNotFoundError" in snooped and "/etc/shadow FileNotFoundError" in snooped
    assert "--db" not in snooped and "grading.runner" not in snooped        # no argv of the grader's
    assert only_record(db).status == "ok"


@pytest.mark.slow
def test_submit_with_staff_hidden_model(tmp_path, expected_100):
    import shutil
    staff = tmp_path / "staff"
    staff.mkdir()
    shutil.copy(ROOT / "models" / "ece408-low-symbol.json", staff / "secret-symbol.json")
    shutil.copy(ROOT / "models" / "ece408-low-0001.params", staff / "secret-0003.params")
    hunt = SNOOPS.replace("/nonexistent", str(staff / "secret-symbol.json"))
    team = team_project(tmp_path / "team", cpu=hunt)
    db = tmp_path / "runs.db"
    out = ranked(team, db, "--hidden-model", staff / "secret")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    assert "on ece408-high, ece408-low, the hidden model, 100 images" in out.stdout
    assert all(f"{staff / 'secret-symbol.json'} FileNotFoundError" in line
               for line in out.stdout.splitlines() if line.startswith("SNOOP "))
    record = only_record(db)
    assert [m["model"] for m in record.models] == ["ece408-high", "ece408-low", "hidden"]
    hidden = record.models[2]
    assert hidden["correctness"] == hidden["expected"] == expected_100["ece408-low"]   # same weights as low
    assert record.correct
    missing = cli("submit", team, "--submit", "m2", "--hidden-model", tmp_path / "nothing", "--db", db, *HOST)
    assert missing.returncode == 1 and missing.stderr.strip() == (
        f"error: hidden model {tmp_path / 'nothing'}: needs nothing-symbol.json and nothing-NNNN.params beside it")


@pytest.mark.slow                                   # measured m2 for expected_100: 12 s (loaded machine)
def test_a_submission_without_the_team_file_is_one_line(tmp_path, expected_100):
    folder = write_config(tmp_path / "team", GOOD)          # no team project: refused before a record is made
    out = ranked(folder, tmp_path / "r.db")
    assert out.returncode == 1 and out.stdout == "" and not (tmp_path / "r.db").exists()
    assert out.stderr.strip() == f"error: {folder} is not a team project (no new-forward.py): make one with " \
                                 "python -m ece408_op init DIR and run this in it, or give --team DIR"
    link = team_project(tmp_path / "linked")
    (link / "new-forward.py").unlink()
    (link / "new-forward.py").symlink_to("/etc/passwd")
    out = ranked(link, tmp_path / "r2.db")
    assert out.returncode == 1 and "error: the submission's new-forward.py cannot be taken: it is a symbolic link" in out.stdout


@pytest.mark.skipif(machine.gpu_name() is not None, reason="this host has a GPU")
@pytest.mark.parametrize("milestone", ["m3", "final"])
def test_submit_gpu_milestone_without_gpu_is_one_line(tmp_path, milestone):
    team = team_project(tmp_path / "team")
    out = cli("submit", team, "--submit", milestone, "--db", tmp_path / "r.db", *HOST)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip() == (f"error: --submit {milestone} runs the GPU path and this host has no CUDA GPU "
                                  f"(nvidia-smi lists none); run it on a GPU machine, or use --submit m2")
    assert not (tmp_path / "r.db").exists()


# ---------------------------------------------------------------------------- ranking

def _record(team, op_time, status="ok", correct=True, at="2026-01-01T00:00:00", milestone="m2", size=100):
    models = [{"model": "ece408-high", "op_times": [op_time / 2], "op_time": op_time / 2, "correctness": 0.91,
               "expected": 0.91 if correct else 0.9, "correct": correct},
              {"model": "ece408-low", "op_times": [op_time / 2], "op_time": op_time / 2, "correctness": 0.68,
               "expected": 0.68, "correct": True}]
    return Record(f"{team}-{op_time}-{at}", at, team, milestone, size, status, 0 if status == "ok" else 1,
                  op_time if status == "ok" else None, correct and status == "ok", models, device="cpu",
                  transcript="...", team_files=[{"name": "new-forward.py", "sha256": "ab" * 32, "size": 10}])


RECORDS = [
    _record("alpha", 0.30, at="2026-01-01T00:00:01"),
    _record("alpha", 0.20, at="2026-01-01T00:00:02"),              # alpha's best
    _record("bravo", 0.25),
    _record("charlie", 0.01, correct=False),                       # fastest, wrong Correctness
    _record("delta", 0.05, status="failed"),                       # build failed
    _record("echo", 0.25, at="2026-01-01T00:00:05"),               # ties bravo, later
    _record("alpha", 0.10, milestone="final"),                     # another milestone
    _record("bravo", 0.15, size=10000),                            # another size
]


def test_ranking_orders_valid_runs_one_row_per_team(tmp_path):
    rows = rank([r for r in RECORDS if r.milestone == "m2" and r.size == 100])
    assert [(r.rank, r.team, r.op_time) for r in rows] == [(1, "alpha", 0.20), (2, "bravo", 0.25), (3, "echo", 0.25)]
    assert rows[0].runs == 2


def test_ranking_command_table_csv_json(tmp_path):
    db = tmp_path / "r.db"
    with open_store(str(db)) as store:
        for record in RECORDS:
            assert store.add(record)
        assert not store.add(RECORDS[0])                           # the same id twice: ignored
    table = cli("ranking", "--db", db, "--milestone", "m2", "--size", 100)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == "Ranking: m2, 100 images on cpu (3 team(s); 2 run(s) not valid)"
    assert [line.split()[:3] for line in lines[2:]] == [["1", "alpha", "0.200000"], ["2", "bravo", "0.250000"],
                                                        ["3", "echo", "0.250000"]]
    csv = cli("ranking", "--db", db, "--milestone", "m2", "--size", 100, "--csv").stdout.splitlines()
    assert csv[0].startswith("rank,team,op_time,") and [c.split(",")[1] for c in csv[1:]] == ["alpha", "bravo", "echo"]
    data = json.loads(cli("ranking", "--db", db, "--milestone", "m2", "--size", 100, "--json").stdout)
    assert [(r["team"], r["op_time"]) for r in data["ranking"]] == [("alpha", 0.2), ("bravo", 0.25), ("echo", 0.25)]
    assert data["ranking"][0]["op_times"] == {"ece408-high": 0.1, "ece408-low": 0.1}
    final = cli("ranking", "--db", db, "--milestone", "final", "--size", 100).stdout
    assert final.splitlines()[2].split()[:2] == ["1", "alpha"]


def test_ranking_of_an_empty_database(tmp_path):
    out = cli("ranking", "--db", tmp_path / "new.db")
    assert out.returncode == 0 and out.stdout.startswith("No records yet")
    out = cli("ranking", "--db", tmp_path / "new.db", "--json")          # JSON asked for: JSON, the line inside
    assert out.returncode == 0 and json.loads(out.stdout)["note"].startswith("No records yet"), out.stdout


def test_team_names_and_devices_print_escaped(tmp_path):
    db = tmp_path / "r.db"
    evil = "pwn\n1     winner  0.000001\x1b[2J\x1b[31m"
    with open_store(str(db)) as store:
        store.add(_record(evil, 0.30))
        store.add(_record("honest", 0.40))
    out = cli("ranking", "--db", db, "--milestone", "m2", "--size", 100)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 4 and "\x1b" not in out.stdout and "\\x1b[2J" in lines[2]
    assert lines[2].split()[:2] == ["1", "pwn\\x0a1"] and lines[3].split()[:2] == ["2", "honest"]


def test_a_bad_row_is_skipped_with_a_warning(tmp_path):
    db = tmp_path / "r.db"
    with open_store(str(db)) as store:
        store.add(_record("good", 0.3))
        store.add(_record("bad-json", 0.1))
        store.add(_record("bad-time", 0.2))
        store._execute("UPDATE runs SET models = 'not json' WHERE team = 'bad-json'")
        store._execute("UPDATE runs SET op_time = 'fast' WHERE team = 'bad-time'")
        store.conn.commit()
    out = cli("ranking", "--db", db, "--milestone", "m2", "--size", 100)
    assert out.returncode == 0, out.stderr
    assert [line.split()[1] for line in out.stdout.splitlines()[2:]] == ["good"]
    warnings = out.stderr.strip().splitlines()
    assert len(warnings) == 2 and all(w.startswith("warning: record ") and "skipped: it cannot be read" in w
                                      for w in warnings)


# ---------------------------------------------------------------------------- concurrency

@pytest.mark.slow                                   # measured 4 s (loaded machine)
def test_parallel_writer_processes_lose_no_rows(tmp_path):
    parallel_writers(str(tmp_path / "parallel.db"), workers=8, each=40)


@pytest.mark.slow
def test_concurrent_ranked_runs_write_the_same_database(tmp_path, expected_100):
    db = tmp_path / "class.db"
    teams = [team_project(tmp_path / f"t{i}", cpu=PLAIN) for i in range(3)]

    def one(i):
        return cli("submit", teams[i], "--submit", "m2", "--size", 100, "--name", f"t{i}", "--db", db, *HOST)
    with ThreadPoolExecutor(3) as pool:
        outs = list(pool.map(one, range(3)))
    assert all(o.returncode == 0 for o in outs), [o.stdout[-2000:] + o.stderr for o in outs]
    rows = rank(open_store(str(db)).records())
    assert sorted(r.team for r in rows) == ["t0", "t1", "t2"] and all(r.op_time > 0 for r in rows)


def test_postgresql_url_without_psycopg_is_one_line():
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "from ece408_op.cli import main; sys.exit(main(['ranking', '--db', 'postgresql://u:secret@127.0.0.1:9/x']))")
    out = subprocess.run([*python_command(), "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip() == ("error: ECE408_DB is a PostgreSQL URL but psycopg is not installed: "
                                  "pip install 'ece408_op[grade]' (in a clone of the repository: pip install "
                                  "'.[grade]')")


@pytest.mark.slow
def test_a_scratch_folder_longer_than_a_socket_path_works(tmp_path):
    """The measuring process's channel is a Unix socket in the scratch folder; a socket's path holds
    107 bytes and a --scratch folder may be longer (it is bound through its folder's descriptor)."""
    team = team_project(tmp_path / "team", cpu=PLAIN)
    deep = tmp_path / ("s" * 60) / ("t" * 60)
    out = cli("submit", team, "--submit", "m2", "--size", 20, "--db", tmp_path / "r.db", "--scratch", deep, *HOST)
    assert out.returncode == 0 and len(str(deep)) > 107, out.stdout[-2000:] + out.stderr
