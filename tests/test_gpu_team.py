"""A team's kernels on the GPU (issue: team kernels), PyCUDA only (the GPU machine's cudapy); every
test skips without a GPU: the fresh-input fill, the template's kernel through the runtime, plans
past the device's limits or naming no kernel refused in one line, a kernel that replays a kept
result caught by the fresh inputs. The milestones and ranked runs are test_gpu_team_mx.py."""
import numpy as np
import pytest

from conftest import ROOT
from gpu_sources import NO_SUCH_KERNEL, REPLAY_CU, REPLAY_LAUNCH, TOO_BIG_GRID, TOO_MANY_THREADS, TOO_MUCH_SHARED
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
    cuda = gpu.cuda
    y = np.empty((batch, 4, 9, 11), np.float32)
    with TeamRuntime(team, image, repeats=repeats, seed=3) as runtime:
        with gpu.active():
            xd, kd, yd = cuda.to_device(x), cuda.to_device(k), cuda.mem_alloc(y.nbytes)
        seconds = runtime.forward_device(int(yd), int(xd), int(kd), x.shape, k.shape, device=gpu.index)
        with gpu.active():
            cuda.memcpy_dtoh(y, yd)
            for buf in (xd, kd, yd):
                buf.free()
    ref, bound = reference_and_bound(x, k)
    return seconds, y, ref, bound


def test_template_kernel_through_the_runtime(gpu, tmp_path):
    seconds, y, ref, bound = _runtime_forward(gpu, team_project(tmp_path / "team"), batch=5, repeats=3)
    assert np.all(np.abs(y - ref) <= bound) and 0 < seconds < 1


def test_fresh_fill_on_the_device_matches_the_host(gpu, tmp_path):
    from ece408_op.kernels.team import TeamModule
    from ece408_op.team.build import compile_kernels
    team = team_project(tmp_path / "team")
    with gpu.active():
        module = TeamModule(gpu, compile_kernels(team, gpu.arch))
        n = 3_000_001
        buf = gpu.cuda.mem_alloc(n * 4)
        module.fill(int(buf), n, 987654321)
        got = np.empty(n, np.float32)
        gpu.cuda.memcpy_dtoh(got, buf)
    assert np.array_equal(got, checks.fresh_values(987654321, 0, n))


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
    team = team_project(tmp_path / "team", launch=TOO_MANY_THREADS,
                        gpu=(ROOT / "ece408_op/team/template/new-forward.cu").read_text()
                        .replace("#define TILE_WIDTH 16", "#define TILE_WIDTH 32").replace(
                            'extern "C" __global__ void forward_kernel',
                            'extern "C" __global__ void __launch_bounds__(256) forward_kernel'))
    with pytest.raises(Exception, match=r"has 1024 threads; this kernel allows at most 256"):
        _runtime_forward(gpu, team)


def test_replayed_result_fails_the_fresh_inputs(gpu, tmp_path):
    team = team_project(tmp_path / "team", gpu=REPLAY_CU, launch=REPLAY_LAUNCH)
    with pytest.raises(Exception, match=r"fresh run 1: the output differs from the reference"):
        _runtime_forward(gpu, team, repeats=2)


