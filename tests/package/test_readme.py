"""The README's examples, run as written, and every relative link of the documentation.

README.md marks its runnable blocks by their fence's info string:

    ```sh / ```python            run here
    ```sh gpu / ```python gpu    run only where a GPU (and MXNet) is usable, else skipped saying why
    ```sh sandbox                run only where a sandbox engine works (bubblewrap, podman, ...)
    ``` (plain), ```text         illustration: never run

A plain block that follows a runnable one with nothing but blank lines between is that block's
output: each of its lines must match a line of the real output (stdout and stderr together), in
order, where every number stands for any number, `...` for any text and a run of spaces for any
whitespace. The blocks run in README order in one temporary folder, as if pasted into one
terminal: shell blocks with ``bash -e``, each starting in the folder where the previous shell
block ended; Python blocks with the interpreter running these tests, which is also ``python`` on
PATH. Records, spools and scratch folders go inside the temporary folder. The Quick start's
commands are not run (``make test`` is this suite).

Then every relative link in README.md and docs/**/*.md must name a file or folder that exists,
and an ``#anchor`` a heading of the page it points to (GitHub's anchor rules).
"""
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from suitekit import ROOT, python_command

# The README's service runs on the default port (8408): one suite's at a time (make test's serial phase)
pytestmark = pytest.mark.serial

README = ROOT / "README.md"
DOCS = ROOT / "docs"
RUNNABLE = ("sh", "python")
TAGS = {"gpu", "sandbox"}
BLOCK_TIMEOUT = 600


# ---------------------------------------------------------------------------------------------
# Reading the README


@dataclass
class Block:
    line: int                  # 1-based line of the opening fence
    lang: str                  # the info string's first word ("" for a plain fence)
    tags: tuple                # its other words
    code: str
    output: str = None         # the plain block right after it, if any

    @property
    def runnable(self):
        return self.lang in RUNNABLE

    def __str__(self):
        return f"README.md:{self.line} ({' '.join((self.lang,) + self.tags)})"


def fenced_blocks(text):
    """Every fenced block of ``text`` in order, a plain block right after a runnable one attached
    to it as its output."""
    blocks, lines, i = [], text.splitlines(), 0
    last_end = None            # index of the line closing the previous block
    while i < len(lines):
        m = re.match(r"^```(.*)$", lines[i])
        if not m:
            i += 1
            continue
        start, words = i, m.group(1).split()
        i += 1
        while i < len(lines) and lines[i] != "```":
            i += 1
        if i == len(lines):
            raise AssertionError(f"README.md:{start + 1}: unclosed code fence")
        block = Block(start + 1, words[0] if words else "", tuple(words[1:]), "\n".join(lines[start + 1:i]) + "\n")
        adjacent = last_end is not None and all(not l.strip() for l in lines[last_end + 1:start])
        if not block.lang and adjacent and blocks and blocks[-1].runnable and blocks[-1].output is None:
            blocks[-1].output = block.code
        else:
            blocks.append(block)
        last_end = i
        i += 1
    return blocks


def line_pattern(line):
    """A regular expression for one line of shown output: numbers, `...` and whitespace generalised."""
    parts = re.split(r"(\.\.\.|\d+|\s+)", line.strip())
    out = []
    for part in parts:
        if part == "...":
            out.append(".*")
        elif part.isdigit():
            out.append(r"\d+")
        elif part and part.isspace():
            out.append(r"\s+")
        else:
            out.append(re.escape(part))
    return re.compile("".join(out))


def output_mismatch(shown, actual):
    """None where every line of ``shown`` matches a line of ``actual`` in order; else the first
    line of ``shown`` that does not."""
    lines = [l.strip() for l in actual.splitlines()]
    i = 0
    for want in (l for l in shown.splitlines() if l.strip()):
        pattern = line_pattern(want)
        while i < len(lines) and not pattern.fullmatch(lines[i]):
            i += 1
        if i == len(lines):
            return want
        i += 1
    return None


BLOCKS = fenced_blocks(README.read_text(encoding="utf-8"))
RUN = [b for b in BLOCKS if b.runnable]


# ---------------------------------------------------------------------------------------------
# Links


def github_anchor(heading):
    """The anchor GitHub gives a heading: its text lowercased, markup and punctuation other than
    hyphens and underscores dropped, spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)          # a link: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def strip_code(text):
    """``text`` without fenced blocks and inline code spans (links in them are not links)."""
    text = re.sub(r"^```.*?^```$", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(path):
    seen, out = {}, set()
    for line in strip_code_keep_headings(path.read_text(encoding="utf-8")):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            base = github_anchor(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def strip_code_keep_headings(text):
    """The lines of ``text`` outside fenced blocks (headings keep their inline code)."""
    return re.sub(r"^```.*?^```$", "", text, flags=re.S | re.M).splitlines()


def broken_links(page):
    """'target: why' for every relative link of the Markdown file ``page`` that does not resolve."""
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", strip_code(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):           # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            problems.append(f"{target}: {dest} does not exist")
        elif anchor:
            if dest.suffix != ".md":
                problems.append(f"{target}: an anchor into a file that is not Markdown")
            elif anchor not in anchors(dest):
                problems.append(f"{target}: no heading of {dest.name} has the anchor #{anchor}")
    return problems


PAGES = [README] + sorted(DOCS.rglob("*.md"))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    problems = broken_links(page)
    assert not problems, f"{page.relative_to(ROOT)}:\n  " + "\n  ".join(problems)


def test_the_link_check_fails_on_a_broken_link_or_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## Its `second` part\n")
    page = tmp_path / "page.md"
    page.write_text("# Page\n[ok](other.md#its-second-part) [ok](#page) [ok](https://example.org/x)\n"
                    "[gone](missing.md) [bad](other.md#nothing) [bad](#nowhere) `[code](not-a-link.md)`\n")
    problems = broken_links(page)
    assert [p.split(":")[0] for p in problems] == ["missing.md", "other.md#nothing", "#nowhere"], problems


# ---------------------------------------------------------------------------------------------
# The README's structure


def test_readme_blocks_are_well_marked():
    """Some blocks run (a milestone, the team, the network and the grading examples); every
    runnable block's tags are known ones, so a typo cannot turn an example into a skipped one."""
    assert len(RUN) >= 5, [str(b) for b in RUN]
    for block in RUN:
        assert set(block.tags) <= TAGS, f"{block}: unknown tags {set(block.tags) - TAGS}"
    assert any(b.lang == "python" for b in RUN) and any("sandbox" in b.tags for b in RUN)


def test_readme_is_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 280       # the service's example and page included


def test_the_ranking_screenshot_caption_says_what_a_reader_will_see():
    """The screenshot shows the other teams under pseudonyms, the instructor's choice on /admin;
    where the service shows names by default the caption must say how the page came to hide them."""
    from ece408_op.service.choices import DEFAULT_NAMES
    captions = re.findall(r"!\[([^\]]*)\]\(docs/pages-ranking\.png\)", README.read_text(encoding="utf-8"))
    assert captions, "README.md shows no ranking screenshot"
    for caption in captions:
        if "anonymis" in caption and DEFAULT_NAMES != "anonymised":
            assert "/admin" in caption and f"{DEFAULT_NAMES} by default" in caption, caption


def test_the_command_table_lists_every_command():
    """Every command of ``python -m ece408_op --help`` has a row in the README's table."""
    from ece408_op.cli import COMMANDS
    from ece408_op.cli.bench import BENCHMARKS
    commands = [c for c in COMMANDS if c != "bench"] + [f"bench {b}" for b in BENCHMARKS]
    text = README.read_text(encoding="utf-8")
    missing = [c for c in commands if f"| `{c}` |" not in text]
    assert not missing, f"README's command table lacks {missing}"


def test_the_output_check_fails_on_other_output():
    shown = "Op Time: 0.004512\nCorrectness: 0.91 Model: ece408-high\nrank  team ...\n"
    assert output_mismatch(shown, "x\nOp Time: 1.5\nCorrectness: 1.0 Model: ece408-high\nrank team  a b\n") is None
    assert output_mismatch(shown, "Op Time: 0.1\nCorrectness: 0.91 Model: ece408-low\n") == \
        "Correctness: 0.91 Model: ece408-high"
    assert output_mismatch(shown, "Correctness: 0.91 Model: ece408-high\nOp Time: 0.1\n") is not None  # order


# ---------------------------------------------------------------------------------------------
# Running the examples


def _gpu_unusable():
    """None where the README's GPU blocks can run here, else why not."""
    import ece408_op
    reason = ece408_op.mxnet_unavailable()
    if reason:
        return f"MXNet unusable here: {reason}"
    try:
        from ece408_op import kernels
        kernels.GpuDevice.get()
    except Exception as exc:                      # no PyCUDA, no driver, no device: all the same here
        return f"no GPU: {exc}"
    return None


def _sandbox_unusable():
    from ece408_op.grading.sandbox import Limits, SandboxError, open_sandbox
    try:
        open_sandbox("auto", Limits())
    except SandboxError as exc:
        return str(exc)
    return None


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """The temporary folder the examples run in, their environment, and where the shell is. The
    user's own folders (records, the service's database and state, the login) are in it too, kept
    from one block to the next as a user's are; a service a block left running is stopped after."""
    home = tmp_path_factory.mktemp("readme")
    work = home / "work"
    work.mkdir()
    bin_dir = home / "bin"
    bin_dir.mkdir()
    command = " ".join(f"'{a}'" for a in python_command())
    for name in ("python", "python3"):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        shim.chmod(0o755)
    # a user's own empty HOME and none of the project's variables, as a reader has; the caches (the fetched
    # data, compiled kernels) stay this machine's user's, as they would be on a reader's machine after `make run`
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("ECE408_", "XDG_"))},
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "HOME": str(home / "user"),
           "XDG_CACHE_HOME": cache,
           "TMPDIR": str(home),
           "PYTHONUNBUFFERED": "1"}
    (home / "user").mkdir()
    yield {"home": home, "cwd": work, "env": env}
    for pid_file in (home / "user").glob(".local/state/ece408_op/service/serve-*.pid"):
        port = pid_file.stem.split("-")[-1]
        subprocess.run([*python_command(), "-m", "ece408_op", "serve", "--stop", "--port", port], env=env,
                       capture_output=True, timeout=120)


def _run(block, session, cwd=None):
    home, env = session["home"], session["env"]
    if block.lang == "sh":
        where = home / "pwd"
        script = f"trap 'pwd > \"{where}\"' EXIT\n{block.code}"
        argv = ["bash", "-e", "-c", script]
    else:
        path = home / f"block_{block.line}.py"
        path.write_text(block.code)
        argv = [*python_command(), str(path)]
    result = subprocess.run(argv, cwd=cwd or session["cwd"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=BLOCK_TIMEOUT)
    if block.lang == "sh" and (home / "pwd").exists() and cwd is None:
        session["cwd"] = Path((home / "pwd").read_text().strip())
    return result


def _skip_unless_runnable(block):
    if "gpu" in block.tags:
        reason = _gpu_unusable()
        if reason:
            pytest.skip(f"{block}: a GPU example; {reason}")
    if "sandbox" in block.tags:
        reason = _sandbox_unusable()
        if reason:
            pytest.skip(f"{block}: needs a sandbox engine; {reason}")


def _check(block, result):
    shown = f"\n--- its output:\n{result.stdout[-6000:]}"
    assert result.returncode == 0, f"{block} exited {result.returncode}{shown}"
    if block.output is not None:
        missing = output_mismatch(block.output, result.stdout)
        assert missing is None, f"{block}: the README shows {missing!r}, not in the real output{shown}"


@pytest.mark.slow
@pytest.mark.timeout(BLOCK_TIMEOUT + 60)
@pytest.mark.parametrize("block", RUN, ids=str)
def test_readme_example(block, session):
    _skip_unless_runnable(block)
    _check(block, _run(block, session))
    session.setdefault("ran", set()).add(block.line)


SERVICE_BLOCK = next(b for b in RUN if "ece408_op serve" in b.code)


@pytest.mark.slow
@pytest.mark.timeout(BLOCK_TIMEOUT + 60)
def test_the_service_example_runs_again_in_another_folder(session):
    """"As pasted, in any folder" holds more than once: the same user (the same database, state and
    login folders as the examples above) runs the service's block again in a new folder."""
    _skip_unless_runnable(SERVICE_BLOCK)
    passes = ("first", "again") if SERVICE_BLOCK.line not in session.get("ran", ()) else ("again",)
    for name in passes:
        folder = session["home"] / name
        folder.mkdir()
        _check(SERVICE_BLOCK, _run(SERVICE_BLOCK, session, cwd=folder))
