"""NVIDIA's profilers in a development run's commands (``ncu -o /build/report ...``,
``nsys profile -o /build/timeline ...``), as the course's teams profiled on its workers and opened the
reports on their laptops.

A command whose program is ``ncu`` or ``nsys`` (by name or by path) is prepared here:

* the tool is looked for where the worker has it (``base.nsight.find``: the command's PATH, the
  CUDA toolkit, ``/opt/nvidia``), and where the sandbox shows it (bubblewrap shows ``/usr`` and
  ``/opt``; the host engine, everything); the command runs it by its full path;
* where the worker has none, the command is not run and ONE line says so
  (``* ncu is not installed on this worker``), and the run goes on with its next command: a
  profile is an extra this worker cannot give, the rest of the run still says what it says;
* where the driver lets only administrators read the GPU's performance counters
  (``RmProfilingAdminOnly: 1`` in /proc/driver/nvidia/params) and the command runs without that
  right (in a sandbox, or as a user other than root), an ``ncu`` command is not run either, and ONE
  line says so: ncu would fail on every kernel;
* an ``ncu`` command that runs and finds it cannot profile here anyway (no permission on the
  counters, a profiler library that does not load: a virtual machine's GPU) has ncu's own error
  lines (``==ERROR== ERR_NVGPUCTRPERM ...``, with its link, for each process) written as ONE line
  (``* ncu could not read the GPU's counters here (...)``) in the transcript (``CounterErrors``).

Containers (docker, podman) are left alone: what their image holds is the image's business.
"""
import os

from ..base import nsight

TOOLS = tuple(nsight.TOOLS)                       # ncu, nsys
SANDBOX_FOLDERS = {"bubblewrap": ("/usr", "/opt")}   # what a sandbox shows of the host (None: everything)
PARAMS = "/proc/driver/nvidia/params"
COUNTER_ERRORS = ("ERR_NVGPUCTRPERM", "permission to access NVIDIA GPU Performance Counters",
                  "Failed to initialize the profiler", "LibraryNotLoaded", "Profiling is not supported",
                  "not supported on this device")
AFTER_ERRORS = ("No kernels were profiled",)    # ncu's own consequence of the errors above
HELD = 4096                                     # characters of a line starting with == held until it ends


def tool_of(argv):
    """"ncu" or "nsys" where ``argv`` runs one of them, else None."""
    name = os.path.basename(argv[0]) if argv else ""
    return name if name in TOOLS else None


def not_installed_line(tool):
    return f"* {tool} is not installed on this worker; the command was not run"


def counters_line(reason):
    return f"* ncu could not read the GPU's counters here ({reason}); the command's profile is not made"


def admin_only(params=PARAMS):
    """Whether the NVIDIA driver lets only administrators read the performance counters."""
    try:
        with open(params, encoding="utf-8", errors="replace") as f:
            return any(line.replace(" ", "").strip() == "RmProfilingAdminOnly:1" for line in f)
    except OSError:
        return False


def prepare(argv, engine, path, as_admin=None, params=PARAMS):
    """(argv to run, None) for a command, the profiler's full path put in where it runs one; or
    (None, the line to write) where the command cannot run here. ``engine``: the sandbox's; ``path``:
    the command's PATH; ``as_admin``: whether the command keeps administrator rights (default: the
    host engine as root)."""
    tool = tool_of(argv)
    if tool is None or engine not in ("bubblewrap", "host"):
        return argv, None
    under = SANDBOX_FOLDERS.get(engine)
    given = argv[0] if os.path.isabs(argv[0]) else None
    found = given if given and os.access(given, os.X_OK) and (under is None or given.startswith(
        tuple(f"{u}/" for u in under))) else nsight.find(tool, path, under)
    if found is None:
        return None, not_installed_line(tool)
    if as_admin is None:
        as_admin = engine == "host" and os.geteuid() == 0
    if tool == "ncu" and not as_admin and admin_only(params):
        return None, counters_line("the driver lets only administrators read them, RmProfilingAdminOnly=1, and "
                                   "team commands run without that right")
    return [found, *argv[1:]], None


class CounterErrors:
    """A transcript, as ``steps.execute`` writes to it, for an ``ncu`` command: ncu's error lines
    saying it cannot profile here become one line of the runner's (``counters_line``); the rest
    passes through as it comes. Only a line that starts with ``==`` is held until it is whole."""

    def __init__(self, transcript):
        self.inner = transcript
        self.partial = ""
        self.said = False

    def write(self, text):
        text = self.partial + text
        lines = text.split("\n")
        last = lines.pop()                          # the line not ended yet ("" after a newline)
        self.partial = last if last[:2] in ("==", "=") and len(last) < HELD else ""
        out = []
        for line in lines:
            if self._dropped(line, out):
                continue
            out.append(line + "\n")
        if not self.partial:
            out.append(last)
        if "".join(out):
            self.inner.write("".join(out))

    def _dropped(self, line, before):
        """Whether ``line`` is one of ncu's errors (the first is written as one line, after the
        output ``before`` it, which is written first and emptied)."""
        if line.startswith("==ERROR==") and any(marker in line for marker in COUNTER_ERRORS):
            if not self.said:
                self.said = True
                if before:
                    self.inner.write("".join(before))
                    before.clear()
                reason = line[len("==ERROR=="):].strip().split(" - ", 1)[0].split(". ", 1)[0][:120]
                self.inner.line(counters_line(reason))
            return True
        return self.said and line.startswith("==WARNING==") and any(m in line for m in AFTER_ERRORS)

    def _flush(self):
        if self.partial:
            line, self.partial = self.partial, ""
            out = []
            if not self._dropped(line, out):
                self.inner.write(line)

    def line(self, text):
        self._flush()
        self.inner.line(text)

    def output_ended(self):
        self._flush()
        self.inner.output_ended()

    def text(self):
        return self.inner.text()
