#!/usr/bin/env python3
"""Lay the tests out as the package is (issue 47): ``tests/<wing>/test_<what it checks>.py``.

    python3 tools/relayout_tests.py            # move and rewrite, then print what it did
    python3 tools/relayout_tests.py --dry-run  # print what it would do, change nothing

Written as a script rather than done by hand because other branches change the tests while this
one waits: it is run on the merged tree, and again on any later one. Its rules:

- Every ``tests/test_*.py`` moves with ``git mv`` to the path ``MOVES`` names for it. A file ``MOVES``
  does not know (a new one from another branch) is placed by ``place()``: by its name's prefix
  (``PREFIXES``), else by the highest wing of the package it imports (``WINGS``' order, the order
  of ece408_op/__init__.py); where neither says, the run stops before it moves anything, listing the
  files to add to ``MOVES``.
- The names say what a file checks, never when it was written: the hostile-class rounds
  (``test_hostile_*``, ``test_hostile2_*``) become ``tests/service/test_attack_*``; a file is renamed,
  never merged, so every check of today stays (the collected count stays the same).
- Base names stay unique over all the wings: pytest imports a test file by its base name (rootdir
  without ``__init__.py``), and the tests import each other's modules by it (``from test_conv import
  _random``). tests/conftest.py puts every wing's folder on ``sys.path`` for that.
- What the tests share stays in tests/: conftest.py, tiers.py, data/ and the helper modules
  (teams.py, servicekit.py, services.py, pagekit.py, hostilekit.py, laptop.py, loadworker.py,
  submissions.py, gpu_sources.py); a test finds them by name from any folder.
- Every reference to a moved file is rewritten in the tracked text files (docs/, README.md,
  Makefile, .ci/, tests/, ece408_op/, ...; this file excepted): ``tests/test_x.py`` to its new path,
  a bare ``test_x.py`` to its new name, ``from test_x import`` and ``import test_x`` to its new
  module, and the globs of ``GLOBS``. A word naming an old module that is left after that (prose
  naming ``test_x`` without ``.py``) is listed at the end, for a hand to reword.
- The run that moves files puts the layout's paragraph (``LAYOUT``) into docs/tests.md, once.
- Running it again changes nothing: no ``tests/test_*.py`` is left to move and no old name to rewrite.
"""
import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

# Every test file of today: its new path under tests/. Kept names already said what they check.
MOVES = {
    # conv/: the NumPy layer
    "test_conv.py": "conv/test_numpy_layer.py",
    "test_numba.py": "conv/test_numba_kernels.py",
    "test_attr_properties.py": "conv/test_attribute_properties.py",
    # kernels/: the PyCUDA layer (test_gpu_*: on a GPU, skipped without)
    "test_autotune.py": "kernels/test_autotuner.py",
    "test_course_list.py": "kernels/test_course_optimisations.py",
    "test_cuda_compile.py": "kernels/test_cuda_sources_compile.py",
    "test_cudadrv.py": "kernels/test_ctypes_launcher.py",
    "test_hostcopy.py": "kernels/test_host_copy_path.py",
    "test_kernel_registry.py": "kernels/test_version_registry.py",
    "test_kernel_sizes.py": "kernels/test_runtime_sizes.py",
    "test_kernel_table.py": "kernels/test_kernel_tables.py",
    "test_gpu_kernels.py": "kernels/test_gpu_every_version.py",
    "test_gpu_fused.py": "kernels/test_gpu_fused_kernel.py",
    "test_gpu_dynamic.py": "kernels/test_gpu_runtime_sizes.py",
    "test_gpu_course_list.py": "kernels/test_gpu_course_optimisations.py",
    "test_gpu_hotpath.py": "kernels/test_gpu_call_path.py",
    # data/: Fashion-MNIST, its readers and fetchers, the resize
    "test_data.py": "data/test_fashion_mnist.py",
    "test_properties.py": "data/test_reader_properties.py",
    "test_resize.py": "data/test_bilinear_resize.py",
    # team/: a team's project, its runtime and its repeats
    "test_team.py": "team/test_team_project.py",
    "test_repeats.py": "team/test_ranked_repeats.py",
    "test_gpu_team.py": "team/test_gpu_team_kernels.py",
    "test_gpu_team_mx.py": "team/test_gpu_team_milestones.py",
    # pytorch/: the PyTorch front-end, ece408_op/torch/ (a folder tests/torch/ on sys.path would be
    # imported as torch where PyTorch is not installed: importorskip("torch") would not skip)
    "test_torch_frontend.py": "pytorch/test_torch_frontend.py",
    "test_torch_compile.py": "pytorch/test_torch_compile.py",
    "test_torch_every_layer.py": "pytorch/test_torch_every_layer.py",
    "test_gpu_half.py": "pytorch/test_gpu_half_precision.py",
    # mx/: the MXNet layer: operator, registration, models, milestones
    "test_op.py": "mx/test_operator.py",
    "test_lean.py": "mx/test_lean_registration.py",
    "test_mkldnn.py": "mx/test_mkldnn_paths.py",
    "test_gluon.py": "mx/test_gluon_block.py",
    "test_zoo.py": "mx/test_model_zoo_swap.py",
    "test_fused.py": "mx/test_fused_layer.py",
    "test_models.py": "mx/test_checkpoints.py",
    "test_later_models.py": "mx/test_later_checkpoints.py",
    "test_harness.py": "mx/test_milestones.py",
    "test_gpu_harness.py": "mx/test_gpu_milestones.py",
    "test_gpu_dropin.py": "mx/test_gpu_dropin.py",
    "test_gpu_models.py": "mx/test_gpu_models_and_host_copy.py",
    # grading/: runs in sandboxes, records, ranking, grading a class
    "test_submit.py": "grading/test_submit_runner.py",
    "test_sandbox.py": "grading/test_sandbox_attacks.py",
    "test_trust.py": "grading/test_unforgeable_ranking.py",
    "test_records.py": "grading/test_records_and_ranking.py",
    "test_grade.py": "grading/test_grade_class.py",
    "test_timing_lease.py": "grading/test_timing_lease.py",
    "test_transcript.py": "grading/test_long_transcript.py",
    "test_profilers.py": "grading/test_profilers_in_runs.py",
    "test_kinds.py": "grading/test_device_kinds.py",
    "test_container.py": "grading/test_container_image.py",
    "test_solutions.py": "grading/test_task_solutions.py",
    "test_gpu_solutions.py": "grading/test_gpu_task_solutions.py",
    # selftest/: every bad input and fault tried, and the table that says so
    "test_selftest.py": "selftest/test_selftest_report.py",
    "test_reliability.py": "selftest/test_failure_classes.py",
    # service/: the submission service, its pages, and the hostile class against it
    "test_service.py": "service/test_service_flow.py",
    "test_service_archive.py": "service/test_upload_archive.py",
    "test_upload_ignore.py": "service/test_upload_ignore.py",
    "test_upload_storm.py": "service/test_upload_storm.py",
    "test_service_uploads.py": "service/test_uploads_on_disk.py",
    "test_service_writers.py": "service/test_concurrent_writers.py",
    "test_service_clock.py": "service/test_clock_steps.py",
    "test_service_schema.py": "service/test_api_schema.py",
    "test_backward.py": "conv/test_backward.py",
    "test_torch_training.py": "pytorch/test_torch_training.py",
    "test_build_folder.py": "service/test_build_folder_bounds.py",
    "test_service_builds.py": "service/test_build_folder_download.py",
    "test_service_capacity.py": "service/test_capacity_refusals.py",
    "test_service_connections.py": "service/test_descriptor_exhaustion.py",
    "test_service_db.py": "service/test_db_pool.py",
    "test_service_faults.py": "service/test_server_and_worker_faults.py",
    "test_service_guessing.py": "service/test_token_guessing_limits.py",
    "test_service_headers.py": "service/test_answer_headers.py",
    "test_service_hostile_jobs.py": "service/test_worker_survives_hostile_jobs.py",
    "test_service_identity.py": "service/test_team_identity.py",
    "test_service_import.py": "service/test_teams_import.py",
    "test_service_latency.py": "service/test_keepalive_latency.py",
    "test_service_limits.py": "service/test_in_memory_limits.py",
    "test_service_load.py": "service/test_load_300_teams.py",
    "test_service_names.py": "service/test_one_identity_per_team.py",
    "test_service_progress.py": "service/test_job_progress.py",
    "test_service_security.py": "service/test_security_points.py",
    "test_service_slurm.py": "service/test_slurm_dispatch.py",
    "test_service_soak.py": "service/test_deadline_night_soak.py",
    "test_service_start.py": "service/test_serve_start_lock.py",
    "test_service_truth.py": "service/test_one_truth_per_job.py",
    "test_service_gpu.py": "service/test_gpu_service_milestones.py",
    "test_gpu_build_profile.py": "service/test_gpu_build_profile.py",
    "test_pages.py": "service/test_pages.py",
    "test_pages_browser.py": "service/test_pages_browser.py",
    "test_hostile_access.py": "service/test_attack_access.py",
    "test_hostile_counting.py": "service/test_attack_counting.py",
    "test_hostile_names.py": "service/test_attack_names.py",
    "test_hostile_requests.py": "service/test_attack_requests.py",
    "test_hostile_slowdb.py": "service/test_attack_slowdb.py",
    "test_hostile_streams.py": "service/test_attack_streams.py",
    "test_hostile_uploads.py": "service/test_attack_uploads.py",
    "test_hostile_workers.py": "service/test_attack_workers.py",
    "test_hostile2_auth.py": "service/test_attack_auth_guessing.py",
    "test_hostile2_builds.py": "service/test_attack_builds_lost_job.py",
    "test_hostile2_connections.py": "service/test_attack_connections_busy.py",
    "test_hostile2_counting.py": "service/test_attack_counting_answers.py",
    "test_hostile2_names.py": "service/test_attack_names_lookalike.py",
    "test_hostile2_requests.py": "service/test_attack_requests_numbers.py",
    "test_hostile2_uploads.py": "service/test_attack_uploads_slots.py",
    # client/: what a student's laptop runs
    "test_student_laptop.py": "client/test_student_laptop.py",
    # cli/: python -m ece408_op <command>, its errors, --profile's breakdown
    "test_cli.py": "cli/test_command_line.py",
    "test_errors.py": "cli/test_one_line_errors.py",
    "test_breakdown.py": "cli/test_profile_breakdown.py",
    # package/: the package as a whole: its layering, its install, its README and links
    "test_layers.py": "package/test_layering.py",
    "test_install.py": "package/test_install.py",
    "test_readme.py": "package/test_readme.py",
    # suite/: the test suite's own rules (tiers, time limit, the gpu marker)
    "test_tiers.py": "suite/test_tiers.py",
    "test_time_limit.py": "suite/test_time_limit.py",
    "test_markers.py": "suite/test_markers.py",
}

# A file MOVES does not know, by its name: (pattern, wing, new name from the match or None to keep it).
PREFIXES = [
    (r"test_hostile\d*_(\w+)\.py", "service", r"test_attack_\1.py"),
    (r"test_(service|pages)_\w+\.py", "service", None),
    (r"test_torch_\w+\.py", "pytorch", None),
    (r"test_(kernel|cuda)_\w+\.py", "kernels", None),
    (r"test_team_\w+\.py", "team", None),
    (r"test_(grade|grading|submit|sandbox)_\w+\.py", "grading", None),
    (r"test_(conv|data|mx|bench|cli|client|selftest)_\w+\.py", None, None),   # the wing its prefix names
]
# The package's wings, lowest first (ece408_op/__init__.py): a file is placed in the highest it imports;
# cli only where it imports no other (most tests run a command to check what lies below it).
WINGS = ["conv", "kernels", "data", "team", "torch", "mx", "bench", "grading", "selftest", "service",
         "client", "cli"]
FOLDERS = {"torch": "pytorch"}              # a wing's folder under tests/ where it is not the wing's name
# Globs in the text, each rewritten as a whole (the longest first). The second round's names carry two
# words after test_attack_ (auth_guessing, uploads_slots, ...), the first round's one (uploads, streams).
GLOBS = [("tests/test_hostile_*.py", "tests/service/test_attack_*.py"),
         ("tests/test_hostile2_*.py", "tests/service/test_attack_*_*.py"),
         ("tests/test_gpu_*.py", "tests/*/test_gpu_*.py"),
         ("test_hostile_*.py", "test_attack_*.py"),
         ("test_hostile2_*.py", "test_attack_*_*.py"),
         ("`test_attack_*.py`, `test_attack_*_*.py`", "`test_attack_*.py`")]   # the two rounds named together
# The layout's paragraph, put into docs/tests.md (before DOC_BEFORE) by the run that makes the layout.
DOC, DOC_BEFORE = "docs/tests.md", "## System components"
LAYOUT = """**The layout.** The tests mirror the package: `tests/<wing>/` for each wing of `ece408_op/` (`conv/`,
`kernels/`, `data/`, `team/`, `pytorch/` for `torch/`, `mx/`, `grading/`, `selftest/`, `service/`,
`client/`, `cli/`) and two for the whole: `package/` (the layering, the install, the README and the
links) and `suite/` (the suite's own rules: the tiers, the time limit, the `gpu` marker). Each file is
named for what it checks (`tests/service/test_attack_*.py`: the hostile class's attacks on a real
service). The GPU tests sit beside the code they test, named `test_gpu_*.py` (`tests/*/test_gpu_*.py`),
and skip without a GPU. What the tests share stays in `tests/`: `conftest.py` (the fixtures, the hooks
and the helpers imported `from conftest`), `tiers.py`, the helper modules (`teams.py`, `servicekit.py`,
`services.py`, `pagekit.py`, `hostilekit.py`, `laptop.py`, `loadworker.py`, `submissions.py`,
`gpu_sources.py`) and the fixture files in `data/` (`kernel_choices.json`, `h100/`). A base name is used
once over all the folders: pytest imports a test file by its base name, and `tests/conftest.py` puts
every wing's folder on `sys.path`, so that a test imports another's module (`from test_numpy_layer
import _random`) whatever folder it is in. `tools/relayout_tests.py` made this layout; a new file left
at `tests/test_*.py` is placed by its name's prefix or its imports when it is run again.

"""
TEXT_SUFFIXES = {".md", ".py", ".sh", ".ini", ".cfg", ".toml", ".txt", ".yml", ".yaml", ".in"}


class LayoutError(Exception):
    """What stops the run before anything is moved: one line each."""


def imported_wings(path):
    """The wings of ece408_op that the test file imports."""
    wings = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        for name in names:
            parts = name.split(".")
            if parts[0] == "ece408_op" and len(parts) > 1 and parts[1] in WINGS:
                wings.add(parts[1])
    return wings


def place(path):
    """The new path (relative to tests/) of a test file MOVES does not know, or None where nothing says."""
    name = path.name
    for pattern, wing, rename in PREFIXES:
        match = re.fullmatch(pattern, name)
        if match:
            return f"{wing or match.group(1)}/{match.expand(rename) if rename else name}"
    wings = imported_wings(path)
    if wings - {"cli"}:
        wings -= {"cli"}
    if not wings:
        return None
    wing = max(wings, key=WINGS.index)
    return f"{FOLDERS.get(wing, wing)}/{name}"


def plan():
    """{old name: new path relative to tests/} for every tests/test_*.py there is now, checked whole."""
    moves, unplaced = {}, []
    for path in sorted(TESTS.glob("test_*.py")):
        new = MOVES.get(path.name) or place(path)
        if new is None:
            unplaced.append(path.name)
        else:
            moves[path.name] = new
    if unplaced:
        raise LayoutError("no wing for " + ", ".join(unplaced) + ": add each to MOVES in tools/relayout_tests.py")
    taken = {p.name: p.relative_to(TESTS).as_posix() for p in TESTS.glob("*/test_*.py")}
    for old, new in moves.items():
        base = new.rsplit("/", 1)[-1]
        if base in taken:
            raise LayoutError(f"{old} would be {new}, but {taken[base]} has that name already "
                              "(pytest imports test files by their base name)")
        if base in MOVES and MOVES[base] != new:
            raise LayoutError(f"{old} would be {new}, named as {base} is now: the rewrite would mix them up")
        taken[base] = new
    return moves


def all_renames(moves):
    """Every old name to its new path: today's MOVES and what this run moves (a second run moves nothing
    and still finds any old name left in the text)."""
    return {**{old: new for old, new in MOVES.items()}, **moves}


def rules(renames):
    """[(compiled pattern, replacement)] for the paths, the bare names and the module names."""
    out = []
    for old, new in sorted(renames.items(), key=lambda pair: -len(pair[0])):
        old_stem, new_base = old[:-3], new.rsplit("/", 1)[-1]
        out.append((re.compile(rf"(?<![\w-])tests/{re.escape(old)}(?!\w)"), f"tests/{new}"))
        if new_base != old:
            out.append((re.compile(rf"(?<![\w./-]){re.escape(old)}(?!\w)"), new_base))
            out.append((re.compile(rf"\b(from|import)(\s+){re.escape(old_stem)}\b(?!\.)"),
                        rf"\g<1>\g<2>{new_base[:-3]}"))
    return out


def text_files():
    """The tracked text files this rewrite may change (this script excepted: it names the old files)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        path = ROOT / name
        if path == Path(__file__).resolve() or not path.is_file():
            continue
        if path.suffix in TEXT_SUFFIXES or path.name == "Makefile" or name.startswith(".ci/"):
            yield path


def rewrite(text, compiled):
    for old, new in GLOBS:
        text = text.replace(old, new)
    for pattern, replacement in compiled:
        text = pattern.sub(replacement, text)
    return text


def leftovers(renames):
    """(file, line number, old module name) for each old name still in the text as a word."""
    stems = {old[:-3] for old, new in renames.items() if new.rsplit("/", 1)[-1] != old}
    word = re.compile(r"(?<![\w/])(" + "|".join(sorted(map(re.escape, stems), key=len, reverse=True)) + r")\b")
    for path in text_files():
        try:
            lines = path.read_text().splitlines()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(lines, 1):
            for match in word.finditer(line):
                yield path.relative_to(ROOT), number, match.group(1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dry-run", action="store_true", help="print what it would do, change nothing")
    args = parser.parse_args(argv)
    try:
        moves = plan()
    except LayoutError as exc:
        print(f"relayout_tests: {exc}", file=sys.stderr)
        return 2
    for old, new in moves.items():
        print(f"  tests/{old} -> tests/{new}" + ("" if old in MOVES else "   (not in MOVES: placed by its "
                                                  "prefix or imports)"))
        if not args.dry_run:
            (TESTS / new).parent.mkdir(exist_ok=True)
            subprocess.run(["git", "mv", f"tests/{old}", f"tests/{new}"], cwd=ROOT, check=True)
    renames = all_renames(moves)
    compiled, changed = rules(renames), []
    for path in text_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new_text = rewrite(text, compiled)
        if new_text != text:
            changed.append(path.relative_to(ROOT))
            if not args.dry_run:
                path.write_text(new_text)
    doc = ROOT / DOC
    if moves and doc.is_file() and "**The layout.**" not in doc.read_text() and DOC_BEFORE in doc.read_text():
        if not args.dry_run:
            doc.write_text(doc.read_text().replace(DOC_BEFORE, LAYOUT + DOC_BEFORE, 1))
        if Path(DOC) not in changed:
            changed.append(Path(DOC))
    for name in changed:
        print(f"  rewrote {name}")
    left = [] if args.dry_run else list(leftovers(renames))
    for name, number, stem in left:
        print(f"  left for a hand: {name}:{number} names {stem}")
    verb = "would move" if args.dry_run else "moved"
    print(f"relayout_tests: {verb} {len(moves)} test files, {'would rewrite' if args.dry_run else 'rewrote'} "
          f"{len(changed)} files' references, {len(left)} old module names left in prose")
    return 0


if __name__ == "__main__":
    sys.exit(main())
