"""The ctypes launcher without a GPU: parameter packing (C layout, as PyCUDA packed them), and the
recorded launches of the network hot path replayed with another call's pointers (the driver replaced
by a fake that keeps what it was given)."""
import ctypes
import struct

import numpy as np
import pytest

from ece408_op.kernels import cudadrv


class FakeDriver:
    """Stands in for libcuda: keeps each launch's handle, dimensions, stream and parameter bytes."""

    def __init__(self):
        self.launches, self.copies = [], []
        self.ex_launches = 0

    def cuLaunchKernel(self, handle, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        buffer, size = extra[1], ctypes.c_size_t.from_address(extra[3]).value
        self.launches.append((handle, (gx, gy, gz, bx, by, bz), shared, stream, ctypes.string_at(buffer, size)))
        return 0

    def raw_launch(self, *args):
        """cuLaunchKernel as a replay calls it: ctypes values (no argtypes), ints as the driver sees them."""
        assert all(isinstance(a, (ctypes.c_void_p, ctypes.c_uint, ctypes.Array)) or a is None for a in args)
        values = [a.value or 0 if isinstance(a, (ctypes.c_void_p, ctypes.c_uint)) else a for a in args]
        return self.cuLaunchKernel(*values)

    def raw_launch_ex(self, config_ref, function, params, extra):
        """cuLaunchKernelEx as a replay calls it: the CUlaunchConfig by reference, the function as a c_void_p."""
        self.ex_launches += 1
        config = config_ref._obj
        assert isinstance(config, cudadrv._LaunchConfig) and isinstance(function, ctypes.c_void_p)
        assert params is None and config.num_attrs == 0
        return self.cuLaunchKernel(function.value, *config.grid, *config.block, config.shared, config.stream or 0,
                                   params, extra)

    def cuMemcpyDtoDAsync_v2(self, dst, src, nbytes, stream):
        self.copies.append((dst, src, nbytes, stream))
        return 0


@pytest.fixture(params=["cuLaunchKernelEx", "cuLaunchKernel"])
def driver(monkeypatch, request):
    """The fake driver; a replay launches with cuLaunchKernelEx, or cuLaunchKernel where the driver has no Ex."""
    fake = FakeDriver()
    monkeypatch.setattr(cudadrv, "_lib", fake)
    monkeypatch.setattr(cudadrv, "_raw_launch", fake.raw_launch)
    monkeypatch.setattr(cudadrv, "_raw_launch_ex", fake.raw_launch_ex if request.param == "cuLaunchKernelEx" else None)
    cudadrv.set_stream(0)
    yield fake
    cudadrv.set_stream(0)


def test_parameters_are_packed_with_c_alignment():
    buf = cudadrv._pack([np.uintp(0x1000), np.int32(7), np.uintp(0x2000), np.int64(-3), np.float32(1.5), 0x3000])
    # pointer, int, 4 bytes of padding, pointer, long, float, 4 bytes of padding, pointer
    assert len(buf) == 48
    assert struct.unpack("@QiQqfP", buf) == (0x1000, 7, 0x2000, -3, 1.5, 0x3000)


def test_a_kernel_goes_to_the_threads_stream(driver):
    kernel = cudadrv.Kernel(None, "k", 0xABC)
    previous = cudadrv.set_stream(0x77)
    kernel(np.uintp(16), np.int32(3), block=(128, 1, 1), grid=(5, 2))
    cudadrv.set_stream(previous)
    kernel(np.uintp(32), np.int32(4), block=(64,), grid=(1,))
    (h1, d1, _, s1, p1), (_, d2, _, s2, p2) = driver.launches
    assert (h1, d1, s1) == (0xABC, (5, 2, 1, 128, 1, 1), 0x77) and (d2, s2) == ((1, 1, 1, 64, 1, 1), 0)
    assert struct.unpack("@Qi", p1) == (16, 3) and struct.unpack("@Qi", p2) == (32, 4)


def test_recorded_launches_replay_with_the_next_calls_pointers(driver):
    y, x, k, bias, workspace = 0x10000, 0x20000, 0x30000, 0x40000, 0x90000
    sizes = (0x1000, 0x1000, 0x100, 0x10)
    pad = cudadrv.Kernel(None, "pad", 1)
    conv = cudadrv.Kernel(None, "conv", 2)
    with cudadrv.Recording(tuple(zip((y, x, k, bias), sizes))) as recording:
        pad(np.uintp(workspace), np.uintp(x), np.int64(12), block=(256, 1, 1), grid=(3, 1))
        cudadrv.memcpy_dtod_async(0x50000, k, 0x100)                         # weights into a constant bank
        for chunk in range(2):                                                # a chunked launch: offsets
            conv(np.uintp(y + chunk * 0x800), np.uintp(workspace), np.uintp(bias), np.int32(7),
                 block=(128, 1, 1), grid=(9, 1), shared=512)
    assert len(recording.ops) == 4
    driver.launches.clear()
    driver.copies.clear()
    y2, x2, k2, bias2 = 0x110000, 0x120000, 0x130000, 0x140000
    recording.replay((y2, x2, k2, bias2), 0x99)
    assert driver.copies == [(0x50000, k2, 0x100, 0x99)]
    (_, _, _, s0, p0), (_, _, sh1, _, p1), (_, d2, _, _, p2) = driver.launches
    assert s0 == 0x99 and struct.unpack("@QQq", p0) == (workspace, x2, 12)      # the workspace stays
    assert sh1 == 512 and struct.unpack("@QQQi", p1) == (y2, workspace, bias2, 7)
    assert d2 == (9, 1, 1, 128, 1, 1) and struct.unpack("@QQQi", p2) == (y2 + 0x800, workspace, bias2, 7)


def test_an_absent_bias_is_never_bound(driver):
    conv = cudadrv.Kernel(None, "conv", 2)
    with cudadrv.Recording(((0x1000, 64), (0x2000, 64), (0x3000, 64), (0, 16))) as recording:
        conv(np.uintp(0x1000), np.uintp(0), block=(32,), grid=(1,))
    assert recording.ops[0].slots == ((0, 0, 0),)
    driver.launches.clear()
    recording.replay((0x5000, 0x6000, 0x7000, 0), 0)
    assert struct.unpack("@QQ", driver.launches[0][4]) == (0x5000, 0)


def test_a_replay_rewrites_only_the_pointers_and_only_when_they_change(driver, monkeypatch):
    """Each recorded launch keeps its own packed parameters: the same pointers as the call before launch
    them as they are (nothing written), other pointers are written into their slots alone (the int
    parameter's bytes are never touched), and going back writes the first ones again."""
    conv = cudadrv.Kernel(None, "conv", 2)
    with cudadrv.Recording(((0x1000, 64), (0x2000, 64), (0x3000, 64), (0, 16))) as recording:
        conv(np.uintp(0x1000), np.uintp(0x2010), np.int32(5), block=(32,), grid=(1,))
    writes = []
    launch = recording.ops[0]
    real = launch.words

    class CountingWords:
        def __setitem__(self, index, value):
            writes.append((index, value))
            real[index] = value
    monkeypatch.setattr(launch, "words", CountingWords())
    driver.launches.clear()
    a, b = (0x5000, 0x6000, 0x7000, 0), (0x8000, 0x9000, 0xA000, 0)
    for addresses in (a, a, b, b, a):
        recording.replay(addresses, 0)
    assert driver.ex_launches == (5 if cudadrv._raw_launch_ex else 0)          # the driver's Ex where it has it
    got = [struct.unpack("@QQi", launch[4]) for launch in driver.launches]
    assert got == [(0x5000, 0x6010, 5)] * 2 + [(0x8000, 0x9010, 5)] * 2 + [(0x5000, 0x6010, 5)]
    assert writes == [(0, 0x5000), (1, 0x6010), (0, 0x8000), (1, 0x9010), (0, 0x5000), (1, 0x6010)]
