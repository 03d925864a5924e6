"""Every team command in a real sandbox (issue: sandbox): a class of hostile teams, one attack
per test, each through a development run (``submit``) on the default engine (bubblewrap), and
the grader's own robustness against what a submission holds. Nothing here is mocked: real
bubblewrap, real cgroups, real processes; every bomb is bounded so that the test ends by itself."""
import http.server
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from suitekit import ROOT, python_command, small_tmpfs
from teams import cli, rai_yaml

from ece408_op.grading.sandbox import BubblewrapSandbox, Limits, SandboxError

ENGINE = ["--engine", "bubblewrap"]


def bubblewrap_missing():
    try:
        BubblewrapSandbox(Limits()).check()
    except SandboxError as exc:
        return str(exc)
    return None


pytestmark = pytest.mark.skipif(bubblewrap_missing() is not None, reason=f"{bubblewrap_missing()}")


def team(folder, commands, **files):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rai_build.yml").write_text(rai_yaml(commands))
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def dev(folder, *flags, env=None, timeout=300):
    return cli("submit", folder, *ENGINE, *flags, env=env, timeout=timeout)


def processes_with(marker):
    """(pid, cmdline) of the processes of this host whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmd and "-m pytest" not in cmd and int(entry.name) != os.getpid():
                found.append((int(entry.name), cmd))
    return found


def gone(marker, wait=10.0):
    deadline = time.monotonic() + wait
    while processes_with(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


# ---------------------------------------------------------------------------- what a team sees

def test_a_team_sees_its_own_small_world(tmp_path):
    probe = ("import os, glob\nprint('uid', os.getuid())\nprint('procs', len(glob.glob('/proc/[0-9]*')))\n"
             "print('hidden', [p for p in ('/root/.local', '/root/.bash_history', '/root/.cache/pip', '/etc/shadow', "
             "'/etc/munge', '/var/lib/postgresql', '/home') if os.path.exists(p)])\nprint('env', sorted(os.environ))\n"
             "print('writable', os.access('/usr', os.W_OK), os.access('/src', os.W_OK), os.access('/build', os.W_OK), "
             "os.access('/tmp', os.W_OK))\n")
    folder = team(tmp_path / "t", ["python /src/probe.py"], **{"probe.py": probe})
    out = dev(folder, env={"ECE408_DB": "postgresql://grader:hunter2@127.0.0.1/x", "PGPASSWORD": "hunter2"})
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout.split("\n", 1)[1]                               # after the command's own line
    uid = int(re.search(r"^uid (\d+)$", text, re.M)[1])
    assert uid >= 1_000_000                                              # its own unprivileged user
    assert int(re.search(r"^procs (\d+)$", text, re.M)[1]) <= 6          # its own processes only
    assert "hidden []" in text                                          # the host's private files are not there
    assert "hunter2" not in text and "ECE408_DB" not in text and "PGPASSWORD" not in text
    assert "writable False False True True" in text


@pytest.mark.slow
def test_two_teams_at_once_neither_reads_nor_writes_the_other(tmp_path):
    """Team A keeps a secret in its /src and /build while team B, at the same time, looks for it
    everywhere (/proc/*/root, /proc/*/cwd, the whole tree) and overwrites what it finds."""
    secret = "A-SECRET-" + os.urandom(8).hex()
    a = team(tmp_path / "a", ['/bin/bash -c "cp /src/secret.txt /build/result.txt; sleep 8; cat /build/result.txt"'],
             **{"secret.txt": secret + "\n"})
    hunt = ("sleep 1\n"
            f"timeout 60 grep -rls {secret} / --exclude-dir=usr --exclude-dir=sys --exclude-dir=proc 2>/dev/null | head -3\n"
            "for p in /proc/[0-9]*; do ls $p/root/src $p/cwd 2>/dev/null; "
            "echo B-WAS-HERE > $p/root/build/result.txt 2>/dev/null; done\n"
            "timeout 60 find / -name result.txt -not -path '/proc/*' -not -path '/usr/*' 2>/dev/null | "
            "while read f; do echo B-WAS-HERE > $f; done\necho hunted\n")
    b = team(tmp_path / "b", ["/bin/bash /src/hunt.sh"], **{"hunt.sh": hunt})
    with_a = {}
    thread = threading.Thread(target=lambda: with_a.setdefault("out", dev(a)))
    thread.start()
    out_b = dev(b)
    thread.join()
    out_a = with_a["out"]
    assert out_a.returncode == 0 and out_b.returncode == 0, (out_a.stderr, out_b.stderr)
    assert "hunted" in out_b.stdout and secret not in out_b.stdout
    assert secret in out_a.stdout.rsplit("\n* ", 1)[0].splitlines()[-1]   # its result as it wrote it


def test_one_team_leaves_nothing_for_the_next(tmp_path):
    marker = "LEFT-" + os.urandom(6).hex()
    plant = ("for p in ('/build/x', '/tmp/x', '/dev/shm/x', '/var/tmp/x', '/run/x', '/src/x', '/x'):\n"
             "    try:\n        open(p, 'w').write('" + marker + "')\n        print('PLANTED', p)\n"
             "    except OSError as e:\n        print('refused', p, e.strerror)\n")
    first = team(tmp_path / "a", ["python /src/plant.py"], **{"plant.py": plant})
    out = dev(first)
    assert out.returncode == 0, out.stderr
    assert "refused /var/tmp/x" in out.stdout and "refused /src/x" in out.stdout and "refused /x" in out.stdout
    look = ('/bin/bash -c "grep -rls ' + marker + ' /build /tmp /dev /var /run 2>/dev/null; echo looked"')
    second = dev(team(tmp_path / "b", [look]))
    assert second.returncode == 0 and "looked" in second.stdout
    found = second.stdout.split("\n", 1)[1].split("looked")[0].strip()     # files holding the marker
    assert found == "", found


def test_a_setsid_child_does_not_outlive_its_team(tmp_path):
    first = team(tmp_path / "a", ['/bin/bash -c "setsid sleep 4011 </dev/null >/dev/null 2>&1 & sleep 0.3; echo left"'])
    out = dev(first)
    assert out.returncode == 0 and "left" in out.stdout, out.stderr
    assert gone("sleep 4011")
    second = team(tmp_path / "b", ['/bin/bash -c "ps -eo args | grep -c 4011 || true"'])
    assert dev(second).returncode == 0


@pytest.mark.slow
def test_time_limit_kills_every_process_of_the_command(tmp_path):
    folder = team(tmp_path / "t", ['/bin/bash -c "setsid sleep 4012 & (sleep 4013 &); sleep 100"', "echo never-run"])
    start = time.monotonic()
    out = dev(folder, "--timeout", 2)
    assert time.monotonic() - start < 30 and out.returncode == 1, out.stderr
    assert "ran past its time limit of 2 s and was killed" in out.stdout and "never-run\n" not in out.stdout
    assert gone("sleep 4012") and gone("sleep 4013")


def test_a_background_child_holding_stdout_does_not_stall_the_run(tmp_path):
    folder = team(tmp_path / "t", ['/bin/bash -c "(sleep 4014 &); echo done"'])
    start = time.monotonic()
    out = dev(folder)
    assert out.returncode == 0 and "done" in out.stdout, out.stderr
    assert time.monotonic() - start < 15 and gone("sleep 4014")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_network_is_cut_loopback_and_other_addresses(tmp_path):
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), _Quiet)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            address = s.getsockname()[0]
        import urllib.request
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).status == 200   # it serves
        probe = ("import urllib.request, sys\nfor a in sys.argv[1:]:\n    try:\n"
                 "        urllib.request.urlopen(a, timeout=3)\n        print('REACHED', a)\n"
                 "    except Exception as e:\n        print('refused', a, type(e).__name__)\n")
        folder = team(tmp_path / "t", [f"python /src/probe.py http://127.0.0.1:{port}/ http://{address}:{port}/"],
                      **{"probe.py": probe})
        out = dev(folder)
    finally:
        server.shutdown()
    assert out.returncode == 0, out.stderr
    assert "REACHED" not in out.stdout and out.stdout.count("refused") == 2, out.stdout


# ---------------------------------------------------------------------------- limits

def test_memory_bomb_is_stopped(tmp_path):
    folder = team(tmp_path / "t", ["python /src/bomb.py"],
                  **{"bomb.py": "b = [bytearray(2**26) for _ in range(64)]\nprint('ALL', len(b))\n"})
    out = dev(folder, "--memory", 0.25)
    assert out.returncode != 0 and "ALL 64" not in out.stdout
    assert "ran out of memory (the limit is 256 MiB) and was stopped" in out.stdout, out.stdout


def test_process_bomb_is_bounded(tmp_path):
    bomb = ("import os, time\nn = 0\nfor i in range(300):\n    try:\n        pid = os.fork()\n    except OSError:\n"
            "        break\n    if pid == 0:\n        time.sleep(4015)\n        os._exit(0)\n    n += 1\nprint('FORKED', n)\n")
    folder = team(tmp_path / "t", ["python /src/bomb.py"], **{"bomb.py": bomb})
    out = dev(folder, "--processes", 40)
    forked = int(re.search(r"FORKED (\d+)", out.stdout)[1])
    assert forked < 40, out.stdout
    assert gone("4015")


def test_disk_bombs_fill_only_the_teams_own_space(tmp_path):
    fill = ("import os\nfor p in ('/build/big', '/tmp/big', '/build/small-a', '/build/small-b'):\n    try:\n"
            "        with open(p, 'wb') as f:\n            for i in range(150 if 'big' in p else 60):\n"
            "                f.write(bytes(1 << 20))\n        print('WROTE', p)\n"
            "    except OSError as e:\n        print('REFUSED', p, e.strerror)\n        if 'big' in p:\n"
            "            os.remove(p)\nprint('survived')\n")
    folder = team(tmp_path / "t", ["python /src/fill.py"], **{"fill.py": fill})
    out = dev(folder, "--disk", 0.1)
    assert out.returncode == 0, out.stderr
    # one file past the cap: too large; two below it that together are past it: no space
    assert "REFUSED /build/big File too large" in out.stdout and "REFUSED /tmp/big File too large" in out.stdout
    assert "WROTE /build/small-a" in out.stdout and "REFUSED /build/small-b No space left on device" in out.stdout
    assert "survived" in out.stdout


def test_output_bomb_is_stopped_and_the_transcript_capped(tmp_path):
    folder = team(tmp_path / "t", ['/bin/bash -c "yes 0123456789abcdef | head -c 300000000; echo never"'])
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = dev(folder, "--max-output", 4)
    assert out.returncode != 0
    assert "wrote more than 4 MiB of output and was stopped" in out.stdout
    assert len(out.stdout) < 2 << 20                                  # what is shown is capped too
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert peak < 400_000 or peak == before                             # KiB: the runner never held the output


@pytest.mark.slow
@pytest.mark.serial         # CPU time: failed once in make test's parallel phase (its shell's exit 152, the limit unnamed): alone
def test_cpu_time_limit(tmp_path):
    folder = team(tmp_path / "t", ['python -c "while True: pass"'])
    start = time.monotonic()
    out = dev(folder, "--cpu-time", 2, "--timeout", 60)
    assert time.monotonic() - start < 40 and out.returncode != 0
    assert re.search(r"killed by SIGXCPU \(its CPU-time limit of 2 s\)|more than 2 s of CPU time", out.stdout), out.stdout


# ---------------------------------------------------------------------------- the runner killed

def test_runner_killed_with_sigkill_leaves_nothing_running_and_the_next_start_cleans(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    folder = team(tmp_path / "t", ['/bin/bash -c "setsid sleep 4016 & echo started; sleep 4017"'])
    proc = subprocess.Popen([*python_command(), "-m", "ece408_op", "submit", str(folder), *ENGINE, "--scratch",
                             str(scratch)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for line in iter(proc.stdout.readline, b""):                      # the command runs: its sandbox is up
        if line.strip() == b"started":
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert gone("sleep 4016") and gone("sleep 4017"), subprocess.run(["ps", "-eo", "pid,ppid,stat,args"],
                                                                      capture_output=True, text=True).stdout
    left = list(scratch.iterdir())
    assert len(left) == 1 and left[0].name.startswith("ece408-run-")  # its scratch folder, for now
    again = dev(team(tmp_path / "u", ["echo fine"]), "--scratch", scratch)
    assert again.returncode == 0 and not left[0].exists() and list(scratch.iterdir()) == []


# ---------------------------------------------------------------------------- what a submission holds

def test_names_of_any_bytes(tmp_path):
    folder = team(tmp_path / "t", ["ls /src"])
    for raw in (b"bad\xff\xfename.txt", b"new\nline", b"\x1b[31mred\x1b[0m"):
        with open(os.path.join(os.fsencode(folder), raw), "w") as f:
            f.write("x")
    weird = tmp_path / os.fsdecode(b"team\xff\n\x1b[2J")
    shutil.copytree(folder, weird)
    out = dev(weird)
    assert out.returncode == 0, out.stderr
    assert "rai_build.yml" in out.stdout


def test_sparse_3_gb_file_is_refused_at_once(tmp_path):
    folder = team(tmp_path / "t", ["echo never"])
    with open(folder / "data.bin", "wb") as f:
        f.truncate(3 << 30)
    start = time.monotonic()
    out = dev(folder)
    assert out.returncode == 1 and time.monotonic() - start < 20
    assert out.stderr.strip() == ("error: the submission holds more than 64 MiB (at data.bin: 3221225472 bytes); "
                                  "leave out data and builds")


@pytest.mark.parametrize("text, message", [
    ("a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n", "uses a YAML alias (*name); write the value out"),
    ("[" * 30000, "is nested more than 20 levels deep"),
    (rai_yaml(['echo "unclosed']), "commands.build[0] does not split into words (No closing quotation); close its quotes"),
    (rai_yaml(["echo a\u0000b"]).replace("\\u0000", "\0"), "holds a NUL byte; it must be a text file"),
    ("x" * 70000, "is larger than 64 KiB"),
])
def test_hostile_rai_build_is_one_line_and_quick(tmp_path, text, message):
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "rai_build.yml").write_text(text)
    start = time.monotonic()
    out = dev(folder)
    assert time.monotonic() - start < 20 and out.returncode == 1 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr


def test_a_linked_rai_build_never_shows_the_linked_file(tmp_path):
    secret = tmp_path / "other-team.yml"
    secret.write_text("password: hunter2\n")
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "rai_build.yml").symlink_to(secret)
    out = dev(folder)
    assert out.returncode == 1 and "hunter2" not in out.stderr + out.stdout
    assert out.stderr.strip() == "error: rai_build.yml: cannot be read: it is a symbolic link; commit the file itself"


def test_schema_errors_never_quote_values(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "rai_build.yml").write_text(rai_yaml(["echo hi"]).replace("network: false", "network: hunter2-secret"))
    out = dev(folder)
    assert out.returncode == 1 and "hunter2" not in out.stderr
    assert out.stderr.strip() == "error: rai_build.yml: resources.network must be a boolean (true or false), not a string"


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_timeout_must_be_finite_and_positive(tmp_path, value):
    out = dev(team(tmp_path / "t", ["echo hi"]), "--timeout", value)
    assert out.returncode == 2 and "--timeout: invalid finite positive number value" in out.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs (root)")
def test_tmpdir_full_during_the_copy_is_one_line(tmp_path):
    with small_tmpfs(tmp_path / "small", "2m") as small:
        folder = team(tmp_path / "t", ["echo never"])
        (folder / "blob.bin").write_bytes(os.urandom(4 << 20))
        out = dev(folder, "--scratch", small)
        assert out.returncode == 1 and out.stderr.strip() == \
            f"error: cannot copy the submission into {small}/{os.listdir(small)[0] if os.listdir(small) else ''}".rstrip("/") \
            or "No space left on device" in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and os.listdir(small) == []


def test_host_engine_only_by_name_and_marked(tmp_path):
    folder = team(tmp_path / "t", ["echo hi"])
    out = cli("submit", folder, "--engine", "host")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("* Engine host: not isolated (the commands run on this host, as its user)\n")
    out = cli("submit", folder, env={"ECE408_ENGINE": "auto"})
    assert "not isolated" not in out.stdout


def test_docker_gets_the_same_isolation_flags_as_podman():
    """No Docker daemon runs here: the flags docker would get are checked as data, against podman's
    (which tests/grading/test_container_image.py runs for real)."""
    from ece408_op.grading.sandbox import ENGINES, Mount, Step
    limits = Limits(memory=1 << 30, processes=64, cpu_seconds=60, disk=1 << 28, output=1 << 20)
    step = Step(["python", "-V"], [Mount("/a", "/src"), Mount("/b", "/build", writable=True)], {"HOME": "/tmp"},
                "/build", gpu=True)
    argvs = {}
    for engine in ("docker", "podman"):
        sandbox = ENGINES[engine](limits, "img:tag", uid=1234567)          # the engine registry
        argvs[engine] = sandbox.launch(step, "run-x").argv
    for engine, argv in argvs.items():
        text = " ".join(argv)
        for flag in ("--network none", "--read-only", "--user 1234567:1234567", "--cap-drop ALL", "--pids-limit 64",
                     f"--memory {1 << 30}", "--security-opt no-new-privileges", "--ulimit cpu=60:60",
                     f"--tmpfs /tmp:rw,size={1 << 28},mode=1777", "-v /a:/src:ro", "-v /b:/build:rw", "--rm"):
            assert flag in text, (engine, flag)
    assert "--gpus all" in " ".join(argvs["docker"])
    assert [a for a in argvs["docker"] if a not in ("--gpus", "all", "docker")] == \
        [a for a in argvs["podman"] if not a.startswith("/dev/nvidia") and a not in ("--device", "podman")]


def test_engines_register_themselves_in_auto_order():
    """One registry (``sandbox.ENGINES``) that choose_engine, open_sandbox and clean_stale read: a
    new engine is one class with @engine."""
    from ece408_op.grading.sandbox import ENGINES, SandboxError, choose_engine
    assert list(ENGINES) == ["bubblewrap", "podman", "docker", "buildah", "host"]
    assert [name for name, cls in ENGINES.items() if cls.auto] == ["bubblewrap", "podman", "docker", "buildah"]
    assert [name for name, cls in ENGINES.items() if not cls.isolated] == ["host"]
    assert choose_engine("Podman") == "podman"
    with pytest.raises(SandboxError, match="unknown engine 'chroot'; use auto, bubblewrap, podman, docker, buildah, host"):
        choose_engine("chroot")
