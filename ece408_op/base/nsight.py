"""Where NVIDIA's profilers are on this machine: Nsight Compute (``ncu``) and Nsight Systems (``nsys``).

``find(tool)`` looks, first found: the tool's own environment variable (``$ECE408_NCU``,
``$ECE408_NSYS``), the given PATH (default this process's), the CUDA toolkit's ``bin``, then the
folders NVIDIA's installers make under ``/opt/nvidia`` (the newest version first). Only a file this
process may execute counts. A copy of ``nsys`` inside Nsight Compute's own folders (``host/...``) is
not a Nsight Systems install: it cannot make a report, so it is never found.
"""
import glob
import os
import shutil

TOOLS = {
    "ncu": ("Nsight Compute", "ECE408_NCU", ["/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu"]),
    "nsys": ("Nsight Systems", "ECE408_NSYS", ["/usr/local/cuda/bin/nsys", "/opt/nvidia/nsight-systems/*/bin/nsys",
                                               "/opt/nvidia/nsight-systems-cli/*/bin/nsys"]),
}


def candidates(tool, path=None):
    """The places ``find`` tries for ``tool``, in order (globs expanded, newest version first)."""
    _, variable, places = TOOLS[tool]
    found = [os.environ.get(variable), shutil.which(tool, path=path)]
    for place in places:
        found += sorted(glob.glob(place), reverse=True) if "*" in place else [place]
    return [p for p in found if p]


def find(tool, path=None, under=None):
    """The absolute path of ``tool`` ("ncu" or "nsys"), or None. ``path``: the PATH to search
    (default this process's); ``under``: folders the path must lie in (a sandbox that shows only
    those), or None for anywhere."""
    for candidate in candidates(tool, path):
        candidate = os.path.abspath(candidate)
        if under is not None and not any(candidate.startswith(folder.rstrip("/") + "/") for folder in under):
            continue
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def env_variable(tool):
    return TOOLS[tool][1]
