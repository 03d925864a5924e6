"""NVIDIA's profilers in a development run's commands (grading/profilers.py): where the worker has none,
where the sandbox cannot show it, where the driver keeps the counters to administrators, and ncu's
own errors written as one line. This machine has no GPU and no Nsight: ncu is a stand-in script here
that prints what ncu prints when it cannot read the counters (its text as ncu 2025 writes it); the
GPU machine's run (scripts/gpu_build_profile.sh) runs the real one."""
import os
import sys

import pytest

from ece408_op.base import nsight
from ece408_op.grading import profilers
from ece408_op.grading.development import run_development
from ece408_op.grading.request import Options
from ece408_op.grading.transcript import Transcript
from teams import team_project

NCU_ERRORS = (
    "==PROF== Connected to process 4242 (/usr/bin/python3.11)\n"
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on "
    "the target device 0. For instructions on enabling permissions and to get more information see "
    "https://developer.nvidia.com/ERR_NVGPUCTRPERM\n"
    "the program's own line\n"
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on "
    "the target device 0. For instructions on enabling permissions and to get more information see "
    "https://developer.nvidia.com/ERR_NVGPUCTRPERM\n"
    "==PROF== Disconnected from process 4242\n"
    "==WARNING== No kernels were profiled.\n")
ONE_LINE = "* ncu could not read the GPU's counters here (ERR_NVGPUCTRPERM); the command's profile is not made\n"
NO_PROFILER = pytest.mark.skipif(any(nsight.find(t) for t in nsight.TOOLS), reason="this machine has a profiler")


def fake_ncu(folder, text):
    """An executable named ncu in ``folder`` that prints ``text``, then runs its last argument."""
    path = folder / "ncu"
    path.write_text(f"#!{sys.executable}\nimport subprocess, sys\nsys.stdout.write({text!r})\nsys.stdout.flush()\n"
                    "sys.exit(subprocess.call(sys.argv[-1:]))\n")
    path.chmod(0o755)
    return str(path)


@NO_PROFILER
def test_a_profiler_the_worker_lacks_is_not_run():
    for tool in ("ncu", "nsys"):
        argv, line = profilers.prepare([tool, "-o", "/build/report", "python"], "bubblewrap", "/usr/bin:/bin")
        assert argv is None and line == f"* {tool} is not installed on this worker; the command was not run"
    assert profilers.prepare(["echo", "ncu"], "bubblewrap", "/usr/bin:/bin") == (["echo", "ncu"], None)
    assert profilers.prepare(["ncu", "x"], "podman", "/usr/bin") == (["ncu", "x"], None)   # the image's business


def test_the_profiler_found_runs_by_its_path_where_the_sandbox_shows_it(tmp_path, monkeypatch):
    path = fake_ncu(tmp_path, "")
    monkeypatch.setenv(nsight.env_variable("ncu"), path)
    assert profilers.prepare(["ncu", "-o", "r", "prog"], "host", "/usr/bin", as_admin=True) == \
        ([path, "-o", "r", "prog"], None)
    # bubblewrap shows /usr and /opt only: a copy elsewhere cannot run there
    if not nsight.find("ncu", "/usr/bin:/bin", under=("/usr", "/opt")):
        argv, line = profilers.prepare(["ncu", "prog"], "bubblewrap", "/usr/bin", as_admin=True)
        assert argv is None and line.startswith("* ncu is not installed on this worker")


def test_counters_kept_to_administrators_stop_ncu_before_it_runs(tmp_path, monkeypatch):
    monkeypatch.setenv(nsight.env_variable("ncu"), fake_ncu(tmp_path, ""))
    params = tmp_path / "params"
    params.write_text("ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 1\nNVLinkDisable: 0\n")
    argv, line = profilers.prepare(["ncu", "prog"], "host", "/usr/bin", as_admin=False, params=str(params))
    assert argv is None and line == ("* ncu could not read the GPU's counters here (the driver lets only administrators "
                                     "read them, RmProfilingAdminOnly=1, and team commands run without that right); "
                                     "the command's profile is not made")
    assert profilers.prepare(["ncu", "prog"], "host", "/usr/bin", as_admin=True, params=str(params))[0] is not None
    params.write_text("RmProfilingAdminOnly: 0\n")
    assert profilers.prepare(["ncu", "prog"], "host", "/usr/bin", as_admin=False, params=str(params))[0] is not None


@pytest.mark.parametrize("piece", [1, 7, 64, 1 << 20])
def test_ncus_errors_become_one_line_however_the_output_is_cut(piece):
    transcript = Transcript(stream=open(os.devnull, "w"))
    out = profilers.CounterErrors(transcript)
    for i in range(0, len(NCU_ERRORS), piece):
        out.write(NCU_ERRORS[i:i + piece])
    out.output_ended()
    assert transcript.text() == ("==PROF== Connected to process 4242 (/usr/bin/python3.11)\n" + ONE_LINE +
                                 "the program's own line\n==PROF== Disconnected from process 4242\n")


def test_a_development_run_writes_ncus_errors_as_one_line(tmp_path, monkeypatch):
    # the real runner, the host engine, the stand-in ncu found through $ECE408_NCU
    monkeypatch.setenv(nsight.env_variable("ncu"), fake_ncu(tmp_path, NCU_ERRORS))
    monkeypatch.setattr(profilers, "admin_only", lambda params=None: False)
    team = team_project(tmp_path / "team", commands=["ncu -o /build/report --clock-control none true", "echo after"])
    transcript = Transcript(stream=open(os.devnull, "w"))
    result = run_development(team, Options(engine="host", timeout=60, scratch_parent=str(tmp_path / "scratch")),
                             transcript)
    text = transcript.text()
    assert result.status == "ok", text
    assert ONE_LINE + "the program's own line\n" in text and "==ERROR==" not in text
    assert text.count("ERR_NVGPUCTRPERM") == 1 and "No kernels were profiled" not in text
    assert text.endswith("* Running echo after\nafter\n")


def test_the_build_folder_is_handed_over_before_the_scratch_goes(tmp_path):
    seen = {}

    def keep(folder, transcript):
        seen["files"] = sorted(os.listdir(folder))
        transcript.line("* kept")
    team = team_project(tmp_path / "team", commands=["/bin/sh -c 'echo x > /build/out.txt'", "/bin/false"])
    transcript = Transcript(stream=open(os.devnull, "w"))
    result = run_development(team, Options(engine="host", timeout=60, scratch_parent=str(tmp_path / "scratch")),
                             transcript, keep_build=keep)
    assert result.status == "failed" and seen["files"] == ["out.txt"]
    assert transcript.text().endswith("; the build stopped.\n* kept\n")
    assert not [p for p in os.listdir(tmp_path / "scratch") if p.startswith("ece408-run-")]
