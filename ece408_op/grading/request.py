"""What a run is asked to do: the milestones a ranked run takes, its options (engine, image,
limits) and the request of a ranked run, and the one error for a run that cannot start here."""
import math
from dataclasses import dataclass, field

from ..base.terms import DEFAULT_SIZE
from ..course import GPU_RANKED, RANKED, RANKED_MODELS
from ..errors import Ece408Error
from .sandbox import Limits

MODELS = RANKED_MODELS                   # the course models every ranked run measures (and a hidden one)
MILESTONES = RANKED                      # the ranked milestones (course.py)
GPU_MILESTONES = GPU_RANKED
DEFAULT_TIMEOUT = 600.0


class SubmitError(Ece408Error):
    """A submission that cannot be run here (no GPU for m3/final, a missing hidden model...)."""


@dataclass
class Options:
    engine: str = None            # auto (None), bubblewrap, podman, docker, buildah, host
    image: str = None             # overrides rai.image (container engines)
    timeout: float = DEFAULT_TIMEOUT
    scratch_parent: str = None
    keep_scratch: bool = False
    limits: Limits = field(default_factory=Limits)
    allow_network: bool = False   # development runs: honour rai_build.yml's network: true


def check_timeout(value):
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise SubmitError(f"the time limit must be a finite number of seconds above 0, not {value!r}")
    return float(value)


@dataclass
class SubmitRequest:
    folder: str
    milestone: str
    size: int = DEFAULT_SIZE
    team: str = None
    hidden_model: str = None
    record_id: str = None
    options: Options = field(default_factory=Options)
    repeats: int = None              # fresh timed runs per layer (default: the milestone's; final 5)
    stored_team: str = None          # a name already stored escaped (the service's): used as it is
