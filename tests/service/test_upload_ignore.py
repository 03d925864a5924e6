"""What an upload leaves out of a team's folder (base/ignore.py): tokens (by name and by content),
databases, version control, caches, virtual environments, other teams' folders and the folder's
own .ece408ignore; ``submit --dry-run`` listing what would be sent without a service or a token;
the upload's one line counting what was left out; a real ``serve`` receiving none of it."""
import os
import re
import shutil
import socket
import subprocess
import threading

import pytest

from suitekit import ROOT, python_command
from teams import rai_yaml, team_project

from ece408_op.base import ignore, terms
from ece408_op.grading.scratch import copy_submission
from ece408_op.service import tokens, upload as uploads
from ece408_op.base.archive import read
from ece408_op.service.upload import inflate, raw_cap

TOKEN = tokens.new_token()[2]
SENT = [".ece408ignore", "README.md", "keep.db", "launch.py", "new-forward.cu", "new-forward.py", "rai_build.yml",
        "src/kernel.cu", "src/notes.md"]
LEFT = {".git", ".venv", "__pycache__", "beta", "class.db", "service.db", "service.db-journal", "tokens",
        "login.json", "scratch.txt", "data", "src/__pycache__", "src/kernel.cu~", ".DS_Store", "env2",
        "src/big/x.bin"}
IGNORE_TEXT = "# the team's own\n/scratch.txt\ndata/\n**/big/*.bin\n!keep.db\n!tokens/\n"


def cluttered(folder):
    """A team folder as the README's commands leave it, and then some: other teams' tokens and
    folder, the service's and the class's databases, version control, caches, two virtual
    environments, a saved login, editor files, and a .ece408ignore."""
    team = team_project(folder, files={"src/kernel.cu": "// k\n", "src/notes.md": "notes\n",
                                       "src/kernel.cu~": "// old\n", "scratch.txt": "x", "data/big.bin": "d" * 100,
                                       "src/big/x.bin": "b", ".ece408ignore": IGNORE_TEXT})
    (team / "tokens").mkdir()
    for name in ("alpha", "beta"):
        (team / "tokens" / f"{name}.token").write_text(tokens.new_token()[2] + "\n")
    for name in ("class.db", "service.db", "service.db-journal", "keep.db", ".DS_Store"):
        (team / name).write_bytes(b"SQLite format 3\0" if name.endswith(".db") else b"\0")
    for rel in (".git/HEAD", ".git/objects/ab/cdef", ".git/config", "__pycache__/m.cpython-312.pyc",
                "src/__pycache__/k.pyc", ".venv/pyvenv.cfg", ".venv/lib/site.py", "env2/pyvenv.cfg", "env2/bin/py"):
        (team / rel).parent.mkdir(parents=True, exist_ok=True)
        (team / rel).write_text(rel)
    (team / "login.json").write_text(f'{{"server": "https://rai.example.edu", "token": "{TOKEN}"}}')
    team_project(team / "beta")                                  # init beta inside my-team
    return team


def archive_names(data, kind="development"):
    max_bytes, max_entries = uploads.caps(kind)
    raw = inflate(data, raw_cap(max_bytes, max_entries))
    return raw, read(raw, max_bytes, max_entries)


def test_a_cluttered_folder_uploads_none_of_its_secrets_databases_or_caches(tmp_path):
    team = cluttered(tmp_path / "my-team")
    packed = uploads.pack_folder(team)
    raw, checked = archive_names(packed.data)
    files = sorted(e.name for e in checked.entries if e.data is not None)
    assert files == SENT
    assert {e.name for e in checked.entries if e.data is None} == {"src", "src/big"}
    assert not ignore.holds_token(raw) and TOKEN.encode() not in raw
    assert raw.count(b"SQLite format 3\0") == 1                    # keep.db, taken back by !keep.db
    left = {item[0]: item[3] for item in packed.left_out.items}
    assert set(left) == LEFT
    assert left["tokens"] == "token" and left["login.json"] == "token"      # !tokens/ takes nothing back
    assert left["beta"] == "team" and left["env2"] == "venv" and left[".venv"] == "venv"
    assert left["scratch.txt"] == left["data"] == left["src/big/x.bin"] == "ignorefile"
    assert packed.left_out.line() == (
        "left out 25 files: 3 tokens, 3 databases, .git (3 files), .venv (2 files), env2 (2 files), 2 cache files, "
        "2 editor or system files, 1 team folder: beta/, 3 by .ece408ignore")


def test_the_local_run_copies_what_the_upload_sends(tmp_path):
    team = cluttered(tmp_path / "my-team")
    notes = copy_submission(team, tmp_path / "copy")
    copied = sorted(p.relative_to(tmp_path / "copy").as_posix() for p in (tmp_path / "copy").rglob("*") if p.is_file())
    assert copied == SENT
    assert notes[-1] == ("* Left out 25 files: 3 tokens, 3 databases, .git (3 files), .venv (2 files), env2 (2 files), "
                         "2 cache files, 2 editor or system files, 1 team folder: beta/, 3 by .ece408ignore (python -m "
                         "ece408_op submit --dry-run lists them)")


def test_the_one_line_counts_refused_entries_and_says_when_nothing_is_left_out(tmp_path):
    team = team_project(tmp_path / "t")
    assert uploads.pack_folder(team).left_out.line() == "nothing left out"
    os.symlink("README.md", team / "readme-link")
    os.mkfifo(team / "pipe")
    packed = uploads.pack_folder(team)
    assert packed.left_out.line() == "left out 2 files: 2 links or names the service refuses"
    assert packed.notes == ["* Left out pipe: not a file or a folder (the service takes files and folders only)",
                            "* Left out readme-link: a symbolic link (the service takes files and folders only)"]


def test_the_token_pattern_is_the_services():
    for _ in range(50):
        text = tokens.new_token()[2]
        assert terms.looks_like_token(text) and ignore.holds_token(f"x = '{text}'\n".encode())
    assert not ignore.holds_token(b"ece408_0123456789abcdef_short")
    assert not ignore.holds_token(TOKEN.encode() + b"x")            # a longer word is no token


@pytest.mark.parametrize("pattern, matched, unmatched", [
    ("*.log", ["a.log", "x/y/a.log"], ["a.logs", "log"]),
    ("/top.txt", ["top.txt"], ["x/top.txt"]),
    ("src/*.cu", ["src/a.cu"], ["src/x/a.cu", "a/src/a.cu"]),
    ("build/", ["build/", "x/build/"], ["build"]),
    ("**/big/*.bin", ["big/a.bin", "x/y/big/a.bin"], ["big/x/a.bin"]),
    ("a/**", ["a/b", "a/b/c"], ["a/"]),
    ("a/**/b", ["a/b", "a/x/y/b"], ["a/xb"]),
    ("k?.cu", ["k1.cu"], ["k12.cu", "k/.cu"]),
    ("[ab].txt", ["a.txt", "b.txt"], ["c.txt"]),
    ("[!ab].txt", ["c.txt"], ["a.txt"]),
    ("\\#x", ["#x"], ["x"]),
    ("\\!x", ["!x"], ["x"]),
])
def test_patterns_read_as_a_gitignore_reads_them(pattern, matched, unmatched):
    (rule,) = ignore.parse(pattern)
    for name in matched:
        assert rule.match(name.rstrip("/"), name.endswith("/")), (pattern, name)
    for name in unmatched:
        assert not rule.match(name.rstrip("/"), name.endswith("/")), (pattern, name)


def cli(*args, cwd, env=None):
    """``python -m ece408_op ARGS`` with an empty HOME and no ECE408_* variable."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("ECE408_", "XDG_"))}
    home = cwd.parent / "home"
    home.mkdir(exist_ok=True)
    environment.update(HOME=str(home), PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([*python_command(), "-m", "ece408_op", *args], capture_output=True, text=True,
                          cwd=cwd, env=environment, timeout=120)


class Listener:
    """A loopback port that counts the connections it is sent."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.count = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.count += 1
            conn.close()


@pytest.mark.parametrize("form", ["local", "server"])
def test_dry_run_lists_what_would_be_sent_and_sends_nothing(tmp_path, form):
    team = cluttered(tmp_path / "my-team")
    listener = Listener()
    out = cli("submit", "--dry-run", *(["--server", listener.url] if form == "server" else []), cwd=team)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert listener.count == 0
    lines = out.stdout.splitlines()
    sent = [line.split()[1] for line in lines if re.match(r"^ *\d+  ", line)]
    assert sent == SENT
    assert f"{len(IGNORE_TEXT.encode()):>10}  .ece408ignore" in lines
    for expected in ("  left out  tokens/ (2 files): a token or secret: never sent",
                     "  left out  login.json: it holds a token of the service: never sent",
                     "  left out  class.db: a database", "  left out  .git/ (3 files): version control",
                     "  left out  beta/ (5 files): another team's folder (it holds rai_build.yml and a new-forward "
                     "file)",
                     "  left out  env2/ (2 files): a virtual environment",
                     "  left out  data/ (1 file): .ece408ignore line 3 (data/)"):
        assert expected in lines, (expected, out.stdout)
    assert lines[-1].startswith("* Dry run: a development run would send 9 file(s) (")
    assert lines[-1].endswith("; left out 25 files: 3 tokens, 3 databases, .git (3 files), .venv (2 files), env2 "
                              "(2 files), 2 cache files, 2 editor or system files, 1 team folder: beta/, 3 by "
                              ".ece408ignore; nothing was sent")
    ranked = cli("submit", "--dry-run", "--submit", "m3", *(["--server", listener.url] if form == "server" else []),
                 cwd=team)
    assert ranked.returncode == 0, ranked.stderr
    assert ranked.stdout.splitlines()[-1].startswith("* Dry run: a ranked m3 would send 2 file(s) (")
    assert [line.split()[1] for line in ranked.stdout.splitlines()[:-1]] == ["new-forward.cu", "launch.py"]
    assert listener.count == 0


@pytest.mark.parametrize("line, says", [
    ("src/[ab", "a [ with no ] after it"),
    ("!", "a pattern with no name in it"),
    ("/", "a pattern with no name in it"),
    ("src/a**b", "** stands for whole folders"),
    ("a/../b", "an empty, . or .. part"),
    ("trailing\\", "a \\ at the end of the pattern"),
    ("tab\there", "the control character '\\t'"),
])
def test_a_bad_ignore_line_is_one_line_naming_it(tmp_path, line, says):
    team = team_project(tmp_path / "t", files={".ece408ignore": f"# ok\n*.log\n{line}\n"})
    for args in (["submit", "--dry-run"], ["submit", "--dry-run", "--submit", "m2"]):
        out = cli(*args, cwd=team)
        assert out.returncode == 2 and out.stdout == "", out
        assert out.stderr.count("\n") == 1 and out.stderr.startswith(f"error: .ece408ignore line 3: {says}"), out.stderr


@pytest.mark.parametrize("milestone, text, says", [
    ("m2", "*.py\n", "new-forward.py is needed by the run, but .ece408ignore line 1 (*.py) leaves it out"),
    ("m3", "/launch.py\n", "launch.py is needed by the run, but .ece408ignore line 1 (/launch.py) leaves it out"),
    (None, "*.yml\n", "rai_build.yml is needed by the run, but .ece408ignore line 1 (*.yml) leaves it out"),
])
def test_a_file_the_run_needs_is_never_ignored_away(tmp_path, milestone, text, says):
    team = team_project(tmp_path / "t", files={".ece408ignore": text})
    out = cli("submit", "--dry-run", *(["--submit", milestone] if milestone else []), cwd=team)
    assert out.returncode == 2 and out.stderr == f"error: {says}; mend .ece408ignore\n", out.stderr


def test_a_token_in_a_needed_file_is_refused(tmp_path):
    team = team_project(tmp_path / "t", cpu=f"# {TOKEN}\n")
    out = cli("submit", "--dry-run", "--submit", "m2", cwd=team)
    assert out.returncode == 2 and out.stderr == ("error: new-forward.py holds a token of the service, and a token is "
                                                  "never sent; take it out of the file\n"), out.stderr
    with pytest.raises(uploads.IgnoreError, match="rai_build.yml holds a token"):
        uploads.pack_folder(team_project(tmp_path / "d", files={"rai_build.yml": f"# {TOKEN}\n"}))


# ---------------------------------------------------------------------------- through a real service

@pytest.mark.service
@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the worker's sandbox needs bubblewrap")
def test_the_service_receives_none_of_what_is_left_out(running_service, tmp_path):
    from servicekit import job_id_of
    svc = running_service(tmp_path / "svc", workers=1, args=["--engine", "bubblewrap"])
    team = cluttered(tmp_path / "my-team")
    (team / "rai_build.yml").write_text(rai_yaml(['/bin/sh -c "cd /src && find . | sort"']))   # a CPU run
    token = svc.add_teams("my-team")["my-team"]
    out = svc.cli("submit", cwd=team, token=token)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    upload_line = next(line for line in out.stderr.splitlines() if line.startswith("* Uploading to"))
    assert upload_line == (f"* Uploading to {svc.url}: development run: 9 file(s), "
                           f"{sum((team / n).stat().st_size for n in SENT)} bytes; left out 25 files: 3 tokens, "
                           "3 databases, .git (3 files), .venv (2 files), env2 (2 files), 2 cache files, 2 editor "
                           "or system files, 1 team folder: beta/, 3 by .ece408ignore (submit --dry-run lists "
                           "them)")
    job = svc.job(job_id_of(out.stderr))
    assert sorted(f["name"] for f in job["files"]) == SENT            # what the server took
    listed = re.search(r"\* Running /bin/sh -c .*?\n(.*?)\* ", out.stdout, re.S).group(1).split()
    assert sorted(listed) == sorted(["."] + [f"./{n}" for n in SENT + ["src", "src/big"]]), out.stdout   # as run
    assert not ignore.holds_token(svc.transcript(job["id"]).encode())

    # a client that leaves nothing out (an older one, a hostile one): the worker's copy still does
    config = rai_yaml(['/bin/sh -c "cd /src && find . | sort"']).encode()
    body = uploads._tar([uploads.Entry("rai_build.yml", config), uploads.Entry("tokens"),
                         uploads.Entry("tokens/beta.token", TOKEN.encode()), uploads.Entry("service.db", b"db"),
                         uploads.Entry("login.txt", f"token: {TOKEN}\n".encode())])
    with svc.http(token) as http:
        answer = http.post("/api/jobs", content=body)
    assert answer.status_code == 201, answer.text
    job = svc.wait_for_state(answer.json()["id"], ("done", "failed"), timeout=120)
    text = svc.transcript(job["id"])
    assert job["status"] == "ok" and "* Left out 3 files: 2 tokens, 1 database (python -m ece408_op submit " \
        "--dry-run lists them)\n" in text, text
    assert re.search(r"^\.\n\./rai_build\.yml\n\* ", text, re.M) and TOKEN not in text, text
