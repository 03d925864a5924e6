"""A team's launch plan, checked: what ``launch.py`` returned for one layer, as data the harness
trusts only after this module has bounded every part of it. No device is needed here; the
device's own limits (threads per block, shared memory, grid size, constant-memory symbols, the
workspace budget) are checked by ``kernels/team.py`` when the plan is bound to a module.

Every problem is one line naming the step: ``launch.py: step 2 (kernel forward_kernel): block
must be ...``.
"""
import math
import re
from dataclasses import dataclass

from ..errors import PlanError  # noqa: F401  (raised here; defined with the others, kernels/team.py raises it too)

BUFFERS = ("y", "x", "k")          # the layer's own buffers, by name
STREAMS = 4                        # stream 0 is the layer's; 1-3 join it before the layer ends
MAX_STEPS = 256                    # launches (a chunked plan repeats its kernels per chunk of images)
MAX_WORKSPACES = 16
MAX_ARGS = 32
MAX_DIM = 2 ** 31 - 1
MAX_BLOCK = 1024
MAX_SHARED = 1 << 20               # bytes; the device's own limit is checked at bind time
MAX_WORKSPACE = 1 << 40
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
INT32 = (-2 ** 31, 2 ** 31 - 1)
INT64 = (-2 ** 63, 2 ** 63 - 1)


@dataclass(frozen=True)
class Arg:
    kind: str                      # ptr, i32, i64, f32
    value: object                  # a buffer name (ptr) or a number


@dataclass(frozen=True)
class KernelStep:
    name: str
    grid: tuple
    block: tuple
    shared: int
    args: tuple
    stream: int

    @property
    def threads(self):
        return self.block[0] * self.block[1] * self.block[2]


@dataclass(frozen=True)
class ConstantStep:
    symbol: str
    source: str


@dataclass(frozen=True)
class LaunchPlan:
    steps: tuple                   # KernelStep and ConstantStep, in order
    workspaces: tuple              # ((name, bytes), ...)

    @property
    def kernels(self):
        return [s for s in self.steps if isinstance(s, KernelStep)]

    def to_json(self):
        steps = []
        for s in self.steps:
            if isinstance(s, KernelStep):
                steps.append({"kernel": s.name, "grid": list(s.grid), "block": list(s.block), "shared": s.shared,
                              "args": [a.value if a.kind in ("ptr", "i32", "f32") else {a.kind: a.value}
                                       for a in s.args], "stream": s.stream})
            else:
                steps.append({"constant": s.symbol, "source": s.source})
        return steps + [{"workspace": n, "bytes": b} for n, b in self.workspaces]


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _name(value, what):
    if not isinstance(value, str) or not NAME.match(value):
        raise PlanError(f"{what} must be a C identifier (letters, digits, _; at most 128)")
    return value


def _dims(value, what, limit, example):
    if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= 3 or not all(_is_int(v) for v in value):
        raise PlanError(f"{what} must be one to three integers, e.g. {example}")
    dims = tuple(value) + (1,) * (3 - len(value))
    if any(d < 1 for d in dims):
        raise PlanError(f"{what} {dims} has a dimension below 1")
    if any(d > limit for d in dims):
        raise PlanError(f"{what} {dims} has a dimension above {limit}")
    return dims


def _arg(value, buffers, i):
    where = f"argument {i + 1}"
    if isinstance(value, str):
        if value not in buffers:
            raise PlanError(f"{where} names buffer {value[:40]!r}, which is neither {', '.join(BUFFERS)} "
                            "nor a workspace of the plan")
        return Arg("ptr", value)
    if _is_int(value):
        if not INT32[0] <= value <= INT32[1]:
            raise PlanError(f"{where} ({value}) does not fit a 32-bit int; pass i64({value}) for a long long")
        return Arg("i32", value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PlanError(f"{where} is not a finite float")
        return Arg("f32", value)
    if isinstance(value, dict) and len(value) == 1:
        (kind, number), = value.items()
        if kind == "i64" and _is_int(number) and INT64[0] <= number <= INT64[1]:
            return Arg("i64", number)
        if kind == "i32" and _is_int(number) and INT32[0] <= number <= INT32[1]:
            return Arg("i32", number)
        if kind == "f32" and isinstance(number, (int, float)) and not isinstance(number, bool) \
                and math.isfinite(number):
            return Arg("f32", float(number))
    raise PlanError(f"{where} must be a buffer name, an int, a float, i64(n) or f32(v)")


def parse_plan(data):
    """A LaunchPlan from what ``launch`` returned (JSON-like data), or PlanError."""
    if not isinstance(data, (list, tuple)):
        raise PlanError("launch.py: launch() must return a list of kernel(...), constant(...) and "
                        "workspace(...) steps")
    if len(data) > MAX_STEPS + MAX_WORKSPACES:
        raise PlanError(f"launch.py: launch() returned {len(data)} steps; at most {MAX_STEPS} launches "
                        f"and {MAX_WORKSPACES} workspaces")
    workspaces = {}
    for i, step in enumerate(data):
        if isinstance(step, dict) and "workspace" in step:
            what = f"launch.py: step {i + 1} (workspace)"
            if set(step) != {"workspace", "bytes"}:
                raise PlanError(f"{what}: takes a name and a size in bytes: workspace(name, nbytes)")
            name = _name(step["workspace"], f"{what}: its name")
            if name in BUFFERS or name in workspaces:
                raise PlanError(f"{what}: the name {name} is already taken")
            size = step["bytes"]
            if not _is_int(size) or not 1 <= size <= MAX_WORKSPACE:
                raise PlanError(f"{what} {name}: its size must be a whole number of bytes from 1 to 2**40")
            workspaces[name] = size
    if len(workspaces) > MAX_WORKSPACES:
        raise PlanError(f"launch.py: {len(workspaces)} workspaces; at most {MAX_WORKSPACES}")
    buffers = set(BUFFERS) | set(workspaces)
    steps = []
    for i, step in enumerate(data):
        if isinstance(step, dict) and "workspace" in step:
            continue
        if not isinstance(step, dict):
            raise PlanError(f"launch.py: step {i + 1} is not a kernel(...), constant(...) or workspace(...)")
        if "constant" in step:
            what = f"launch.py: step {i + 1} (constant)"
            if set(step) != {"constant", "source"}:
                raise PlanError(f"{what}: takes a __constant__ symbol and a buffer: constant(symbol, 'k')")
            symbol = _name(step["constant"], f"{what}: its symbol")
            source = step["source"]
            if source not in buffers:
                raise PlanError(f"{what} {symbol}: its source must be one of {', '.join(sorted(buffers))}")
            steps.append(ConstantStep(symbol, source))
            continue
        if "kernel" not in step:
            raise PlanError(f"launch.py: step {i + 1} is not a kernel(...), constant(...) or workspace(...)")
        name = _name(step["kernel"], f"launch.py: step {i + 1} (kernel): its name")
        what = f"launch.py: step {i + 1} (kernel {name})"
        unknown = set(step) - {"kernel", "grid", "block", "shared", "args", "stream"}
        if unknown:
            raise PlanError(f"{what}: unknown field {sorted(unknown)[0][:40]!r}")
        grid = _dims(step.get("grid"), f"{what}: grid", MAX_DIM, "(blocks_x, blocks_y, blocks_z)")
        block = _dims(step.get("block"), f"{what}: block", MAX_BLOCK, "(16, 16, 1)")
        if block[0] * block[1] * block[2] > MAX_BLOCK:
            raise PlanError(f"{what}: block {block} has {block[0] * block[1] * block[2]} threads; at most {MAX_BLOCK}")
        shared = step.get("shared", 0)
        if not _is_int(shared) or not 0 <= shared <= MAX_SHARED:
            raise PlanError(f"{what}: shared must be a byte count from 0 to {MAX_SHARED}")
        stream = step.get("stream", 0)
        if not _is_int(stream) or not 0 <= stream < STREAMS:
            raise PlanError(f"{what}: stream must be 0 to {STREAMS - 1}")
        args = step.get("args", [])
        if not isinstance(args, (list, tuple)) or len(args) > MAX_ARGS:
            raise PlanError(f"{what}: args must be a list of at most {MAX_ARGS} arguments")
        try:
            parsed = tuple(_arg(a, buffers, j) for j, a in enumerate(args))
        except PlanError as exc:
            raise PlanError(f"{what}: {exc}") from None
        steps.append(KernelStep(name, grid, block, shared, parsed, stream))
    if not any(isinstance(s, KernelStep) for s in steps):
        raise PlanError("launch.py: launch() returned no kernel(...) step")
    if len(steps) > MAX_STEPS:
        raise PlanError(f"launch.py: launch() returned {len(steps)} steps; at most {MAX_STEPS}")
    return LaunchPlan(tuple(steps), tuple(workspaces.items()))
