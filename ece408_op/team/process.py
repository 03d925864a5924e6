"""The team process: the only place a team's Python runs during a measured run.

Started by ``harness.TeamProcess`` (never by hand) as ``python -I -c BOOT ... -m
ece408_op.team.process --part cpu|gpu --dir TEAM --control R --reply W [--shm S]``. It locks
itself down (``lockdown.lock_down``: no fork, exec or ptrace) BEFORE it imports the team's
file, then answers requests on the control pipe, one reply each on the reply pipe:

    {"op": "hello"}                         -> {"ok": true}  (the team's file imported)
    {"op": "plan", "layer": {B, M, C, H, W, K}} -> {"ok": true, "plan": [...]}  (gpu: launch.py)
    {"op": "forward", "size", "x", "k", "y"}     -> {"ok": true}  (cpu: new-forward.py, into --shm)

Each message is a 4-byte big-endian length, then that many bytes of JSON. The team's own
output (print, tracebacks) goes to this process's stdout and stderr: the run's transcript,
never the record. A reply is data the harness bounds and checks (``harness.py``, ``plan.py``).
"""
import argparse
import os
import sys
import traceback

from . import wire

CPU_FILE = "new-forward.py"
GPU_FILE = "launch.py"
CPU_FUNCTION = "forward"
GPU_FUNCTION = "launch"


def send(fd, message):
    _write_all(fd, wire.encode(message))


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def recv(fd, limit):
    """One message (JSON), refusing one longer than ``limit`` bytes."""
    return wire.decode(lambda k: os.read(fd, k), limit)


def numba_error_line(exc, path):
    """One line for Numba's refusal to compile the team's code (``Failed in nopython mode
    pipeline``), or None for any other exception: Numba's own reason (``NameError: name 'n' is
    not defined``, ``Unknown attribute ...``) and the team's file and line, from Numba's
    ``File "new-forward.py", line N`` where it gives one, else the first line naming the
    undefined name."""
    import re
    if not type(exc).__module__.startswith("numba"):
        return None
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("Failed in "):
        return None
    skip = ("Failed in ", "During:", "File ", "<source elided>", "^", "def ")
    reason = next((line for line in lines[1:] if not line.startswith(skip)), lines[0])
    name = os.path.basename(path)
    line_no = None
    found = re.search(r'File "([^"]*)", line (\d+)', text)
    if found and os.path.basename(found.group(1)) == name:
        line_no = int(found.group(2))
    else:
        undefined = re.search(r"name '(\w+)' is not defined|global name '(\w+)'", reason)
        word = undefined and (undefined.group(1) or undefined.group(2))
        if word:
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    line_no = next((i for i, line in enumerate(f, 1) if re.search(rf"\b{word}\b", line)), None)
            except OSError:
                pass
    where = f"{name} line {line_no}" if line_no else name
    return f"{where}: Numba could not compile it: {reason}"[:400]


def error_line(exc, path):
    """One line for an exception raised by the team's code: where in the team's file, and what."""
    numba_line = numba_error_line(exc, path)
    if numba_line is not None:
        return numba_line
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.basename(f.filename) == os.path.basename(path)]
    where = f"{os.path.basename(path)} line {frames[-1].lineno}: " if frames else f"{os.path.basename(path)}: "
    text = str(exc).strip().splitlines()
    hint = ("; a team's forward may not start processes or programs (fork, exec) nor trace others"
            if isinstance(exc, PermissionError) and exc.errno == 1 else "")
    return (where + type(exc).__name__ + (f": {text[0]}" if text else ""))[:300] + hint


def print_team_traceback(exc, path):
    """The frames of the team's own file (never the harness's) and the exception, on stderr: the
    team's debugging aid in its transcript."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.basename(f.filename) == os.path.basename(path)]
    if not frames:
        return                                # the harness's own check: its one line says it all
    lines = ["Traceback of the team's code (most recent call last):\n"] + traceback.format_list(frames)
    sys.stderr.write("".join(lines + traceback.format_exception_only(type(exc), exc)))
    sys.stderr.flush()


def load_team_file(path, name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"ece408_team_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # Numba's cache finds the module again by its name
    spec.loader.exec_module(module)
    return module


def _jsonable(value, depth=0):
    """What launch() returned, as JSON data (tuples to lists); anything else is refused."""
    if depth > 8:
        raise ValueError("nested too deeply")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    import numbers
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise ValueError(f"launch() returned a {type(value).__name__}; use lists, numbers and strings")


class Worker:
    def __init__(self, args):
        self.args = args
        self.control, self.reply = args.control, args.reply
        self.shm = None
        self.mapped = 0
        self.path = os.path.join(args.dir, CPU_FILE if args.part == "cpu" else GPU_FILE)
        self.function = None

    def hello(self):
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f"{os.path.basename(self.path)} not found in the team folder")
        module = load_team_file(self.path, self.args.part)
        name = CPU_FUNCTION if self.args.part == "cpu" else GPU_FUNCTION
        function = getattr(module, name, None)
        if not callable(function):
            raise AttributeError(f"{os.path.basename(self.path)} defines no function {name}()")
        self.function = function
        return {}

    def plan(self, layer):
        keys = ("B", "M", "C", "H", "W", "K")
        result = self.function(*[int(layer[k]) for k in keys])
        return {"plan": _jsonable(result)}

    def _views(self, message):
        import mmap
        import numpy as np
        size = int(message["size"])
        if self.shm is None or self.mapped < size:
            if self.shm is not None:
                self.shm.close()
            self.shm = mmap.mmap(self.args.shm, size)
            self.mapped = size
        views = {}
        for name in ("x", "k", "y"):
            offset, shape = message[name]
            views[name] = np.ndarray(tuple(shape), np.float32, buffer=self.shm, offset=int(offset))
        views["x"].flags.writeable = False
        views["k"].flags.writeable = False
        return views

    def forward(self, message):
        v = self._views(message)
        self.function(v["y"], v["x"], v["k"])
        return {}

    def serve(self):
        while True:
            try:
                message = recv(self.control, 1 << 20)
            except EOFError:
                return 0
            op = message.get("op")
            try:
                if op == "hello":
                    result = self.hello()
                elif op == "plan":
                    result = self.plan(message["layer"])
                elif op == "forward":
                    result = self.forward(message)
                elif op == "exit":
                    return 0
                else:
                    raise ValueError(f"unknown request {op!r}")
                send(self.reply, {"ok": True, **result})
            except Exception as exc:             # noqa: BLE001  the team's error, reported in one line
                print_team_traceback(exc, self.path)
                send(self.reply, {"ok": False, "error": error_line(exc, self.path)})


def main(argv=None):
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="ece408_op.team.process")
    parser.add_argument("--part", choices=("cpu", "gpu"), required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--control", type=int, required=True)
    parser.add_argument("--reply", type=int, required=True)
    parser.add_argument("--shm", type=int)
    args = parser.parse_args(argv)
    from .lockdown import LockdownError, lock_down
    try:
        lock_down()
    except (LockdownError, OSError) as exc:
        send(args.reply, {"ok": False, "error": f"the team process could not lock itself down: {exc}"})
        return 3
    return Worker(args).serve()


if __name__ == "__main__":
    sys.exit(main())
