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
