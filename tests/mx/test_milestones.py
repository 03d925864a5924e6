"""Milestone scripts: argument parsing, usage errors, exact output, m1 == m2 Correctness."""
import re
import subprocess

import pytest

from suitekit import SCRIPTS, python_command, require_mxnet, run_script

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
    (["--data-dir=/x", "7", "--fuse", "--team", "proj"], "ece408-high", 7),
])
def test_parse_args(argv, model, size):
    args = harness.parse_args(argv, "m2.1.py", "m2")
    assert (args.model, args.size) == (model, size)


@pytest.mark.parametrize("argv", [
    ["ece408-high", "10", "extra"],   # too many args
    ["10", "20"],                     # two sizes
    ["--bogus"],                      # unknown option
    ["-5"],                           # clamped to 0: nothing to run
])
def test_parse_args_usage_errors(argv):
    # bad input: each argv above
    with pytest.raises(UsageError) as info:
        harness.parse_args(argv, "m2.1.py", "m2")
    text = str(info.value).splitlines()
    assert text[0] == "Usage: m2.1.py <model_name> <dataset size>"
    assert "ece408-high" in text[1] and "ece408-low" in text[1] and "10000" in text[2]


@pytest.mark.slow                                   # measured 1.9 s (loaded machine)
@pytest.mark.parametrize("typed", ["ece408-hihg", "12abc"])
def test_a_mistyped_model_is_the_one_line_saying_where_it_was_looked_for(typed):
    # bad input: an unknown model name (a typo; a size with a letter in it) through the real script
    result = run_script("m2.1.py", typed, "10")
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: model '{typed}' not found: looked for {typed}-symbol.json in ") and \
        "(known models: ece408-2018, ece408-2019, ece408-high, ece408-low)" in line, line


@pytest.mark.slow                                   # measured 4 s (loaded machine)
def test_a_milestone_says_which_forward_runs_where_no_team_project_is(tmp_path):
    # outside a team project the staff's forward runs: said once, on stderr (stdout: the course's transcript)
    from ece408_op.mx.milestone import NO_TEAM
    result = run_script("m2.1.py", "20", cwd=tmp_path)
    assert result.returncode == 0 and CUSTOM_OUTPUT.match(result.stdout), result.stdout + result.stderr
    assert result.stderr.splitlines()[-1] == NO_TEAM                  # after the run: an error stays one line
    assert NO_TEAM.startswith("* No team project here: the course's reference forward ran")
    chosen = subprocess.run([*python_command(), "-m", "ece408_op", "m2", "20", "--fuse"], capture_output=True,
                            text=True, cwd=tmp_path, timeout=600)      # the staff's forward asked for: no note
    assert chosen.returncode == 0 and NO_TEAM not in chosen.stderr, chosen.stderr


@pytest.mark.slow                                   # measured 1.7 s (loaded machine)
def test_a_team_folder_without_its_forward_says_how_to_restore_it(tmp_path):
    # bad input: a team project whose new-forward.py was deleted
    from ece408_op.team import project
    project.init(tmp_path / "team")
    (tmp_path / "team" / "new-forward.py").unlink()
    result = subprocess.run([*python_command(), "-m", "ece408_op", "m2", "20"], capture_output=True, text=True,
                            cwd=tmp_path / "team", timeout=600)
    assert result.returncode == 1 and result.stdout == ""            # before any of the transcript
    team = (tmp_path / "team").resolve()
    assert result.stderr.splitlines() == [f"error: the team folder {team} has no new-forward.py; restore the "
                                          f"template's (your other files are kept): python -m ece408_op init {team} "
                                          "--restore"], result.stderr


@pytest.mark.slow                                   # measured 1.7 s (loaded machine)
def test_script_size_zero_is_a_clear_error():
    # bad input: dataset size 0 (after clamping a negative size): the error line names what was given
    result = run_script("m2_cpu.py", "-3")
    assert result.returncode == 2 and "Traceback" not in result.stderr and result.stdout == ""
    last = result.stderr.splitlines()[-1]
    assert last.startswith("error: dataset size -3 ") and "nothing to run" in last, result.stderr


@pytest.mark.slow
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


@pytest.mark.slow                                   # measured 3 s (loaded machine)
def test_classic_name_runs_from_scripts_folder():
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


# ---------------------------------------------------------------- one parser: help, usage and errors

def _milestone(*argv, capsys):
    """``python -m ece408_op ARGV`` in this process: (status, stdout, stderr)."""
    from ece408_op.cli import main
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def _kernel_range():
    from ece408_op.kernels import VERSIONS
    return f"{min(VERSIONS)}-{max(VERSIONS)}"


# the options each milestone takes, and the words its help line must hold
OPTION_WORDS = {"--data-dir DIR": ["Fashion-MNIST"], "--debug": ["traceback"], "-h, --help": ["this text"],
                "--fuse": ["ece408_conv_tanh_pool"], "--team DIR": ["team project in DIR"],
                "--kernel N": ["fast", "auto"], "--profile": ["kernels and copies"], "--ncu": ["Nsight Compute", "occupancy"],
                "--time-limit SECONDS": ["600", "Ctrl-C"]}
TAKES = {"m1": ["--data-dir DIR", "--debug", "-h, --help"],
         "m2": ["--data-dir DIR", "--debug", "-h, --help", "--fuse", "--team DIR", "--time-limit SECONDS"],
         "m3": list(OPTION_WORDS), "final": list(OPTION_WORDS)}


@pytest.mark.parametrize("name", sorted(TAKES))
def test_help_exits_0_and_lists_every_option_of_the_milestone(name, capsys):
    status, out, err = _milestone(name, "--help", capsys=capsys)
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"Usage: python -m ece408_op {name} <model_name> <dataset size>"
    options = {line.split(":", 1)[0].strip(): line for line in lines[1:] if line.strip().startswith("-")}
    assert sorted(options) == sorted(TAKES[name])
    for option in TAKES[name]:
        assert all(word in options[option] for word in OPTION_WORDS[option]), options[option]
    if "--kernel N" in options:                         # the real range of versions, from the version table
        assert f"version {_kernel_range()}" in options["--kernel N"], options["--kernel N"]
    assert _milestone(name, "-h", capsys=capsys)[1] == out


@pytest.mark.parametrize("argv,error", [
    (["m2", "--bogus"], "error: unknown option --bogus"),
    (["m2", "--bogus=3"], "error: unknown option --bogus"),
    (["m2", "ece408-high", "10", "extra"], "error: unexpected argument 'extra': give at most a model and a "
                                           "dataset size"),
    (["m2", "10", "20"], "error: two dataset sizes, 10 and 20: give at most one"),
    (["m2", "ece408-high", "ece408-low"], "error: two models, 'ece408-high' and 'ece408-low': give at most one"),
    (["m2", "-5"], "error: dataset size -5 is clamped to 0: nothing to run; give a size from 1 to 10000"),
    (["m2", "--data-dir"], "error: --data-dir needs a value: --data-dir DIR"),
    (["m1", "--fuse"], "error: --fuse is for m2, m3 and final: m1 runs MXNet's built-in Convolution"),
    (["m1", "--team", "proj"], "error: --team is for m2, m3 and final: m1 runs MXNet's built-in Convolution"),
    (["m2", "--kernel", "3"], "error: --kernel is for m3 and final: m2 runs the CPU path"),
    (["m2", "--profile"], "error: --profile is for m3 and final: m2 runs the CPU path"),
    (["m2", "--ncu"], "error: --ncu is for m3 and final: m2 runs the CPU path"),
    (["m3", "--kernel", "99"], "error: --kernel 99: unknown kernel '99'; choose auto, fast"),
])
def test_usage_error_is_the_usage_then_one_line_naming_what_was_wrong(argv, error, capsys):
    # bad input: each argv above
    status, out, err = _milestone(*argv, capsys=capsys)
    assert status == 2 and out == ""
    usage = _milestone(argv[0], "--help", capsys=capsys)[1]
    assert err.startswith(usage), err                      # the same text as --help: one source
    last = err[len(usage):]
    assert last.count("\n") == 1 and last.startswith(error), last


@pytest.mark.slow
def test_usage_names_the_command_that_ran(tmp_path):
    for command, prog in ((["-m", "ece408_op", "final"], "python -m ece408_op final"),
                          ([str(SCRIPTS / "m3.1.py")], "m3.1.py"), ([str(SCRIPTS / "m1_cpu.py")], "m1_cpu.py")):
        result = subprocess.run([*python_command(), *command, "--bogus"], capture_output=True, text=True,
                                cwd=tmp_path, timeout=600)
        assert result.returncode == 2 and result.stderr.startswith(f"Usage: {prog} <model_name> <dataset size>\n")
        assert result.stderr.splitlines()[-1] == "error: unknown option --bogus"


def _predictions_of_the_first(n, model):
    """The model's argmax on the first ``n`` test images and their labels, computed here: the whole
    split loaded and sliced, the checkpoint bound with MXNet's own executor (no milestone code)."""
    import mxnet as mx
    import numpy as np
    from ece408_op.data import load_fashion_mnist
    from ece408_op.mx.models import resolve_model
    images, labels = load_fashion_mnist("test")
    _, prefix, epoch = resolve_model(model)
    symbol, arg_params, aux_params = mx.model.load_checkpoint(str(prefix), epoch)
    x = mx.nd.array(images[:n].reshape(n, 1, 28, 28).astype(np.float32))
    executor = symbol.simple_bind(mx.cpu(), data=x.shape, softmax_label=(n,), grad_req="null")
    executor.copy_params_from(arg_params, aux_params, allow_extra_params=True)
    return executor.forward(is_train=False, data=x)[0].asnumpy().argmax(axis=1), labels[:n]


@pytest.mark.slow
@pytest.mark.parametrize("n", [113, 1])
def test_correctness_is_the_exact_fraction_of_the_first_n_images(n):
    # n = 113, a prime: k/113 has more than two decimals, and no k'/112 equals it (0 < k < 113),
    # so an accuracy over n - 1 images or rounded to two places prints another number
    predicted, labels = _predictions_of_the_first(n, "ece408-low")
    want = str(int((predicted == labels).sum()) / n)
    assert n == 1 or len(want) > 4, want
    m2 = run_script("m2.1.py", "ece408-low", n)
    match = CUSTOM_OUTPUT.match(m2.stdout)
    assert match and match["acc"] == want, (m2.stdout + m2.stderr, want)
    m1 = run_script("m1.1.py", n, "ece408-low")
    match = M1_OUTPUT.match(m1.stdout)
    assert match and match["acc"] == want, (m1.stdout + m1.stderr, want)
    assert run_inference("ece408-low", n)["accuracy"] == float(want)
