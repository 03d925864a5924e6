"""A team's own convolution: the course's student workflow (``python -m ece408_op init DIR``).

A team project is a folder made from ``template/``:

    rai_build.yml     the course's submission file (development runs: ``submit``)
    new-forward.py    the CPU forward (m2): ``forward(y, x, k)``, plain loops compiled by Numba
    new-forward.cu    the GPU kernels (m3, final): ``forward_kernel(y, x, k, B, M, C, H, W, K)``...
    launch.py         how the harness launches them for a layer: ``launch(B, M, C, H, W, K)``
    README.md         the student's guide

The harness never runs a team's Python or host code in the process that times and records:

    project.py    the template, ``init``, finding a team folder, the files a run takes and their SHA-256
    api.py        what ``launch.py`` returns: kernel(...), constant(...), workspace(...) (plain data)
    plan.py       that data checked and bounded (no device needed), one line per problem
    lockdown.py   the seccomp filter a team process runs under (no fork, exec, ptrace)
    process.py    the team process: imports the team's files after locking itself down, answers
                  requests (a launch plan for a shape; a CPU forward into shared memory)
    harness.py    the harness's side: starts the team process, keeps it stopped (SIGSTOP) except while
                  it answers, times the CPU forward around the request, size-caps every reply
    checks.py     fresh inputs and the reference check of every timed repeat; the physical floor
    runtime.py    a milestone's team: the compiled kernels, the team process, the GPU and CPU forwards

The GPU side (load the compiled kernels, check a plan against the device, launch and time it
with CUDA events) is ``kernels/team.py``: PyCUDA lives there.
"""
from .api import constant, f32, i64, kernel, workspace

__all__ = ["constant", "f32", "i64", "kernel", "workspace"]
