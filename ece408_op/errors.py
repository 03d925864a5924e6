"""Errors a person can act on: each message is one line saying what was wrong and what to do."""


class Ece408Error(Exception):
    """Base class; the scripts print ``error: <message>`` and exit non-zero."""

    exit_code = 1


class UsageError(Ece408Error):
    """Bad command-line arguments; the message is the usage text."""

    exit_code = 2


class DataError(Ece408Error):
    """Missing, corrupt or unsafe data files."""


class ModelError(Ece408Error):
    """Missing or malformed model checkpoints."""


class ShapeError(Ece408Error):
    """Tensor shapes the operator cannot handle."""


class GpuError(Ece408Error):
    """No usable CUDA device, PyCUDA or nvcc; kernel compile or launch failures."""


class PlanError(Ece408Error):
    """A team's launch plan the harness refuses (team/plan.py, kernels/team.py): one line."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived while a command cleans up after itself on every exit path
    (a fetch); like KeyboardInterrupt, not an Exception, so that nothing swallows it."""

    def __init__(self, signum):
        super().__init__(f"terminated by signal {signum}")
        self.signum = signum
        self.exit_code = 128 + signum
