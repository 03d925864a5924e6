"""The submission runner (python -m ece408_op submit) and the ranking, on this host: schema
errors, the transcript, failing and slow commands, the scratch copy, records parsed from real
m2 output and from real m3/final output captured on an H100, and concurrent writers."""
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import ROOT, python_command
from submissions import HOST, cli, crafted_team, parallel_writers, project_copy, rai_yaml, reference_accuracies

from ece408_op.grading import runner, transcript as tx
from ece408_op.grading.ranking import rank
from ece408_op.grading.store import Record, open_store

H100 = Path(__file__).parent / "data" / "h100"
GOOD = rai_yaml(["echo hello"])


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


# ---------------------------------------------------------------------------- the build

def test_transcript_format(tmp_path):
    team = write_config(tmp_path / "team", rai_yaml(["echo hello", "python -c \"print('from python')\""]))
    out = cli("submit", team, *HOST)
    assert out.returncode == 0, out.stderr
    assert out.stdout == ("* Running echo hello\nhello\n"
                          "* Running python -c \"print('from python')\"\nfrom python\n")


def test_failing_command_stops_the_build_with_its_exit_code(tmp_path):
    team = write_config(tmp_path / "team", rai_yaml(
        ["echo first", "/bin/bash -c \"echo partial; exit 3\"", "echo never-run"]))
    out = cli("submit", team, *HOST)
    assert out.returncode == 3
    assert out.stdout == ("* Running echo first\nfirst\n"
                          "* Running /bin/bash -c \"echo partial; exit 3\"\npartial\n"
                          "* The command exited with code 3; the build stopped.\n")


def test_command_past_its_time_limit_is_killed_with_its_children(tmp_path):
    pidfile = tmp_path / "child.pid"
    team = write_config(tmp_path / "team", rai_yaml(
        [f"/bin/bash -c \"sleep 60 & echo $! > {pidfile}; echo started; wait\"", "echo never-run"]))
    start = time.monotonic()
    out = cli("submit", team, *HOST, "--timeout", "1.5")
    elapsed = time.monotonic() - start
    assert out.returncode == 1 and elapsed < 30, (elapsed, out.stderr)
    assert out.stdout.endswith("started\n* The command ran past its time limit of 1.5 s and was killed; "
                               "the build stopped.\n"), out.stdout
    assert "never-run\n" not in out.stdout
    assert not alive(int(pidfile.read_text()))          # the background sleep went with its group


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
    assert re.search(r"-> '\S+/build/sub/c.txt'", out.stdout), out.stdout   # cp -rv did copy
    assert out.stdout.endswith("a.txt\nrai_build.yml\nsub\n"), out.stdout  # b.txt gone from /build only
    assert _tree(team) == before


def test_host_mode_warns_in_one_line_when_no_engine_chosen(tmp_path):
    team = write_config(tmp_path / "team", rai_yaml(["python -c \"print('hi')\""]))
    # auto falls back to the host only where no engine is usable: a PATH without any
    env = {**os.environ, "ECE408_ENGINE": "auto", "PATH": str(Path(sys.executable).parent) + ":/nonexistent"}
    out = subprocess.run([sys.executable, "-m", "ece408_op", "submit", str(team)], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.endswith("\nhi\n") and out.stderr.strip().splitlines() == [
        "warning: no container engine (docker with a daemon, podman, buildah): running the commands on this host"]


# ---------------------------------------------------------------------------- --submit and records

@pytest.fixture(scope="module")
def expected_100():
    pytest.importorskip("mxnet")
    return reference_accuracies(100)


def test_submit_m2_stores_a_record_parsed_from_real_output(tmp_path, expected_100):
    team = project_copy(tmp_path / "team")
    subprocess.run(["git", "init", "-q", str(team)], check=True)
    subprocess.run(["git", "-C", str(team), "add", "."], check=True)
    subprocess.run(["git", "-C", str(team), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "s"],
                   check=True)
    head = subprocess.run(["git", "-C", str(team), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    db = tmp_path / "runs.db"
    out = cli("submit", team, "--submit", "m2", "--size", 100, "--team", "tigers", "--db", db, *HOST)
    assert out.returncode == 0, out.stderr
    with open_store(str(db)) as store:
        (record,) = store.records()
    assert record.status == "ok" and record.team == "tigers" and record.milestone == "m2" and record.size == 100
    assert record.git_commit == head and record.content_hash == runner.content_hash(team)
    assert record.device == runner.cpu_name() and record.engine == "host"
    # every number comes from the transcript the runner printed
    printed = [float(v) for v in re.findall(r"^Op Time: (\S+)$", out.stdout, re.M)]
    correctness = re.findall(r"^Correctness: (\S+) Model: (\S+)$", out.stdout, re.M)
    assert [m["model"] for m in record.models] == ["ece408-high", "ece408-low"]
    assert [t for m in record.models for t in m["op_times"]] == printed and len(printed) == 2
    assert record.op_time == pytest.approx(sum(printed))
    assert [(str(m["correctness"]), m["model"]) for m in record.models] == correctness
    assert {m["model"]: m["expected"] for m in record.models} == expected_100
    assert record.correct and all(m["correct"] for m in record.models)
    assert "* Running python /build/scripts/m2.1.py ece408-high 100\n" in record.transcript
    assert record.transcript in out.stdout
    assert f"* Record {record.id} (tigers, m2, 100 images): ok; total Op Time {record.op_time:.6f} s" in out.stdout


def test_submit_with_staff_hidden_model(tmp_path, expected_100):
    import shutil
    staff = tmp_path / "staff"
    staff.mkdir()
    shutil.copy(ROOT / "models" / "ece408-low-symbol.json", staff / "secret-symbol.json")
    shutil.copy(ROOT / "models" / "ece408-low-0001.params", staff / "secret-0003.params")
    team = project_copy(tmp_path / "team")
    db = tmp_path / "runs.db"
    out = cli("submit", team, "--submit", "m2", "--size", 100, "--hidden-model", staff / "secret", "--db", db, *HOST)
    assert out.returncode == 0, out.stderr
    assert "* Running python /build/scripts/m2.1.py /hidden/secret 100\n" in out.stdout
    assert not (team / "secret-symbol.json").exists() and "secret" not in " ".join(p.name for p in team.rglob("*"))
    with open_store(str(db)) as store:
        (record,) = store.records()
        keys = store._execute("SELECT model FROM expected ORDER BY model").fetchall()
    assert [m["model"] for m in record.models] == ["ece408-high", "ece408-low", "secret"]
    hidden = record.models[2]
    assert hidden["correctness"] == hidden["expected"] == expected_100["ece408-low"]   # same weights as low
    assert record.correct and len(keys) == 3 and keys[2][0].startswith("hidden:secret:")
    missing = cli("submit", team, "--submit", "m2", "--hidden-model", tmp_path / "nothing", "--db", db, *HOST)
    assert missing.returncode == 1 and missing.stderr.strip() == (
        f"error: hidden model {tmp_path / 'nothing'}: needs nothing-symbol.json and nothing-NNNN.params beside it")


@pytest.mark.parametrize("milestone", ["m3", "final"])
def test_record_from_real_gpu_output_captured_on_h100(milestone):
    # The transcript the runner would have collected on the H100: the copy, then each model.
    outputs = {m: (H100 / f"{milestone}_{m}.txt").read_text() for m in runner.MODELS}
    expected = {m: tx.parse_eval_metric((H100 / f"m1_{m}.txt").read_text()) for m in runner.MODELS}
    commands, models = runner.fixed_commands(milestone, 10000)
    assert commands[1] == f"python /build/scripts/{runner.SCRIPTS[milestone]} ece408-high 10000"
    results = [runner.CommandResult(commands[0], "", 0)] + \
        [runner.CommandResult(c, outputs[m], 0) for c, m in zip(commands[1:], models)]
    text = "".join(f"{tx.running_line(r.command)}\n{r.output}" for r in results)
    build = runner.BuildResult("ok", results, text)
    request = runner.SubmitRequest("/nonexistent", milestone, 10000, "gpu-team")
    record = runner.make_record(request, "rid", "2026-01-01T00:00:00+00:00", build, models, expected,
                                (H100 / "gpu.txt").read_text().strip())
    assert record.status == "ok" and record.correct and record.device == "NVIDIA H100 80GB HBM3"
    by_model = {m["model"]: m for m in record.models}
    assert by_model["ece408-high"]["correctness"] == 0.9139 == expected["ece408-high"]
    assert by_model["ece408-low"]["correctness"] == 0.629 == expected["ece408-low"]
    times = [float(v) for m in runner.MODELS for v in re.findall(r"^Op Time: (\S+)$", outputs[m], re.M)]
    assert record.op_time == pytest.approx(sum(times)) and 0 < record.op_time < 0.01   # GPU: well under m2's
    assert [tx.split_commands(text)[i][0] for i in range(3)] == commands


def test_record_without_correctness_is_failed(tmp_path):
    out = "Loading fashion-mnist data... done\nTraceback (most recent call last):\n"
    commands, models = runner.fixed_commands("m2", 10)
    results = [runner.CommandResult(commands[0], "", 0)] + [runner.CommandResult(c, out, 0) for c in commands[1:]]
    record = runner.make_record(runner.SubmitRequest(str(tmp_path), "m2", 10, "t"), "rid", "now",
                                runner.BuildResult("ok", results, "x\n"), models, {}, "cpu")
    assert record.status == "failed" and not record.correct and record.op_time is None
    assert record.transcript.endswith("the run cannot be ranked.\n")


@pytest.mark.skipif(runner.gpu_name() is not None, reason="this host has a GPU")
@pytest.mark.parametrize("milestone", ["m3", "final"])
def test_submit_gpu_milestone_without_gpu_is_one_line(tmp_path, milestone):
    team = project_copy(tmp_path / "team")
    out = cli("submit", team, "--submit", milestone, "--db", tmp_path / "r.db", *HOST)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip() == (f"error: --submit {milestone} runs the GPU path and this host has no CUDA GPU "
                                  f"(nvidia-smi lists none); run it on a GPU machine, or use --submit m2")
    assert not (tmp_path / "r.db").exists()


def test_crafted_wrong_correctness_is_stored_but_not_valid(tmp_path, expected_100):
    wrong = {m: round(v - 0.01, 4) for m, v in expected_100.items()}
    team = crafted_team(tmp_path / "team", wrong)
    out = cli("submit", team, "--submit", "m2", "--size", 100, "--db", tmp_path / "r.db", *HOST)
    assert out.returncode == 0, out.stderr
    assert "not valid for the ranking" in out.stdout
    with open_store(str(tmp_path / "r.db")) as store:
        (record,) = store.records()
    assert record.status == "ok" and not record.correct
    assert [m["correctness"] for m in record.models] == list(wrong.values())


# ---------------------------------------------------------------------------- ranking

def _record(team, op_time, status="ok", correct=True, at="2026-01-01T00:00:00", milestone="m2", size=100):
    models = [{"model": "ece408-high", "op_times": [op_time / 2], "op_time": op_time / 2, "correctness": 0.91,
               "expected": 0.91 if correct else 0.9, "correct": correct},
              {"model": "ece408-low", "op_times": [op_time / 2], "op_time": op_time / 2, "correctness": 0.68,
               "expected": 0.68, "correct": True}]
    return Record(f"{team}-{op_time}-{at}", at, team, milestone, size, status, 0 if status == "ok" else 1,
                  op_time if status == "ok" else None, correct and status == "ok", models, device="cpu",
                  transcript="...")


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
    assert lines[0] == "Ranking: m2, 100 images (3 team(s); 2 run(s) not valid)"
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


# ---------------------------------------------------------------------------- concurrency

def test_parallel_writer_processes_lose_no_rows(tmp_path):
    parallel_writers(str(tmp_path / "parallel.db"), workers=8, each=40)


def test_concurrent_submissions_write_the_same_database(tmp_path, expected_100):
    db = tmp_path / "class.db"
    teams = [crafted_team(tmp_path / f"t{i}", expected_100, op_time=0.01 * (i + 1)) for i in range(6)]
    first = cli("submit", teams[0], "--submit", "m2", "--size", 100, "--team", "t0", "--db", db, *HOST)
    assert first.returncode == 0, first.stderr                     # fills the reference cache

    def one(i):
        return cli("submit", teams[i], "--submit", "m2", "--size", 100, "--team", f"t{i}", "--db", db, *HOST)
    with ThreadPoolExecutor(5) as pool:
        outs = list(pool.map(one, range(1, 6)))
    assert all(o.returncode == 0 for o in outs), [o.stderr for o in outs]
    rows = rank(open_store(str(db)).records())
    assert [(r.team, round(r.op_time, 6)) for r in rows] == [(f"t{i}", round(0.02 * (i + 1), 6)) for i in range(6)]


def test_postgresql_url_without_psycopg_is_one_line():
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "from ece408_op.cli import main; sys.exit(main(['ranking', '--db', 'postgresql://u:secret@127.0.0.1:9/x']))")
    out = subprocess.run([*python_command(), "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip() == ("error: ECE408_DB is a PostgreSQL URL but psycopg is not installed; "
                                  "pip install 'ece408_op[grade]' (or psycopg[binary])")
