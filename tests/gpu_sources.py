"""Team kernels for the GPU tests: the task's template kernel, and the GPU solution folders' files
(``ece408_op/tasks/conv/solutions/``: one mistake or one hostile twist each)."""
from teams import solution

from ece408_op.team import project

TEMPLATE_CU = (project.TEMPLATE / "new-forward.cu").read_text()
TEMPLATE_LAUNCH = (project.TEMPLATE / "launch.py").read_text()

# thread 0 of the first block prints the course's lines: they reach the transcript only
PRINTF_CU = solution("hostile/gpu-printf", "new-forward.cu")

# the first call computes and keeps its output in a __device__ buffer; every later call replays it
REPLAY_CU = solution("hostile/gpu-replay", "new-forward.cu")
REPLAY_LAUNCH = solution("hostile/gpu-replay", "launch.py")

# launch plans past the GPU's limits or naming no kernel of new-forward.cu
TOO_MUCH_SHARED = solution("wrong/gpu-too-much-shared", "launch.py")
TOO_BIG_GRID = solution("wrong/gpu-too-big-grid", "launch.py")
NO_SUCH_KERNEL = solution("wrong/gpu-no-such-kernel", "launch.py")
TOO_MANY_THREADS = solution("wrong/gpu-too-many-threads", "launch.py")
BOUNDED_CU = solution("wrong/gpu-too-many-threads", "new-forward.cu")     # __launch_bounds__(256), 32 x 32 tiles

# computes only image 0 of every call (a team that "foresees" which images are checked and computes
# those): the grader's kernel checks every value, so any skipped image fails
ONE_IMAGE_CU = solution("hostile/gpu-one-image", "new-forward.cu")

# writes zeros into x and k, then y = 0: consistent with what it left in the buffers it was given,
# wrong against the grader's own copies (uploaded after the timed run)
TAMPER_CU = solution("hostile/gpu-tamper", "new-forward.cu")
TAMPER_LAUNCH = solution("hostile/gpu-tamper", "launch.py")
