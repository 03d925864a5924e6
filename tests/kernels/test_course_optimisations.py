"""The course's optimisation list without a GPU: v14-v19 in the version table (never a
default), the error models of v17 (FP16) and v19 (FFT) and that they can fail, the cuBLAS/cuFFT
loaders' one-line refusal, ECE408_STREAMS, and the Nsight Compute wrapper (--ncu)."""
import re
import shutil
import subprocess

import numpy as np
import pytest

from ece408_op import kernels
from ece408_op.conv import bounds, reference_and_bound
from ece408_op.errors import GpuError
from ece408_op.bench import ncu, suite
from ece408_op.kernels import choice, libraries
from ece408_op.kernels.hostcopy import streams

S = kernels.ConvShape
COURSE = [layer.shape() for layer in suite.LAYERS if layer.course]
NEW = (14, 15, 16, 17, 18, 19)


def test_new_versions_are_never_defaults_and_parse_by_name():
    for number in NEW:
        version = kernels.VERSIONS[number]
        assert not version.defaultable and number not in choice.fallback_order()
        assert kernels.parse_version(version.name) == number == kernels.parse_version(f"v{number}")
    for shape in COURSE:
        assert kernels.default_version(shape) not in NEW
        assert kernels.default_version(shape, "NVIDIA H100 80GB HBM3") not in NEW
    rows = [{"layer": "L", "shape": "K", "batch": 1, "entry": f"v{n} {kernels.VERSIONS[n].name}", "kind": "conv",
             "median_s": 1e-6 * n, "valid": True} for n in (*NEW, 7)]
    assert suite.choose_defaults({"layers": [{"name": "L"}], "rows": rows}) == {"K": 7}   # v14 fastest, not chosen


def test_own_error_models_are_declared_where_the_float32_bound_does_not_hold():
    assert [n for n, v in kernels.VERSIONS.items() if v.own_error_model] == [17, 19]
    assert all(not kernels.VERSIONS[n].exact for n in (17, 19))


@pytest.mark.parametrize("shape", [S(1, 28, 28, 50, 5), S(6, 30, 30, 16, 5), S(12, 33, 33, 24, 5), S(1, 70, 70, 12, 5)],
                         ids=str)
def test_channel_slices_and_fft_sizes(shape):
    v15, v19 = kernels.VERSIONS[15], kernels.VERSIONS[19]
    slices = v15.slices(shape)
    assert slices & (slices - 1) == 0 and slices <= min(shape.C, 4) and slices * 2 > min(shape.C, 4)
    size = v19.size(shape)
    th, tw = v19.tiles(shape, size)
    edge = size - shape.K + 1
    assert edge * th >= shape.H and edge * (th - 1) < shape.H and tw == th       # tiles cover x, none wasted
    for other in v19.SIZES:                                                     # no other size does less work
        if other >= shape.K:
            assert np.prod(v19.tiles(shape, other)) * other ** 2 >= th * tw * size ** 2
    assert kernels.module_defines(15, shape)["V15_CZ"] == slices and kernels.module_defines(19, shape)["V19_F"] == size


def test_new_versions_refuse_in_one_line_what_they_cannot_run():
    big = S(64, 32, 32, 128, 5)                      # weights beyond the constant bank
    for number in (14, 15, 16, 17):
        assert "constant memory" in kernels.VERSIONS[number].unsupported(big)
    stride2 = S(8, 20, 20, 8, 3, 3, 2, 2)
    for number in (14, 15, 16, 17, 19):
        assert "stride" in kernels.VERSIONS[number].unsupported(stride2)
    assert kernels.VERSIONS[18].unsupported(stride2) is None                # general, like v5
    with pytest.raises(ValueError, match="V19_F must be one of"):
        # bad input: a transform size the FFT version does not build
        kernels.module_defines(19, S(1, 28, 28, 50, 5), {"V19_F": 48})


def _fp16_direct(x, k):
    """NumPy's half precision in the kernel's order (channels, then taps; each product and sum rounded:
    one rounding more per term than the GPU's fused multiply-add)."""
    b, c, h, w = x.shape
    m, _, kk, _ = k.shape
    ho, wo = h - kk + 1, w - kk + 1
    xh, kh = x.astype(np.float16), k.astype(np.float16)
    acc = np.zeros((b, m, ho, wo), np.float16)
    for ci in range(c):
        for p in range(kk):
            for q in range(kk):
                acc = acc + xh[:, None, ci, p:p + ho, q:q + wo] * kh[None, :, ci, p, q, None, None]
    return acc.astype(np.float32)


@pytest.mark.parametrize("shape", [(3, 1, 28, 28, 50, 5), (2, 6, 30, 30, 16, 5), (2, 12, 33, 33, 24, 5),
                                   (4, 1, 7, 13, 4, 1)], ids=str)
def test_fp16_model_holds_for_half_arithmetic_and_catches_a_wrong_window(shape):
    b, c, h, w, m, kk = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(0, 256, (b, c, h, w)).astype(np.float32)
    k = (rng.standard_normal((m, c, kk, kk)) * 0.01).astype(np.float32)
    errors = bounds.fp16_errors(_fp16_direct(x, k), x, k)
    assert errors["vs_bound"] <= 1 and errors["rms_vs_model"] <= 1, errors
    assert errors["vs_float32"] > 1                              # why v17 has a model of its own
    ref = reference_and_bound(x, k)[0]
    shifted = np.roll(ref, 1, axis=3).astype(np.float32)         # each output from its neighbour's window
    wrong = bounds.fp16_errors(shifted, x, k)
    assert wrong["vs_bound"] > 1 or wrong["rms_vs_model"] > 1


@pytest.mark.parametrize("shape", [(3, 1, 28, 28, 50, 5), (2, 6, 30, 30, 16, 5), (2, 1, 70, 70, 12, 5)], ids=str)
def test_fft_model_holds_for_a_float32_transform_and_catches_a_wrong_window(shape):
    b, c, h, w, m, kk = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.random((b, c, h, w), dtype=np.float32)
    k = rng.standard_normal((m, c, kk, kk)).astype(np.float32)
    size = kernels.VERSIONS[19].size(S(c, h, w, m, kk))
    ref = reference_and_bound(x, k)[0]
    rounded = (ref + ref * rng.uniform(-1, 1, ref.shape) * 2.0 ** -20).astype(np.float32)   # 16 ulps each
    assert bounds.fft_errors(rounded, x, k, size=size)["vs_bound"] <= 1
    shifted = np.roll(ref, 1, axis=2).astype(np.float32)
    assert bounds.fft_errors(shifted, x, k, size=size)["vs_bound"] > 1e3
    nan = ref.astype(np.float32)
    nan[0, 0, 0, 0] = np.nan                                     # an output never written
    assert bounds.fft_errors(nan, x, k, size=size)["vs_bound"] == np.inf


@pytest.fixture
def no_libraries(monkeypatch):
    monkeypatch.setattr(libraries, "search_paths", lambda stem: [])
    monkeypatch.setattr(libraries, "_loaded", {})
    monkeypatch.setattr(libraries, "_instances", {})


@pytest.mark.parametrize("stem, call, label", [("libcublas", libraries.cublas, "v18 cublas"),
                                               ("libcufft", libraries.cufft, "v19 fft")])
def test_a_missing_library_is_one_line_naming_where_it_was_looked_for(no_libraries, stem, call, label):
    # bad input: a machine without cuBLAS / cuFFT
    with pytest.raises(GpuError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"kernel {label} cannot run here: {stem}.so not found")
    assert "/usr/local/cuda/lib64" in message and "site-packages/nvidia/*/lib" in message
    assert kernels.VERSIONS[18 if stem == "libcublas" else 19].available() == message.split("here: ", 1)[1]


def test_library_search_order_is_the_toolkit_then_the_wheels(tmp_path, monkeypatch):
    toolkit, wheels = tmp_path / "cuda" / "lib64", tmp_path / "site" / "nvidia" / "cu13" / "lib"
    for folder in (toolkit, wheels):
        folder.mkdir(parents=True)
        (folder / "libcufft.so.12").write_bytes(b"")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.setattr(libraries.sys, "path", [str(tmp_path / "site")])
    monkeypatch.setattr(libraries.site, "getsitepackages", lambda: [])
    paths = libraries.search_paths("libcufft")
    assert str(toolkit / "libcufft.so.12") in paths and str(wheels / "libcufft.so.12") in paths
    assert paths.index(str(toolkit / "libcufft.so.12")) < paths.index(str(wheels / "libcufft.so.12"))
    assert paths[0] == str(toolkit / "libcufft.so.12")                     # $CUDA_HOME first


@pytest.mark.parametrize("text, want", [("", None), ("1", 1), (" 4 ", 4), ("64", 64)])
def test_streams_setting(monkeypatch, text, want):
    monkeypatch.setenv(streams.STREAMS_ENV, text)
    assert streams.stream_chunks() == want


@pytest.mark.parametrize("text", ["0", "65", "-2", "two", "1.5"])
def test_streams_setting_refuses_nonsense_in_one_line(monkeypatch, text):
    # bad input: each value above
    monkeypatch.setenv(streams.STREAMS_ENV, text)
    with pytest.raises(GpuError, match=r"^ECE408_STREAMS=.*: give a number of chunks from 1 to 64"):
        streams.stream_chunks()


# ncu's raw CSV page (--csv --page raw --print-units base): a header, a units row, one row per launch
NCU_CSV = '''==PROF== Connected to process 4242
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC",{metrics}
"","","","","","","","","","","",{units}
"0","4242","python3","h","conv_forward_v7","1","7","(256, 1, 1)","(5625, 1, 1)","0","9.0",{v7a}
"1","4242","python3","h","conv_forward_v7","1","7","(256, 1, 1)","(5625, 1, 1)","0","9.0",{v7b}
"2","4242","python3","h","im2col_v5","1","7","(256, 1, 1)","(100, 1, 1)","0","9.0",{im2col}
'''


def _ncu_csv():
    def values(*numbers):
        return ",".join(f'"{n}"' for n in numbers)
    return NCU_CSV.format(metrics=",".join(f'"{m}"' for m in ncu.METRICS), units=values("ns", *["byte/s"] + ["inst/s"] * 4 + ["%"]),
                          v7a=values("400000", "2,900,000,000,000", "1.5e13", "0", "0", "0", "61.5"),
                          v7b=values("600000", "2,700,000,000,000", "1.3e13", "0", "0", "0", "58.5"),
                          im2col=values("100000", "1e12", "0", "0", "0", "0", "n/a"))


def test_ncu_command_and_table():
    line = ncu.command(["python3", "-m", "ece408_op", "m3", "100"], "/tmp/log.csv", "/opt/ncu", kernels="conv_")
    assert line[:3] == ["/opt/ncu", "--clock-control", "none"] and line[-5:] == ["python3", "-m", "ece408_op", "m3", "100"]
    assert "regex:conv_" in line and all(m in line[line.index("--metrics") + 1] for m in ncu.METRICS)
    rows = ncu.parse(_ncu_csv())
    assert [r["kernel"] for r in rows] == ["conv_forward_v7", "conv_forward_v7", "im2col_v5"]
    v7, im2col = ncu.summary(rows)
    assert v7["launches"] == 2 and v7["total_s"] == pytest.approx(1e-3) and v7["dram_GB_per_s"] == pytest.approx(2780)
    assert v7["fp32_GFLOP_per_s"] == pytest.approx(2 * 1.38e4) and v7["occupancy_pct"] == pytest.approx(59.7)
    assert im2col["occupancy_pct"] is None
    text = ncu.table(rows).splitlines()
    assert text[0].split()[:4] == ["kernel", "grid", "calls", "mean"] and text[1].startswith("conv_forward_v7")
    assert text[1].split()[1:4] == ["(5625,1,1)", "2", "0.500"]
    assert ncu.parse("==PROF== Disconnected\n") == []
    assert [ncu.unit_scale(u) for u in ("us", "msecond", "Gbyte/s", "byte/s", "inst/s", "%", "")] == \
        [1e-6, 1e-3, 1e9, 1, 1, 1, 1]


def test_ncu_missing_is_one_line(monkeypatch):
    # bad input: a machine without Nsight Compute
    from ece408_op.base import nsight
    monkeypatch.setenv(ncu.NCU_ENV, "/nonexistent/ncu")
    monkeypatch.setattr(nsight.shutil, "which", lambda name, path=None: None)
    monkeypatch.setattr(nsight.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(nsight.os.path, "isfile", lambda path: False)
    with pytest.raises(GpuError, match=r"^ncu \(Nsight Compute\) not found"):
        ncu.find_ncu()


def test_milestone_ncu_reruns_itself_without_the_flag():
    from ece408_op.cli.milestone import ncu_argv, parse_args
    assert parse_args(["100", "--ncu"], "m3", "m3").ncu
    argv = ncu_argv("m3", ["100", "--ncu", "--kernel", "14"])
    assert argv[-5:] == ["ece408_op", "m3", "100", "--kernel", "14"] and "--ncu" not in argv


CUOBJDUMP, NVCC = shutil.which("cuobjdump"), shutil.which("nvcc")


@pytest.mark.skipif(CUOBJDUMP is None or NVCC is None, reason="nvcc or cuobjdump not on PATH")
def test_v17_computes_in_paired_half_fmas(tmp_path):
    shape = S(1, 28, 28, 50, 5)
    module = kernels.module_spec(17, kernels.VERSIONS[17].inner(shape))
    cubin = tmp_path / "v17.cubin"
    subprocess.run([NVCC, "-arch=sm_90", "-cubin", *[f"-D{k}={v}" for k, v in module.defines],
                    "-o", str(cubin), str(module.source)], check=True, capture_output=True)
    sass = subprocess.run([CUOBJDUMP, "-sass", "-fun", "conv_forward_v17", str(cubin)], check=True,
                          capture_output=True, text=True).stdout
    assert len(re.findall(r"\bHFMA2\b", sass)) >= 25 and not re.findall(r"\bFFMA\b", sass)
