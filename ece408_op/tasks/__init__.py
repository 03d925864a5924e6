"""The course's tasks, each a folder an installed package carries: what the task is (README.md), its
reference, the template a team starts from, and solutions a team could hand in (correct ones, wrong
ones, hostile ones), each a team folder that runs as it is. ``conv/`` is the ECE 408 convolution."""
