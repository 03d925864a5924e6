"""The command line: ``python -m ece408_op``, the console script, the scripts' classic names."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suitekit import ROOT, SCRIPTS, python_command, require_mxnet, run_script
from ece408_op.cli import COMMANDS, main
from ece408_op.cli.errors import ArgumentParser, report
from ece408_op.errors import DataError, UsageError


def _module(*args, cwd=ROOT):
    return subprocess.run([*python_command(), "-m", "ece408_op", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=600)


def test_no_command_prints_usage_and_fails():
    result = _module()
    assert result.returncode == 2 and result.stdout == ""
    for name in COMMANDS:
        assert f"  {name} " in result.stderr


def test_help_lists_every_command_and_every_benchmark():
    from ece408_op.cli.bench import BENCHMARKS
    result = _module("--help")
    assert result.returncode == 0 and result.stderr == ""
    listed = [line.split()[:2] for line in result.stdout.splitlines() if line.startswith("  ")]
    names = [words[0] for words in listed]
    assert [n for n in names if n != "bench"] == [n for n in COMMANDS if n != "bench"]
    assert [words[1] for words in listed if words[0] == "bench"] == list(BENCHMARKS)   # bench memory too


@pytest.mark.parametrize("typed,close", [("m4", "did you mean m1, m2 or m3?"), ("M2", "did you mean m2?"),
                                         ("rankng", "did you mean ranking"), ("xyzzy", None)])
def test_unknown_command_is_one_line_naming_the_closest(typed, close):
    # bad input: a command that does not exist (a typo, the wrong case)
    result = _module(typed)
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: unknown command {typed!r}") and "--help' lists them" in line, line
    assert (close in line) if close else "did you mean" not in line, line


def test_options_are_never_abbreviated():
    # bad input: --token (no such option of login) would be taken as --token-file by argparse's prefix match
    result = _module("login", "--server", "http://127.0.0.1:9", "--token", "ece408_0123456789abcdef_x")
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: a token never goes on the command line") and "--token-file PATH" in line
    listing = _module("jobs", "list", "--lim", "5", "--server", "http://127.0.0.1:9")    # --limit, abbreviated
    assert listing.returncode == 2 and "unrecognized arguments: --lim 5" in listing.stderr, listing.stderr
    import ast
    for path in sorted((ROOT / "ece408_op").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "ArgumentParser" and \
                    path.name != "pagebench.py":
                kwargs = {k.arg: k.value for k in node.keywords}
                assert "allow_abbrev" in kwargs and kwargs["allow_abbrev"].value is False, f"{path}:{node.lineno}"


# a package made unimportable, as in an environment without the extra that brings it
WITHOUT = "import sys\nsys.modules[{module!r}] = None\nfrom ece408_op.cli import main\nsys.exit(main({argv!r}))\n"


@pytest.mark.parametrize("module,argv,extra", [("numpy", ["m2", "10"], "mxnet"), ("numpy", ["m3", "10"], "gpu"),
                                               ("fastapi", ["serve", "--workers", "0"], "service"),
                                               ("numpy", ["fetch", "--force"], "mxnet")])
def test_a_missing_extra_is_one_line_naming_it_for_a_clone_and_an_index(module, argv, extra, tmp_path):
    result = subprocess.run([*python_command(), "-c", WITHOUT.format(module=module, argv=argv)], capture_output=True,
                            text=True, cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == "" and "Traceback" not in result.stderr, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: python -m ece408_op {argv[0]} needs the {extra} extra ") and \
        f"{module} is not installed" in line, line
    assert f"pip install 'ece408_op[{extra}]'" in line and f"pip install '.[{extra}]'" in line, line
    debug = subprocess.run([*python_command(), "-c", WITHOUT.format(module=module, argv=argv + ["--debug"])],
                           capture_output=True, text=True, cwd=tmp_path)
    assert "Traceback" in debug.stderr and debug.stderr.rstrip().splitlines()[-1] == line


@pytest.mark.slow                                   # measured 1.5 s (loaded machine)
def test_the_install_hints_name_a_clone_and_an_index():
    from ece408_op.base.extras import install_hint
    assert install_hint("gpu") == "pip install 'ece408_op[gpu]' (in a clone of the repository: pip install '.[gpu]')"
    code = "import sys\nsys.modules['pycuda'] = None\nsys.modules['pycuda.driver'] = None\n" \
           "from ece408_op.kernels.device import driver\ndriver()\n"
    result = subprocess.run([*python_command(), "-c", code], capture_output=True, text=True)
    assert install_hint("gpu") in result.stderr.splitlines()[-1], result.stderr
    import ast
    for path in sorted((ROOT / "ece408_op").rglob("*.py")):          # no error naming one form alone
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise):
                text = " ".join(c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and
                                isinstance(c.value, str))
                assert "ece408_op[" not in text and "'.[" not in text, f"{path}:{node.lineno}: {text}"


def test_bench_needs_one_of_its_benchmarks():
    from ece408_op.cli.bench import BENCHMARKS
    # bad input: bench with an unknown target: the usage of every benchmark, then one line
    result = _module("bench", "tpu")
    assert result.returncode == 2 and result.stdout == ""
    *usage, last = result.stderr.splitlines()
    assert all(any(f"bench {name} " in line for line in usage) for name in BENCHMARKS)
    assert last == f"error: unknown benchmark 'tpu'; choose one of {', '.join(BENCHMARKS)}"
    help_ = _module("bench", "--help")
    assert help_.returncode == 0 and help_.stdout.splitlines() == usage


def test_bench_gpu_network_precisions_and_layouts():
    from ece408_op.cli.bench import _precisions
    assert _precisions("fp16,bf16,tf32", "fp16,bf16") == (("fp16", "bf16", "tf32"), ("fp16", "bf16"))
    assert _precisions("FP16, tf32", "all") == (("fp16", "tf32"), ("fp16", "tf32"))      # --channels-last alone
    assert _precisions("", "") == ((), ())
    # bad input: a precision that is none of the four, channels-last for a precision not asked for, or alone
    for text, layouts, match in [("fp8", "", "unknown precision\\(s\\) fp8; choose from fp32, tf32, fp16, bf16"),
                                 ("fp16", "bf16", "names precisions that --precision does not list"),
                                 ("", "all", "names precisions that --precision does not list")]:
        with pytest.raises(UsageError, match=match):
            _precisions(text, layouts)


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="PyTorch is installed here")
def test_bench_gpu_without_pytorch_is_one_line():
    # bad input: the GPU benchmark where PyTorch (its cuDNN baseline) is not installed
    result = _module("bench", "gpu")
    assert result.returncode == 1 and result.stdout == "" and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: bench gpu needs PyTorch")
    assert _module("bench", "gpu", "--help").returncode == 0        # the help needs neither


@pytest.mark.slow
def test_bench_cpu_takes_short_layer_names(tmp_path):
    require_mxnet()
    import json
    from ece408_op.cli.bench import short_name
    from ece408_op.bench.cpu import LAYERS
    shorts = [short_name(name) for name in LAYERS]
    assert len(set(shorts)) == len(LAYERS) and all(" " not in s and s == s.lower() for s in shorts)
    out = tmp_path / "cpu.json"
    result = _module("bench", "cpu", "--layers", "1x1", "--repeats", 1, "--json", out)
    assert result.returncode == 0, result.stderr
    layers = json.loads(out.read_text())["layers"]
    assert list(layers) == ["1x1 (C=256)"]
    row = layers["1x1 (C=256)"]               # MXNet's fresh output alone, timed beside the two calls
    assert row["fresh_output"]["repeats"] == 1 and row["fresh_output"]["median_s"] > 0
    assert row["ratio_fresh_output"] == row["fresh_output"]["median_s"] / row["builtin"]["median_s"]
    assert "| MXNet's fresh y / built-in |" in result.stdout
    bad = _module("bench", "cpu", "--layers", "nope")          # bad input: a layer that does not exist
    assert bad.returncode == 2 and bad.stderr.startswith("usage: ece408_op bench cpu")
    assert bad.stderr.splitlines()[-1] == f"ece408_op bench cpu: error: unknown layer 'nope'; choose from " \
                                           f"{', '.join(shorts)}"


@pytest.mark.slow
def test_bench_overhead_splits_an_imperative_call_into_invoke_and_engine_wait(tmp_path):
    """``bench overhead`` times each imperative call until it returns and then until its output is
    ready (MXNet's engine hop): the split behind docs/benchmarks.md's statement of what CustomOp costs."""
    require_mxnet()
    import json
    out = tmp_path / "overhead.json"
    result = _module("bench", "overhead", "--rounds", 1, "--json", out)
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    names = {"built-in Convolution", "empty CustomOp", "empty CustomOp, lean registration", "ece408_conv"}
    assert set(data["imperative_invoke"]) == set(data["imperative_wait"]) == names
    for name in names:
        total = data["imperative_per_call"][name]["median_s"]
        invoke, wait = data["imperative_invoke"][name]["median_s"], data["imperative_wait"][name]["median_s"]
        assert 0 < invoke < total and 0 <= wait < total and abs(invoke + wait - total) <= 1e-9 + 1e-6 * total
    assert "| empty CustomOp |" in result.stdout and "until the call returns" in result.stdout


@pytest.mark.slow                                   # measured 1.5 s (loaded machine)
def test_bench_memory_measures_fresh_memory_per_thread_count(tmp_path):
    """``bench memory`` (no MXNet, no GPU): one row per thread count and huge-page choice, measured."""
    import json
    out = tmp_path / "memory.json"
    result = _module("bench", "memory", "--mb", 64, "--json", out)
    assert result.returncode == 0, result.stderr
    rows = json.loads(out.read_text())["rows"]
    cores = os.cpu_count()
    assert sorted({r["threads"] for r in rows}) == sorted({1, min(4, cores), cores})
    assert len(rows) == 2 * len({r["threads"] for r in rows})
    assert all(0 < r["GB_per_s"] < 1e4 and 0 < r["first_GB_per_s"] < 1e4 for r in rows)
    assert all(r["huge_pages_MB"] is None or r["huge_pages_MB"] >= -1 for r in rows)
    assert result.stdout.count("\n| 1 | ") == 2
    bad = _module("bench", "memory", "--mb", 0)                          # bad input: one line, exit 2
    assert bad.returncode == 2 and bad.stderr.strip() == "--mb must be a positive number of megabytes, got 0"


@pytest.mark.parametrize("name", sorted(p.name for p in SCRIPTS.glob("*.py")))
def test_scripts_are_plain_files_calling_the_cli(name):
    path = SCRIPTS / name
    assert path.is_file() and not path.is_symlink()
    code = [line for line in path.read_text().splitlines()
            if line.strip() and not line.startswith(("#", '"""'))]
    assert len(code) == 3 and "from ece408_op.cli import main" in code[1] and code[2].startswith("sys.exit(main([")
    assert os.access(path, os.X_OK)


@pytest.mark.slow
def test_script_help_from_any_folder(tmp_path):
    # The classic name, run from another folder: the help (stdout, exit 0) names the script.
    require_mxnet()
    result = run_script("m2.1.py", "--help", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.startswith("Usage: m2.1.py <model_name> <dataset size>"), \
        result.stderr


def test_console_script_is_declared_and_installed():
    text = (ROOT / "setup.py").read_text()
    assert '"ece408 = ece408_op.cli:main"' in text
    exe = Path(sys.executable).with_name("ece408")
    if not exe.exists():
        pytest.skip("the package is not installed in this interpreter's environment")
    result = subprocess.run([str(exe), "fetch", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "--source" in result.stdout


def test_argument_errors_are_usage_errors():
    parser = ArgumentParser(prog="ece408_op thing")
    parser.add_argument("--n", type=int)
    with pytest.raises(UsageError, match=r"ece408_op thing: error: argument --n: invalid int value"):
        # bad input: a non-integer where an integer is needed
        parser.parse_args(["--n", "x"])


def test_report_maps_errors_to_one_line_and_exit_codes(capsys):
    assert report(DataError("the files are gone; fetch again")) == 1
    assert capsys.readouterr().err == "error: the files are gone; fetch again\n"
    assert report(UsageError("usage: x")) == 2
    assert report(KeyboardInterrupt()) == 130
    with pytest.raises(ZeroDivisionError):
        report(ZeroDivisionError())            # not ours: a bug, shown as a traceback


def test_debug_shows_the_traceback(capsys, monkeypatch):
    # bad input: a fetch into a destination that is a file (any failing command would do)
    def boom(argv):
        raise DataError("broken on purpose")
    from ece408_op.cli import errors
    assert errors.run(boom, ["--debug"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.rstrip().endswith("error: broken on purpose")
    monkeypatch.setenv("ECE408_DEBUG", "1")
    assert errors.run(boom, []) == 1
    assert "Traceback" in capsys.readouterr().err


def test_main_dispatches_in_process(capsys):
    assert main(["fetch", "--help"]) == 0
    assert "usage: ece408_op fetch" in capsys.readouterr().out


def test_a_ranked_run_in_a_folder_that_is_no_team_is_refused_before_anything_is_stored(tmp_path):
    # bad input: submit --submit m2 where no team project is (a student's home folder, the clone's root)
    env = {**os.environ, "ECE408_DB": str(tmp_path / "records.db"), "ECE408_SPOOL": str(tmp_path / "spool")}
    env.pop("ECE408_SERVER", None)
    result = subprocess.run([*python_command(), "-m", "ece408_op", "submit", "--submit", "m2", "--size", "10"],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert result.returncode == 1 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line == "error: this folder is not a team project (no new-forward.py): make one with python -m " \
                   "ece408_op init DIR and run this in it, or give --team DIR", line
    assert sorted(p.name for p in tmp_path.iterdir()) == []            # no record, no spool, no scratch


def test_init_restores_a_deleted_file_and_keeps_the_others(tmp_path):
    made = _module("init", tmp_path / "team")
    assert made.returncode == 0, made.stderr
    mine = b"def forward(y, x, k):\n    pass  # mine\n"
    (tmp_path / "team" / "launch.py").write_bytes(mine)
    (tmp_path / "team" / "new-forward.py").unlink()
    again = _module("init", tmp_path / "team")                  # bad input: init into a team's folder
    assert again.returncode == 1 and again.stderr.strip().endswith(f"init {tmp_path / 'team'} --restore)")
    restored = _module("init", tmp_path / "team", "--restore")
    assert restored.returncode == 0 and restored.stdout.strip() == f"Restored in {tmp_path / 'team'}: new-forward.py"
    from ece408_op.team.project import TEMPLATE
    assert (tmp_path / "team" / "new-forward.py").read_bytes() == (TEMPLATE / "new-forward.py").read_bytes()
    assert (tmp_path / "team" / "launch.py").read_bytes() == mine


@pytest.mark.service
@pytest.mark.timeout(300)
def test_serve_detach_returns_once_it_answers_or_says_in_one_line_why_not(tmp_path, request):
    """The README's service block starts ``serve --detach`` and ends with ``serve --stop``: a service
    that cannot start is one line and a non-zero exit, never a wait without end."""
    import socket
    from services import free_port
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ECE408_")},
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_DATA_HOME": str(tmp_path / "data")}

    def serve(*args):
        return subprocess.run([*python_command(), "-m", "ece408_op", "serve", *map(str, args)], capture_output=True,
                              text=True, cwd=tmp_path, env=env, timeout=200)
    port = free_port()
    with socket.socket() as taken:                        # bad input: the port is in use
        taken.bind(("127.0.0.1", port))
        taken.listen()
        busy = serve("--workers", 0, "--port", port, "--detach")
    assert busy.returncode == 1 and busy.stdout == ""
    assert busy.stderr.splitlines() == [f"error: cannot listen on 127.0.0.1:{port}: Address already in use; "
                                        "choose another --port"], busy.stderr
    (tmp_path / "a-file").write_text("")
    bad_db = serve("--workers", 0, "--port", port, "--db", tmp_path / "a-file" / "x.db", "--detach")
    assert bad_db.returncode == 1 and bad_db.stdout == ""         # bad input: a database that cannot be made
    (line,) = bad_db.stderr.splitlines()
    assert line.startswith("error: serve did not start: ") and "x.db" in line and "its log: " in line
    started = serve("--workers", 0, "--port", port, "--db", tmp_path / "s.db", "--detach")
    request.addfinalizer(lambda: serve("--port", port, "--stop"))
    assert started.returncode == 0 and started.stdout.startswith(f"Serving http://127.0.0.1:{port} (pid "), started
    import httpx
    assert httpx.get(f"http://127.0.0.1:{port}/ready").status_code == 200
    twice = serve("--workers", 0, "--port", port, "--detach")
    assert twice.returncode == 1 and "already runs on port" in twice.stderr
    stopped = serve("--port", port, "--stop")
    assert stopped.returncode == 0 and stopped.stdout.startswith(f"Stopped the service on port {port}"), stopped
    with socket.socket() as free:       # no one listens on the port once --stop returns (as serve binds it)
        free.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        free.bind(("127.0.0.1", port))
        free.listen()
    none = serve("--port", port, "--stop")
    assert none.returncode == 1 and none.stderr.startswith(f"error: no service started with --detach on port {port}")
