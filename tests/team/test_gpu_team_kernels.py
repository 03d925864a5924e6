"""A team's kernels on the GPU (issue: team kernels), PyCUDA only (the GPU machine's cudapy); every
test skips without a GPU: the grader's fill and check kernels, the template's kernel through the
runtime, plans past the device's limits or naming no kernel refused in one line, a kernel that
replays a kept result, computes only some images, or wipes the buffers it was given, each caught
by the check of every value against the grader's own copies. The milestones and ranked runs are
test_gpu_team_milestones.py."""
import numpy as np
import pytest

from gpu_sources import (BOUNDED_CU, NO_SUCH_KERNEL, ONE_IMAGE_CU, REPLAY_CU, REPLAY_LAUNCH, TAMPER_CU, TAMPER_LAUNCH,
                         TOO_BIG_GRID, TOO_MANY_THREADS, TOO_MUCH_SHARED)
from teams import team_project

from ece408_op.team import checks
from ece408_op.team.runtime import TeamRuntime

# ---------------------------------------------------------------------------- the kernels alone (PyCUDA)

def _runtime_forward(gpu, team, batch=3, repeats=0):
    """The team's kernels through TeamRuntime on device arrays; returns (Op Time, y, reference, bound)."""
    from ece408_op.conv import reference_and_bound
    from ece408_op.team.build import compile_kernels
    rng = np.random.default_rng(2)
    x = rng.random((batch, 2, 11, 13), dtype=np.float32)
    k = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    image = compile_kernels(team, gpu.arch)
    y = np.empty((batch, 4, 9, 11), np.float32)
    with TeamRuntime(team, image, repeats=repeats) as runtime:
        seconds = runtime.forward_gpu(y, x, k, device=gpu.index)
    ref, bound = reference_and_bound(x, k)
    return seconds, y, ref, bound


def test_template_kernel_through_the_runtime(gpu, tmp_path):
    seconds, y, ref, bound = _runtime_forward(gpu, team_project(tmp_path / "team"), batch=5, repeats=3)
    assert np.all(np.abs(y - ref) <= bound) and 0 < seconds < 1


def test_the_runtime_repeats_the_model_on_the_gpu(gpu, tmp_path):
    """time_model on the GPU path: every layer call again on fresh inputs the grader's kernel
    draws, each checked (the team process kept by ``held`` until the repeats end)."""
    from ece408_op.team import repeats
    from ece408_op.team.build import compile_kernels
    rng = np.random.default_rng(3)
    x = rng.random((4, 2, 11, 13), dtype=np.float32)
    k = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    y = np.empty((4, 4, 9, 11), np.float32)
    team = team_project(tmp_path / "team")
    runtime = TeamRuntime(team, compile_kernels(team, gpu.arch), repeats=1)
    with runtime.held():
        with runtime:
            runtime.forward_gpu(y, x, k, device=gpu.index)
            runtime.forward_gpu(y, x, k, device=gpu.index)
        timing = runtime.time_model()
    assert repeats.MIN_REPEATS <= len(timing["totals"]) <= repeats.MAX_REPEATS
    assert all(len(layer["repeats"]) == len(timing["totals"]) for layer in runtime.layers)
    assert timing["totals"][0] == pytest.approx(sum(layer["repeats"][0] for layer in runtime.layers))
    assert not runtime.workers and timing["stopped"] in ("bound", "cap", "wall", "max", "limit")


def test_grader_kernels_fill_under_secret_keys_and_check_every_value(gpu):
    """The fill repeats exactly under one key and differs under another; the check passes a right
    output, and counts each wrong value (one, then a whole image), naming the first."""
    from ece408_op.conv import conv2d_forward_reference
    from ece408_op.kernels.team import GraderKernels, grader_cubin
    from ece408_op.team.checks import Layer
    layer = Layer(3, 4, 2, 11, 13, 3)
    with gpu.active():
        grader = GraderKernels(gpu, grader_cubin(gpu.arch))
        n = 3_000_001
        buf = gpu.cuda.mem_alloc(n * 4)
        first, again, other = (np.empty(n, np.float32) for _ in range(3))
        key = grader.fill(int(buf), n)
        gpu.cuda.memcpy_dtoh(first, buf)
        grader.fill_with(int(buf), n, key)
        gpu.cuda.memcpy_dtoh(again, buf)
        grader.fill(int(buf), n)
        gpu.cuda.memcpy_dtoh(other, buf)
        assert np.array_equal(first, again) and not np.array_equal(first, other)
        assert np.all((first >= 0) & (first < 1)) and 0.49 < first.mean() < 0.51
        rng = np.random.default_rng(5)
        x = rng.random(layer.x_shape, dtype=np.float32)
        k = rng.standard_normal(layer.k_shape).astype(np.float32)
        y = conv2d_forward_reference(x, k).astype(np.float32)
        xd, kd, res = gpu.cuda.to_device(x), gpu.cuda.to_device(k), gpu.cuda.mem_alloc(16)
        assert grader.check(int(gpu.cuda.to_device(y)), int(xd), int(kd), layer, res) == (0, None)
        wrong = y.copy()
        wrong[2, 1, 3, 4] += 1e-3
        assert grader.check(int(gpu.cuda.to_device(wrong)), int(xd), int(kd), layer, res) == \
            (1, np.ravel_multi_index((2, 1, 3, 4), layer.y_shape))
        wrong[1] = 0.0
        bad, at = grader.check(int(gpu.cuda.to_device(wrong)), int(xd), int(kd), layer, res)
        assert bad == 1 + wrong[1].size and at == np.ravel_multi_index((1, 0, 0, 0), layer.y_shape)


@pytest.mark.parametrize("launch, message", [
    (TOO_MUCH_SHARED, "0 bytes of static and 409600 of dynamic shared memory; NVIDIA"),
    (TOO_BIG_GRID, "exceeds the device's limit"),
    (NO_SUCH_KERNEL, "new-forward.cu has no kernel named forward_kernal; declare it extern \"C\""),
])
def test_plans_past_the_device_are_refused_in_one_line(gpu, tmp_path, launch, message):
    team = team_project(tmp_path / "team", launch=launch)
    with pytest.raises(Exception) as info:
        _runtime_forward(gpu, team)
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_block_past_the_kernel_s_own_limit_is_refused(gpu, tmp_path):
    team = team_project(tmp_path / "team", launch=TOO_MANY_THREADS, gpu=BOUNDED_CU)
    with pytest.raises(Exception, match=r"has 1024 threads; this kernel allows at most 256"):
        _runtime_forward(gpu, team)


def test_replayed_result_fails_the_fresh_inputs(gpu, tmp_path):
    team = team_project(tmp_path / "team", gpu=REPLAY_CU, launch=REPLAY_LAUNCH)
    with pytest.raises(Exception, match=r"fresh run 1: the output differs from the reference"):
        _runtime_forward(gpu, team, repeats=2)




@pytest.mark.parametrize("source, launch, repeats, message", [
    (ONE_IMAGE_CU, None, 1, r"fresh run 1: the output differs from the reference at \(b, m, h, w\) = \(1, 0, 0, 0\)"),
    (ONE_IMAGE_CU, None, 0, r"layer 1 .*: the output differs from the reference at \(b, m, h, w\) = \(1, 0, 0, 0\)"),
    (TAMPER_CU, TAMPER_LAUNCH, 1, r"fresh run 1: the output differs from the reference"),
    (TAMPER_CU, TAMPER_LAUNCH, 0, r"the output differs from the reference .*got 0, want"),
])
def test_partial_and_tampering_kernels_fail_the_check_of_every_value(gpu, tmp_path, source, launch, repeats, message):
    team = team_project(tmp_path / "team", gpu=source, launch=launch)
    with pytest.raises(Exception, match=message):
        _runtime_forward(gpu, team, batch=4, repeats=repeats)
