"""The task's GPU solution folders (ece408_op/tasks/conv/solutions/*/gpu-*/), each run as the team it
is and judged as its one-line README.md says, skipped without a GPU: through the team runtime alone
(PyCUDA: the folder's kernels on fresh inputs, every value checked; refused in one line naming the
README's phrase, or passing), and, where MXNet runs too, one class of copies of them through
``grade --local`` (m3, 100 images, two fresh runs a layer; engine bubblewrap where it runs there,
else host). The CPU folders are tests/grading/test_task_solutions.py's."""
import subprocess

import numpy as np
import pytest

from suitekit import python_command, ranked_engine
from teams import grade_as_said, verdict
from test_task_solutions import FOLDERS, kind

from ece408_op.grading.machine import gpu_name

GPU_FOLDERS = {rel: folder for rel, folder in FOLDERS.items() if kind(folder) == "gpu"}
SIZE = 100
pytestmark = pytest.mark.skipif(gpu_name() is None, reason="no GPU (nvidia-smi lists none)")


@pytest.mark.parametrize("rel", sorted(GPU_FOLDERS))
def test_each_gpu_solution_through_the_runtime(gpu, rel):
    """The course layer on 4 fresh images: two timed fresh runs, then the input itself, every value
    of each checked by the grader's kernel against its own copies."""
    from ece408_op.conv import reference_and_bound
    from ece408_op.team.build import compile_kernels
    from ece408_op.team.runtime import TeamRuntime
    folder, said = GPU_FOLDERS[rel], verdict(GPU_FOLDERS[rel])
    assert said.action in ("rank", "refuse"), rel            # no GPU team here is one to kill
    rng = np.random.default_rng(7)
    x = rng.random((4, 1, 28, 28), dtype=np.float32)
    k = rng.standard_normal((50, 1, 5, 5)).astype(np.float32)
    y = np.empty((4, 50, 24, 24), np.float32)
    try:
        with TeamRuntime(folder, compile_kernels(folder, gpu.arch), repeats=2) as runtime:
            seconds = runtime.forward_gpu(y, x, k, device=gpu.index)
    except Exception as exc:                                  # noqa: BLE001  the refusal is the outcome
        assert said.action == "refuse", f"{rel}: {exc}"
        assert said.phrase in str(exc) and "\n" not in str(exc).strip(), f"{rel}: {exc}"
        return
    assert said.action == "rank", f"{rel} was not refused"
    ref, bound = reference_and_bound(x, k)
    assert np.all(np.abs(y - ref) <= bound) and 0 < seconds < 1, rel


@pytest.mark.timeout(1200)
def test_every_gpu_solution_is_graded_as_its_readme_says(tmp_path):
    # asked in a fresh interpreter: MXNet loaded after this process's CUDA context crashes it
    found = subprocess.run([*python_command(), "-c", "import ece408_op; print(ece408_op.mxnet_unavailable())"],
                           capture_output=True, text=True)
    if found.stdout.strip() != "None":
        pytest.skip(f"MXNet unusable here: {found.stdout.strip() or found.stderr.strip()}")
    grade_as_said(GPU_FOLDERS, tmp_path, "m3", SIZE, "--engine", ranked_engine(), "--jobs", 1, "--repeats", 2)
