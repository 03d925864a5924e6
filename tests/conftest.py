import ctypes
import mmap
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

import tiers

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"


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


def resident_pages(addr, nbytes):
    """How many of the pages of [addr, addr + nbytes) are in memory (mincore)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    start, end = addr // mmap.PAGESIZE * mmap.PAGESIZE, -(-(addr + nbytes) // mmap.PAGESIZE) * mmap.PAGESIZE
    vec = (ctypes.c_ubyte * ((end - start) // mmap.PAGESIZE))()
    assert libc.mincore(start, end - start, vec) == 0, ctypes.get_errno()
    return sum(v & 1 for v in vec)


@contextmanager
def small_tmpfs(folder, size):
    """A tmpfs of ``size`` (mount's syntax, e.g. "1m") made at ``folder`` for the block: a disk that
    fills up (root only); unmounted lazily after, whatever the block left open."""
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def require_mxnet(module="ece408_op.mx.op"):
    """Import an MXNet-dependent module of ours, or skip (module level too) where MXNet is unusable
    (not installed, or NumPy 2 as in the GPU benchmark environment)."""
    import importlib

    import ece408_op
    reason = ece408_op.mxnet_unavailable()
    if reason is not None:
        pytest.skip(f"MXNet unusable here: {reason}", allow_module_level=True)
    return importlib.import_module(module)


def ranked_engine():
    """The sandbox of a ranked run on this machine: bubblewrap where it runs, else host (the GPU
    machine may lack bubblewrap)."""
    from ece408_op.grading.sandbox import BubblewrapSandbox, Limits, SandboxError
    try:
        BubblewrapSandbox(Limits()).check()
        return "bubblewrap"
    except SandboxError:
        return "host"


# A fresh interpreter that imports mxnet before ece408_op relies on the start-up hook (a .pth file
# the install puts in site-packages) for MXNet's `np.bool`; python -S (the GPU kit's mxpy) reads no .pth.
needs_startup_hook = pytest.mark.skipif(sys.flags.no_site, reason="imports mxnet first: needs the start-up "
                                        "hook, a .pth file, which this interpreter's -S does not read")


def python_command():
    """This interpreter, with the same -S (the GPU kit's mxpy runs without site)."""
    return [sys.executable] + (["-S"] if sys.flags.no_site else [])


def run_script(name, *args, env=None, cwd=None):
    """Run one of scripts/ in a fresh interpreter; returns CompletedProcess (text)."""
    return subprocess.run([*python_command(), str(SCRIPTS / name), *map(str, args)],
                          capture_output=True, text=True, cwd=cwd or ROOT,
                          env={**os.environ, **(env or {})}, timeout=600)


def assert_close(got, ref, atol=1e-4, rtol=1e-5, what="output"):
    """Tolerance = absolute part + |ref| * eps; on mismatch list the first differing elements."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    bad = ~(np.abs(got - ref) <= atol + rtol * np.abs(ref))
    if bad.any():
        idx = np.argwhere(bad)[:5]
        lines = [f"  at {tuple(i)}: got {got[tuple(i)]!r}, want {ref[tuple(i)]!r}" for i in idx]
        pytest.fail(f"{what}: {int(bad.sum())} of {bad.size} elements differ\n" + "\n".join(lines))


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


def allocations_per_calls(torch, device, call, calls=10):
    """(PyTorch's CUDA allocations made by ``calls`` calls of ``call`` after a first one, the last result)."""
    call()
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats(device)["allocation.all.allocated"]
    for _ in range(calls):
        out = call()
    return torch.cuda.memory_stats(device)["allocation.all.allocated"] - before, out


@pytest.fixture(scope="session")
def rng():
    return np.random.default_rng(408)


def check_against_reference(y, x, k, images=None, what="kernel"):
    """y (float32) vs the float64 reference on ``images`` (default all), within the float32 bound;
    on failure lists the first differing elements."""
    from ece408_op.conv import reference_and_bound
    images = np.arange(len(x)) if images is None else np.asarray(images)
    ref, bound = reference_and_bound(x[images], k)
    got = np.asarray(y[images], dtype=np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    bad = ~(np.abs(got - ref) <= bound)            # NaN counts as bad
    if bad.any():
        idx = np.argwhere(bad)[:5]
        lines = [f"  image {images[i[0]]} {tuple(i[1:])}: got {got[tuple(i)]!r}, want {ref[tuple(i)]!r}"
                 for i in idx]
        pytest.fail(f"{what}: {int(bad.sum())} of {bad.size} elements off\n" + "\n".join(lines))


@pytest.fixture
def gpu_alone(gpu):
    """The device, for tests that read its memory in use (the driver reports it for the whole
    device): skipped under pytest-xdist, whose other workers allocate at the same time (its tests are
    marked serial: make test runs them in its serial phase, without -n)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("reads the whole device's memory in use: run without -n (other workers allocate)")
    return gpu


def striped_winograd_case():
    """(spec, x, k, ref, bound) where Winograd misses the elementwise float32 bound: zero 3x3 windows
    inside 6x6 tiles of large values (stripes of 3 rows and columns). The direct sum gives those outputs
    exactly 0 (the bound there is 1e-6); Winograd mixes the tile, so they carry rounding of the tile's
    magnitude, still tiny against the layer's values. Used by the CPU's and the GPU's Winograd tests."""
    from ece408_op.conv import ConvSpec, reference_and_bound
    rng = np.random.default_rng(5)
    spec = ConvSpec.from_attrs(num_filter="32", kernel="3", pad="1")
    x = rng.standard_normal((2, 64, 28, 28)).astype(np.float32)
    stripes = np.arange(28) // 3 % 2 == 0
    x *= stripes[:, None] & stripes[None, :]
    k = rng.standard_normal((32, 64, 3, 3)).astype(np.float32)
    ref, bound = reference_and_bound(x, k, None, spec)
    return spec, x, k, ref, bound


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
