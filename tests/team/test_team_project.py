"""A team's own forward (issue: team kernels): the project template, its milestones, the team
process's lock-down, the launch plan's checks, fresh inputs and the reference checks. CPU only
here; tests/team/test_gpu_team_kernels.py runs the GPU half on a GPU machine."""
import os
import re
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from suitekit import require_mxnet
from teams import EARLY_THREAD, FAKE_LINES, FORKS, PLAIN, REPLAY, cli, reference_accuracies, team_project

from ece408_op.tasks.conv import SOLUTIONS
from ece408_op.team import checks, lockdown, plan as team_plan, project
from ece408_op.team.checks import CheckError, Layer
from ece408_op.team.harness import TeamError, TeamProcess
from ece408_op.team.runtime import TeamRuntime

COURSE_LINES = re.compile(r"Loading fashion-mnist data\.\.\. done\nLoading model\.\.\. done\nNew Inference\n"
                          r"Op Time: \d+\.\d{6}\nCorrectness: (\S+) Model: (\S+)\n\Z")


# ---------------------------------------------------------------------------- init

def test_init_makes_the_template_and_refuses_a_used_folder(tmp_path):
    out = cli("init", tmp_path / "team")
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in (tmp_path / "team").iterdir()) == sorted(project.TEMPLATE_FILES)
    for name in project.TEMPLATE_FILES:
        assert (tmp_path / "team" / name).read_bytes() == (project.TEMPLATE / name).read_bytes()
    again = cli("init", tmp_path / "team")
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr.strip() == (f"error: {tmp_path / 'team'} already exists and is not an empty folder; "
                                    "choose a new folder for the team (or restore the template's files it lacks: "
                                    f"python -m ece408_op init {tmp_path / 'team'} --restore)")


def test_template_is_the_course_interface():
    cu = (project.TEMPLATE / "new-forward.cu").read_text()
    assert re.search(r'extern "C" __global__ void forward_kernel\(float \*y, const float \*x, const float \*k,\s*'
                     r"const int B, const int M, const int C,\s*const int H, const int W, const int K\)", cu)
    assert "def launch(B, M, C, H, W, K):" in (project.TEMPLATE / "launch.py").read_text()
    assert "def forward(y, x, k):" in (project.TEMPLATE / "new-forward.py").read_text()


# ---------------------------------------------------------------------------- the CPU milestone

@pytest.fixture(scope="module")
def expected_100():
    require_mxnet()
    return reference_accuracies(100)


@pytest.mark.slow
def test_template_m2_prints_the_course_lines_with_the_right_correctness(tmp_path, expected_100):
    team = team_project(tmp_path / "team")
    here = cli("m2", 100, cwd=team)                             # from inside the folder
    assert here.returncode == 0, here.stderr
    match = COURSE_LINES.match(here.stdout)
    assert match and float(match[1]) == expected_100["ece408-high"], here.stdout
    there = cli("m2", "ece408-low", 100, "--team", team)        # from anywhere
    assert there.returncode == 0, there.stderr
    match = COURSE_LINES.match(there.stdout)
    assert match and float(match[1]) == expected_100["ece408-low"] and match[2] == "ece408-low", there.stdout


@pytest.mark.slow
def test_team_forward_really_runs(tmp_path, expected_100):
    """The team's file is what computes: a wrong forward gives a wrong Correctness, a failing one
    a one-line error naming its file and line."""
    wrong = team_project(tmp_path / "wrong", cpu=PLAIN.replace("for p in range(K):", "for p in range(K - 1):"))
    out = cli("m2", 100, "--team", wrong)
    assert out.returncode == 1, out.stdout
    assert "the output differs from the reference at (b, m, h, w)" in out.stderr and len(out.stderr.splitlines()) == 1
    broken = team_project(tmp_path / "broken", cpu=PLAIN.replace("def forward(y, x, k):", "def forward(y, x, k):\n    1 / 0"))
    out = cli("m2", 100, "--team", broken)
    assert out.returncode == 1
    assert out.stderr.strip().endswith("error: new-forward.py line 5: ZeroDivisionError: division by zero")


@pytest.mark.slow                                   # measured a milestone: 9 s (loaded machine)
def test_fake_printed_lines_stay_printed_text(tmp_path, expected_100):
    team = team_project(tmp_path / "team", cpu=FAKE_LINES)
    out = cli("m2", 100, "--team", team)
    assert out.returncode == 0, out.stderr
    times = re.findall(r"^Op Time: (\S+)$", out.stdout, re.M)
    # the team's prints (warm-up and timed call), then the harness's own line
    assert times[:-1] == ["0.000001"] * 2 and float(times[-1]) > 0.000001, out.stdout


@pytest.mark.slow
def test_missing_team_files_are_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    out = cli("m2", 10, "--team", tmp_path / "empty")
    assert out.returncode == 1 and out.stderr.strip() == (
        f"error: --team {tmp_path / 'empty'}: no new-forward.py or new-forward.cu or launch.py in it; "
        "make a team project with: python -m ece408_op init DIR")
    team = team_project(tmp_path / "nofn", cpu="def forwad(y, x, k):\n    pass\n")
    out = cli("m2", 10, "--team", team)
    assert out.returncode == 1 and out.stderr.strip() == "error: new-forward.py: AttributeError: new-forward.py defines no function forward()"


# ---------------------------------------------------------------------------- lock-down

def _in_child(body):
    pid = os.fork()
    if pid == 0:
        try:
            lockdown.lock_down()
            code = body()
        except BaseException:                # noqa: BLE001
            code = 99
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_locked_process_starts_no_process_and_runs_no_program():
    def attempt(action):
        def body():
            try:
                action()
            except PermissionError:
                return 0
            return 1
        return body
    assert _in_child(attempt(os.fork)) == 0
    assert _in_child(attempt(lambda: subprocess.run(["/bin/true"]))) == 0
    assert _in_child(attempt(lambda: os.execv("/bin/true", ["true"]))) == 0
    assert _in_child(attempt(lambda: os.posix_spawn("/bin/true", ["true"], {}))) == 0

    def threads():
        seen = []
        workers = [threading.Thread(target=seen.append, args=(i,)) for i in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return 0 if sorted(seen) == [0, 1, 2, 3] and lockdown.status() == 2 else 1
    assert _in_child(threads) == 0


def test_control_without_lock_down_does_fork():
    """The control: the same attempt, unlocked, succeeds (the test above can fail)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    assert os.waitpid(pid, 0)[0] == pid


def test_locked_process_cannot_stop_wake_or_slow_its_harness():
    """A red team's attack: a team process that SIGSTOPped the harness (its parent, same user), woke
    itself with a POSIX timer sending SIGCONT while held stopped, or reniced the harness. Signals
    reach only the process itself; timers, I/O signals and io_uring are refused; scheduling calls
    reach only itself."""
    import ctypes
    import fcntl
    import signal
    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)

    def refused(call):
        def body():
            try:
                call()
            except PermissionError:
                return 0
            return 1
        return body

    def self_signals():
        old = signal.signal(signal.SIGUSR1, lambda *a: None)
        os.kill(os.getpid(), signal.SIGUSR1)               # itself: still allowed
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)
        signal.signal(signal.SIGUSR1, old)
        os.sched_setaffinity(0, os.sched_getaffinity(0))   # itself: allowed
        os.nice(1)
        return 0

    def timer():
        timer_id = ctypes.c_void_p()
        if libc.timer_create(1, None, ctypes.byref(timer_id)) != 0 and ctypes.get_errno() == 1:
            return 0
        return 1

    def io_signal():
        r, w = os.pipe()
        fcntl.fcntl(r, 10, signal.SIGCONT)                  # F_SETSIG
    # SIGCONT stands for any signal (the filter reads the target, not the signal): harmless if it got through
    for call in (lambda: os.kill(parent, signal.SIGCONT), lambda: os.kill(0, signal.SIGCONT),
                 lambda: os.kill(-os.getpgid(0), signal.SIGCONT), lambda: os.setpriority(os.PRIO_PROCESS, parent, 0),
                 lambda: os.sched_setaffinity(parent, {0}), io_signal,
                 lambda: fcntl.fcntl(os.open("/", os.O_RDONLY), 1026, 0)):    # F_NOTIFY
        assert _in_child(refused(call)) == 0
    assert _in_child(timer) == 0 and _in_child(self_signals) == 0
    pid = os.fork()                                         # the control: unlocked, the timer is made
    if pid == 0:
        timer_id = ctypes.c_void_p()
        os._exit(0 if libc.timer_create(1, None, ctypes.byref(timer_id)) == 0 else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def test_filter_program_shape():
    prog = lockdown.filter_program("x86_64")
    assert prog[0] == (lockdown.BPF_LD_W_ABS, 0, 0, lockdown.OFFSET_ARCH) and prog[-1][3] == lockdown.SECCOMP_RET_ALLOW
    assert len(lockdown._pack(prog)) == 8 * len(prog) and len(prog) < 256       # every jump fits a byte
    with pytest.raises(lockdown.LockdownError):
        lockdown.filter_program("sparc64")


# ---------------------------------------------------------------------------- the team process

def _run_cpu(team, runtime_kwargs=None, batch=6):
    rng = np.random.default_rng(1)
    x = rng.random((batch, 2, 9, 10), dtype=np.float32)
    k = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    out = np.empty((batch, 3, 7, 8), np.float32)
    with TeamRuntime(team, **(runtime_kwargs or {})) as runtime:
        seconds = runtime.forward_cpu(out, x, k)
        return seconds, out, x, k, runtime.layers


def test_runtime_computes_checks_and_keeps_figures(tmp_path):
    team = team_project(tmp_path / "team", cpu=PLAIN)
    seconds, out, x, k, layers = _run_cpu(team, {"repeats": 3})
    from ece408_op.conv import reference_and_bound
    ref, bound = reference_and_bound(x, k)
    assert np.all(np.abs(out - ref) <= bound)
    (layer,) = layers
    assert layer["layer"] == {"B": 6, "M": 3, "C": 2, "H": 9, "W": 10, "K": 3} and len(layer["fresh"]) == 3
    assert seconds == layer["op_time"] == sorted(layer["fresh"])[1] and layer["checked"] == "all"
    start, end = layer["window"]
    assert start <= end and end - start < 600                        # the team's window (the timing lease)


@pytest.mark.parametrize("source, message", [
    (FORKS, "PermissionError: [Errno 1] Operation not permitted; a team's forward may not start processes"),
    (EARLY_THREAD, "the output differs from the reference at"),
    (REPLAY, "fresh run 2: the output differs from the reference"),
])
def test_team_process_attacks_fail_in_one_line(tmp_path, source, message):
    team = team_project(tmp_path / "team", cpu=source)
    with pytest.raises((TeamError, CheckError)) as info:
        _run_cpu(team, {"repeats": 2})
    assert message in str(info.value) and "\n" not in str(info.value)


def test_worker_is_stopped_between_requests(tmp_path):
    team = team_project(tmp_path / "team", cpu=PLAIN)
    with TeamProcess(team, "cpu") as worker:
        state = open(f"/proc/{worker.proc.pid}/stat").read().rsplit(")", 1)[1].split()[0]
        assert state == "T" and worker.stopped                       # SIGSTOPped after hello
        with open(f"/proc/{worker.proc.pid}/status") as f:
            assert "Seccomp:\t2" in f.read()                        # and locked down


SPINS = PLAIN.replace("import numpy as np", """import numpy as np, threading
def _spin():
    while True:
        pass
threading.Thread(target=_spin, daemon=True).start()""")


@pytest.mark.slow
def test_a_team_process_that_ran_while_held_is_refused(tmp_path):
    """Whatever woke it (here: a SIGCONT from outside, standing for any source the lock-down could
    miss), a team process that ran while the harness held it stopped is refused before the clock
    starts; the control, held the whole time, answers as usual (its spinning thread runs only while
    it answers)."""
    team = team_project(tmp_path / "team", cpu=SPINS)
    x = np.random.default_rng(1).random((2, 1, 8, 8), dtype=np.float32)
    k = np.random.default_rng(2).random((3, 1, 3, 3), dtype=np.float32)
    with TeamProcess(team, "cpu") as worker:
        worker.forward(np.empty((2, 3, 6, 6), np.float32), x, k)                   # the control
        os.kill(worker.proc.pid, signal.SIGCONT)
        time.sleep(0.3)
        os.kill(worker.proc.pid, signal.SIGSTOP)
        while open(f"/proc/{worker.proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
            time.sleep(0.01)
        with pytest.raises(TeamError, match=r"the team process ran while the harness held it stopped \(\d+\.\d ms on a CPU"):
            worker.forward(np.empty((2, 3, 6, 6), np.float32), x, k)
        assert worker.proc.poll() is not None                                      # killed


def test_a_team_process_holding_a_gpu_device_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("makes a stand-in device node in /dev (root only)")
    node = Path(f"/dev/nvidia-ece408-test-{os.getpid()}")
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))                         # /dev/null's numbers
    try:
        team = team_project(tmp_path / "team", launch=f"HELD = open({str(node)!r})\n" +
                            (project.TEMPLATE / "launch.py").read_text())
        with pytest.raises(TeamError, match=r"the team's launch.py opened the GPU \(/dev/nvidia-ece408-test"):
            TeamProcess(team, "gpu").start()
    finally:
        node.unlink()


def test_worker_environment_holds_nothing_of_the_harness(tmp_path, monkeypatch):
    monkeypatch.setenv("ECE408_DB", "postgresql://grader:hunter2@db/x")
    monkeypatch.setenv("PGPASSWORD", "hunter2")
    team = team_project(tmp_path / "team", cpu=PLAIN.replace("def forward(y, x, k):", "import os\nSEEN = dict(os.environ)\ndef forward(y, x, k):\n    assert not any('hunter2' in v for v in SEEN.values()), SEEN"))
    _run_cpu(team)


# ---------------------------------------------------------------------------- launch plans

TEMPLATE_PLAN = [{"kernel": "forward_kernel", "grid": [4, 50, 10], "block": [16, 16, 1], "shared": 0,
                  "args": ["y", "x", "k", 10, 50, 1, 28, 28, 5], "stream": 0}]


def test_plan_of_the_template_parses():
    plan = team_plan.parse_plan(TEMPLATE_PLAN)
    (step,) = plan.kernels
    assert step.grid == (4, 50, 10) and step.threads == 256 and [a.kind for a in step.args] == ["ptr"] * 3 + ["i32"] * 6
    assert team_plan.parse_plan(plan.to_json()) == plan


@pytest.mark.parametrize("data, message", [
    ({"kernel": "k"}, "must return a list"),
    ([], "returned no kernel(...) step"),
    ([{"kernel": "forward kernel", "grid": [1], "block": [1]}], "its name must be a C identifier"),
    ([{"kernel": "f", "grid": [0, 1, 1], "block": [1]}], "grid (0, 1, 1) has a dimension below 1"),
    ([{"kernel": "f", "grid": [1], "block": [32, 32, 2]}], "block (32, 32, 2) has 2048 threads; at most 1024"),
    ([{"kernel": "f", "grid": [1], "block": [1], "shared": -4}], "shared must be a byte count"),
    ([{"kernel": "f", "grid": [1], "block": [1], "args": ["z"]}], "argument 1 names buffer 'z'"),
    ([{"kernel": "f", "grid": [1], "block": [1], "args": [2 ** 40]}], "does not fit a 32-bit int; pass i64"),
    ([{"kernel": "f", "grid": [1], "block": [1], "args": [float("nan")]}], "is not a finite float"),
    ([{"kernel": "f", "grid": [1], "block": [1], "stream": 9}], "stream must be 0 to 3"),
    ([{"kernel": "f", "grid": [1], "block": [1], "turbo": True}], "unknown field 'turbo'"),
    ([{"workspace": "y", "bytes": 4}, {"kernel": "f", "grid": [1], "block": [1]}], "the name y is already taken"),
    ([{"workspace": "w", "bytes": 0}, {"kernel": "f", "grid": [1], "block": [1]}], "whole number of bytes"),
    ([{"constant": "c_k", "source": "q"}, {"kernel": "f", "grid": [1], "block": [1]}], "its source must be one of"),
    ([{"kernel": "f", "grid": [1], "block": [1]}] * 300, "at most 256 launches"),
])
def test_bad_plans_are_refused_in_one_line(data, message):
    with pytest.raises(team_plan.PlanError) as info:
        team_plan.parse_plan(data)
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_plan_from_the_team_process(tmp_path):
    team = team_project(tmp_path / "team")
    with TeamProcess(team, "gpu") as worker:
        plan = worker.plan({"B": 10, "M": 50, "C": 1, "H": 28, "W": 28, "K": 5})
    assert plan.to_json() == TEMPLATE_PLAN
    bad = team_project(tmp_path / "bad", launch="def launch(B, M, C, H, W, K):\n    return [object()]\n")
    with TeamProcess(bad, "gpu") as worker, pytest.raises(TeamError) as info:
        worker.plan({"B": 1, "M": 1, "C": 1, "H": 5, "W": 5, "K": 3})
    assert str(info.value) == "launch.py: ValueError: launch() returned a object; use lists, numbers and strings"


# ---------------------------------------------------------------------------- fresh inputs, checks, floor

def test_fresh_inputs_and_checked_values_come_from_secret_randomness():
    """Every fresh input is new (no two alike, nothing to predict from a seed a team could recover)
    and the sampled values are uniform over the whole output."""
    a, b = checks.fresh_input((2, 3, 8, 8)), checks.fresh_input((2, 3, 8, 8))
    assert a.dtype == np.float32 and np.all((a >= 0) & (a < 1)) and not np.array_equal(a, b)
    shared = np.empty((2, 3, 8, 8), np.float32)
    assert not np.array_equal(checks.fill_fresh(shared), a)
    picks = np.concatenate([checks.secret_indices(1000, 2048) for _ in range(20)])
    assert picks.min() >= 0 and picks.max() < 1000
    counts = np.bincount(picks // 100, minlength=10)                    # ten bins of 100 indices
    assert counts.min() > 0.8 * counts.mean() and counts.max() < 1.2 * counts.mean()
    assert not np.array_equal(checks.secret_indices(10 ** 9, 64), checks.secret_indices(10 ** 9, 64))


def _layer_data(layer, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.random(layer.x_shape, dtype=np.float32)
    k = rng.standard_normal(layer.k_shape).astype(np.float32)
    from ece408_op.conv import conv2d_forward_reference
    return x, k, conv2d_forward_reference(x, k).astype(np.float32)


def test_check_output_names_the_first_wrong_value():
    layer = Layer(2, 2, 1, 6, 6, 3)
    x, k, y = _layer_data(layer)
    checks.check_output(y, x, k, layer, "layer 1")
    y[1, 1, 2, 3] += 1e-3
    with pytest.raises(CheckError, match=r"layer 1: the output differs from the reference at \(b, m, h, w\) = "
                                         r"\(1, 1, 2, 3\): got .* \(1 of 64 checked values\)"):
        checks.check_output(y, x, k, layer, "layer 1")


def test_a_large_output_is_sampled_and_a_skipped_percent_is_caught(monkeypatch):
    """Past WHOLE_CHECK_MACS the check samples SAMPLED_VALUES secret indices: a forward that skips
    1% of its outputs (here every 100th value left at 0) is caught every time (0.99^2048 = 1e-9)."""
    monkeypatch.setattr(checks, "WHOLE_CHECK_MACS", 1000)
    layer = Layer(40, 8, 2, 12, 12, 3)
    x, k, y = _layer_data(layer, 1)
    checks.check_output(y, x, k, layer, "layer 1")                 # a right output passes the sample
    skipped = y.copy().reshape(-1)
    skipped[::100] = 0.0
    for _ in range(20):
        with pytest.raises(CheckError, match=r"of 2048 checked values"):
            checks.check_output(skipped.reshape(y.shape), x, k, layer, "layer 1")
    images = y.copy()
    images[7] = 0.0                                                   # one whole image of 40 skipped
    with pytest.raises(CheckError, match=r"at \(b, m, h, w\) = \(7, "):
        checks.check_output(images, x, k, layer, "layer 1")


def test_an_op_time_below_the_physical_floor_is_refused():
    layer = Layer(10000, 50, 1, 28, 28, 5)
    peaks = checks.Peaks(1e12, 1e15)
    floor = checks.floor_seconds(layer, peaks)
    assert floor == pytest.approx(layer.bytes / 1e12)
    checks.check_floor(floor * 1.01, layer, peaks, "layer 1")
    with pytest.raises(CheckError, match="Op Time 0.000001 s is below what this device can do"):
        checks.check_floor(1e-6, layer, peaks, "layer 1")
    with pytest.raises(CheckError):
        checks.check_floor(float("nan"), layer, peaks, "layer 1")
    cached = checks.Peaks(1e12, 1e15, cache=50 << 20)                 # what an L2 can hold is not counted
    assert checks.floor_seconds(layer, cached) == pytest.approx((layer.bytes - (50 << 20)) / 1e12)


def test_course_layer_refuses_what_the_team_interface_does_not_compute():
    from ece408_op.conv import ConvSpec
    spec = ConvSpec.from_attrs(num_filter="4", kernel="(3, 3)", pad="(1, 1)")
    with pytest.raises(Exception, match="this layer has padding"):
        checks.course_layer((1, 2, 8, 8), (4, 2, 3, 3), spec)
    assert checks.course_layer((1, 2, 8, 8), (4, 2, 3, 3)) == Layer(1, 4, 2, 8, 8, 3)


# ---------------------------------------------------------------------------- the build

def test_template_kernels_compile_for_hopper(tmp_path):
    from ece408_op.team.build import BuildError, compile_kernels
    import shutil
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    team = team_project(tmp_path / "team")
    image = compile_kernels(team, "sm_90")
    assert image[:4] == b"\x7fELF" and b"forward_kernel" in image
    broken = team_project(tmp_path / "broken", gpu=(project.TEMPLATE / "new-forward.cu").read_text().replace("acc +=", "acc + ="))
    with pytest.raises(BuildError, match=r"new-forward.cu did not compile: .*error"):
        compile_kernels(broken, "sm_90")


EXAMPLES = {p.name: p for p in sorted(SOLUTIONS.glob("correct/gpu-*"))}   # the task's correct GPU teams
COURSE_LAYERS = [{"B": 10000, "M": 50, "C": 1, "H": 28, "W": 28, "K": 5},      # 2017
                 {"B": 10000, "M": 16, "C": 6, "H": 30, "W": 30, "K": 5},      # 2018 conv2
                 {"B": 10000, "M": 24, "C": 12, "H": 33, "W": 33, "K": 5}]     # 2019 conv2


def test_grader_kernels_and_the_gpu_attack_kernels_compile_for_hopper(tmp_path):
    """What the GPU machine runs, compiled here first: the grader's fill and check kernels (no disk
    cache: a fresh build per process) and the attack kernels of tests/team/test_gpu_team_kernels.py."""
    import shutil
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    from gpu_sources import ONE_IMAGE_CU, TAMPER_CU, TAMPER_LAUNCH
    from ece408_op.kernels.team import grader_cubin
    from ece408_op.team.build import compile_kernels
    image = grader_cubin("sm_90")
    assert image[:4] == b"\x7fELF" and b"grader_fill" in image and b"grader_check" in image
    for name, source, launch in (("one", ONE_IMAGE_CU, None), ("tamper", TAMPER_CU, TAMPER_LAUNCH)):
        team = team_project(tmp_path / name, gpu=source, launch=launch)
        image = compile_kernels(team, "sm_90")
        with TeamProcess(team, "gpu") as worker:
            plan = worker.plan(COURSE_LAYERS[0])
        assert all(step.name.encode() in image for step in plan.kernels)



@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_worked_examples_compile_and_plan_the_course_layers(example):
    import shutil
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    from ece408_op.team.build import compile_kernels
    team = EXAMPLES[example]                 # the solution folder itself, as a team
    image = compile_kernels(team, "sm_90")
    with TeamProcess(team, "gpu") as worker:
        plans = [worker.plan(layer) for layer in COURSE_LAYERS]
    for plan in plans:
        assert all(step.name.encode() in image for step in plan.kernels)
    kinds = {type(s).__name__ for p in plans for s in p.steps}
    assert ("ConstantStep" in kinds) == (example == "gpu-constant")
    assert bool(plans[0].workspaces) == (example == "gpu-unroll")
