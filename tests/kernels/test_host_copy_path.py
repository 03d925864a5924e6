"""The host side of the GPU copy path (kernels/hostcopy/), on real memory: page arithmetic, faulting
pages in ahead of a copy (checked with mincore), the pooled memmove, the mode switch; and the fresh-memory
yardstick (bench/memory.py). The CUDA side runs in tests/mx/test_gpu_models_and_host_copy.py."""
import ctypes
import mmap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from suitekit import resident_pages
from ece408_op.errors import GpuError
from ece408_op.bench import memory
from ece408_op.kernels.hostcopy import engine
from ece408_op.kernels.hostcopy import host_memory

PAGE = mmap.PAGESIZE


def fresh_mapping(nbytes):
    """Anonymous memory that was never touched (as MXNet's fresh output is)."""
    area = host_memory.fresh_area(nbytes)
    return area, ctypes.addressof(ctypes.c_char.from_buffer(area))


@pytest.mark.parametrize("addr,nbytes,want", [
    (0, 3 * PAGE, (0, 3 * PAGE)),
    (10, 3 * PAGE, (PAGE, 3 * PAGE)),              # partial first and last pages left out
    (PAGE + 1, PAGE, (2 * PAGE, 2 * PAGE)),         # no whole page inside
    (5, 10, (PAGE, PAGE)),
])
def test_inner_pages(addr, nbytes, want):
    assert host_memory.inner_pages(addr, nbytes) == want


def test_pieces_cover_the_range_once():
    parts = host_memory.pieces(100, 100 + 10 * 7 + 3, 10)
    assert parts[0] == (100, 10) and parts[-1] == (170, 3)
    assert sum(n for _, n in parts) == 73 and all(a + n == b for (a, n), (b, _) in zip(parts, parts[1:]))


def test_populate_faults_pages_in_and_keeps_contents():
    nbytes = 64 * PAGE
    area, addr = fresh_mapping(nbytes)
    try:
        assert resident_pages(addr, nbytes) == 0
        host_memory.populate(addr + 8 * PAGE, 16 * PAGE)
        assert resident_pages(addr + 8 * PAGE, 16 * PAGE) == 16
        assert resident_pages(addr + 24 * PAGE, 40 * PAGE) == 0     # nothing outside the range
        view = host_memory.byte_view(addr, nbytes)
        view[:] = np.arange(nbytes) % 251
        host_memory.populate(addr, nbytes)                              # already there: contents kept
        assert np.array_equal(view, np.arange(nbytes) % 251)
    finally:
        area.close()


def test_populate_fallback_touch_keeps_contents(monkeypatch):
    # the path for kernels before 5.14 (no MADV_POPULATE_WRITE): one read-write per page
    monkeypatch.setattr(host_memory, "populate_supported", [False])
    area, addr = fresh_mapping(32 * PAGE)
    try:
        view = host_memory.byte_view(addr, 32 * PAGE)
        view[: 4 * PAGE] = 7
        host_memory.populate(addr, 32 * PAGE)
        assert resident_pages(addr, 32 * PAGE) == 32
        assert np.all(view[: 4 * PAGE] == 7) and not view[4 * PAGE:].any()
    finally:
        area.close()


def test_advise_huge_accepts_aligned_ranges_and_skips_small_ones():
    area, addr = fresh_mapping(8 << 20)
    try:
        assert host_memory.advise_huge(addr + 1, 100) is False          # no 2 MB-aligned inside: nothing asked
        host_memory.advise_huge(addr, 8 << 20)                          # accepted or refused (no THP): never raises
    finally:
        area.close()


def _thp_mode():
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return None
    return text[text.index("[") + 1:text.index("]")] if "[" in text else None


def test_fault_in_measures_private_memory_and_its_huge_pages():
    """The yardstick maps memory as malloc maps MXNet's outputs (private, anonymous): there the
    kernel grants transparent huge pages when asked (it did not on the shared mapping the yardstick
    used before, so ``bench memory`` reported 0 MB obtained where MXNet's y got them)."""
    mode = _thp_mode()
    if mode not in ("madvise", "always"):
        pytest.skip(f"transparent huge pages are {mode or 'not available'} on this kernel")
    with ThreadPoolExecutor(max_workers=1) as executor:
        seconds, gained = memory.fault_in(64 << 20, executor, huge=True)
        assert seconds > 0 and gained is not None and gained >= 2       # at least one 2 MB page
        if mode == "madvise":                                           # not asked: none given
            assert memory.fault_in(64 << 20, executor, huge=False)[1] == 0


def test_copy_bytes_on_the_pool_is_exact_across_pieces(rng):
    nbytes = 3 * host_memory.HOST_PIECE + 12345
    src = rng.integers(0, 256, nbytes, dtype=np.uint8)
    area, addr = fresh_mapping(nbytes + PAGE)
    try:
        dst = addr + 3                                              # not page-aligned, like MXNet's arrays
        futures = host_memory.copy_bytes(dst, host_memory.address(src), nbytes, fault_first=True)
        assert len(futures) == 4
        host_memory.wait_all(futures)
        assert np.array_equal(host_memory.byte_view(dst, nbytes), src)
        assert host_memory.byte_view(addr, 3).tolist() == [0, 0, 0]    # nothing written before dst
    finally:
        area.close()


def test_mode_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(engine.MODE_ENV, raising=False)
    assert engine.host_copy_mode() == "ring"
    monkeypatch.setenv(engine.MODE_ENV, "Registered")
    assert engine.host_copy_mode() == "registered"
    # bad input: an unknown mode names the choices
    monkeypatch.setenv(engine.MODE_ENV, "teleport")
    with pytest.raises(GpuError, match="ring, registered, direct"):
        engine.host_copy_mode()


def test_fresh_memory_yardstick_measures_this_machine():
    # both rates come from timing real work on real memory: finite and positive, and a memmove
    # into mapped pages is not slower than a tenth of mapping them (it does no page-table work)
    fault, copy = memory.measure_fresh_memory(32 << 20, repeats=1)
    assert 0 < fault < 1e4 and 0 < copy < 1e4
    assert copy > fault / 10
