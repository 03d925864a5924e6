"""The timing lease is the machine's: two runners started at once, each with its own TMPDIR and
--scratch, whose teams burn both cores for two seconds in every call, never run team code at the
same time (each layer's window in the records); the lock file is at the machine's fixed path,
readable by every user, and a lock whose holder was killed is free at once."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from suitekit import ROOT, python_command
from teams import BURNER, team_project

from ece408_op.grading import channel
from ece408_op.grading.store import open_store

pytestmark = [pytest.mark.slow, pytest.mark.serial,     # the machine's timing lease and its waits: alone
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]

def runner_env(tmp):
    env = {k: v for k, v in os.environ.items() if k != channel.LOCK_DIR_ENV}     # the machine's own lock
    return {**env, "TMPDIR": str(tmp), "ECE408_MODEL_DIR": str(ROOT / "models")}


@pytest.mark.timeout(900)
def test_runners_with_their_own_tmpdir_and_scratch_never_time_at_once(tmp_path):
    procs = []
    for name in ("east", "west"):
        team = team_project(tmp_path / name, cpu=BURNER)
        tmp, scratch = tmp_path / f"tmp-{name}", tmp_path / f"scratch-{name}"
        tmp.mkdir()
        scratch.mkdir()
        argv = [*python_command(), "-m", "ece408_op", "submit", "--submit", "m2", "--size", "20", "--team", str(team),
                "--db", str(tmp_path / f"{name}.db"), "--scratch", str(scratch), "--engine", "bubblewrap",
                "--timeout", "600"]
        procs.append(subprocess.Popen(argv, env=runner_env(tmp), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outs = [p.communicate(timeout=800)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outs)
    windows = []
    for name in ("east", "west"):
        with open_store(str(tmp_path / f"{name}.db")) as store:
            (record,) = store.records()
        assert record.status == "ok"
        windows += [(name, *layer["window"]) for m in record.models for layer in m["layers"]]
        windows += [(name, *m["repeats_window"]) for m in record.models]        # the repeats: leased too
    assert len(windows) == 8
    for team_a, start_a, end_a in windows:
        for team_b, start_b, end_b in windows:
            if team_a != team_b:
                assert end_a <= start_b or end_b <= start_a, windows


HOLDER = """
import sys, time
from ece408_op.grading import channel
lock = channel.TimingLock(sys.argv[1])
lock.acquire()
print(lock.path, flush=True)
time.sleep(600)
"""


def test_the_lock_is_at_the_machines_path_whatever_the_tmpdir(tmp_path):
    key = f"test-{os.getpid()}-{time.monotonic_ns()}"
    env = {k: v for k, v in os.environ.items() if k != channel.LOCK_DIR_ENV}
    holder = subprocess.Popen([*python_command(), "-c", HOLDER, key], env={**env, "TMPDIR": str(tmp_path)},
                              stdout=subprocess.PIPE, text=True)
    try:
        path = holder.stdout.readline().strip()
        assert path == os.path.join(channel.lock_dir(), f"ece408-timing-{key}.lock")
        assert os.path.dirname(path) in channel.LOCK_DIRS and not path.startswith(str(tmp_path))
        assert os.stat(path).st_mode & 0o777 == 0o644                     # every user's runner can open it
        probe = [sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); "
                 "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)", path]
        other_tmp = tmp_path / "other"
        other_tmp.mkdir()
        held = subprocess.run(probe, env={**env, "TMPDIR": str(other_tmp)}, capture_output=True, text=True)
        assert held.returncode != 0 and "BlockingIOError" in held.stderr   # held, seen from another TMPDIR
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        assert subprocess.run(probe, capture_output=True).returncode == 0  # a killed holder leaves it free
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        try:
            os.unlink(os.path.join(channel.lock_dir(), f"ece408-timing-{key}.lock"))
        except OSError:
            pass
