"""The task's solution folders (ece408_op/tasks/conv/solutions/{correct,wrong,hostile}/NAME/) are
the list of teams a grader is checked with: each says in its one-line README.md what the grader
must do with it (rank it, refuse it, kill it), and each is run as a team and graded as it says.
The CPU ones here, as one class graded with ``grade --local`` in bubblewrap (m2, 100 images, two
fresh runs a layer); the GPU ones in tests/grading/test_gpu_task_solutions.py."""
import os
import shutil

import pytest

from teams import Verdict, cli, grade_as_said, graded_as_said, reference_accuracies, solution_folders, verdict

from ece408_op.tasks.conv import SOLUTIONS, TASK, TEMPLATE

FOLDERS = solution_folders()
TEAM_FILES = {"cpu": ["README.md", "new-forward.py"], "gpu": ["README.md", "launch.py", "new-forward.cu"]}
SIZE = 100
COMMAND_LIMIT = 90           # seconds per command of a ranked run: the slow team sleeps past it


def kind(folder):
    """"cpu" or "gpu": the milestone a solution folder's files are for (m2, or m3 and final)."""
    files = sorted(p.name for p in folder.iterdir() if p.name != "__pycache__")
    found = [name for name, wanted in TEAM_FILES.items() if files == wanted]
    assert found, f"{folder}: {files} is neither a CPU team's files nor a GPU team's"
    return found[0]


def cpu_folders():
    return {rel: folder for rel, folder in FOLDERS.items() if kind(folder) == "cpu"}


def test_every_solution_folder_is_a_team_with_a_verdict_and_a_test_that_runs_it():
    assert FOLDERS and {rel.split("/")[0] for rel in FOLDERS} == {"correct", "wrong", "hostile"}
    names = [rel.split("/")[1] for rel in FOLDERS]
    assert len(set(names)) == len(names), "two folders share a name: they could not be one class"
    for rel, folder in FOLDERS.items():
        said = verdict(folder)
        if rel.startswith("correct/"):
            assert said.action == "rank", rel
        elif rel.startswith("wrong/"):
            assert said.action != "rank", rel
        assert said.action != "refuse" or said.phrase, f"{rel}: a refusal names the phrase of its error line"
        kind(folder)                          # the CPU ones run below, the GPU ones in test_gpu_task_solutions.py
        assert folder.name.startswith(kind(folder) + "-"), rel
    assert [p.name for p in sorted(SOLUTIONS.iterdir())] == ["correct", "hostile", "wrong"]


def test_a_readme_without_a_verdict_is_refused(tmp_path):
    (tmp_path / "README.md").write_text("A forward that does something.\n")
    with pytest.raises(ValueError, match="not one line"):
        verdict(tmp_path)
    (tmp_path / "README.md").write_text('A forward. Grader: refuse it, not ranked ("a phrase").\nmore\n')
    with pytest.raises(ValueError, match="not one line"):
        verdict(tmp_path)
    (tmp_path / "README.md").write_text('A forward. Grader: refuse it, not ranked ("a phrase").\n')
    assert verdict(tmp_path) == Verdict("refuse", "a phrase")


def test_the_task_folder_has_its_readme_reference_and_template():
    readme = (TASK / "README.md").read_text()
    for rel in FOLDERS:
        kind_folder = rel.split("/")[0]
        assert f"solutions/{kind_folder}/" in readme
    assert sorted(p.name for p in TEMPLATE.iterdir()) == sorted(
        ["README.md", "rai_build.yml", "new-forward.py", "new-forward.cu", "launch.py"])
    from ece408_op.conv.reference import reference_and_bound
    from ece408_op.tasks.conv import reference
    assert reference.reference_and_bound is reference_and_bound


@pytest.mark.slow
def test_a_solution_folder_runs_as_a_team_where_it_lies():
    """``m2 --team`` on the package's own folders, not copies: the correct one prints the course's
    lines with MXNet's Correctness, the wrong one fails in one line."""
    pytest.importorskip("mxnet")
    expected = reference_accuracies(SIZE, models=("ece408-high",))["ece408-high"]
    out = cli("m2", SIZE, "--team", SOLUTIONS / "correct" / "cpu-numpy")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == f"Correctness: {expected} Model: ece408-high", out.stdout
    wrong = cli("m2", SIZE, "--team", SOLUTIONS / "wrong" / "cpu-wrong-result")
    assert wrong.returncode == 1 and len(wrong.stderr.splitlines()) == 1, wrong.stderr
    assert "the output differs from the reference" in wrong.stderr


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_every_cpu_solution_is_graded_as_its_readme_says(tmp_path):
    pytest.importorskip("mxnet")
    from test_sandbox_attacks import bubblewrap_missing
    if bubblewrap_missing() is not None:
        pytest.skip(bubblewrap_missing())
    grade_as_said(cpu_folders(), tmp_path, "m2", SIZE, "--engine", "bubblewrap", "--jobs", 2, "--repeats", 2,
                  "--timeout", COMMAND_LIMIT)


def test_the_verdict_check_fails_a_record_the_grader_got_wrong():
    """``graded_as_said`` is what the graded tests assert on: it must name every way a grader can
    get a folder wrong (a ranked run refused, a refused one ranked, another error line, a fake time)."""
    from ece408_op.grading.record import Record

    def record(status, correct, op_times, transcript=""):
        models = [{"model": "ece408-high", "op_times": op_times}]
        return Record("r", "2026-01-01T00:00:00", "t", "m2", SIZE, status, op_time=sum(op_times) if correct else None,
                      correct=correct, models=models, transcript=transcript)

    ranked = record("ok", True, [0.01])
    refused = record("failed", False, [], "error: layer 1: may not start processes or programs\n")
    killed = record("timeout", False, [], "* The command ran past its time limit of 90 s and was killed\n")
    rank, refuse, kill = Verdict("rank"), Verdict("refuse", "may not start processes"), Verdict("kill")
    assert graded_as_said(ranked, rank) == [] and graded_as_said(refused, refuse) == []
    assert graded_as_said(killed, kill) == []
    assert graded_as_said(refused, rank) and graded_as_said(killed, rank)
    assert graded_as_said(ranked, refuse) and graded_as_said(ranked, kill)
    assert graded_as_said(refused, Verdict("refuse", "differs from the reference"))
    assert graded_as_said(killed, refuse) and graded_as_said(refused, kill)
    assert graded_as_said(record("ok", True, [1e-7]), rank)                # a time no layer can take
    assert graded_as_said(record("failed", False, [], "error: one\nerror: two may not start processes\n"), refuse)


@pytest.mark.slow
def test_a_wheel_carries_the_whole_task_folder(tmp_path):
    """The README, reference, template and every solution file are in the built wheel (package
    data), so that ``init`` and the solutions work from an installed package."""
    import subprocess
    import sys
    import zipfile
    from suitekit import ROOT
    src = tmp_path / "src"
    shutil.copytree(ROOT / "ece408_op", src / "ece408_op", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "setup.py", src)
    shutil.copy(ROOT / "README.md", src)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                            "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True,
                           env={**os.environ, "PIP_FIND_LINKS": ""})
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("ece408_op-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {p.relative_to(src).as_posix() for p in (src / "ece408_op" / "tasks").rglob("*") if p.is_file()}
    assert len(wanted) > 50 and not wanted - names, sorted(wanted - names)
