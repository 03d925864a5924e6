"""The package's layering: each layer imports only the layers below it, and nothing below mx/
imports MXNet (checked statically, and by importing every module with MXNet made unimportable)."""
import ast
import subprocess

import pytest

from conftest import ROOT, python_command

PACKAGE = ROOT / "ece408_op"
# layer -> the package's layers it may import (errors, base/ and the package root are everyone's)
ALLOWED = {
    "base": set(),                             # small helpers every layer may use (see BASE)
    "conv": {"conv"},
    "kernels": {"conv", "kernels"},
    "team": {"conv", "kernels", "team"},       # a team's forward: its process, plans, checks (no MXNet)
    "data": {"data"},
    "mx": {"conv", "kernels", "data", "team", "mx"},
    "torch": {"conv", "kernels", "torch"},      # the PyTorch front-end: no MXNet (needs PyTorch)
    "grading": {"grading", "team", "data", "mx", "kernels"},   # MXNet only in measure.py, the sandbox's half
    "selftest": {"conv", "kernels", "data", "mx", "selftest"},
    "bench": {"conv", "kernels", "data", "team", "torch", "mx", "bench"},   # every measurement; MXNet, PyTorch below
    "service": {"grading", "team", "data", "service"},   # the submission service: grading through service/runs.py only
    "cli": {"conv", "kernels", "data", "team", "mx", "grading", "selftest", "torch", "bench", "service", "cli"},
}
BASE = {"errors", "course", "console", "", "base"}   # leaves every layer may import (base/: small helpers)
MXNET_FREE = ("base", "conv", "kernels", "team", "data", "grading", "selftest", "bench", "service", "cli")   # these
# import mx lazily, but for the benchmark modules that import MXNet (cpu, zoo: through mx/) or PyTorch (network):
IMPORTS_MXNET_OR_TORCH = {"bench/cpu.py", "bench/zoo.py", "bench/network.py"}


TEMPLATE = PACKAGE / "team" / "template"         # a team's files, copied by init: data, not modules


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if len(rel.parts) > 1 and TEMPLATE not in path.parents:
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
    # "MXNet is not importable (...)", or where NumPy 2 is installed "MXNet 1.9.1 needs NumPy < 2 ..."
    assert len(lines) == 1 and lines[0].startswith("error: MXNet "), result.stderr


def test_fetch_and_gpu_bench_commands_need_no_mxnet():
    code = BLOCK_MXNET + ("from ece408_op.cli import main\n"
                          "assert main(['fetch', '--help']) == 0\n") 
    result = subprocess.run([*python_command(), "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert "--source" in result.stdout, result.stderr
    assert result.returncode == 0, result.stderr


def test_the_service_reaches_grading_through_one_module():
    # service/runs.py is the service's one door into grading/ and team/: a move of their modules
    # (the architecture step) then touches one file of the service
    bad = []
    for owner, path in _modules():
        if owner == "service" and path.name != "runs.py":
            ours, _ = _package_imports(path)
            bad += [f"{path.relative_to(ROOT)}:{line} imports ece408_op.{target}"
                    for target, line in ours if target in ("grading", "team", "data")]
    assert not bad, "\n".join(bad)
