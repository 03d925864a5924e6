"""Submission folders for the submit/grade tests: copies of this project, or crafted teams whose
milestone script prints a chosen transcript (cheap, deterministic Op Times)."""
import json
import os
import shutil
import subprocess
from pathlib import Path

from conftest import ROOT, python_command

HOST = ["--engine", "host"]


def rai_yaml(commands, image="ece408_op:latest", gpu_count=0):
    lines = ["rai:", "  version: 0.2", f"  image: {image}", "resources:", "  cpu:", "    architecture: amd64",
             "  gpu:", "    architecture: hopper", f"    count: {gpu_count}", "  network: false",
             "commands:", "  build:"]
    lines += [f"    - {json.dumps(c)}" for c in commands]
    return "\n".join(lines) + "\n"


def project_copy(dest, commands=None):
    """This project's package and scripts (no models: ECE408_MODEL_DIR points at them) in ``dest``."""
    dest = Path(dest)
    shutil.copytree(ROOT / "ece408_op", dest / "ece408_op", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "scripts", dest / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "rai_build.yml").write_text(rai_yaml(commands or ['/bin/bash -c "cp -rv /src/* /build"']))
    return dest


CRAFTED = """\
import os, sys, time
model, size = sys.argv[1], sys.argv[2]
kind = {kind!r}
if kind == "fail":
    print("Loading fashion-mnist data... done", flush=True)
    sys.exit("error: crafted failure")
if kind in ("sleep", "pidfile"):
    if kind == "pidfile":
        with open({pidfile!r} + ".tmp", "w") as f:
            f.write(f"{{os.getppid()}} {{os.getpid()}}")
        os.replace({pidfile!r} + ".tmp", {pidfile!r})
    print("Loading fashion-mnist data...", end="", flush=True)
    time.sleep({sleep})
accuracy = {accuracy!r}[os.path.basename(model)]
print("Loading fashion-mnist data... done")
print("Loading model... done")
print("New Inference")
print("Op Time: %f" % {op_time!r})
print(f"Correctness: {{accuracy}} Model: {{os.path.basename(model)}}")
"""


def crafted_team(dest, accuracy, op_time=0.01, kind="ok", sleep=0, pidfile=None):
    """A team whose scripts/m2.1.py prints ``op_time`` and ``accuracy[model]`` (kind: ok, fail,
    sleep: sleeps first, pidfile: writes '<parent pid> <pid>' to ``pidfile`` then sleeps)."""
    dest = Path(dest)
    (dest / "scripts").mkdir(parents=True)
    (dest / "scripts" / "m2.1.py").write_text(CRAFTED.format(kind=kind, accuracy=accuracy, op_time=op_time,
                                                             sleep=sleep, pidfile=str(pidfile)))
    (dest / "rai_build.yml").write_text(rai_yaml(['/bin/bash -c "cp -rv /src/* /build"']))
    return dest


def cli(*args, env=None, timeout=600, cwd=None):
    """``python -m ece408_op ARGS`` in a fresh interpreter; CompletedProcess (text)."""
    return subprocess.run([*python_command(), "-m", "ece408_op", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "ECE408_MODEL_DIR": str(ROOT / "models"), **(env or {})},
                          cwd=cwd or ROOT, timeout=timeout)


def reference_accuracies(size, models=("ece408-high", "ece408-low")):
    """What m1 (MXNet's own Convolution) prints for each model on ``size`` images, on this host."""
    from ece408_op.grading.transcript import parse_eval_metric
    found = {}
    for model in models:
        out = cli("m1", model, size)
        assert out.returncode == 0, out.stderr
        found[model] = parse_eval_metric(out.stdout)
    return found


WRITER = """
import sys
from ece408_op.grading.store import Record, open_store
url, worker, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open_store(url) as store:
    for i in range(n):
        assert store.add(Record(f"{worker}-{i}", f"2026-01-01T00:00:{i % 60:02d}", f"team{worker}", "m2", 10,
                                "ok", 0, 0.1, True, [], transcript="x" * 2000))
    assert not store.add(Record(f"{worker}-0", "2026-01-01", "dup", "m2", 10, "ok", transcript="y"))
"""


def parallel_writers(url, workers, each):
    """``workers`` processes, started together, each adding ``each`` records (and one duplicate id)
    to the database at ``url``: every record must be there once, the duplicates nowhere."""
    from ece408_op.grading.store import open_store
    procs = [subprocess.Popen([*python_command(), "-c", WRITER, url, str(w), str(each)], cwd=ROOT)
             for w in range(workers)]
    assert [p.wait(timeout=300) for p in procs] == [0] * workers
    with open_store(url) as store:
        records = store.records()
    assert len(records) == workers * each and len({r.id for r in records}) == workers * each
    assert not any(r.team == "dup" for r in records)
