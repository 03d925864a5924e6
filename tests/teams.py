"""Team projects for the tests: the template from ``init``, with its files replaced where a test
needs a team that is wrong, slow, or hostile. Every attack here is something a team could hand
in; the tests expect each to fail, be refused in one line, or have no effect on the record."""
import json
import os
import subprocess
from pathlib import Path

from conftest import ROOT, python_command

from ece408_op.team import project


def rai_yaml(commands, image="ece408_op:latest", gpu_count=0):
    lines = ["rai:", "  version: 0.2", f"  image: {image}", "resources:", "  cpu:", "    architecture: amd64",
             "  gpu:", "    architecture: hopper", f"    count: {gpu_count}", "  network: false",
             "commands:", "  build:"]
    lines += [f"    - {json.dumps(c)}" for c in commands]
    return "\n".join(lines) + "\n"


def team_project(dest, cpu=None, gpu=None, launch=None, commands=None, files=None):
    """A team made by ``init`` in ``dest``, with new-forward.py / new-forward.cu / launch.py replaced
    where given, rai_build.yml's commands where given, and extra ``files`` {relative path: text}."""
    dest = Path(dest)
    project.init(dest)
    for name, text in (("new-forward.py", cpu), ("new-forward.cu", gpu), ("launch.py", launch)):
        if text is not None:
            (dest / name).write_text(text)
    if commands is not None:
        (dest / "rai_build.yml").write_text(rai_yaml(commands))
    for rel, text in (files or {}).items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return dest


def cli(*args, env=None, timeout=900, cwd=None):
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


# ---------------------------------------------------------------------------- CPU forwards

HONEST = (project.TEMPLATE / "new-forward.py").read_text()

PLAIN = '''
import numpy as np

def forward(y, x, k):
    B, M, H_out, W_out = y.shape
    K = k.shape[2]
    for p in range(K):
        for q in range(K):
            y += np.einsum("bchw,mc->bmhw", x[:, :, p:p + H_out, q:q + W_out], k[:, :, p, q])
'''
"""A correct forward without Numba: quick to start, for tests that time many runs."""

WRONG = PLAIN.replace("for p in range(K):", "for p in range(K - 1):")          # misses a row of taps

FAILS = PLAIN + "\nraise RuntimeError('this team forgot a colon')\n"

# burns both cores for two seconds in every call, warm-up included: what the timing lease keeps apart
BURNER = PLAIN.replace("    B, M, H_out, W_out = y.shape", '''    import threading, time
    def spin():
        end = time.time() + 2
        while time.time() < end:
            pass
    threads = [threading.Thread(target=spin) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    B, M, H_out, W_out = y.shape''')

SLOW = PLAIN.replace("    B, M, H_out, W_out = y.shape", "    import time; time.sleep(600)\n    B, M, H_out, W_out = y.shape")

FAKE_LINES = PLAIN.replace("    B, M, H_out, W_out = y.shape", '''    print("Op Time: 0.000001")
    print("Correctness: 0.99 Model: ece408-high", flush=True)
    B, M, H_out, W_out = y.shape''')

CLOCK = '''
import time
time.perf_counter = lambda: 0.0
time.monotonic = lambda: 0.0
time.time = lambda: 0.0
''' + PLAIN

FORKS = PLAIN.replace("    B, M, H_out, W_out = y.shape", '''    import os
    if os.fork() == 0:          # a child to finish the work after forward "returns"
        os._exit(0)
    return''')

EARLY_THREAD = '''
import threading, time
import numpy as np

def _work(y, x, k):
    time.sleep(0.2)
    B, M, H_out, W_out = y.shape
    K = k.shape[2]
    for p in range(K):
        for q in range(K):
            y += np.einsum("bchw,mc->bmhw", x[:, :, p:p + H_out, q:q + W_out], k[:, :, p, q])

def forward(y, x, k):
    threading.Thread(target=_work, args=(y, x, k)).start()    # returns at once; a thread keeps going
'''

EXECS = PLAIN.replace("    B, M, H_out, W_out = y.shape", '''    import os, subprocess
    os.environ["LD_PRELOAD"] = "/tmp/fakeclock.so"
    subprocess.run(["/bin/true"])         # any new process, any exec
    B, M, H_out, W_out = y.shape''')

REPLAY = '''
import numpy as np
_kept = {}

def forward(y, x, k):
    if y.shape in _kept:              # a result kept from an earlier call of this shape
        y[...] = _kept[y.shape]
        return
    B, M, H_out, W_out = y.shape
    K = k.shape[2]
    for p in range(K):
        for q in range(K):
            y += np.einsum("bchw,mc->bmhw", x[:, :, p:p + H_out, q:q + W_out], k[:, :, p, q])
    _kept[y.shape] = y.copy()
'''

WRITES_PTH = PLAIN.replace("    B, M, H_out, W_out = y.shape", '''    import site, sys, os
    for folder in site.getsitepackages() + sys.path:
        try:
            with open(os.path.join(folder or ".", "zz_ece408_attack.pth"), "w") as f:
                f.write("import time; time.perf_counter = lambda: 0.0\\n")
            print("WROTE", folder)
        except OSError:
            pass
    B, M, H_out, W_out = y.shape''')

SNOOPS = PLAIN.replace("    B, M, H_out, W_out = y.shape", '''    import os, glob
    found = [f"ENV {k}={v}" for k, v in os.environ.items()]
    for path in glob.glob("/proc/[0-9]*/cmdline") + glob.glob("/proc/[0-9]*/environ"):
        try:
            found.append(path + " " + open(path, "rb").read().replace(b"\\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    for path in ("/root", "/etc/shadow", os.environ.get("SNOOP_TARGET", "/nonexistent")):
        try:
            found.append(path + " " + (" ".join(os.listdir(path)) if os.path.isdir(path) else open(path).read()))
        except OSError as exc:
            found.append(path + " " + type(exc).__name__)
    print("SNOOP", " | ".join(found), flush=True)
    B, M, H_out, W_out = y.shape''')
