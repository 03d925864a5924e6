"""The course's facts every layer shares, in one leaf module (it imports nothing of ours): the
milestones and what each runs, times and ranks, the team project's file names, the operator's
name, the package's version and where the course's task folder lies.

    m1     the network with MXNet's built-in Convolution, CPU (EvalMetric)
    m2     the network with ece408_conv, CPU path          (ranked: new-forward.py)
    m3     the same, GPU path                              (ranked: new-forward.cu + launch.py)
    final  same as m3: the run the course ranked by Op Time
"""
from dataclasses import dataclass
from pathlib import Path

__version__ = "0.1.0"

OP_TYPE = "ece408_conv"                     # the custom operator MXNet knows our convolution by

RANKED_MODELS = ("ece408-high", "ece408-low")              # every ranked run measures both (and a hidden one)
COURSE_MODELS = RANKED_MODELS + ("ece408-2018", "ece408-2019")   # the checkpoints the package ships

CPU_FILES = ("new-forward.py",)             # a team's CPU forward (m2)
GPU_FILES = ("new-forward.cu", "launch.py")  # a team's GPU kernels and their launch plan (m3, final)


@dataclass(frozen=True)
class Milestone:
    name: str
    script: str            # the classic name (scripts/); a usage names the command that ran
    summary: str           # one line for ``python -m ece408_op --help``
    custom: bool           # swap in ece408_conv
    device: str = "cpu"    # path the custom operator takes
    repeats: int = 0       # a team's forward, run locally: timed runs on fresh inputs per layer
    ranked_repeats: int = None   # the same in a ranked run (never 0: the time that ranks comes from
    #                              inputs no team can know in advance); None: not a ranked milestone
    files: tuple = ()      # the team's files a ranked run takes

    @property
    def gpu(self):
        return self.device == "gpu"


MILESTONES = {m.name: m for m in (
    Milestone("m1", "m1.1.py", "whole network with MXNet's built-in Convolution, CPU (EvalMetric)", custom=False),
    Milestone("m2", "m2.1.py", "network with ece408_conv, CPU path (Op Time, Correctness)", custom=True,
              ranked_repeats=1, files=CPU_FILES),
    Milestone("m3", "m3.1.py", "network with ece408_conv, GPU path (Op Time, Correctness)", custom=True,
              device="gpu", ranked_repeats=1, files=GPU_FILES),
    Milestone("final", "final.py", "same as m3: the run the course ranked by Op Time", custom=True, device="gpu",
              repeats=5, ranked_repeats=5, files=GPU_FILES),
)}
RANKED = tuple(name for name, m in MILESTONES.items() if m.ranked_repeats)     # m2, m3, final
GPU_RANKED = tuple(name for name in RANKED if MILESTONES[name].gpu)           # m3, final

# The course's task as a folder the package carries (tasks/conv/: its README, reference, template and
# solutions): data for the harness, whose place is a fact every wing may know (team/ copies the template)
TASK = Path(__file__).resolve().parent / "tasks" / "conv"
TEMPLATE = TASK / "template"
SOLUTIONS = TASK / "solutions"
