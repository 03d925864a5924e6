"""The ECE 408 task: the forward pass of the course's convolution layer (README.md says what is run,
checked and timed). Its folders are team files, data for the harness, not modules of the package:
``template/`` is what ``init`` copies, ``solutions/{correct,wrong,hostile}/NAME/`` are teams, each
with a one-line README.md saying what it does and what the grader must do with it."""
from ...course import SOLUTIONS, TASK, TEMPLATE  # noqa: F401  (the folder's places, named where every wing reads them)
