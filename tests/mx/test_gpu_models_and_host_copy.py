"""GPU (skipped without one): the host copy path of kernels/hostcopy/ in every mode, the fused
layer on the GPU, the later course models through m3/final, and m3's --profile breakdown."""
import re

import numpy as np
import pytest

from suitekit import assert_close, check_against_reference, require_mxnet, run_script
from test_milestones import CUSTOM_OUTPUT

require_mxnet("ece408_op.mx.inference")
from ece408_op import kernels  # noqa: E402
from ece408_op.conv import conv2d_forward_cpu  # noqa: E402
from ece408_op.conv.fused import fused_reference_and_bound, pooled_shape  # noqa: E402
from ece408_op.kernels.hostcopy import engine, host_memory, records  # noqa: E402

MODES = engine.MODES
# (B, C, H, W, M, K): y of 230 MB (the ring of 4 x 16 MB wraps), a C=12 course layer, one smaller than a page
SHAPES = [(2000, 1, 28, 28, 50, 5), (300, 12, 33, 33, 24, 5), (3, 2, 9, 11, 7, 3)]
HAS_FUSED = hasattr(kernels, "fused_forward_device") and hasattr(kernels, "fused_forward_gpu")
needs_fused = pytest.mark.skipif(not HAS_FUSED, reason="no fused GPU kernel in this build "
                                 "(kernels.fused_forward_device / fused_forward_gpu)")


def _misaligned(shape, offset=4, guard=4096):
    """A float32 array of ``shape`` starting ``offset`` bytes past a page boundary (as MXNet's
    arrays may), its inside never touched, between two guard regions; returns (array, raw
    bytes, (start, end) of the array in them)."""
    nbytes = int(np.prod(shape)) * 4
    raw = np.empty(2 * guard + 4096 + nbytes, np.uint8)
    start = guard + (offset - (host_memory.address(raw) + guard)) % 4096
    raw[:start] = 0xAB
    raw[start + nbytes:] = 0xAB
    return raw[start:start + nbytes].view(np.float32).reshape(shape), raw, (start, start + nbytes)


def _inputs(rng, shape):
    b, c, h, w, m, k = shape
    x = (rng.random((b, c, h, w)) * 255).astype(np.float32)
    weight = (rng.standard_normal((m, c, k, k)) / (255 * k)).astype(np.float32)
    return x, weight


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_into_writes_the_conv_into_unaligned_fresh_memory(gpu, rng, monkeypatch, mode, shape):
    monkeypatch.setenv(engine.MODE_ENV, mode)
    x, k = _inputs(rng, shape)
    out, raw, (start, end) = _misaligned((shape[0], shape[4], shape[2] - shape[5] + 1, shape[3] - shape[5] + 1))
    first = records.record_count()
    seconds = engine.forward_into(out, x, k)
    assert seconds > 0
    check_against_reference(out, x, k, images=[0, shape[0] // 2, shape[0] - 1], what=f"{mode} {shape}")
    assert_close(out, conv2d_forward_cpu(x, k), atol=1e-3, rtol=1e-4, what=f"{mode} {shape} vs CPU")
    assert np.all(raw[:start] == 0xAB) and np.all(raw[end:] == 0xAB), "bytes outside y were written"
    (record,) = records.records_since(first)
    assert record.mode == mode and record.y_bytes == out.nbytes and record.wall >= record.op_time


@pytest.mark.serial                                 # the whole device's memory in use: alone (gpu_alone)
def test_registered_mode_unregisters_every_call(gpu_alone, rng, monkeypatch):
    # A piece left registered would make the next registration of the same memory fail.
    monkeypatch.setenv(engine.MODE_ENV, "registered")
    x, k = _inputs(rng, (400, 1, 28, 28, 50, 5))
    out = np.empty((400, 50, 24, 24), np.float32)
    engine.forward_into(out, x, k)
    before = gpu_alone.memory_in_use()
    for _ in range(20):
        engine.forward_into(out, x, k)
    assert gpu_alone.memory_in_use() <= before + (2 << 20)    # no buffer kept per call
    check_against_reference(out, x, k, images=[0, 399])


def test_calls_from_other_threads_leave_no_stream_to_clean_up(gpu, rng):
    # MXNet runs a CustomOp's forward on its own threads; a CUDA stream or event made per call
    # and collected where the context is not current is leaked (PyCUDA warns "could not be
    # cleaned up"). The host copy keeps its stream and events on the device object instead.
    import gc
    import threading
    import warnings
    x, k = _inputs(rng, (64, 1, 28, 28, 50, 5))
    outs = [np.empty((64, 50, 24, 24), np.float32) for _ in range(3)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=engine.forward_into, args=(out, x, k)) for out in outs]
        for t in threads:
            t.start()
            t.join()
        gc.collect()
    assert not [w for w in caught if "cleaned up" in str(w.message)], [str(w.message) for w in caught]
    for out in outs:
        check_against_reference(out, x, k, images=[0, 63])


@needs_fused
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bias", [False, True])
def test_fused_layer_on_the_gpu(gpu, rng, monkeypatch, mode, bias):
    monkeypatch.setenv(engine.MODE_ENV, mode)
    for shape in SHAPES[:2]:
        x, k = _inputs(rng, shape)
        b = rng.standard_normal(shape[4]).astype(np.float32) if bias else None
        out, raw, (start, end) = _misaligned(pooled_shape(x.shape, k.shape))
        engine.forward_into(out, x, k, b, fused=True)
        images = [0, shape[0] - 1]
        ref, bound = fused_reference_and_bound(x[images], k, b)
        bad = ~(np.abs(out[images] - ref) <= bound)
        assert not bad.any(), f"fused {mode} {shape}: {int(bad.sum())} off, first at {np.argwhere(bad)[0]}"
        assert np.all(raw[:start] == 0xAB) and np.all(raw[end:] == 0xAB)


@needs_fused
def test_fused_operator_gpu_path_matches_cpu_in_mxnet(gpu, rng):
    from ece408_op.mx.op import mx
    for b, c, h, w, m, ksize in [(5, 1, 28, 28, 50, 5), (2, 12, 33, 33, 24, 5)]:
        x = mx.nd.array((rng.random((b, c, h, w)) * 255).astype(np.float32))
        k = mx.nd.array((rng.standard_normal((m, c, ksize, ksize)) / 1000).astype(np.float32))
        outs = [mx.nd.Custom(x, k, op_type="ece408_conv_tanh_pool", num_filter=m, kernel=ksize, device=d).asnumpy()
                for d in ("cpu", "gpu")]
        np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-5)


def _run(script, *args):
    result = run_script(script, *args)
    match = CUSTOM_OUTPUT.match(result.stdout)
    assert result.returncode == 0 and match, result.stdout + result.stderr
    return match


@pytest.mark.parametrize("model", ["ece408-2018", "ece408-2019"])
def test_later_models_m3_and_final_match_m2(gpu, model):
    m2 = _run("m2_cpu.py", model, 10000)
    assert len(m2["ops"].splitlines()) == 2 and float(m2["acc"]) >= 0.88
    for script in ("m3_gpu.py", "final.py"):
        run = _run(script, model, 10000)
        assert len(run["ops"].splitlines()) == 2
        assert run["acc"] == m2["acc"], f"{script} {model}: {run['acc']} != m2 {m2['acc']}"


@needs_fused
@pytest.mark.parametrize("model", ["ece408-high", "ece408-2018", "ece408-2019"])
def test_fused_models_on_the_gpu_match_m2(gpu, model):
    m2 = _run("m2_cpu.py", model, 10000)
    fused = _run("m3_gpu.py", model, 10000, "--fuse")
    assert fused["acc"] == m2["acc"] and len(fused["ops"].splitlines()) == len(m2["ops"].splitlines())


BREAKDOWN = ["Wall time of the run (host clock):", "start-up: Python and ece408_op", "MXNet import",
             "GPU set-up", "data: 1000 test images of", "model: load, swap", "inference:",
             "custom layers: copies", "custom layers: Op Time (the kernels)", "the rest of the network",
             "Custom layers against the host link", "wall/link", "[CUDA memcpy DtoH] y", "pages ms",
             "and fresh host memory (measured after the run: faulted in at"]


@pytest.mark.parametrize("model", ["ece408-high", "ece408-2018"])
def test_profile_breaks_the_run_down(gpu, model):
    result = run_script("m3_gpu.py", model, 1000, "--profile")
    assert result.returncode == 0, result.stderr
    missing = [line for line in BREAKDOWN if line not in result.stdout]
    assert not missing, f"--profile lacks {missing}:\n{result.stdout}"
    rows = re.findall(r"^\s+(\d)\s+conv\s+ring .* ([\d.]+)x\s+[\d.]+(?:  \(.*\))?$", result.stdout, re.M)
    assert [r[0] for r in rows] == (["1"] if model == "ece408-high" else ["1", "2"]), result.stdout
    assert all(float(ratio) > 0 for _, ratio in rows)
