"""Milestone scripts: argument parsing, usage errors, exact output, m1 == m2 Correctness."""
import re

import pytest

from conftest import require_mxnet, run_script

require_mxnet("ece408_op.mx.inference")
from ece408_op.cli import milestone as harness  # noqa: E402
from ece408_op.errors import UsageError  # noqa: E402
from ece408_op.mx.inference import run_inference  # noqa: E402

CUSTOM_OUTPUT = re.compile(
    r"\ALoading fashion-mnist data\.\.\. done\n"
    r"Loading model\.\.\. done\n"
    r"New Inference\n"
    r"(?P<ops>(?:Op Time: \d+\.\d{6}\n)+)"
    r"Correctness: (?P<acc>1\.0|0\.\d+|0\.0) Model: (?P<model>[\w.-]+)\n\Z")
M1_OUTPUT = re.compile(
    r"\ALoading fashion-mnist data\.\.\. done\n"
    r"Loading model\.\.\. done\n"
    r"New Inference\n"
    r"EvalMetric: \{'accuracy': (?P<acc>1\.0|0\.\d+|0\.0)\}\n\Z")
# The course's submission client: "Loading model... done" immediately followed by "New Inference".
SUBMISSION_CLIENT = re.compile(r"Loading model\.\.\. done\s*New Inference")


@pytest.mark.parametrize("argv,model,size", [
    ([], "ece408-high", 10000),
    (["100"], "ece408-high", 100),
    (["ece408-low"], "ece408-low", 10000),
    (["ece408-low", "250"], "ece408-low", 250),
    (["250", "ece408-low"], "ece408-low", 250),
    (["20000"], "ece408-high", 10000),       # clamped like the original
    (["-5"], "ece408-high", 0),
])
def test_parse_args(argv, model, size):
    args = harness.parse_args(argv, "m2.1.py")
    assert (args.model, args.size) == (model, size)


@pytest.mark.parametrize("argv", [
    ["ece408-nope"],                  # unknown model
    ["12abc"],                        # non-numeric size
    ["ece408-high", "10", "extra"],   # too many args
    ["10", "20"],                     # two sizes
    ["--bogus"],                      # unknown option
])
def test_parse_args_usage_errors(argv):
    # bad input: each argv above
    with pytest.raises(UsageError) as info:
        harness.parse_args(argv, "m2.1.py")
    text = str(info.value).splitlines()
    assert text[0] == "Usage: m2.1.py <model_name> <dataset size>"
    assert "ece408-high" in text[1] and "ece408-low" in text[1] and "10000" in text[2]


def test_script_usage_error_exits_nonzero():
    # bad input: an unknown model name through the real script; nothing on stdout
    result = run_script("m2.1.py", "ece408-nope", "10")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("Usage: m2.1.py <model_name> <dataset size>")


def test_script_size_zero_is_a_clear_error():
    # bad input: dataset size 0 (after clamping a negative size)
    result = run_script("m2_cpu.py", "-3")
    assert result.returncode != 0 and "nothing to run" in result.stderr
    assert "Traceback" not in result.stderr


def test_m2_output_format_and_m1_agreement_both_models():
    for model in ("ece408-high", "ece408-low"):
        m2 = run_script("m2_cpu.py", model, 300)
        assert m2.returncode == 0, m2.stderr
        match = CUSTOM_OUTPUT.match(m2.stdout)
        assert match, f"m2 output not in the course format:\n{m2.stdout}"
        assert match["model"] == model and len(match["ops"].splitlines()) == 1
        assert SUBMISSION_CLIENT.search(m2.stdout)
        m1 = run_script("m1.1.py", "300", model)
        assert m1.returncode == 0, m1.stderr
        m1_match = M1_OUTPUT.match(m1.stdout)
        assert m1_match, f"m1 output not in the course format:\n{m1.stdout}"
        assert m1_match["acc"] == match["acc"], f"{model}: m1 {m1_match['acc']} != m2 {match['acc']}"


def test_classic_name_runs_from_scripts_folder():
    from conftest import SCRIPTS
    result = run_script("m2.1.py", "37", cwd=SCRIPTS)
    match = CUSTOM_OUTPUT.match(result.stdout)
    assert result.returncode == 0 and match, result.stdout + result.stderr
    accuracy = float(match["acc"])
    assert round(accuracy * 37) == pytest.approx(accuracy * 37, abs=1e-9)   # k / 37 for an integer k


def test_run_inference_reports_op_times_and_accuracy():
    quiet = run_inference("ece408-high", 200)
    assert quiet["name"] == "ece408-high" and len(quiet["op_times"]) == 1
    builtin = run_inference("ece408-high", 200, use_custom=False)
    assert builtin["op_times"] == [] and builtin["accuracy"] == quiet["accuracy"]
