"""The command line: ``python -m ece408_op``, the console script, the scripts' classic names."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, SCRIPTS, python_command, require_mxnet, run_script
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


def test_unknown_command():
    # bad input: a command that does not exist
    result = _module("m4")
    assert result.returncode == 2 and result.stderr.startswith("error: unknown command 'm4'")


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
