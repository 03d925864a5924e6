"""Team projects for the tests: the template from ``init``, with its files replaced where a test
needs a team that is wrong, slow, or hostile. The teams are the task's solution folders
(``ece408_op/tasks/conv/solutions/{correct,wrong,hostile}/NAME/``), each with a one-line README.md
saying what the grader must do with it (``verdict``); the names below are their files' text.
Every attack is something a team could hand in; the tests expect each to fail, be refused in one
line, or have no effect on the record."""
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from suitekit import ROOT, python_command

from ece408_op.tasks.conv import SOLUTIONS
from ece408_op.team import project


def rai_yaml(commands, image="ece408_op:latest", gpu_count=0):
    lines = ["rai:", "  version: 0.2", f"  image: {image}", "resources:", "  cpu:", "    architecture: amd64",
             "  gpu:", "    architecture: hopper", f"    count: {gpu_count}", "  network: false",
             "commands:", "  build:"]
    lines += [f"    - {json.dumps(c)}" for c in commands]
    return "\n".join(lines) + "\n"


def team_project(dest, cpu=None, gpu=None, launch=None, commands=None, files=None):
    """A team made by ``init`` in ``dest``, with new-forward.py / new-forward.cu / launch.py replaced
    where given, rai_build.yml's commands where given, and extra ``files`` {relative path: text}."""
    dest = Path(dest)
    project.init(dest)
    for name, text in (("new-forward.py", cpu), ("new-forward.cu", gpu), ("launch.py", launch)):
        if text is not None:
            (dest / name).write_text(text)
    if commands is not None:
        (dest / "rai_build.yml").write_text(rai_yaml(commands))
    for rel, text in (files or {}).items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return dest


def cli(*args, env=None, timeout=900, cwd=None):
    """``python -m ece408_op ARGS`` in a fresh interpreter; CompletedProcess (text)."""
    return subprocess.run([*python_command(), "-m", "ece408_op", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "ECE408_MODEL_DIR": str(ROOT / "models"), **(env or {})},
                          cwd=cwd or ROOT, timeout=timeout)


def reference_accuracies(size, models=("ece408-high", "ece408-low")):
    """What m1 (MXNet's own Convolution) prints for each model on ``size`` images, on this host."""
    from ece408_op.grading.transcript import parse_eval_metric
    found = {}
    for model in models:
        out = cli("m1", model, size)
        assert out.returncode == 0, out.stderr
        found[model] = parse_eval_metric(out.stdout)
    return found


# ---------------------------------------------------------------------------- the solution folders

VERDICT = re.compile(r"Grader: (rank|refuse|kill) it\b[^\"]*(?:\"([^\"]+)\")?")


@dataclass(frozen=True)
class Verdict:
    """What the grader must do with a solution folder, as its README.md says: ``rank`` it (a ranked
    record, its Correctness MXNet's, its Op Time the harness's), ``refuse`` it (not ranked; the run's
    one error line holds ``phrase``) or ``kill`` it past the time limit (not ranked)."""
    action: str
    phrase: str = None


def solution_folders():
    """{"kind/name": folder} of every solution folder (kind: correct, wrong, hostile), sorted."""
    return {f"{folder.parent.name}/{folder.name}": folder
            for folder in sorted(SOLUTIONS.glob("*/*")) if folder.is_dir()}


def verdict(folder):
    """The Verdict a solution folder's README.md states; ValueError where it states none or more
    than one line."""
    lines = (Path(folder) / "README.md").read_text().splitlines()
    match = VERDICT.search(lines[0]) if len(lines) == 1 else None
    if match is None:
        raise ValueError(f"{folder}/README.md: not one line ending 'Grader: rank|refuse|kill it ...'")
    return Verdict(*match.groups())


def solution(rel, name="new-forward.py"):
    """The text of a solution folder's file: ``rel`` is "kind/name" (correct/cpu-numpy)."""
    return (SOLUTIONS / rel / name).read_text()


# ---------------------------------------------------------------------------- CPU forwards

HONEST = (project.TEMPLATE / "new-forward.py").read_text()
PLAIN = solution("correct/cpu-numpy")
"""A correct forward without Numba: quick to start, for tests that time many runs."""
WRONG = solution("wrong/cpu-wrong-result")        # misses a row of taps
FAILS = solution("wrong/cpu-crash")
SLOW = solution("wrong/cpu-slow")
FAKE_LINES = solution("hostile/cpu-fake-lines")
CLOCK = solution("hostile/cpu-clock")
FORKS = solution("hostile/cpu-forks")
EARLY_THREAD = solution("hostile/cpu-early-thread")
EXECS = solution("hostile/cpu-execs")
REPLAY = solution("hostile/cpu-replay")
WRITES_PTH = solution("hostile/cpu-writes-pth")
SNOOPS = solution("hostile/cpu-snoops")
# burns both cores for two seconds in every call, warm-up included: what the timing lease keeps apart
BURNER = PLAIN.replace("    B, M, H_out, W_out = y.shape", '''    import threading, time
    def spin():
        end = time.time() + 2
        while time.time() < end:
            pass
    threads = [threading.Thread(target=spin) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    B, M, H_out, W_out = y.shape''')


def graded_as_said(record, said):
    """What is wrong with ``record`` (a ranked run's record) for the Verdict ``said``: [] where the
    grader did what the folder's README asks."""
    errors = [line for line in record.transcript.splitlines() if line.startswith("error: ")]
    if said.action == "rank":
        times = [t for m in record.models for t in m["op_times"]]
        problems = [] if record.status == "ok" and record.correct else [f"not ranked: {record.status}, {errors}"]
        return problems + ([] if times and min(times) > 1e-6 else [f"Op Times {times}: not the harness's"])
    if record.correct or record.op_time is not None:
        return [f"ranked ({record.status}, Op Time {record.op_time})"]
    if said.action == "kill":
        return [] if record.status == "timeout" and "ran past its time limit" in record.transcript else \
            [f"not killed past the time limit: {record.status}, {errors}"]
    return [] if record.status == "failed" and len(errors) == 1 and said.phrase in errors[0] else \
        [f"not refused in one line naming {said.phrase!r}: {record.status}, {errors}"]


def grade_as_said(folders, work, milestone, size, *options):
    """Grade copies of the solution ``folders`` ({"kind/name": folder}) as one class with ``grade
    --local`` (``options`` added) in ``work``; asserts that every record and the ranking are as each
    folder's README says: each rank-verdict team ranked, no other."""
    import shutil
    from ece408_op.grading.store import open_store
    classroom, db = Path(work) / "class", Path(work) / "g.db"
    for folder in folders.values():
        shutil.copytree(folder, classroom / folder.name, ignore=shutil.ignore_patterns("__pycache__"))
    out = cli("grade", classroom, "--milestone", milestone, "--size", size, "--local", "--db", db,
              "--workdir", Path(work) / "w", *options, timeout=1100)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    with open_store(str(db)) as store:
        records = {r.team: r for r in store.records()}
    assert sorted(records) == sorted(f.name for f in folders.values())
    problems = {rel: graded_as_said(records[f.name], verdict(f)) for rel, f in folders.items()}
    assert not any(problems.values()), {rel: p for rel, p in problems.items() if p}
    ranking = cli("ranking", "--db", db, "--milestone", milestone, "--size", size, "--json")
    ranked = sorted(r["team"] for r in json.loads(ranking.stdout)["ranking"])
    assert ranked == sorted(f.name for f in folders.values() if verdict(f).action == "rank")
