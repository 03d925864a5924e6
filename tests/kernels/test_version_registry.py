"""A kernel version in one place: the fallback order, the autotuner's candidates and tiles and the choice
for every layer are read from the Version classes (their ranks and tiles), and equal what the hand-kept
lists gave before the classes held them (tests/data/kernel_choices.json: choice.PREFERENCE,
autotune.TUNED and autotune.TILES, and the choices they made, written once from that code); every
version's number is in its file's name and its row in docs/kernels.md; a version added as its two files
is picked up by the choice, the autotuner and the table with no other edit."""
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from ece408_op import kernels
from ece408_op.kernels import autotune, choice
from ece408_op.kernels.versions import registry
from suitekit import ROOT

EXPECTED = json.loads((ROOT / "tests" / "data" / "kernel_choices.json").read_text())
S = kernels.ConvShape
COURSE = S(1, 28, 28, 50, 5)


def _float32(order):
    """The versions of ``order`` that compute float32 data (those the lists held; v21 and v22 came after)."""
    return [n for n in order if "float32" in kernels.VERSIONS[n].dtypes]


def test_the_orders_and_tiles_are_the_ones_the_lists_gave():
    assert _float32(choice.fallback_order()) == EXPECTED["fallback_order"]
    assert _float32(autotune.tune_order()) == EXPECTED["tune_order"]
    for number in _float32(kernels.VERSIONS):
        assert [dict(t) for t in kernels.VERSIONS[number].tune_tiles] == EXPECTED["tiles"].get(str(number), [{}]), number


@pytest.mark.parametrize("row", EXPECTED["layers"], ids=lambda row: kernels.shape_key(S(**row["shape"])))
def test_every_layer_gets_the_choices_the_lists_gave(row):
    """The fallback, the default on each device of the committed table and the autotuner's candidates (in
    timing order, with their tiles) for the committed tables' layers and the shared modules' layers."""
    shape = S(**row["shape"])
    for precision in ("tf32x3", "fp32"):
        assert choice.fallback_version(shape, precision) == row[f"fallback {precision}"]
        assert [choice.default_version(shape, device, precision) for device in EXPECTED["devices"]] == \
            row[f"default {precision}"]
        for arch in ("sm_90", "sm_80"):
            got = [autotune.describe(n, o) for n, o in autotune.candidates(shape, arch, precision)]
            assert got == row[f"candidates {arch} {precision}"], (arch, precision)
    # 'tf32': tf32x3's choices, the TF32 tensor-core versions' with one product (TF32_PASSES 1)
    assert choice.fallback_version(shape, "tf32") == row["fallback tf32x3"]
    want = [(n, {**({"TF32_PASSES": 1} if kernels.VERSIONS[n].tf32 else {}), **o})
            for n, o in autotune.candidates(shape, "sm_90", "tf32x3")]
    assert autotune.candidates(shape, "sm_90", "tf32") == want


def test_the_registry_refuses_a_rank_it_cannot_place():
    base = type(kernels.VERSIONS[7])
    with pytest.raises(ValueError, match="fallback_rank 10 is v7 strip's"):
        # bad input: a second version in v7's place of the fallback order
        registry.register(type("Twin", (base,), {"number": 98, "name": "twin"}))
    with pytest.raises(ValueError, match="has a tune_rank but is not defaultable"):
        # bad input: an opt-in version the autotuner would time
        registry.register(type("OptIn", (base,), {"number": 98, "name": "optin", "fallback_rank": None,
                                                  "tune_rank": 99, "defaultable": False}))
    assert 98 not in kernels.VERSIONS


def test_every_version_number_is_in_its_file_name():
    """``ls kernels/versions/`` finds every version: a file holding several names each of their numbers."""
    for number, version in kernels.VERSIONS.items():
        stem = Path(sys.modules[type(version).__module__].__file__).stem
        assert number in [int(n) for n in re.findall(r"v(\d+)", stem)], (version.label, stem)


def _unasked(version):
    """The docs table's ``unasked`` cell for ``version``, from its class."""
    if not version.defaultable:
        return "opt-in"
    ranks = [word for word, rank in (("fallback", version.fallback_rank), ("tuned", version.tune_rank))
             if rank is not None]
    return ", ".join(ranks) or "table"


def test_every_version_has_its_row_in_the_docs_table():
    """docs/kernels.md's table: a row per version, naming the file that defines it, its facts as the
    class says (layers ``any`` where general, arithmetic ``fp32`` where exact, where it runs unasked)."""
    rows = {}
    for line in (ROOT / "docs" / "kernels.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| v") and len(cells) == 6 and re.match(r"v\d+ ", cells[0]):
            rows[cells[0]] = cells[1:]
    assert set(rows) == {version.label for version in kernels.VERSIONS.values()}
    for version in kernels.VERSIONS.values():
        file, layers, arithmetic, unasked, _ = rows[version.label]
        assert Path(sys.modules[type(version).__module__].__file__).stem in file, version.label
        assert layers.split(" ")[0] == ("any" if version.general else "course"), version.label
        assert (arithmetic == "fp32") == version.exact, version.label
        assert unasked == _unasked(version), version.label


SCRATCH_PY = '''"""v99 scratch: v1's kernel under another name, first in both orders (a test's own version)."""
from ece408_op.kernels.versions.registry import register
from ece408_op.kernels.versions.v01_naive import Naive


@register
class Scratch(Naive):
    number, name, kernels = 99, "scratch", ("conv_forward_v99",)
    fallback_rank = 1
    tune_rank = 1
    tuning_keys = ("V99_THREADS",)
    tune_tiles = ({}, {"V99_THREADS": 128})

    def defines(self, inner, tuning_overrides=None):
        return {"V99_THREADS": int(self.own(tuning_overrides).get("V99_THREADS", self.THREADS))}
'''


def test_a_version_added_as_two_files_is_picked_up_everywhere(tmp_path, monkeypatch):
    """Adding a version is its .py and .cu in a folder of versions: the registry finds the module, the
    module registers its class, its CUDA file beside it is what its plans build, and its ranks and tiles
    put it into the fallback order and the autotuner's candidates; nothing else is edited."""
    from ece408_op.kernels.build import ModuleSpec, build_cubin
    package = tmp_path / "scratch_versions"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "v99_scratch.py").write_text(SCRATCH_PY)
    common = kernels.VERSIONS[1].source_path.with_name("common.cuh")
    naive = kernels.VERSIONS[1].source_path.read_text()
    (package / "v99_scratch.cu").write_text(naive.replace('#include "common.cuh"', f'#include "{common}"')
                                            .replace("conv_forward_v1(", "conv_forward_v99("))
    monkeypatch.syspath_prepend(str(tmp_path))
    before = choice.fallback_order(), autotune.tune_order()
    try:
        registry.discover("scratch_versions", [str(package)])
        scratch = kernels.VERSIONS[99]
        assert list(kernels.VERSIONS)[-1] == 99 and scratch.label == "v99 scratch"
        assert kernels.parse_version("scratch") == kernels.parse_version("v99") == 99
        assert choice.fallback_order() == (99, *before[0]) and autotune.tune_order() == (99, *before[1])
        assert kernels.default_version(COURSE) == 99                                 # first in the fallback order
        assert kernels.default_version(COURSE, "NVIDIA H100 80GB HBM3") == 7          # the measured table first
        assert autotune.candidates(COURSE, "sm_90")[:2] == [(99, {}), (99, {"V99_THREADS": 128})]
        spec = kernels.module_spec(99, scratch.inner(COURSE))
        assert spec.source == package / "v99_scratch.cu" and dict(spec.defines)["CONV_M"] == 50
        if shutil.which("nvcc"):
            monkeypatch.setenv("ECE408_CUBIN_CACHE", str(tmp_path / "cubins"))
            assert build_cubin(spec, "sm_90") and build_cubin(ModuleSpec(spec.source, spec.defines), "sm_90")
            assert len(list((tmp_path / "cubins").iterdir())) == 1            # cached once, by its sources
        with pytest.raises(ValueError, match="clashes"):
            # bad input: a second version of the same number
            registry.register(type("Again", (type(scratch),), {"name": "again", "fallback_rank": 2, "tune_rank": 2}))
    finally:
        registry.unregister(99)
        for name in [n for n in sys.modules if n.startswith("scratch_versions")]:
            del sys.modules[name]
    assert 99 not in kernels.VERSIONS and (choice.fallback_order(), autotune.tune_order()) == before
