"""m3 / final on the GPU: the course output, Correctness equal to m2's, kernel selection (needs MXNet + GPU)."""
import pytest

from suitekit import require_mxnet, run_script
from test_milestones import CUSTOM_OUTPUT

require_mxnet("ece408_op.mx.inference")
from ece408_op import kernels  # noqa: E402


def _correctness(result):
    match = CUSTOM_OUTPUT.match(result.stdout)
    assert result.returncode == 0 and match, result.stdout + result.stderr
    return match


@pytest.mark.parametrize("model", ["ece408-high", "ece408-low"])
@pytest.mark.parametrize("size", [100, 1000, 10000])
def test_m3_and_final_match_m2(gpu, model, size):
    m2 = _correctness(run_script("m2_cpu.py", model, size))
    for script in ("m3_gpu.py", "final.py"):
        gpu_run = _correctness(run_script(script, size, model))
        assert gpu_run["model"] == model
        assert gpu_run["acc"] == m2["acc"], f"{script} {model} {size}: {gpu_run['acc']} != m2 {m2['acc']}"


@pytest.mark.parametrize("kernel", sorted(kernels.VERSIONS))
def test_every_kernel_through_mxnet_gives_m2_correctness(gpu, kernel):
    if kernels.VERSIONS[kernel].unsupported(kernels.ConvShape(1, 28, 28, 50, 5)):     # v12: 3x3 layers only
        result = run_script("m3.1.py", "ece408-low", 100, "--kernel", kernel)
        assert result.returncode != 0 and "cannot run this layer" in result.stderr and "Traceback" not in result.stderr
        return
    m2 = _correctness(run_script("m2_cpu.py", "ece408-low", 2000))
    run = _correctness(run_script("m3.1.py", "ece408-low", 2000, "--kernel", kernel))
    assert run["acc"] == m2["acc"]


def test_profile_table(gpu):
    result = run_script("m3_gpu.py", 1000, "--profile")
    assert result.returncode == 0, result.stderr
    assert "Time(%)" in result.stdout and "conv_forward v7" in result.stdout
    assert "[CUDA memcpy DtoH] y" in result.stdout


def test_unknown_kernel_is_one_line_error(gpu):
    # bad input: --kernel 99 (no such version)
    result = run_script("m3_gpu.py", 10, "--kernel", "99")
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]           # the usage, then one line saying what was wrong
    assert last.startswith("error: --kernel 99: unknown kernel '99'") and "Traceback" not in result.stderr


def test_operator_gpu_path_matches_cpu_in_mxnet(gpu):
    import numpy as np
    from ece408_op.mx.op import mx
    rng = np.random.default_rng(0)
    for shape in [(3, 2, 9, 11, 7, 3), (5, 1, 28, 28, 50, 5), (2, 12, 33, 33, 24, 5)]:
        b, c, h, w, m, ksize = shape
        x = mx.nd.array(rng.standard_normal((b, c, h, w)).astype(np.float32))
        k = mx.nd.array(rng.standard_normal((m, c, ksize, ksize)).astype(np.float32))
        cpu = mx.nd.Custom(x, k, op_type="ece408_conv", num_filter=m, kernel=ksize, device="cpu").asnumpy()
        on_gpu = mx.nd.Custom(x, k, op_type="ece408_conv", num_filter=m, kernel=ksize, device="gpu").asnumpy()
        np.testing.assert_allclose(on_gpu, cpu, rtol=1e-4, atol=1e-4 * np.abs(cpu).max())
