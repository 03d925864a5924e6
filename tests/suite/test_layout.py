"""The suite's layout (docs/tests.md, 'The layout'): every test file in a wing's folder, named for
what it checks (no round's name), its base name used once; nothing imports from a conftest.py
(pytest imports each folder's conftest.py as ``conftest``: a wing's own fixtures would shadow the
helpers, which live in tests/suitekit.py and the helper modules)."""
import ast
import re

from suitekit import ROOT

TESTS = ROOT / "tests"
ROUND = re.compile(r"(hostile|round|issue|attack)\d|_r\d+\b|_v\d+_round")


def _files():
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_test_file_is_in_a_wing_with_a_base_name_of_its_own():
    tests = [p for p in _files() if p.name.startswith("test_")]
    assert tests
    loose = [p.name for p in tests if p.parent == TESTS]
    assert not loose, f"test files outside a wing's folder: {loose}"
    names = {}
    for p in tests:
        names.setdefault(p.name, []).append(str(p.relative_to(TESTS)))
    assert not {n: ps for n, ps in names.items() if len(ps) > 1}
    assert not [p.name for p in tests if ROUND.search(p.stem)], "a file named for a round, not what it checks"


def test_nothing_imports_from_a_conftest():
    found = []
    for p in _files():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.ImportFrom) and node.module == "conftest" or \
                    isinstance(node, ast.Import) and any(a.name == "conftest" for a in node.names):
                found.append(f"{p.relative_to(TESTS)}:{node.lineno}")
    assert not found, f"imports from conftest (use tests/suitekit.py): {found}"


def _started_by_hand(func):
    """Lines of ``func`` that start a service themselves: ``Service(...).start()``, ``start_service(...)``,
    or ``.start()`` of a name the function bound to ``Service(...)`` (a restart of the fixture's is not)."""
    made = {n.targets[0].id for n in ast.walk(func) if isinstance(n, ast.Assign) and len(n.targets) == 1 and
            isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Call) and
            isinstance(n.value.func, ast.Name) and n.value.func.id == "Service"}
    found = []
    for n in ast.walk(func):
        if not isinstance(n, ast.Call):
            continue
        if isinstance(n.func, ast.Name) and n.func.id == "start_service":
            found.append(n.lineno)
        elif isinstance(n.func, ast.Attribute) and n.func.attr == "start" and (
                isinstance(n.func.value, ast.Call) and isinstance(n.func.value.func, ast.Name) and
                n.func.value.func.id == "Service" or isinstance(n.func.value, ast.Name) and n.func.value.id in made):
            found.append(n.lineno)
    return found


def test_no_test_starts_a_service_by_hand():
    # a service a test needs comes from a fixture that stops it whatever happens: running_service
    # (tests/conftest.py), module_service (hostilekit.py) or a file's own; a test may stop and start
    # that one again (a restart), and may build a Service to run the command line against nothing
    found = []
    for p in _files():
        if not p.name.startswith("test_"):
            continue
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.FunctionDef) and not any("fixture" in ast.unparse(d) for d in node.decorator_list):
                found += [f"{p.relative_to(TESTS)}:{line} ({node.name})" for line in _started_by_hand(node)]
    assert not found, "services started by hand (use the running_service fixture):\n" + "\n".join(found)
