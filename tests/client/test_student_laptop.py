"""A student's day from a laptop, as a student meets it: a wheel of this checkout in a fresh
client-only virtual environment, a new empty HOME, no ECE408_ or XDG_ variable set. ``login``
once; then ``submit`` (ranked and development), ``ranking`` and ``jobs`` reach the service with
no flag or variable; the help says what this install can run and shows the service's options;
``init`` suggests a command that runs here; a client command loads nothing of grading/ or team/.
And the rule of a full install (tests/cli/test_command_line.py runs it here): logged in, ``submit`` goes to the
service, ``--local`` runs it here."""
import re
import subprocess

import pytest

from laptop import student_env

pytestmark = [pytest.mark.slow, pytest.mark.service]


def _run(python, *args, cwd, home, stdin=None, timeout=300):
    return subprocess.run([str(python), *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env=student_env(home), input=stdin, timeout=timeout)


def _client(python, *args, cwd, home, stdin=None, timeout=300):
    return _run(python, "-m", "ece408_op", *args, cwd=cwd, home=home, stdin=stdin, timeout=timeout)


@pytest.fixture
def home(tmp_path):
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


def test_the_help_on_a_laptop_shows_the_service_and_marks_what_runs_elsewhere(client_env, home):
    top = _client(client_env, "--help", cwd=home, home=home)
    assert top.returncode == 0, top.stderr
    lines = {line.split()[0]: line for line in top.stdout.splitlines() if line.startswith("  ")}
    assert "[needs the mxnet extra]" in lines["m2"] and "[needs the gpu extra]" in lines["m3"]
    assert "[on the class's service" in lines["submit"] and "[on the class's service" in lines["ranking"]
    assert "[needs" not in lines["login"] and "[needs" not in lines["jobs"] and "[needs" not in lines["init"]
    assert "pip install 'ece408_op[X]'" in top.stdout
    for command in ("submit", "ranking"):
        shown = _client(client_env, command, "--help", cwd=home, home=home)
        assert shown.returncode == 0, shown.stderr
        text = " ".join(shown.stdout.split())                # argparse wraps the lines
        assert "--server URL" in text and "after 'login'" in text and "client-only install" in text, text
    assert "--gpu KIND" in _client(client_env, "submit", "--help", cwd=home, home=home).stdout


def test_a_local_option_on_a_laptop_is_one_line_naming_why(client_env, home):
    # a client-only install has no sandbox: what only a local run takes is refused, saying why
    made = _client(client_env, "init", "red", cwd=home, home=home)
    assert made.returncode == 0, made.stderr
    result = _client(client_env, "submit", "--submit", "m2", "--engine", "host", cwd=home / "red", home=home)
    assert result.returncode == 2 and result.stdout == "", result
    (line,) = result.stderr.strip().splitlines()[-1:]
    assert "--engine" in line and "client-only" in line or "mxnet extra" in line, result.stderr
    # --local asks for the sandbox this install lacks: the extra, in one line
    local = _client(client_env, "submit", "--local", "--submit", "m2", cwd=home / "red", home=home)
    assert local.returncode == 1 and "needs the mxnet extra" in local.stderr, local.stderr
    assert len(local.stderr.strip().splitlines()) == 1, local.stderr


@pytest.mark.timeout(900)
def test_one_login_and_every_command_follows(running_service, client_env, home, tmp_path):
    """init, login once, then the ranked run, the ranking, the jobs and a development run with no
    flag and no variable, as a student on a laptop types them."""
    service = running_service(tmp_path / "service", workers=1)
    token = service.add_teams("red")["red"]
    made = _client(client_env, "init", "red", cwd=home, home=home)
    assert made.returncode == 0, made.stderr
    # the next step it suggests runs here: log in first (no login yet), then the ranked run
    (step,) = [line for line in made.stdout.splitlines() if line.startswith("Next: ")]
    assert "login --server URL" in step and "submit --submit m2 --size 100" in step, step
    assert " m2 1000" not in step, step                      # no milestone runs on this install
    login = _client(client_env, "login", "--server", service.url, cwd=home, home=home, stdin=token + "\n")
    assert login.returncode == 0 and "Logged in to" in login.stdout, login.stderr
    kept = list(home.rglob("login.json"))
    assert len(kept) == 1 and oct(kept[0].stat().st_mode & 0o777) == "0o600", kept
    again = _client(client_env, "init", "blue", cwd=home, home=home)
    (step,) = [line for line in again.stdout.splitlines() if line.startswith("Next: ")]
    assert "login" not in step and step.startswith("Next: cd blue && python -m ece408_op submit"), step

    # the command init suggested, as written (less the `cd`: the folder is the cwd)
    command = step[len("Next: cd blue && python -m ece408_op "):].split("   (")[0].split()
    assert command == ["submit", "--submit", "m2", "--size", "100"], command
    ranked = _client(client_env, *command, cwd=home / "red", home=home, timeout=600)
    assert ranked.returncode == 0, ranked.stdout + ranked.stderr
    assert "accepted (team red)" in ranked.stderr and "Correctness" in ranked.stdout, ranked.stderr
    assert "needs the mxnet extra" not in ranked.stderr

    ranking = _client(client_env, "ranking", cwd=home, home=home)
    assert ranking.returncode == 0, ranking.stderr
    assert "No records yet" not in ranking.stdout and re.search(r"^1\s+red\s", ranking.stdout, re.M), \
        ranking.stdout
    jobs = _client(client_env, "jobs", "list", cwd=home, home=home)
    assert jobs.returncode == 0 and "m2 100" in jobs.stdout and "done" in jobs.stdout, jobs.stdout + jobs.stderr

    config = home / "red" / "rai_build.yml"                # the template's, on a class of CPU workers
    text = config.read_text()
    config.write_text(text.replace("count: 1", "count: 0").split("  build:")[0] + "  build:\n    - echo built here\n")
    development = _client(client_env, "submit", cwd=home / "red", home=home, timeout=600)
    assert development.returncode == 0 and "built here" in development.stdout, \
        development.stdout + development.stderr


def test_a_client_command_loads_nothing_of_grading_or_team(client_env, home):
    # -X importtime names every module the command imports, those a failing command imported too
    for argv in (["ranking"], ["submit", "--submit", "m2"], ["jobs", "list"], ["login", "--server",
                                                                                "http://127.0.0.1:9"]):
        made = _client(client_env, "init", "red", cwd=home, home=home) if not (home / "red").exists() else None
        assert made is None or made.returncode == 0
        result = _run(client_env, "-X", "importtime", "-m", "ece408_op", *argv, cwd=home / "red", home=home,
                      stdin="")
        ours = sorted({line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()
                       if line.startswith("import time:") and "ece408_op" in line})
        assert len(ours) > 5, result.stderr[-2000:]
        heavy = [m for m in ours if m.startswith(("ece408_op.grading", "ece408_op.team", "ece408_op.mx.",
                                                   "ece408_op.kernels", "ece408_op.conv", "ece408_op.service."))
                 and m not in ("ece408_op.mx.hook", "ece408_op.service.upload")]
        assert not heavy, (argv, heavy)
        assert len(ours) <= 25, (argv, len(ours), ours)


@pytest.mark.parametrize("blocked,where", [("numba", "False "), ("mxnet", "True client-only")])
def test_an_install_runs_here_where_mxnet_is_found_whatever_else_it_lacks(tmp_path, blocked, where):
    """The GPU machine's kit brings MXNet without Numba: submit and ranking run here there. Only an
    install without MXNet (a laptop's) goes to the service for want of local runs."""
    import sys as _sys
    from suitekit import ROOT, python_command
    code = (f"import sys; sys.modules[{blocked!r}] = None\n"
            "from ece408_op.cli.remote import where\n"
            "print(*where(['--submit', 'm2', '--db', 'x.db']))")
    result = subprocess.run([*python_command(), "-c", code], capture_output=True, text=True, cwd=ROOT,
                            env=student_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == where.strip(), (result.stdout, _sys.executable)
