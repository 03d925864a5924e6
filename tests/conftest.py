import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tiers

from suitekit import ROOT        # (the helpers tests import live in suitekit.py)


def _wings_on_path():
    """The tests mirror the package, one folder a wing (tests/conv/, tests/service/, ...: docs/tests.md).
    pytest imports each test file by its base name (no ``__init__.py``), putting only its own folder on
    ``sys.path``; a test imports another file's module by that name (``from test_numpy_layer import
    _random``) and the shared helpers of this folder by theirs (``from teams import ...``, ``from conftest
    import ROOT``). This folder and every wing's on ``sys.path``, so that both import from any folder,
    whatever files a run selects (tools/relayout_tests.py keeps the base names unique)."""
    here = ROOT / "tests"
    for folder in [here, *sorted(p for p in here.iterdir() if p.is_dir() and any(p.glob("test_*.py")))]:
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))


_wings_on_path()

# The tests choose their kernels explicitly or take the table/fallback order: no autotuning (timing
# and module builds) unless a test turns it on (tests/kernels/test_autotuner.py, tests/kernels/test_gpu_call_path.py).
# Compiled modules stay in one folder even where a test moves $XDG_CACHE_HOME.
os.environ.setdefault("ECE408_AUTOTUNE", "0")
if not os.environ.get("ECE408_CUBIN_CACHE"):
    from ece408_op.kernels.build import cubin_cache_dir
    os.environ["ECE408_CUBIN_CACHE"] = str(cubin_cache_dir())


def _signals_as_a_terminal_gives_them():
    """The tests send SIGINT and SIGHUP to the processes they start and expect what a terminal's
    user gets (Ctrl-C: exit 130). A suite started in the background (``cmd &`` in a script, nohup)
    inherits both ignored, and an ignored signal stays ignored across exec: give them back their
    defaults here, so that the children start as they would from a terminal."""
    import signal
    for signum, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGHUP, signal.SIG_DFL)):
        if signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, default)


def pytest_addoption(parser):
    tiers.add_options(parser)


# Files that share what there is one of on a machine: one worker under xdist takes them all, one at a time
# (two one-node Slurm clusters of one hostname are not tried).
ONE_AT_A_TIME = {"test_grade_class.py": "slurm", "test_slurm_dispatch.py": "slurm"}


@pytest.hookimpl(optionalhook=True)                 # a hook of pytest-xdist's: none without it
def pytest_xdist_make_scheduler(config, log):
    """``make test``'s parallel phase (``--dist loadfile``): each file's tests in one worker, so that a
    module's services start once, and the files of ONE_AT_A_TIME's group in one worker together."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LoadFileOneSlurm(LoadFileScheduling):
        def _split_scope(self, nodeid):
            scope = super()._split_scope(nodeid)
            return ONE_AT_A_TIME.get(scope.rsplit("/", 1)[-1], scope)
    return LoadFileOneSlurm(config, log)


def pytest_configure(config):
    """Each run its own temporary folder (unless --basetemp names one): pytest's shared
    /tmp/pytest-of-<user> is cleaned by the next run that starts, which then resets its permissions
    under a run still going (PostgreSQL's initdb failed in the first of two suites on one machine)."""
    _signals_as_a_terminal_gives_them()
    tiers.register(config)
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        import tempfile
        config.option.basetemp = tempfile.mkdtemp(prefix="pytest-ece408-")
        config._ece408_basetemp = config.option.basetemp


def pytest_collection_modifyitems(config, items):
    """``gpu`` (pytest.ini) marks the tests that need a GPU, wherever their folder: those of a
    ``test_gpu_*.py`` file and those using the ``gpu`` fixture (``cuda`` and ``gpu_alone`` use it), so that
    ``-m gpu`` picks them on a GPU machine and ``-m "not gpu"`` leaves them out where none is."""
    for item in items:
        if item.path.name.startswith("test_gpu_") or "gpu" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.gpu)


def pytest_sessionfinish(session, exitstatus):
    """This run's own temporary folder goes when every test passed (kept to look into otherwise),
    with any tmpfs a test left mounted in it."""
    folder = getattr(session.config, "_ece408_basetemp", None)
    if folder and exitstatus == 0:
        import shutil
        try:
            for line in Path("/proc/mounts").read_text().splitlines():
                target = line.split()[1] if len(line.split()) > 1 else ""
                if target.startswith(folder):
                    subprocess.run(["umount", "-l", target], capture_output=True)
        except OSError:
            pass
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def gpu():
    """The CUDA device the GPU tests use; skips them cleanly where there is none."""
    from ece408_op import kernels
    from ece408_op.errors import GpuError
    try:
        return kernels.GpuDevice.get()
    except GpuError as exc:
        pytest.skip(f"no GPU: {exc}")


@pytest.fixture(scope="module")
def cuda(gpu):
    """PyTorch's handle on the GPU tests' device, TF32 off (cuDNN the plain float32 baseline)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this PyTorch has no CUDA device")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch.device("cuda", gpu.index)


@pytest.fixture(scope="session")
def rng():
    return np.random.default_rng(408)


@pytest.fixture
def gpu_alone(gpu):
    """The device, for tests that read its memory in use (the driver reports it for the whole
    device): skipped under pytest-xdist, whose other workers allocate at the same time (its tests are
    marked serial: make test runs them in its serial phase, without -n)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("reads the whole device's memory in use: run without -n (other workers allocate)")
    return gpu


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory):
    """A wheel of this checkout (tests/laptop.py), built once a run."""
    from laptop import build_wheel
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def client_env(tmp_path_factory, built_wheel):
    """The python of a fresh client-only virtual environment holding that wheel (tests/laptop.py)."""
    from laptop import client_venv
    return client_venv(tmp_path_factory.mktemp("client"), built_wheel)


class _RunningServices:
    """The ``running_service`` fixture: ``running_service(root, workers=1, args=(), env=None)`` is a
    started ``servicekit.Service`` (the submission service on its own port and state folder),
    ``running_service.on(root, database, postgres, ...)`` one on SQLite or the module's PostgreSQL
    (``hostilekit.start_service``); each is closed at the test's end whatever happens, the last first."""

    def __init__(self):
        self.started = []

    def __call__(self, *args, **kwargs):
        from servicekit import Service
        service = Service(*args, **kwargs)
        self.started.append(service)
        return service.start()

    def on(self, *args, **kwargs):
        from hostilekit import start_service
        service = start_service(*args, **kwargs)
        self.started.append(service)
        return service

    def close(self):
        for service in reversed(self.started):
            service.close()


@pytest.fixture
def running_service():
    services = _RunningServices()
    try:
        yield services
    finally:
        services.close()
