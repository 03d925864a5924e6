"""Installing the package.

* The base install is the class's client, pure Python: a wheel built from this checkout, installed
  with its client extra into a fresh virtual environment (from the package index) where NumPy,
  MXNet and Numba cannot be imported, runs the client's commands against a real ``serve``; a
  command whose extra is missing says in one line which to install; pip resolves the client for
  macOS on Apple silicon and Windows, where MXNet 1.9.1 has no build, without MXNet or NumPy.
* What cannot run here (Windows' folders, its file flags, its consoles' code pages, another
  system's facts) is checked with that system's facts substituted.
* `import mxnet` before `import ece408_op` works in any environment the package is installed in,
  editable (`pip install -e`, what the Makefile does) or not: the package installs
  `ece408_op-hook.pth` beside itself, which installs the import hook at interpreter start-up. Each
  case builds a fresh virtual environment, installs this checkout into it (no network: no
  dependencies, no build isolation) and runs a user's script that imports MXNet first."""
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from suitekit import ROOT, python_command, require_mxnet
from laptop import skip_without_the_index, source_copy

# Top-level distributions the fresh environment borrows from this one (by symlink) instead of
# installing them: MXNet, NumPy and what MXNet imports.
BORROWED = ("mxnet", "numpy", "numpy.libs", "requests", "urllib3", "idna", "certifi", "charset_normalizer",
            "graphviz", "threadpoolctl.py", "setuptools", "pkg_resources", "_distutils_hack", "wheel",
            "packaging")
BUILD_TOOLS = ("setuptools", "wheel")      # their dist-info too: setuptools finds its commands through it

USER_SCRIPT = """
import sys
import mxnet as mx                                   # before ece408_op, as in the README
assert "numpy" in sys.modules
x, w = mx.nd.ones((1, 2, 5, 5)), mx.nd.ones((3, 2, 3, 3))
y = mx.nd.Custom(x, w, op_type="ece408_conv", num_filter=3, kernel=(3, 3), pad=(1, 1))
print(float(y.asnumpy()[0, 0, 2, 2]), float(y.asnumpy()[0, 0, 0, 0]))
"""
STARTUP_SCRIPT = "import sys; print('ece408_op' in sys.modules, 'numpy' in sys.modules, 'mxnet' in sys.modules)"


def _fresh_venv(tmp_path):
    if sys.flags.no_site:
        pytest.skip("this interpreter runs without site (-S): .pth files are not processed")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    ours = Path(sysconfig.get_path("purelib"))
    for name in BORROWED:
        if (ours / name).exists():
            (purelib / name).symlink_to(ours / name)
    for tool in BUILD_TOOLS:
        for info in ours.glob(f"{tool}-*.dist-info"):
            (purelib / info.name).symlink_to(info)
    return python, purelib


def _pip(python, *args):
    # pip runs from this environment against the fresh one's interpreter (--python, pip >= 22.3)
    result = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                             "--no-build-isolation", "--no-index", *args], capture_output=True, text=True,
                            env={**os.environ, "PIP_FIND_LINKS": ""})
    assert result.returncode == 0, result.stdout + result.stderr


INSTALLS = {
    "editable-pep660": ["--use-pep517", "-e"],     # what `make` does (pip builds an editable wheel)
    "editable-develop": ["-e"],                    # pip's legacy path without build isolation: setup.py develop
    "normal": [],                                  # a wheel
}


@pytest.mark.slow
@pytest.mark.parametrize("how", sorted(INSTALLS))
def test_import_mxnet_first_works_after_install(tmp_path, how):
    require_mxnet()
    python, purelib = _fresh_venv(tmp_path)
    src = source_copy(tmp_path)
    _pip(python, *INSTALLS[how], str(src))
    assert (purelib / "ece408_op-hook.pth").is_file()
    run = dict(capture_output=True, text=True, cwd=tmp_path)         # not the checkout: the install
    startup = subprocess.run([str(python), "-c", STARTUP_SCRIPT], **run)
    assert startup.stdout.split() == ["True", "False", "False"], startup.stderr   # cheap: no NumPy, no MXNet
    result = subprocess.run([str(python), "-c", USER_SCRIPT], **run)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["18.0", "8.0"]


@pytest.mark.slow                                   # measured 1.6 s (loaded machine)
def test_without_the_hook_mxnet_first_fails_here(tmp_path):
    # Control: the same fresh environment without our package cannot import MXNet at all on this
    # NumPy (np.bool), which is what the hook repairs.
    require_mxnet()
    import numpy
    if int(numpy.__version__.split(".")[0]) != 1 or int(numpy.__version__.split(".")[1]) < 24:
        pytest.skip(f"NumPy {numpy.__version__} still has np.bool")
    python, _ = _fresh_venv(tmp_path)
    result = subprocess.run([str(python), "-c", "import mxnet"], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode != 0 and "bool" in result.stderr


# ---------------------------------------------------------------------------------------------
# The base install: the class's client, pure Python

ABSENT = ("numpy", "mxnet", "numba")             # none of them in the client's environment
HEAVY = {"mxnet", "numpy", "numba", "llvmlite", "pycuda", "torch", "scipy"}
LIGHT_PLATFORMS = [("macosx_11_0_arm64", "3.13"), ("win_amd64", "3.9")]      # MXNet 1.9.1 has no build for either


def _client(python, *args, cwd, home=None):
    """``python -m ece408_op ARGS`` in the client's environment, its user's folders under ``home``."""
    return subprocess.run([str(python), "-m", "ece408_op", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=_clean_env(home or cwd), timeout=300)


def _clean_env(home):
    """No token, server or database of this machine's user: the client's own folders under ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECE408_") and k != "PYTHONPATH"}
    env.update({"XDG_CONFIG_HOME": str(Path(home) / "config"), "XDG_DATA_HOME": str(Path(home) / "data"),
                "XDG_STATE_HOME": str(Path(home) / "state")})
    return env


@pytest.mark.slow
def test_the_client_install_holds_no_numpy_mxnet_or_numba(client_env, tmp_path):
    for module in ABSENT:
        result = subprocess.run([str(client_env), "-c", f"import {module}"], capture_output=True, text=True,
                                cwd=tmp_path)
        assert result.returncode != 0 and "ModuleNotFoundError" in result.stderr, (module, result.stderr)
    # the start-up hook runs at every interpreter start: harmless without MXNet, warnings included
    result = subprocess.run([str(client_env), "-W", "error", "-c",
                             "import sys; print('ece408_op' in sys.modules, 'numpy' in sys.modules)"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.split() == ["True", "False"] and result.stderr == "", result


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_client_works_against_a_real_service(running_service, client_env, tmp_path):
    help_ = _client(client_env, "--help", cwd=tmp_path)
    assert help_.returncode == 0 and "  login " in help_.stdout, help_.stderr
    made = _client(client_env, "init", "red", cwd=tmp_path)
    assert made.returncode == 0 and (tmp_path / "red" / "new-forward.py").is_file(), made.stderr
    service = running_service(tmp_path / "service", workers=0)
    token = service.add_teams("red")["red"]
    (tmp_path / "red.token").write_bytes(token.encode() + b"\r\n")        # as Windows' Notepad writes it
    login = _client(client_env, "login", "--server", service.url, "--token-file", tmp_path / "red.token",
                    cwd=tmp_path)
    assert login.returncode == 0 and "Logged in to" in login.stdout, login.stderr
    assert (tmp_path / "config" / "ece408_op" / "login.json").is_file()
    ranking = _client(client_env, "ranking", "--server", service.url, cwd=tmp_path)
    assert ranking.returncode == 0 and ranking.stderr == "", ranking.stderr
    sent = _client(client_env, "submit", "--server", service.url, "--submit", "m2", "--size", 10, "--detach",
                   cwd=tmp_path / "red", home=tmp_path)
    assert sent.returncode == 0 and "accepted (team red)" in sent.stderr, sent.stderr
    jobs = _client(client_env, "jobs", "list", "--server", service.url, cwd=tmp_path)
    assert jobs.returncode == 0 and "m2 10" in jobs.stdout and "queued" in jobs.stdout, jobs.stdout + jobs.stderr


@pytest.mark.slow
@pytest.mark.parametrize("command,extra", [(["m2", "10"], "mxnet"), (["m3", "10"], "gpu"), (["fetch"], "mxnet"),
                                           (["serve", "--workers", "0"], "service"), (["bench", "gpu"], "bench")])
def test_a_command_whose_extra_is_missing_says_which_in_one_line(client_env, tmp_path, command, extra):
    result = _client(client_env, *command, cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == "" and "Traceback" not in result.stderr, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: python -m ece408_op {command[0]} needs the {extra} extra ") or \
        (command[0] == "bench" and line.startswith("error: bench gpu needs ")), line
    assert f"pip install 'ece408_op[{extra}]'" in line and f"pip install '.[{extra}]'" in line, line


def _resolved(wheel, platform, python, tmp_path):
    """The distributions pip would install for ``wheel[client]`` on another system (its report)."""
    report = tmp_path / f"report-{platform}.json"
    result = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed",
                             "--only-binary=:all:", "--platform", platform, "--python-version", python,
                             "--target", str(tmp_path / "target"), "--report", str(report), f"{wheel}[client]"],
                            capture_output=True, text=True, timeout=600)
    return result, (json.loads(report.read_text())["install"] if report.exists() else [])


@pytest.mark.slow
@pytest.mark.parametrize("platform,python", LIGHT_PLATFORMS)
def test_the_client_resolves_where_mxnet_has_no_build(built_wheel, tmp_path, platform, python):
    result, install = _resolved(built_wheel, platform, python, tmp_path)
    skip_without_the_index(result)
    assert result.returncode == 0, result.stderr[-3000:]
    names = {item["metadata"]["name"].lower() for item in install}
    assert "ece408-op" in names or "ece408_op" in names, names
    assert not names & HEAVY, names
    files = [item["download_info"]["url"].rsplit("/", 1)[-1] for item in install]
    assert all(f.endswith("-none-any.whl") for f in files), files         # pure Python, every one


# ---------------------------------------------------------------------------------------------
# What cannot run here: another system's facts substituted


def test_the_user_folders_on_windows_and_elsewhere():
    from ece408_op.base.files import user_folder_text
    roaming, local = r"C:\Users\ada\AppData\Roaming", r"C:\Users\ada\AppData\Local"
    windows = {"APPDATA": roaming, "LOCALAPPDATA": local}
    assert user_folder_text("config", "login.json", environ=windows, windows=True) == \
        roaming + r"\ece408_op\login.json"
    assert user_folder_text("data", "service.db", environ=windows, windows=True) == local + r"\ece408_op\service.db"
    assert user_folder_text("state", "service", environ=windows, windows=True) == local + r"\ece408_op\state\service"
    assert user_folder_text("cache", "numba", environ=windows, windows=True) == local + r"\ece408_op\cache\numba"
    assert user_folder_text("config", environ={}, windows=True, home=r"C:\Users\ada") == roaming + r"\ece408_op"
    xdg = {**windows, "XDG_CONFIG_HOME": r"D:\cfg"}                       # set on purpose: it wins there too
    assert user_folder_text("config", "login.json", environ=xdg, windows=True) == r"D:\cfg\ece408_op\login.json"
    assert user_folder_text("state", "spool", environ={}, windows=False, home="/home/ada") == \
        "/home/ada/.local/state/ece408_op/spool"
    assert user_folder_text("data", environ={"XDG_DATA_HOME": "/srv/d"}, windows=False) == "/srv/d/ece408_op"


def test_the_client_reads_files_where_the_system_has_no_nofollow_or_nonblock(tmp_path, monkeypatch):
    # Windows has neither flag: a link is still refused, a file's bytes (CRLF included) read as they are
    from ece408_op.base.files import IsLink, read_regular
    for flag in ("O_NOFOLLOW", "O_NONBLOCK"):
        monkeypatch.delattr(os, flag)
    data = b"def forward(y, x, k):\r\n    pass\r\n\x1a\r\n"
    (tmp_path / "new-forward.py").write_bytes(data)
    (tmp_path / "link.py").symlink_to(tmp_path / "new-forward.py")
    assert read_regular(os.fsencode(tmp_path / "new-forward.py"), 1 << 20) == data
    with pytest.raises(IsLink):
        read_regular(os.fsencode(tmp_path / "link.py"), 1 << 20)


# POSIX-only modules (fcntl, termios, resource, pwd, grp...), made unimportable as on Windows
WINDOWS_LACKS = "import sys\nfor m in ('fcntl', 'termios', 'resource', 'pwd', 'grp', 'pty', 'tty', 'syslog'):\n" \
                "    sys.modules[m] = None\n"
CLIENT_MODULES = ("ece408_op.cli", "ece408_op.cli.remote", "ece408_op.cli.login", "ece408_op.cli.jobs",
                  "ece408_op.cli.teams", "ece408_op.cli.deadlines", "ece408_op.cli.init", "ece408_op.client.api",
                  "ece408_op.client.instructor", "ece408_op.client.roster", "ece408_op.client.importer")


def test_the_client_imports_without_the_modules_windows_lacks():
    code = WINDOWS_LACKS + "".join(f"import {m}\n" for m in CLIENT_MODULES)
    result = subprocess.run([*python_command(), "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]


def test_output_in_a_code_page_without_the_characters_is_escaped_not_a_traceback(tmp_path):
    # Windows' redirected output (and an older console) writes cp1252: a name outside it must not stop a command
    env = {**os.environ, "PYTHONIOENCODING": "cp1252"}
    result = subprocess.run([*python_command(), "-m", "ece408_op", "init", "équipe→1"], capture_output=True,
                            cwd=tmp_path, env=env)
    assert result.returncode == 0 and b"Traceback" not in result.stderr, result.stderr.decode(errors="replace")
    assert "équipe\\u21921".encode("cp1252") in result.stdout and (tmp_path / "équipe→1" / "launch.py").is_file()


@pytest.mark.parametrize("platform,machine,python,expect", [
    ("win32", "AMD64", (3, 12), "no build for Windows"),
    ("darwin", "arm64", (3, 11), "no build for macOS on Apple silicon"),
    ("linux", "x86_64", (3, 13), "has no build for Python 3.13"),
    ("darwin", "x86_64", (3, 11), None),
    ("linux", "aarch64", (3, 9), None),
])
def test_the_missing_extra_line_knows_where_mxnet_has_no_build(platform, machine, python, expect):
    from ece408_op.base.extras import missing_line
    line = missing_line("python -m ece408_op m2", "numpy", "mxnet", platform=platform, machine=machine,
                        python=python)
    assert "\n" not in line and line.startswith("python -m ece408_op m2 needs the mxnet extra")
    if expect is None:
        assert "pip install 'ece408_op[mxnet]'" in line and "pip install '.[mxnet]'" in line, line
    else:
        assert expect in line and "submit --server" in line and "pip install" not in line, line
    assert missing_line("python -m ece408_op serve", "fastapi", "service", platform=platform, machine=machine,
                        python=python) is not None
    assert missing_line("python -m ece408_op m2", "no_such_module_anywhere") is None     # a bug: not an install


def test_setup_reads_the_one_table_of_requirements():
    """setup.py's install_requires and extras_require are base/extras.py's: the client light, every
    module a hint names brought by the extra it names."""
    from ece408_op.base import extras
    assert extras.install_requires() == ["httpx>=0.27,<1"]
    table = extras.extras_require()
    assert set(table) == {"mxnet", "gpu", "service", "grade", "bench", "client", "test"}
    assert not any(r.split("=")[0].split("<")[0].split(">")[0].lower() in HEAVY for r in table["client"])
    for name in ("mxnet", "gpu", "service", "grade", "test"):
        assert "mxnet==1.9.1" in table[name] and "numpy<2" in table[name]
    assert "pycuda" in table["gpu"] and "pycuda" in table["bench"] and "mxnet==1.9.1" not in table["bench"]
    # the checkpoints come with MXNet (every extra that runs a model), never with the client
    for name in ("mxnet", "gpu", "service", "grade", "test"):
        assert extras.MODELS in table[name], name
    assert extras.MODELS not in table["client"] and extras.MODELS not in table["bench"]
    # the server checks team names (PRECIS, Unicode's confusables); the client need not
    for requirement, _ in extras.NAMES:
        assert requirement in table["service"] and requirement in table["test"], requirement
        assert requirement not in table["client"] and requirement not in extras.install_requires()


@pytest.mark.slow
def test_the_wheel_requires_what_the_table_says(built_wheel):
    import zipfile
    with zipfile.ZipFile(built_wheel) as wheel:
        (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = wheel.read(name).decode()
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert [r for r in requires if "extra ==" not in r] == ["httpx<1,>=0.27"] or \
        [r for r in requires if "extra ==" not in r] == ["httpx>=0.27,<1"], requires
    assert any(r.startswith("mxnet==1.9.1") and 'extra == "mxnet"' in r for r in requires), requires
    assert any(r.replace("-", "_").startswith("ece408_op_models==") and 'extra == "mxnet"' in r for r in requires), \
        requires                                          # the name as the metadata writes it: - or _


@pytest.mark.slow
def test_a_laptops_wheel_carries_no_model_and_the_models_distribution_does(built_wheel, tmp_path):
    """The checkpoints (23 MB) are models/setup.py's distribution, installed where the package looks
    for them (share/ece408_op/models): the client's wheel holds none, the models' wheel every one."""
    import zipfile
    with zipfile.ZipFile(built_wheel) as wheel:
        names = wheel.namelist()
    assert not [n for n in names if n.endswith((".params", "-symbol.json"))], names
    assert built_wheel.stat().st_size < 2 << 20, built_wheel.stat().st_size
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                             "-w", str(tmp_path), str(ROOT / "models")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    (models,) = tmp_path.glob("ece408_op_models-*.whl")
    with zipfile.ZipFile(models) as wheel:
        got = sorted(n.split("/")[-1] for n in wheel.namelist() if "/share/ece408_op/models/" in n)
    want = sorted(p.name for p in (ROOT / "models").iterdir() if p.name.endswith((".params", "-symbol.json")))
    assert got == want and len(want) == 8, (got, want)


def test_token_files_and_rosters_as_windows_writes_and_reads_them(tmp_path):
    """Without O_NOFOLLOW (Windows has none) token files are still written; a token file or a
    roster saved with a byte order mark (Notepad, Excel's "CSV UTF-8") reads as without it."""
    code = (WINDOWS_LACKS + "import os\ndel os.O_NOFOLLOW\n"
            "from ece408_op.client.instructor import write_token\n"
            f"write_token({str(tmp_path / 'w.token')!r}, 'ece408_' + '0' * 16 + '_' + 'a' * 43)\n")
    result = subprocess.run([*python_command(), "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "w.token").read_text().strip().startswith("ece408_")
    from ece408_op.client.api import read_token_file
    from ece408_op.client.roster import roster_names
    token = "ece408_" + "1" * 16 + "_" + "b" * 43
    (tmp_path / "bom.token").write_bytes(b"\xef\xbb\xbf" + token.encode() + b"\r\n")
    assert read_token_file(tmp_path / "bom.token") == token
    (tmp_path / "roster.csv").write_bytes(b"\xef\xbb\xbfteam,email\r\nred,r@x\r\nblue,b@x\r\n")
    assert roster_names(tmp_path / "roster.csv") == ["red", "blue"]


@pytest.mark.parametrize("text,names", [
    ("team,email\nred,r@x\nblue,b@x\n", ["red", "blue"]),
    ("name,email\nred,r@x\nblue,b@x\n", ["red", "blue"]),            # a header of other words: not a team 'name'
    ("Email,Team Name\nr@x,red\n", ["red"]),
    ("netid,team\nab1,rho\ncd2,sigma\n", ["rho", "sigma"]),
    ("red\nblue\n", ["red", "blue"]),                                  # no header: the first column
])
def test_a_rosters_team_column_is_found_by_its_header(tmp_path, text, names):
    from ece408_op.client.roster import roster_names
    (tmp_path / "roster.csv").write_text(text)
    assert roster_names(tmp_path / "roster.csv") == names


@pytest.mark.parametrize("text,says", [
    ("netid,email\nab1,a@x\n", "no team column"),
    ("team\nred\nbl\x00ue\n", "line 3: the team name holds the control character U+0000"),
    ("team\nred\nbl\x07ue\n", "line 3"),
    ("netid,team\nab1,red\ncd2\n", "line 3: no team column (the team is column 2; this row has 1)"),
])
def test_a_roster_that_cannot_be_read_rightly_is_refused_in_one_line(tmp_path, text, says):
    from ece408_op.client.api import ClientError
    from ece408_op.client.roster import roster_names
    (tmp_path / "roster.csv").write_bytes(text.encode())
    with pytest.raises(ClientError) as caught:
        roster_names(tmp_path / "roster.csv")
    assert says in str(caught.value) and "\n" not in str(caught.value), caught.value
