"""What the test files share that is not a fixture: the checkout's paths, the interpreter's command,
the float64-reference checks, MXNet's skip, the ranked runs' sandbox, a small tmpfs. Its own module
(not tests/conftest.py) so that a test imports it by one name whatever conftest.py files the wings
hold (pytest imports each folder's conftest.py under the one name ``conftest``)."""
import ctypes
import mmap
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"


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


def allocations_per_calls(torch, device, call, calls=10):
    """(PyTorch's CUDA allocations made by ``calls`` calls of ``call`` after a first one, the last result)."""
    call()
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats(device)["allocation.all.allocated"]
    for _ in range(calls):
        out = call()
    return torch.cuda.memory_stats(device)["allocation.all.allocated"] - before, out


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
