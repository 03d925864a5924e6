"""The task's reference: every timed output of a team is checked against the float64 convolution
of the harness's own copies of x and k, within the float32 bound of ``reference_and_bound``. The
harness's CPU path and kernels are checked against the same functions, so they live in ``conv/``
(the package's bottom layer); this module names them for the task."""
from ...conv.reference import conv2d_forward_reference, reference_and_bound

__all__ = ["conv2d_forward_reference", "reference_and_bound"]
