"""A development run's build folder through the service: a real ``serve`` on the loopback address, its
real worker running each job in a bubblewrap sandbox, the real client. The worker packs /build at the
run's end and sends it under the job's lease; the server checks and keeps it for ``--keep-builds``;
``jobs download`` brings it back (same bytes, same execute bits) to the job's team only. Also: an
expired build, a build past the bounds, a hostile build folder, hostile archives posted straight to
the worker route, a cut download, and profilers the worker does not have."""
import contextlib
import gzip
import hashlib
import io
import os
import re
import shutil
import socket
import stat
import tarfile
import threading
import zlib

import httpx
import pytest

from ece408_op.service.buildstore import bytes_text
from servicekit import Service, job_id_of, started_postgres
from teams import team_project

pytestmark = [pytest.mark.service, pytest.mark.skipif(shutil.which("bwrap") is None, reason="the workers' sandbox needs bubblewrap")]

# what the honest build writes: {path under /build: (bytes, executable)}; plus an empty folder
HONEST = {
    "notes.txt": (b"text, one line\n", False),
    "sub/data.bin": (bytes(range(256)) * 40, False),
    "sub/deeper/empty.dat": (b"", False),
    "run.sh": (b"#!/bin/sh\necho run\n", True),
}
MAKE_HONEST = """import os, sys
files = %r
for name, (data, executable) in files.items():
    path = os.path.join("/build", name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o755 if executable else 0o600)      # 600: the download gives 644, as an upload does
os.makedirs("/build/empty-folder")
""" % (HONEST,)

# a hostile build folder beside the honest one: links out, a FIFO, a sparse file past the bytes' bound,
# names the archive check refuses, a folder too deep, and more left out than the lines name
MAKE_HOSTILE = MAKE_HONEST + """
os.symlink("/etc/passwd", "/build/passwd")
os.symlink("/", "/build/root")
os.mkfifo("/build/fifo")
with open("/build/sparse.bin", "wb") as f:
    f.truncate(1536 << 20)
for name in ("aux.txt", "a:b", "trail.", "x\\x01y"):
    open(os.path.join("/build", name), "w").write("refused name")
open("/build/Case.txt", "w").write("first in name order\\n")
open("/build/case.txt", "w").write("the same name where case is ignored")
open(os.path.join(b"/build", b"latin-\\xff"), "w").write("not UTF-8")
deep = "/build/" + "/".join(["d"] * 40)
os.makedirs(deep)
open(deep + "/too-deep.txt", "w").write("deep")
os.mkdir("/build/links")
for i in range(25):
    os.symlink("/etc/shadow", f"/build/links/l{i:02d}")
"""

MAKE_MANY = """import os
for i in range(10050):
    open(f"/build/f{i:05d}", "w").close()
"""


@pytest.fixture
def service(tmp_path):
    svc = Service(tmp_path / "svc", workers=1, args=["--engine", "bubblewrap"]).start()
    yield svc
    svc.close()


def dev_team(folder, commands, files=None):
    return team_project(folder, commands=commands, files=files)


def submit_build(svc, folder, token, script=MAKE_HONEST):
    """A development run by ``token``'s team that runs ``script`` (it writes /build), run to its end
    and exiting 0; (its output, its job id)."""
    out = svc.cli("submit", dev_team(folder, ["python /src/make_build.py"], files={"make_build.py": script}),
                  token=token)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    return out, job_id_of(out.stderr)


def tree(folder):
    """{relative path: (bytes, mode)} of the files, and the set of folders, under ``folder``."""
    files, folders = {}, set()
    for root, dirs, names in os.walk(folder):
        for d in dirs:
            folders.add(os.path.relpath(os.path.join(root, d), folder))
        for n in names:
            path = os.path.join(root, n)
            files[os.path.relpath(path, folder)] = (open(path, "rb").read(), stat.S_IMODE(os.lstat(path).st_mode))
    return files, folders


def expected_honest():
    return {name: (data, 0o755 if executable else 0o644) for name, (data, executable) in HONEST.items()}


def kept_line(job_id, files, mib):
    return re.compile(rf"^\* The build folder \({files} files, {re.escape(mib)} MiB\) is kept until "
                      rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC: python -m ece408_op jobs download {job_id}$", re.M)


@contextlib.contextmanager
def login(url, token):
    """A browser's session (httpx with the session cookie) of ``token``'s team."""
    with httpx.Client(base_url=url, timeout=30) as browser:
        form = browser.get("/login")
        pair = re.search(r'name="login" value="([^"]+)"', form.text).group(1)
        assert browser.post("/login", data={"login": pair, "token": token}).status_code == 303
        yield browser


# ---------------------------------------------------------------------------- the round trip

@pytest.mark.timeout(600)
def test_the_build_folder_comes_back_to_its_team_only(tmp_path, service):
    tokens = service.add_teams("alpha", "beta")
    team = dev_team(tmp_path / "alpha", ["python /src/make_build.py", "echo done"],
                    files={"make_build.py": MAKE_HONEST})
    out = service.cli("submit", team, token=tokens["alpha"])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    job_id = job_id_of(out.stderr)
    assert kept_line(job_id, 4, "0.0").search(out.stdout), out.stdout[-2000:]
    assert out.stdout.endswith(" jobs download " + job_id + "\n* Development run: no record is stored (ranked runs: "
                               "--submit m2|m3|final)\n")
    # downloaded: the same bytes, the execute bit kept (644 / 755), the empty folders too
    got = tmp_path / "got"
    down = service.cli("jobs", "download", job_id, "-o", got, token=tokens["alpha"])
    assert down.returncode == 0, down.stderr
    assert down.stdout == f"Job {job_id}'s build folder: 4 files, 0.0 MiB, in {got}\n"
    files, folders = tree(got)
    assert files == expected_honest()
    assert folders == {"sub", "sub/deeper", "empty-folder"}
    # the default folder is build-<id>, made in the current folder
    here = tmp_path / "here"
    here.mkdir()
    down = service.cli("jobs", "download", job_id, token=tokens["alpha"], cwd=here)
    assert down.returncode == 0, down.stderr
    assert tree(here / f"build-{job_id}")[0] == expected_honest() and os.listdir(here) == [f"build-{job_id}"]
    # a folder that exists and is not empty: refused, nothing written into it
    again = service.cli("jobs", "download", job_id, "-o", got, token=tokens["alpha"])
    assert again.returncode == 2 and again.stderr == f"error: {got} exists and is not an empty folder; give another " \
                                                     "with -o DIR\n"
    assert tree(got)[0] == expected_honest() and not [p for p in os.listdir(tmp_path) if ".partial-" in p]
    # another team: 404 as for any job of another team, and nothing downloaded
    other = service.cli("jobs", "download", job_id, "-o", tmp_path / "stolen", token=tokens["beta"])
    assert other.returncode == 2 and other.stderr == f"error: no job {job_id} here (jobs list shows yours)\n"
    assert not (tmp_path / "stolen").exists()
    with service.http(tokens["beta"]) as c:
        answer = c.get(f"/api/jobs/{job_id}/build")
    assert answer.status_code == 404 and answer.json() == {"error": f"no job {job_id} here (jobs list shows yours)"}
    # the instructor: any job's; the bytes are those the server stored (its SHA-256 in the header)
    answer = service.admin("GET", f"/api/jobs/{job_id}/build")
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/gzip"
    stored = list((service.root / "state" / "ece408_op" / "service" / "builds").glob(f"{job_id}-*.tar.gz"))
    assert len(stored) == 1 and stored[0].read_bytes() == answer.content
    assert answer.headers["x-build-sha256"] == hashlib.sha256(answer.content).hexdigest() in stored[0].name
    # the job page links it; its link serves the same bytes to the team's session, not to another's
    with login(service.url, tokens["alpha"]) as browser:
        page = browser.get(f"/jobs/{job_id}")
        assert f'<a href="/jobs/{job_id}/build" download="build-{job_id}.tar.gz">' in page.text
        assert "4 file(s), 0.0 MiB, kept until" in page.text
        assert browser.get(f"/jobs/{job_id}/build").content == answer.content
    with login(service.url, tokens["beta"]) as browser:
        assert browser.get(f"/jobs/{job_id}/build").status_code == 404


@pytest.mark.timeout(600)
def test_no_build_folder_says_why(tmp_path, service):
    tokens = service.add_teams("gamma")
    # an empty /build: nothing kept, and the download says so in one line
    empty = service.cli("submit", dev_team(tmp_path / "empty", ["echo nothing"]), token=tokens["gamma"])
    assert empty.returncode == 0, empty.stderr
    empty_id = job_id_of(empty.stderr)
    assert "\n* The build folder is empty: nothing is kept\n" in empty.stdout
    down = service.cli("jobs", "download", empty_id, token=tokens["gamma"], cwd=tmp_path)
    assert down.returncode == 2 and down.stderr == (
        f"error: job {empty_id} kept no build folder; the end of its transcript says why (python -m ece408_op jobs "
        f"show {empty_id})\n")
    # a run that ends before its commands (network: true, which this grader refuses): no build folder
    refused = dev_team(tmp_path / "net", ["echo never"])
    (refused / "rai_build.yml").write_text((refused / "rai_build.yml").read_text().replace("network: false",
                                                                                         "network: true"))
    out = service.cli("submit", refused, token=tokens["gamma"])
    assert out.returncode == 1
    assert "\n* No build folder is kept: the run ended before its commands ran\n" in out.stdout
    assert not (tmp_path / f"build-{job_id_of(out.stderr)}").exists()
    # a command that fails: what it left is kept all the same
    failing = dev_team(tmp_path / "fail", ["python /src/make_build.py", "/bin/false"],
                       files={"make_build.py": MAKE_HONEST})
    out = service.cli("submit", failing, token=tokens["gamma"])
    assert out.returncode == 1 and kept_line(job_id_of(out.stderr), 4, "0.0").search(out.stdout), out.stdout


@pytest.mark.timeout(600)
def test_a_ranked_or_waiting_job_has_no_build_folder(running_service, tmp_path):
    svc = running_service(tmp_path / "svc", workers=0)
    token = svc.add_teams("delta")["delta"]
    team = team_project(tmp_path / "delta")
    ranked = job_id_of(svc.cli("submit", "--submit", "m2", "--size", 10, "--detach", team, token=token).stderr)
    out = svc.cli("jobs", "download", ranked, token=token, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr == (f"error: job {ranked} is a ranked run: only development runs "
                                                  "keep their build folder\n")
    waiting = job_id_of(svc.cli("submit", "--detach", team, token=token).stderr)
    out = svc.cli("jobs", "download", waiting, token=token, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr == (f"error: job {waiting} is queued: its build folder is kept when "
                                                  "it ends\n")
    assert not list(tmp_path.glob("build-*"))


# ---------------------------------------------------------------------------- kept for a time

@pytest.mark.timeout(600)
def test_an_expired_build_folder_is_deleted_and_says_so(running_service, tmp_path):
    svc = running_service(tmp_path / "svc", workers=1, args=["--engine", "bubblewrap", "--keep-builds", "0.0001"])
    token = svc.add_teams("eps")["eps"]
    _, job_id = submit_build(svc, tmp_path / "eps", token)
    builds = svc.root / "state" / "ece408_op" / "service" / "builds"
    assert len(list(builds.glob(f"{job_id}-*.tar.gz"))) == 1
    svc.wait_for_log(f"build.expired job={job_id}", timeout=60)
    assert list(builds.glob("*.tar.gz")) == []
    down = svc.cli("jobs", "download", job_id, token=token, cwd=tmp_path)
    assert down.returncode == 2
    assert re.fullmatch(rf"error: the build folder of job {job_id} expired on \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC "
                        r"\(this service keeps build folders 9 s\)\n", down.stderr), down.stderr
    with login(svc.url, token) as browser:
        assert "Build folder: deleted once it expired" in browser.get(f"/jobs/{job_id}").text
    assert not list(tmp_path.glob("build-*"))


# ---------------------------------------------------------------------------- bounds and hostile folders

@pytest.mark.timeout(600)
def test_a_build_folder_past_the_entries_bound_comes_back_cut(tmp_path, service):
    token = service.add_teams("zeta")["zeta"]
    out, job_id = submit_build(service, tmp_path / "zeta", token, MAKE_MANY)
    assert "\n* The build folder holds more than 10000 entries: f10000 and every entry after it are left out\n" \
        in out.stdout
    assert kept_line(job_id, 10000, "0.0").search(out.stdout), out.stdout[-2000:]
    down = service.cli("jobs", "download", job_id, "-o", tmp_path / "got", token=token)
    assert down.returncode == 0, down.stderr
    assert sorted(os.listdir(tmp_path / "got")) == [f"f{i:05d}" for i in range(10000)]


@pytest.mark.timeout(600)
def test_a_hostile_build_folder_is_left_out_line_by_line(tmp_path, service):
    token = service.add_teams("eta")["eta"]
    out, job_id = submit_build(service, tmp_path / "eta", token, MAKE_HOSTILE)
    text = out.stdout
    for line in ("* Left out of the build folder: a:b: the character :, which Windows and macOS cannot store",
                 "* Left out of the build folder: fifo: a FIFO (files and folders only; a link is never followed)",
                 "* Left out of the build folder: passwd: a symbolic link (files and folders only; a link is never "
                 "followed)",
                 "* Left out of the build folder: sparse.bin: 1536.0 MiB, past the 256 MiB the service keeps of a "
                 "build folder",
                 "* Left out of the build folder: x\\x01y: the control character \\x01, which Windows cannot store"):
        assert f"\n{line}\n" in text, text[-4000:]
    assert re.search(r"^\* \.\.\. and \d+ more entries of the build folder left out$", text, re.M), text[-4000:]
    left = [line for line in text.splitlines() if line.startswith("* Left out of the build folder")]
    assert len(left) == 20                                  # the rest counted in one line
    assert "\n* Left out of the build folder: case.txt: the same name as Case.txt where case or Unicode " \
           "normalisation is ignored (macOS, Windows)\n" in text
    assert kept_line(job_id, 5, "0.0").search(text), text[-2000:]
    # the download holds the honest files and folders and nothing else; nothing beside its folder
    before = set(os.listdir(tmp_path))
    down = service.cli("jobs", "download", job_id, "-o", tmp_path / "got", token=token)
    assert down.returncode == 0, down.stderr
    assert set(os.listdir(tmp_path)) == before | {"got"}
    files, folders = tree(tmp_path / "got")
    assert files == {**expected_honest(), "Case.txt": (b"first in name order\n", 0o644)}
    assert folders <= {"sub", "sub/deeper", "empty-folder", "links"} | {"/".join(["d"] * n) for n in range(1, 33)}
    assert not any(os.path.islink(os.path.join(r, n)) for r, ds, fs in os.walk(tmp_path / "got") for n in ds + fs)
    # the worker and the server went on: the next job of the same worker runs and keeps its build
    again, again_id = submit_build(service, tmp_path / "eta2", token)
    assert kept_line(again_id, 4, "0.0").search(again.stdout)
    assert "Traceback" not in service.log() and "slot_error" not in service.log()


# ---------------------------------------------------------------------------- the worker route, the download

def tar_gz(members):
    """A tar.gz of ``members`` [(TarInfo fields, data)], written by tarfile as a hostile worker could."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for fields, data in members:
            info = tarfile.TarInfo(fields.pop("name"))
            for key, value in fields.items():
                setattr(info, key, value)
            info.size = len(data or b"")
            tar.addfile(info, io.BytesIO(data) if data else None)
    return gzip.compress(raw.getvalue())


def bomb(size=400 << 20):
    """A gzip stream of ``size`` zero bytes (a few hundred KiB as sent)."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    return b"".join(deflate.compress(block) for _ in range(size >> 20)) + deflate.flush()


class CuttingProxy:
    """A TCP proxy on the loopback address that forwards a request whole and the answer's first
    ``keep`` bytes, then closes both connections: a download cut on the way."""

    def __init__(self, upstream_port, keep):
        self.upstream, self.keep = upstream_port, keep
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self.pump, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self.pump, args=(upstream, client, self.keep), daemon=True).start()

    @staticmethod
    def pump(source, sink, limit):
        sent = 0
        try:
            while limit is None or sent < limit:
                data = source.recv(65536)
                if not data:
                    break
                data = data if limit is None else data[:limit - sent]
                sink.sendall(data)
                sent += len(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.server.close()


def raw_post(port, path, headers):
    """An HTTP/1.1 POST of headers only (its body never sent); the status line's code."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall((f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                   + "\r\n").encode())
        return int(s.recv(4096).split(b" ", 2)[1])


@pytest.mark.timeout(600)
def test_hostile_archives_on_the_worker_route_and_a_cut_download(running_service, tmp_path):
    from ece408_op.service import buildfolder
    svc = running_service(tmp_path / "svc", workers=0)
    proxy = None
    try:
        token = svc.add_teams("theta")["theta"]
        worker = svc.worker_token()
        job_id = job_id_of(svc.cli("submit", "--detach", dev_team(tmp_path / "theta", ["echo hi"]), token=token).stderr)
        with svc.http(worker) as w:
            claimed = w.post("/api/worker/claim", json={"slot": "s0", "gpu": False, "device": "test", "wait": 0}).json()
            assert claimed["job"]["id"] == job_id
            lease = {"X-Lease": claimed["lease"]}
            route = f"/api/worker/jobs/{job_id}/build"
            hostile = [
                (b"not a gzip stream", "the upload is not a gzip-compressed tar"),
                (gzip.compress(b"x" * 1000), "not whole 512-byte blocks"),
                (tar_gz([({"name": "passwd", "type": tarfile.SYMTYPE, "linkname": "/etc/passwd"}, None)]),
                 "a symbolic link"),
                (tar_gz([({"name": "../escape.txt"}, b"out")]), "climbs out of the folder"),
                (tar_gz([({"name": "/etc/cron.d/x"}, b"out")]), "the absolute path"),
                (tar_gz([({"name": "fifo", "type": tarfile.FIFOTYPE}, None)]), "a FIFO"),
                (tar_gz([({"name": "aux.txt"}, b"x")]), "a device name on Windows"),
                (tar_gz([({"name": "a"}, b"1"), ({"name": "A"}, b"2")]), "one name where case"),
                (bomb(), "unpacks to more than"),
                (tar_gz([({"name": "ok.txt"}, b"fine")])[:-30], "ends before its gzip stream does"),
            ]
            for data, why in hostile:
                answer = w.post(route, headers=lease, content=data)
                assert answer.status_code == 400 and why in answer.json()["error"], (why, answer.text)
                assert answer.json()["error"].startswith("the build folder's archive is refused: ")
            wrong = {"X-Lease": "0" * 32}
            assert w.post(route, headers=wrong, content=tar_gz([({"name": "a"}, b"1")])).status_code == 409
            assert raw_post(svc.port, route, {"Authorization": f"Bearer {worker}", **lease,
                                              "Content-Length": str(1 << 30)}) == 413
            # a team's token cannot post one
            with svc.http(token) as t:
                assert t.post(route, headers=lease, content=tar_gz([({"name": "a"}, b"1")])).status_code == 403
            builds = svc.root / "state" / "ece408_op" / "service" / "builds"
            assert list(builds.iterdir()) == []                   # nothing kept, no file left half-written
            assert httpx.get(svc.url + "/health").status_code == 200
            # an honest one: packed as the worker packs, kept, then the job ends
            folder = tmp_path / "build"
            (folder / "sub").mkdir(parents=True)
            (folder / "report.ncu-rep").write_bytes(os.urandom(300_000))
            (folder / "sub" / "a.out").write_bytes(b"\x7fELF" + os.urandom(1000))
            (folder / "sub" / "a.out").chmod(0o755)
            packed = buildfolder.pack(folder, tmp_path / "build.tar.gz")
            answer = w.post(route, headers=lease, content=(tmp_path / "build.tar.gz").read_bytes())
            assert answer.status_code == 200, answer.text
            assert (answer.json()["files"], answer.json()["data_bytes"]) == (2, packed.bytes) == (2, 301_004)
            assert w.post(f"/api/worker/jobs/{job_id}/finish", headers=lease,
                          json={"status": "ok", "exit_code": 0, "reason": None, "record": None}).status_code == 200
        # a download cut on the way: one line, nothing written
        proxy = CuttingProxy(svc.port, keep=4000)
        cut = svc.cli("jobs", "download", job_id, "-o", tmp_path / "cut", token=token,
                      env={"ECE408_SERVER": f"http://127.0.0.1:{proxy.port}"})
        assert cut.returncode == 2
        assert re.fullmatch(rf"error: the download of job {job_id}'s build folder was cut short (after \d+ bytes "
                            r"\(RemoteProtocolError\)|\(\d+ of \d+ bytes\)); run the command again\n",
                            cut.stderr), cut.stderr
        assert not (tmp_path / "cut").exists() and not list(tmp_path.glob(".cut.partial-*"))
        whole = svc.cli("jobs", "download", job_id, "-o", tmp_path / "whole", token=token)
        assert whole.returncode == 0, whole.stderr
        assert tree(tmp_path / "whole")[0] == {"report.ncu-rep": ((folder / "report.ncu-rep").read_bytes(), 0o644),
                                               "sub/a.out": ((folder / "sub" / "a.out").read_bytes(), 0o755)}
        assert "Traceback" not in svc.log()
    finally:
        if proxy is not None:
            proxy.close()
        svc.close()


# ---------------------------------------------------------------------------- profilers the worker lacks

@pytest.mark.timeout(600)
@pytest.mark.skipif(any(shutil.which(t) for t in ("ncu", "nsys")), reason="this machine has a profiler")
def test_a_profiler_the_worker_lacks_is_one_line_and_the_run_goes_on(tmp_path, service):
    token = service.add_teams("iota")["iota"]
    out = service.cli("submit", dev_team(tmp_path / "iota", [
        "ncu -o /build/report --clock-control none python -c pass",
        "nsys profile -o /build/timeline python -c pass", "echo after"]), token=token)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    assert "* Running ncu -o /build/report --clock-control none python -c pass\n" \
           "* ncu is not installed on this worker; the command was not run\n" \
           "* Running nsys profile -o /build/timeline python -c pass\n" \
           "* nsys is not installed on this worker; the command was not run\n" \
           "* Running echo after\nafter\n" in out.stdout


@pytest.fixture
def postgres(tmp_path):
    server = started_postgres(tmp_path / "pg")
    yield server
    server.stop()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_teams_oldest_build_folders_go_past_its_quota(running_service, tmp_path, request, database):
    env = {"ECE408_DB": request.getfixturevalue("postgres").url} if database == "postgresql" else {}
    svc = running_service(tmp_path / "svc", workers=1, args=["--engine", "bubblewrap", "--build-quota", "0.001"],
                  env=env)
    tokens = svc.add_teams("kappa", "lambda")
    first, second = (submit_build(svc, tmp_path / f"kappa{i}", tokens["kappa"])[1] for i in range(2))
    other = submit_build(svc, tmp_path / "lambda", tokens["lambda"])[1]          # another team's: its own quota
    out = svc.cli("jobs", "download", first, token=tokens["kappa"], cwd=tmp_path)
    assert out.returncode == 2 and re.fullmatch(
        rf"error: the build folder of job {first} was deleted on \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC to keep your "
        r"team's build folders within 1 KiB \(the newest are kept\)\n", out.stderr), out.stderr
    for job_id, token in ((second, tokens["kappa"]), (other, tokens["lambda"])):
        down = svc.cli("jobs", "download", job_id, "-o", tmp_path / job_id, token=token)
        assert down.returncode == 0 and tree(tmp_path / job_id)[0] == expected_honest(), down.stderr
    builds = svc.root / "state" / "ece408_op" / "service" / "builds"
    assert sorted(p.name.split("-")[0] for p in builds.glob("*.tar.gz")) == sorted([second, other])
    with login(svc.url, tokens["kappa"]) as browser:
        assert "to keep the team's build folders within its quota" in browser.get(f"/jobs/{first}").text


@pytest.mark.timeout(900)
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_the_services_oldest_build_folders_go_past_its_total(running_service, tmp_path, request, database):
    """serve --build-folders-total: three kept, then a restart with a total that holds two (the
    reaper deletes the oldest), another team's new one (the service's oldest goes, another
    team's), each gone job saying so in jobs download and on its page; then a total smaller than
    one archive: refused (413) in the transcript's line, nothing kept."""
    env = {"ECE408_DB": request.getfixturevalue("postgres").url} if database == "postgresql" else {}
    svc = running_service(tmp_path / "svc", workers=1, args=["--engine", "bubblewrap", "--build-folders-total", "10M"],
                  env=env)
    builds = svc.root / "state" / "ece408_op" / "service" / "builds"
    try:
        tokens = svc.add_teams("nu", "xi")
        owner = {}
        for i, team in enumerate(("nu", "xi", "nu")):
            owner[submit_build(svc, tmp_path / f"{team}{i}", tokens[team])[1]] = team
        first, second, third = owner
        sizes = {p.name.split("-")[0]: p.stat().st_size for p in builds.glob("*.tar.gz")}
        assert sorted(sizes) == sorted(owner)
        total = sizes[second] + sizes[third] + max(sizes.values()) // 2       # two fit, three do not
        svc.stop()
        svc.args = ["--engine", "bubblewrap", "--build-folders-total", str(total)]
        svc.start()
        svc.wait_for_log(f"build.over_total job={first}", timeout=60)        # the reaper: the oldest, nu's
        assert sorted(p.name.split("-")[0] for p in builds.glob("*.tar.gz")) == sorted([second, third])
        fourth = submit_build(svc, tmp_path / "nu3", tokens["nu"])[1]         # nu's new one: xi's goes
        owner[fourth] = "nu"
        assert sorted(p.name.split("-")[0] for p in builds.glob("*.tar.gz")) == sorted([third, fourth])
        for job_id in (first, second):
            out = svc.cli("jobs", "download", job_id, token=tokens[owner[job_id]], cwd=tmp_path)
            assert out.returncode == 2 and re.fullmatch(
                rf"error: the build folder of job {job_id} was deleted on \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC, "
                rf"(\d+ min )?\d+ s after it was kept, to keep this service's build folders within "
                rf"{re.escape(bytes_text(total))} \(all teams' together: the oldest go first\)\n", out.stderr), \
                out.stderr
            with login(svc.url, tokens[owner[job_id]]) as browser:
                page = browser.get(f"/jobs/{job_id}").text
                assert "to keep this service&#39;s build folders within" in page or \
                    "to keep this service's build folders within" in page, page
        for job_id in (third, fourth):
            down = svc.cli("jobs", "download", job_id, "-o", tmp_path / job_id, token=tokens[owner[job_id]])
            assert down.returncode == 0 and tree(tmp_path / job_id)[0] == expected_honest(), down.stderr
        assert not list(tmp_path.glob("build-*"))
        svc.stop()
        svc.args = ["--engine", "bubblewrap", "--build-folders-total", "100"]
        svc.start()
        out, job_id = submit_build(svc, tmp_path / "xi4", tokens["xi"])
        assert "\n* The build folder is not kept: HTTP 413: the build folder's archive is " in out.stdout and \
            "larger than 100 bytes, the most this service keeps of all build folders together (serve " \
            "--build-folders-total 100)\n" in out.stdout, out.stdout[-2000:]
        svc.wait_for_log(f"build.over_total job={fourth}", timeout=60)
        assert list(builds.glob("*.tar.gz")) == []
    finally:
        svc.close()


def test_a_bad_build_folders_total_is_one_line(tmp_path):
    out = Service(tmp_path / "svc", workers=0).cli("serve", "--build-folders-total", "lots")
    assert out.returncode == 2 and out.stderr.splitlines()[-1] == (
        "ece408_op serve: error: argument --build-folders-total: invalid size in bytes (1048576, 500M, 20G) "
        "value: 'lots'"), out.stderr


@pytest.mark.timeout(600)
def test_a_service_that_keeps_no_build_folders_says_so_and_its_worker_goes_on(running_service, tmp_path):
    svc = running_service(tmp_path / "svc", workers=1, args=["--engine", "bubblewrap", "--keep-builds", "0"])
    token = svc.add_teams("mu")["mu"]
    for i in range(2):                                  # the same worker runs the next job
        out, job_id = submit_build(svc, tmp_path / f"mu{i}", token)
        assert "\n* The build folder is not kept: HTTP 404: this service keeps no build folders (serve " \
               "--keep-builds 0)\n" in out.stdout, out.stdout[-2000:]
    down = svc.cli("jobs", "download", job_id, token=token, cwd=tmp_path)
    assert down.returncode == 2 and "kept no build folder" in down.stderr
    assert not (svc.root / "state" / "ece408_op" / "service" / "builds").exists()
    assert svc.log().count("worker.ready") == 1 and "worker.stopped" not in svc.log()
