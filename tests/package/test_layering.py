"""The package's layering: each layer imports only the layers below it, and nothing below mx/
imports MXNet (checked statically, and by importing every module with MXNet made unimportable)."""
import ast
import subprocess

import pytest

from suitekit import ROOT, python_command

PACKAGE = ROOT / "ece408_op"
# layer -> the package's layers it may import (errors, base/ and the package root are everyone's)
ALLOWED = {
    "base": set(),                             # small helpers every layer may use (see BASE)
    "conv": {"conv"},
    "tasks": {"conv", "tasks"},                # the course's task as a folder: its reference is conv's
    "kernels": {"conv", "kernels"},
    "team": {"conv", "tasks", "kernels", "team"},   # a team's forward: its process, plans, checks (no MXNet)
    "data": {"data"},
    "mx": {"conv", "kernels", "data", "team", "mx"},
    "torch": {"conv", "kernels", "torch"},      # the PyTorch front-end: no MXNet (needs PyTorch)
    "grading": {"grading", "team", "data", "mx", "kernels"},   # MXNet only in measure.py, the sandbox's half
    "selftest": {"conv", "kernels", "data", "mx", "selftest"},
    "bench": {"conv", "kernels", "data", "team", "torch", "mx", "bench"},   # every measurement; MXNet, PyTorch below
    "service": {"grading", "team", "data", "service"},   # the submission service: grading through service/grading_door.py only
    "client": {"service", "client"},           # a laptop's client: the upload's format only (test below)
    "cli": {"conv", "kernels", "data", "team", "mx", "grading", "selftest", "torch", "bench", "service", "client", "cli"},
}
BASE = {"errors", "course", "console", "", "base"}   # leaves every layer may import (base/: small helpers)
MXNET_FREE = ("base", "conv", "tasks", "kernels", "team", "data", "grading", "selftest", "bench", "service", "client", "cli")   # these
# import mx lazily, but for the benchmark modules that import MXNet (cpu, zoo: through mx/) or PyTorch (network):
IMPORTS_MXNET_OR_TORCH = {"bench/cpu.py", "bench/zoo.py", "bench/network_layers.py"}


def is_module(path):
    """Whether the .py file ``path`` is a module of the package: its folder is a package (has an
    __init__.py). A team's files (the task's template, its solutions) are data the harness reads."""
    return (path.parent / "__init__.py").is_file()


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if len(rel.parts) > 1 and is_module(path):
            yield rel.parts[0], path


def _package_imports(path):
    """(layer imported, line) for every import of our own package in ``path``; and third-party tops."""
    tree = ast.parse(path.read_text())
    depth = len(path.relative_to(PACKAGE).parts) - 1        # folders below the package root
    ours, others = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                top = (node.module or "").split(".")[0]
                if top == "ece408_op":
                    parts = node.module.split(".")[1:]
                    ours.append((parts[0] if parts else "", node.lineno))
                else:
                    others.append((top, node.lineno))
            else:
                parts = (node.module or "").split(".")
                if node.level > depth:                       # from .. import x / from ..x import y
                    if parts[0]:
                        ours.append((parts[0], node.lineno))
                    for alias in node.names:                 # from .. import kernels: a layer; else the root
                        layer = alias.name if (PACKAGE / alias.name).is_dir() or alias.name == "errors" else ""
                        ours.append((layer, node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top == "ece408_op":
                    parts = alias.name.split(".")[1:]
                    ours.append((parts[0] if parts else "", node.lineno))
                else:
                    others.append((top, node.lineno))
    return ours, others


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_downward(layer):
    bad = []
    for owner, path in _modules():
        if owner != layer:
            continue
        ours, others = _package_imports(path)
        for target, line in ours:
            if target not in ALLOWED[layer] | BASE:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports ece408_op.{target}")
        if layer != "mx":
            bad += [f"{path.relative_to(ROOT)}:{line} imports mxnet" for top, line in others if top == "mxnet"]
    assert not bad, "\n".join(bad)


def test_layering_check_catches_a_violation(tmp_path, monkeypatch):
    # The check above must be able to fail: a conv module importing the kernels layer.
    fake = PACKAGE / "conv" / "_layering_probe.py"
    fake.write_text("from ..kernels import VERSIONS\nimport mxnet\n")
    try:
        with pytest.raises(AssertionError, match="imports ece408_op.kernels"):
            test_layer_imports_only_downward("conv")
    finally:
        fake.unlink()


BLOCK_MXNET = "import sys; sys.modules['mxnet'] = None\n"   # `import mxnet` now raises ImportError


@pytest.mark.slow                                   # measured 1.9 s (loaded machine)
def test_every_module_below_mx_imports_without_mxnet():
    names = ["ece408_op"] + [
        "ece408_op." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts).replace(".__init__", "")
        for layer, path in _modules()
        if layer in MXNET_FREE and path.relative_to(PACKAGE).as_posix() not in IMPORTS_MXNET_OR_TORCH]
    code = BLOCK_MXNET + "".join(f"import {name}\n" for name in names) + \
        "assert sys.modules['mxnet'] is None, 'mxnet was loaded'\nprint(len(sys.modules))\n"
    result = subprocess.run([*python_command(), "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert len(names) > 20


def test_importing_the_package_does_not_import_mxnet_or_numpy():
    code = "import sys, ece408_op; print('mxnet' in sys.modules, 'numpy' in sys.modules)"
    result = subprocess.run([*python_command(), "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0 and result.stdout.split() == ["False", "False"], result.stderr


def test_milestone_without_mxnet_is_one_line_error():
    # bad input: an environment where MXNet cannot be imported
    code = BLOCK_MXNET + "from ece408_op.cli import main; sys.exit(main(['m2', '10']))"
    result = subprocess.run([*python_command(), "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    # the extra that brings MXNet, and how to install it; where NumPy 2 is installed "MXNet 1.9.1 needs NumPy < 2 ..."
    assert len(lines) == 1 and lines[0].startswith(("error: python -m ece408_op m2 needs the mxnet extra ",
                                                    "error: MXNet 1.9.1 needs NumPy < 2")), result.stderr


def test_fetch_and_gpu_bench_commands_need_no_mxnet():
    code = BLOCK_MXNET + ("from ece408_op.cli import main\n"
                          "assert main(['fetch', '--help']) == 0\n") 
    result = subprocess.run([*python_command(), "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert "--source" in result.stdout, result.stderr
    assert result.returncode == 0, result.stderr


def test_the_clients_import_nothing_heavy():
    # the team's and the instructor's clients run on a laptop: no NumPy, MXNet, Numba, PyCUDA or
    # PyTorch, and none of the server's packages (FastAPI, Starlette, Jinja2, matplotlib...)
    heavy = ("numpy", "mxnet", "numba", "pycuda", "torch", "fastapi", "starlette", "jinja2", "matplotlib", "anyio",
             "uvicorn", "sse_starlette")
    code = ("import sys\n"
            "import ece408_op.client.api, ece408_op.client.instructor, ece408_op.client.roster\n"
            "import ece408_op.cli.remote, ece408_op.cli.jobs, ece408_op.cli.login, ece408_op.cli.teams\n"
            "import ece408_op.cli.deadlines\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})))\n")
    result = subprocess.run([*python_command(), "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout


def test_the_client_wing_takes_only_the_uploads_format_from_the_service():
    # client/ is what a laptop runs: of the service it shares the formats of the upload and the build
    # folder (service/upload.py, service/buildfolder.py: jobs download checks what it unpacks),
    # nothing of the server; what both must agree on is in base/ (terms.py, archive.py, names.py)
    bad = []
    for owner, path in _modules():
        if owner != "client":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 2 and (node.module or "").startswith("service"):
                names = [node.module] if node.module != "service" else [f"service.{a.name}" for a in node.names]
                bad += [f"{path.relative_to(ROOT)}:{node.lineno} imports ece408_op.{n}" for n in names
                        if n not in ("service.upload", "service.buildfolder")]
    assert not bad, "\n".join(bad)


def test_the_service_reaches_grading_through_one_module():
    # service/grading_door.py is the service's one door into grading/ and team/: a move of their modules
    # (the architecture step) then touches one file of the service
    bad = []
    for owner, path in _modules():
        if owner == "service" and path.name != "grading_door.py":
            ours, _ = _package_imports(path)
            bad += [f"{path.relative_to(ROOT)}:{line} imports ece408_op.{target}"
                    for target, line in ours if target in ("grading", "team", "data")]
    assert not bad, "\n".join(bad)


def _module_graph(package=PACKAGE):
    """{module file: {module files it imports}}: every import of the package's own modules, those
    inside functions too (a circle closed by an import inside a function is still a circle). A name
    imported from a package that is not a module of it counts as an import of its __init__.py."""
    def target(base, name):
        path = base.joinpath(*name.split(".")) if name else base
        if path.with_suffix(".py").is_file():
            return path.with_suffix(".py")
        if (path / "__init__.py").is_file():
            return path / "__init__.py"
        return None

    graph = {}
    for path in sorted(package.rglob("*.py")):
        if not is_module(path):
            continue
        edges = graph.setdefault(path, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = path.parent
                    for _ in range(node.level - 1):
                        base = base.parent
                    module = node.module or ""
                elif (node.module or "").split(".")[0] == package.name:
                    base, module = package, node.module.partition(".")[2]
                else:
                    continue
                for alias in node.names:                   # from . import remote: the module itself
                    found = target(base, f"{module}.{alias.name}" if module else alias.name)
                    edges.add(found or target(base, module))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == package.name:
                        edges.add(target(package, alias.name.partition(".")[2]))
        edges.discard(None)
        edges.discard(path)
    return graph


def _circles(graph):
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_module_imports_one_that_imports_it_back():
    circles = _circles(_module_graph())
    assert not circles, "\n".join(" <-> ".join(str(p.relative_to(ROOT)) for p in group) for group in circles)


def test_the_circle_check_catches_a_circle_closed_inside_a_function(tmp_path):
    # The check above must be able to fail: two modules of a package, one importing the other at the
    # top and the other importing it back inside a function.
    package = tmp_path / "ece408_op"
    (package / "wing").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "wing" / "__init__.py").write_text("")
    (package / "wing" / "a.py").write_text("from .b import helper\n")
    (package / "wing" / "b.py").write_text("def helper():\n    from . import a\n    return a\n")
    (package / "wing" / "c.py").write_text("from ece408_op.wing import b\n")
    circles = _circles(_module_graph(package))
    assert circles == [[package / "wing" / "a.py", package / "wing" / "b.py"]]
