"""The ranking no team can forge, tried as a team would through `submit --submit` and
the milestones (bubblewrap, real runs; the class-wide cases are tests/grading/test_grade_class.py, the GPU half
tests/team/test_gpu_team_kernels.py and tests/team/test_gpu_team_milestones.py):

* a forward that computes only some images, or skips 1% of its values, fails: every timed output
  is checked against the grader's float64 reference (all of it, or 2,048 secret random values);
* the team process sees only its layer: no test images, models, hidden model, records database,
  class folder or grader checkout (the package is bound alone), neither from new-forward.py nor
  through nvcc's #include in the ranked build; a development run's links never resolve outside
  the team folder and network: true is refused unless the grader allows it;
* an odd file (a character device, a folder) is refused in one line; the record's hash is the
  bytes that ran, even when the file changes during the run;
* escape sequences in a team's output never reach the terminal or the record;
* two teams' timed sections never overlap on one machine (the timing lease);
* what a team is told: the template's development run passes without a GPU, --team is a folder,
  a Numba error names its reason and line, Ctrl-C and the time limit stop a local milestone.
"""
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from suitekit import ROOT, python_command
from teams import BURNER, PLAIN, cli, rai_yaml, team_project

from ece408_op.grading.store import open_store

HOST = ["--engine", "bubblewrap"]
SIZE = 20

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]

# only image 0 of each call is computed: what a team that foresees the checked images would do
PARTIAL = PLAIN.replace("            y += np.einsum(\"bchw,mc->bmhw\", x[:, :, p:p + H_out, q:q + W_out], k[:, :, p, q])",
                        "            y[:1] += np.einsum(\"bchw,mc->bmhw\", x[:1, :, p:p + H_out, q:q + W_out], k[:, :, p, q])")

# every value computed, then one in a hundred dropped
SKIPS_ONE_PERCENT = PLAIN + '''
_full = forward

def forward(y, x, k):
    _full(y, x, k)
    y.reshape(-1)[::100] = 0.0
'''


def probe_source(paths):
    """The template's own forward, and at import a scan of everything the team process can reach:
    the ``paths`` named (each opened), and a walk of the whole file system for test images,
    models, databases and other teams' files. Prints one line: PROBE <json>."""
    return (ROOT / "ece408_op/tasks/conv/template/new-forward.py").read_text() + f'''

def _probe():
    import json, os
    opened = {{}}
    for path in {json.dumps([str(p) for p in paths])}:
        try:
            with open(path, "rb") as f:
                opened[path] = f.read(64).hex()
        except OSError as exc:
            opened[path] = type(exc).__name__
    names = ("ubyte", ".params", "symbol.json", ".db", "tasks.json", "victim")
    found = []
    for root, dirs, files in os.walk("/"):
        if root.startswith(("/proc", "/sys", "/dev", "/usr")):
            dirs[:] = []
            continue
        for name in files + dirs:
            if any(n in name.lower() for n in names):
                found.append(os.path.join(root, name))
    print("PROBE " + json.dumps({{"opened": opened, "found": found[:50]}}), flush=True)

_probe()
'''


def probe_result(text):
    lines = [line for line in text.splitlines() if line.startswith("PROBE ")]
    assert lines, text[-3000:]
    return json.loads(lines[0][len("PROBE "):])


def record_of(db, record_id):
    with open_store(str(db)) as store:
        (record,) = [r for r in store.records() if r.id == record_id]
    return record


def record_id(stdout):
    found = re.search(r"\* Record ([0-9a-f]{32}) ", stdout)
    assert found, stdout[-2000:]
    return found.group(1)


@pytest.fixture
def in_checkout():
    """A folder inside the grader's checkout (the package is installed editable from ROOT), as an
    instructor who keeps the class and the database in the checkout would have it."""
    folder = ROOT / f".trust-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------------------- every value checked

@pytest.mark.timeout(600)
@pytest.mark.parametrize("source, size", [(PARTIAL, SIZE), (SKIPS_ONE_PERCENT, 1000)])
def test_a_forward_that_skips_work_fails(tmp_path, source, size):
    """Computing only the images one expects to be checked, or 99% of the values (at 1,000 images
    the check samples 2,048 secret values: missed with probability 1e-9), fails the first run."""
    team = team_project(tmp_path / "team", cpu=source)
    out = cli("submit", "--submit", "m2", "--size", size, "--team", team, "--db", tmp_path / "r.db", *HOST)
    assert out.returncode == 1, out.stdout[-3000:]
    record = record_of(tmp_path / "r.db", record_id(out.stdout))
    assert record.status == "failed" and record.op_time is None
    assert "fresh run 1: the output differs from the reference at (b, m, h, w)" in record.reason, record.reason


def precomputing_source(size):
    """A forward that carries the first ``size`` test images in its own file (the data set is public:
    no data file needed), computes the course layer for them in its untimed warm-up (which hands it
    the true weights) and copies that answer in every later call: what ranked first before, when
    the timed run was the network's own input."""
    import base64
    from ece408_op.data import load_fashion_mnist
    images, _ = load_fashion_mnist("test", size)
    blob = base64.b64encode(images.tobytes()).decode()
    return PLAIN.replace("def forward(y, x, k):", "_forward = None\n\ndef _compute(y, x, k):") + f'''
import base64
IMAGES = np.frombuffer(base64.b64decode("{blob}"), np.uint8).reshape({size}, 1, 28, 28).astype(np.float32)
KEPT = {{}}

def forward(y, x, k):
    if "y" not in KEPT:                               # the warm-up: the true k, the layer's shape
        out = np.zeros((IMAGES.shape[0],) + y.shape[1:], np.float32)
        _compute(out, IMAGES, k)
        KEPT["y"] = out
        _compute(y, x, k)
        return
    y[...] = KEPT["y"][:y.shape[0]]                   # every timed call: the answer kept
'''


@pytest.mark.timeout(300)
def test_a_precomputing_forward_fails(tmp_path):
    """It would be right on the network's own images, but the time that ranks comes from fresh
    inputs drawn after the warm-up, so its first fresh run fails the check."""
    team = team_project(tmp_path / "team", cpu=precomputing_source(SIZE))
    out = cli("submit", "--submit", "m2", "--size", SIZE, "--team", team, "--db", tmp_path / "r.db", *HOST)
    assert out.returncode == 1, out.stdout[-3000:]
    record = record_of(tmp_path / "r.db", record_id(out.stdout))
    assert record.status == "failed" and "fresh run 1: the output differs from the reference" in record.reason


# ---------------------------------------------------------------------------- a team sees only its layer

@pytest.mark.timeout(600)
def test_the_team_process_sees_only_its_own_layer(tmp_path, in_checkout):
    """With the records database, a hidden model and another team's folder inside the grader's
    checkout, the team process finds none of them, nor the test images or the course models;
    the run itself is honest and ranked."""
    from ece408_op.data.lookup import locate
    hidden = in_checkout / "hidden"
    hidden.mkdir()
    for suffix in ("-symbol.json", "-0001.params"):
        shutil.copy(ROOT / "models" / f"ece408-high{suffix}", hidden / f"secret{suffix}")
    victim = team_project(in_checkout / "class" / "victim", cpu=PLAIN + "\n# VICTIM-SECRET-7f3a\n")
    db = in_checkout / "class.db"
    images = locate("test").images
    targets = [db, hidden / "secret-0001.params", victim / "new-forward.py", ROOT / "models/ece408-high-0001.params",
               images, ROOT / "setup.py"]
    team = team_project(tmp_path / "probe", cpu=probe_source(targets))
    out = cli("submit", "--submit", "m2", "--size", SIZE, "--team", team, "--db", db, "--hidden-model",
              hidden / "secret", *HOST)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    probe = probe_result(out.stdout)
    assert all(v in ("FileNotFoundError", "PermissionError") for v in probe["opened"].values()), probe["opened"]
    assert probe["found"] == [], probe["found"]
    assert "multiprocessing lock" not in out.stdout                 # no Numba cache/lock warnings
    record = record_of(db, record_id(out.stdout))
    assert record.status == "ok" and [m["model"] for m in record.models] == ["ece408-high", "ece408-low", "hidden"]


def test_the_ranked_build_sees_only_the_team_s_files(tmp_path, in_checkout):
    """nvcc in the ranked build's sandbox: an #include of the grader's database, a course model or
    another team's kernel finds nothing (and no byte of them reaches the transcript)."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    from ece408_op.grading import ranked, transcript as tx
    from ece408_op.grading.sandbox import Limits, open_sandbox
    from ece408_op.grading.scratch import Scratch
    db = in_checkout / "class.db"
    db.write_bytes(b"SQLite format 3\0GRADER-RECORDS-5e1d")
    victim = team_project(in_checkout / "class" / "victim", gpu="// VICTIM-KERNEL-91c2\n")
    transcript = tx.Transcript(stream=open(os.devnull, "w"))
    sandbox = open_sandbox("bubblewrap", Limits())
    for target in (db, victim / "new-forward.cu", ROOT / "models/ece408-high-symbol.json"):
        with Scratch(None, sandbox.uid, None) as scratch:
            scratch.src.mkdir()
            (scratch.src / "new-forward.cu").write_text(f'#include "{target}"\n')
            cubin, reason = ranked.build_team_kernels(sandbox, scratch, "sm_90", transcript, 120)
        assert cubin is None and reason == "new-forward.cu did not compile"
    text = transcript.text()
    assert text.count("No such file or directory") == 3, text
    assert "GRADER-RECORDS" not in text and "VICTIM-KERNEL" not in text and "softmax" not in text


def test_development_runs_keep_links_inside_and_the_network_off(tmp_path, in_checkout):
    db = in_checkout / "class.db"
    db.write_text("GRADER-RECORDS-77aa")
    team = team_project(tmp_path / "team", commands=["/bin/bash -c 'cat /src/db /src/sub/up /src/ok; ls /src'"],
                        files={"inside.txt": "INSIDE-OK", "sub/keep": "x"})
    os.symlink(str(db), team / "db")                      # absolute: would name the grader's file
    os.symlink("../../etc/passwd", team / "sub" / "up")    # climbs above the team folder
    os.symlink("inside.txt", team / "ok")                  # stays inside: kept
    os.symlink(".", team / "here")                         # kept; but through it, "here/.." is the parent
    os.symlink("here/..", team / "up")
    out = cli("submit", team, *HOST)
    assert "GRADER-RECORDS" not in out.stdout and "root:" not in out.stdout
    assert "INSIDE-OK" in out.stdout
    assert "* Left out db: a symbolic link to " in out.stdout and "* Left out sub/up: a symbolic link to ../../etc/passwd" \
        in out.stdout
    assert "* Left out up: a symbolic link to here/.." in out.stdout
    (team / "rai_build.yml").write_text(rai_yaml(["echo hi"]).replace("network: false", "network: true"))
    out = cli("submit", team, *HOST)
    assert out.returncode == 1 and "asks for network: true" in out.stderr and len(out.stderr.splitlines()) == 1
    assert "* Running" not in out.stdout


def test_a_development_run_sees_the_course_models_alone(tmp_path):
    """A hidden model kept in the model folder beside the course's is not in a development run's
    sandbox: each course checkpoint is bound alone, never the folder."""
    models = tmp_path / "models"
    shutil.copytree(ROOT / "models", models)
    for suffix in ("-symbol.json", "-0001.params"):
        shutil.copy(ROOT / "models" / f"ece408-high{suffix}", models / f"secret{suffix}")
    team = team_project(tmp_path / "team", commands=[
        "/bin/bash -c 'ls $ECE408_MODEL_DIR; cat " + str(models / "secret-symbol.json") + " || echo NOT-THERE'",
        "python -m ece408_op m2 ece408-low 20"])
    out = cli("submit", team, *HOST, env={"ECE408_MODEL_DIR": str(models)})
    assert out.returncode == 0, out.stdout[-2000:]
    listed = out.stdout.splitlines()
    assert "secret-0001.params" not in listed and "secret-symbol.json" not in listed and "NOT-THERE" in listed
    assert "ece408-2019-symbol.json" in listed and "Correctness: " in out.stdout


# ---------------------------------------------------------------------------- files read once

@pytest.mark.parametrize("kind", ["character device", "folder", "fifo"])
def test_an_odd_team_file_is_refused_in_one_line(tmp_path, kind):
    team = team_project(tmp_path / "team")
    path = team / "new-forward.py"
    path.unlink()
    if kind == "character device":
        if os.geteuid() != 0:
            pytest.skip("mknod needs root")
        os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 5))          # /dev/zero: reads forever
    elif kind == "folder":
        path.mkdir()
    else:
        os.mkfifo(path)
    started = time.monotonic()
    out = cli("submit", "--submit", "m2", "--size", SIZE, "--team", team, "--db", tmp_path / "r.db", *HOST, timeout=120)
    assert time.monotonic() - started < 60
    assert out.returncode == 1 and "Traceback" not in out.stdout + out.stderr
    what = {"character device": "a character device", "folder": "a folder", "fifo": "a FIFO"}[kind]
    assert f"error: the submission's new-forward.py is not a regular file ({what})" in out.stdout
    record = record_of(tmp_path / "r.db", record_id(out.stdout))
    assert record.status == "failed" and "not a regular file" in record.reason


@pytest.mark.timeout(300)
def test_the_record_names_the_bytes_that_ran_when_the_file_changes_mid_run(tmp_path):
    slow = PLAIN.replace("import numpy as np", "import numpy as np, time\ntime.sleep(4)")
    team = team_project(tmp_path / "team", cpu=slow)
    import hashlib
    want = hashlib.sha256(slow.encode()).hexdigest()
    proc = subprocess.Popen([*python_command(), "-m", "ece408_op", "submit", "--submit", "m2", "--size", str(SIZE),
                             "--team", str(team), "--db", str(tmp_path / "r.db"), *HOST], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "ECE408_MODEL_DIR": str(ROOT / "models")})
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("* Running python -m ece408_op m2"):
            (team / "new-forward.py").write_text(PLAIN + "\n# swapped\n")
    proc.wait(timeout=240)
    text = "".join(lines)
    record = record_of(tmp_path / "r.db", record_id(text))
    assert record.status == "ok" and record.team_files[0]["sha256"] == want, text[-2000:]
    from ece408_op.grading.runner import team_digest
    assert record.content_hash != team_digest(team, "m2")              # the file on disk now is another


# ---------------------------------------------------------------------------- what a terminal shows

def test_escape_sequences_of_a_team_never_reach_the_terminal_or_the_record(tmp_path):
    loud = PLAIN.replace("    B, M, H_out, W_out = y.shape",
                         "    print('\\x1b]0;owned\\x07\\x1b[8mHIDDEN\\x1b[0m done\\rfake line', flush=True)\n"
                         "    B, M, H_out, W_out = y.shape")
    team = team_project(tmp_path / "team", cpu=loud)
    out = cli("submit", "--submit", "m2", "--size", SIZE, "--team", team, "--db", tmp_path / "r.db", *HOST)
    assert out.returncode == 0, out.stdout[-2000:]
    assert "\x1b" not in out.stdout + out.stderr and "\x07" not in out.stdout and "\r" not in out.stdout
    assert "\\x1b]0;owned\\x07\\x1b[8mHIDDEN\\x1b[0m done\\rfake line" in out.stdout
    record = record_of(tmp_path / "r.db", record_id(out.stdout))
    assert "\x1b" not in record.transcript and "\\x1b[8mHIDDEN" in record.transcript


# ---------------------------------------------------------------------------- the timing lease

@pytest.mark.timeout(900)
def test_two_teams_timed_sections_never_overlap(tmp_path):
    """grade --local --jobs 2 on two cores: one team burns both cores for two seconds in every call
    (its warm-up included); the windows in which each team's code ran (the timing lease) never
    overlap."""
    classroom = tmp_path / "class"
    team_project(classroom / "burner", cpu=BURNER)
    team_project(classroom / "honest", cpu=PLAIN)
    env = {"ECE408_LOCK_DIR": str(tmp_path)}
    out = cli("grade", classroom, "--local", "--jobs", 2, "--milestone", "m2", "--size", 200, "--db", tmp_path / "r.db",
              *HOST, env=env, timeout=800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    with open_store(str(tmp_path / "r.db")) as store:
        records = {r.team: r for r in store.records()}
    assert set(records) == {"burner", "honest"} and all(r.status == "ok" for r in records.values())
    windows = [(team, *layer["window"]) for team, r in records.items() for m in r.models for layer in m["layers"]]
    assert len(windows) == 4
    for team_a, start_a, end_a in windows:
        for team_b, start_b, end_b in windows:
            if team_a != team_b:
                assert end_a <= start_b or end_b <= start_a, windows


@pytest.mark.timeout(600)
def test_waiting_for_the_lease_never_times_an_honest_team_out(tmp_path):
    """A team that sleeps in its forward holds the timing lease until its own time limit; another
    team waiting for it meanwhile has its time limit extended by the wait, as it waits."""
    sleeper = team_project(tmp_path / "sleeper", cpu=PLAIN.replace("import numpy as np", "import numpy as np, time")
                           .replace("    B, M, H_out, W_out = y.shape", "    time.sleep(120)\n    B, M, H_out, W_out = y.shape"))
    honest = team_project(tmp_path / "honest", cpu=PLAIN)
    env = {**os.environ, "ECE408_MODEL_DIR": str(ROOT / "models"), "ECE408_LOCK_DIR": str(tmp_path)}

    def submit(team, timeout):
        return subprocess.Popen([*python_command(), "-m", "ece408_op", "submit", "--submit", "m2", "--size", str(SIZE),
                                 "--team", str(team), "--db", str(tmp_path / "r.db"), "--timeout", str(timeout), *HOST],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    first = submit(sleeper, 60)
    lines = []
    for line in first.stdout:                       # until the sleeper's first layer holds the lease
        lines.append(line)
        if line.startswith("New Inference"):
            break
    time.sleep(2)
    # waits about 58 s for the lease: more than its 40 s (its own work, the model's repeats among it,
    # takes 5-20 s here)
    second = submit(honest, 40)
    out = second.communicate(timeout=300)[0]
    lines.append(first.communicate(timeout=300)[0])
    assert second.returncode == 0, out[-2000:]
    with open_store(str(tmp_path / "r.db")) as store:
        records = {r.team: r for r in store.records()}
    assert records["honest"].status == "ok" and records["sleeper"].status == "timeout", "".join(lines)[-2000:]


def test_the_repeats_end_inside_the_jobs_time_limit(tmp_path):
    """A forward whose time is noisy (RSE far above the bound: the repeats would go on to the
    maximum, about 8 s a model) under a 25 s limit: the repeats stop where the limit would (``limit``),
    the run is valid, and every model still has at least the minimum of repeats."""
    noisy = team_project(tmp_path / "noisy", cpu=PLAIN.replace("import numpy as np", "import numpy as np, random, time")
                         .replace("    B, M, H_out, W_out = y.shape",
                                  "    time.sleep(0.02 + 0.04 * random.random())\n    B, M, H_out, W_out = y.shape"))
    out = cli("submit", "--submit", "m2", "--size", SIZE, "--team", noisy, "--db", tmp_path / "r.db",
              "--timeout", 25, *HOST, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    record = record_of(tmp_path / "r.db", record_id(out.stdout))
    stopped = [m["stopped"] for m in record.models]
    assert record.status == "ok" and "limit" in stopped, (stopped, out.stdout[-1500:])
    assert all(len(m["repeats"]) >= 3 for m in record.models)


# ---------------------------------------------------------------------------- what a team is told

def test_the_template_development_run_passes_without_a_gpu(tmp_path):
    if shutil.which("nvidia-smi") is not None:
        pytest.skip("this host has a GPU: the template's m3 step runs there")
    team = tmp_path / "fresh"
    assert cli("init", team).returncode == 0
    out = cli("submit", *HOST, cwd=team, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    assert "Correctness: " in out.stdout and "No GPU here, so m3 did not run: on a GPU machine, python -m ece408_op m3 " \
        "1000" in out.stdout


def test_team_is_a_folder_and_the_record_is_named_after_it(tmp_path):
    team = team_project(tmp_path / "blue-team", cpu=PLAIN)
    out = cli("submit", "--submit", "m2", "--size", SIZE, "--team", team, "--db", tmp_path / "r.db", *HOST)
    assert out.returncode == 0 and record_of(tmp_path / "r.db", record_id(out.stdout)).team == "blue-team"
    out = cli("submit", "--submit", "m2", "--size", SIZE, "--name", "Blue Team", "--db", tmp_path / "r.db", *HOST,
              cwd=team)
    assert out.returncode == 0 and record_of(tmp_path / "r.db", record_id(out.stdout)).team == "Blue Team"
    out = cli("submit", "--submit", "m2", "--team", tmp_path / "nowhere", *HOST)
    assert out.returncode == 2 and "no such folder" in out.stderr and out.stdout == ""


def test_a_numba_error_names_numba_s_reason_and_the_team_s_line(tmp_path):
    source = (ROOT / "ece408_op/tasks/conv/template/new-forward.py").read_text()
    first = next(i for i, line in enumerate(source.splitlines(), 1) if line.strip().startswith("weight = "))
    team = team_project(tmp_path / "team", cpu=source.replace("weight = k[", "weight = undefined_name + k[", 1))
    out = cli("m2", SIZE, "--team", team)
    assert out.returncode == 1 and len(out.stderr.splitlines()) == 1, out.stderr
    assert f"new-forward.py line {first}: Numba could not compile it: NameError: name 'undefined_name' is not " \
        "defined" in out.stderr, out.stderr


LOOPS = PLAIN.replace("    B, M, H_out, W_out = y.shape", "    while True:\n        pass")


def test_a_local_milestone_stops_at_its_time_limit(tmp_path):
    team = team_project(tmp_path / "team", cpu=LOOPS)
    started = time.monotonic()
    out = cli("m2", SIZE, "--team", team, "--time-limit", "3")
    assert out.returncode == 1 and time.monotonic() - started < 60
    assert "did not answer within 3 s (the time limit: --time-limit or $ECE408_TIME_LIMIT); the team process was " \
        "killed" in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr


def test_ctrl_c_stops_a_local_milestone_in_one_line(tmp_path):
    team = team_project(tmp_path / "team", cpu=LOOPS)
    proc = subprocess.Popen([*python_command(), "-m", "ece408_op", "m2", str(SIZE), "--team", str(team)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "ECE408_MODEL_DIR": str(ROOT / "models")})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:                      # until the team process runs the forward
        kids = subprocess.run(["pgrep", "-s", str(proc.pid), "-f", "ece408_op.team.process"],   # this run's own
                              capture_output=True, text=True).stdout.split()
        if any(_running(int(pid)) for pid in kids):
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)                      # Ctrl-C reaches the terminal's process group
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "error: stopped by Ctrl-C (SIGINT) while the team's new-forward.py ran; " \
        "the team process was killed", err
    assert subprocess.run(["pgrep", "-f", "--", f"--dir {team}"], capture_output=True).returncode == 1   # none left


def _running(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "R"
    except OSError:
        return False
