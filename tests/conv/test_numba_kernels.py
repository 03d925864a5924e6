"""The CPU path's Numba kernels (conv/direct.py) and their environment (conv/numba_env.py): every kernel
against the float64 reference on irregular layers, the fallback and its reasons, the cache folder and its
key, the first-compile note, a read-only cache, the SLP switch, and the warmup command."""
import os
import subprocess
import sys

import numpy as np
import pytest

from suitekit import ROOT, python_command
from ece408_op.conv import ConvSpec, conv2d_forward_cpu, direct, numba_env, reference_and_bound

pytestmark = pytest.mark.skipif(not direct.available(), reason=f"Numba unavailable: {numba_env.unavailable()}")

# (B, C, H, W, M, attrs): each tile (M -> MB 4, 3, 2, 1), odd sizes, K=1, K=H, B=1, C>1, padding, stride
# (2 and 3, uneven), dilation, rectangular kernels, groups, depthwise (multiplier 1 and 2), bias, planes
# smaller than a row of blocks, blocks crossing several rows (7x7 outputs), many images.
LAYERS = [
    (1, 1, 28, 28, 50, dict(kernel=5)),
    (3, 6, 30, 30, 16, dict(kernel=5, no_bias=False)),
    (2, 2, 64, 20, 6, dict(kernel=5)),                                 # MB 6
    (1, 12, 33, 33, 24, dict(kernel=5)),
    (2, 3, 9, 11, 7, dict(kernel=3)),
    (5, 1, 7, 13, 4, dict(kernel=1)),
    (4, 2, 6, 40, 3, dict(kernel="(6, 3)")),                           # K = H
    (1, 16, 9, 9, 8, dict(kernel=3, pad=1, no_bias=False)),
    (2, 8, 14, 14, 13, dict(kernel=3, pad=1, stride=2)),
    (2, 3, 40, 40, 16, dict(kernel=7, pad=3, stride=2)),               # a stem, scaled down
    (1, 5, 23, 19, 9, dict(kernel="(3, 2)", stride="(3, 2)", pad="(1, 0)")),
    (2, 8, 17, 17, 8, dict(kernel=3, pad=2, dilate=2)),
    (1, 4, 15, 21, 6, dict(kernel="(2, 4)", dilate="(2, 1)", pad="(3, 0)", stride="(1, 3)", num_group=2)),
    (2, 16, 12, 12, 16, dict(kernel=3, pad=1, num_group=16, no_bias=False)),     # depthwise
    (2, 6, 13, 13, 12, dict(kernel=3, pad=1, stride=2, num_group=6)),            # depthwise x2, strided
    (2, 6, 13, 15, 12, dict(kernel=3, pad="(2, 1)", dilate=2, num_group=6)),     # depthwise3x3: x2, dilated
    (3, 5, 9, 9, 5, dict(kernel=3, num_group=5, no_bias=False)),                 # depthwise3x3, no padding
    (1, 4, 11, 11, 4, dict(kernel=5, pad=2, num_group=4)),                       # depthwise 5x5, stride 1
    (2, 32, 7, 7, 20, dict(kernel=3, pad=1, no_bias=False)),           # 7x7: blocks over several rows
    (2, 24, 9, 9, 2, dict(kernel=1)),                                  # x read as it is, MB 2
    (2, 16, 15, 14, 12, dict(kernel=1, stride=2, no_bias=False)),      # strided 1x1: one phase plane
    (1, 3, 19, 23, 5, dict(kernel=3, stride="(2, 3)", pad="(0, 2)")),  # uneven strides and padding
    (3, 3, 10, 12, 1, dict(kernel=3)),                                 # MB 1
    (130, 1, 28, 28, 50, dict(kernel=5)),                              # many images, rows kernel (8, 8)
    (1, 1200, 61, 59, 4, dict(kernel=3, pad=2, stride=2)),             # x large enough for the parallel re-layout
    (3, 1, 31, 30, 11, dict(kernel=5, no_bias=False)),                  # rows kernel (4, 16), overlapping blocks
    (2, 7, 12, 11, 9, dict(kernel=3, pad=1)),                            # rows kernel (8, 8), 63 taps
    (2, 2, 20, 17, 6, dict(kernel="(3, 4)", pad=1)),                   # rows kernel (6, 16), padding
]


def _layer(rng, b, c, h, w, m, attrs):
    spec = ConvSpec.from_attrs(num_filter=m, **{k: str(v) for k, v in attrs.items()})
    x = (rng.standard_normal((b, c, h, w)) * 10).astype(np.float32)
    k = rng.standard_normal(spec.weight_shape(c)).astype(np.float32)
    bias = None if spec.no_bias else rng.standard_normal(m).astype(np.float32)
    return spec, x, k, bias


def _within(got, ref, bound, what):
    bad = ~(np.abs(np.asarray(got, np.float64) - ref) <= bound)          # NaN counts as bad
    assert not bad.any(), f"{what}: {int(bad.sum())} of {bad.size} off, first at {tuple(np.argwhere(bad)[0])}"


@pytest.mark.slow
@pytest.mark.parametrize("layer", LAYERS, ids=lambda g: "B%dC%dH%dW%dM%d" % g[:5] + str(g[5]))
def test_direct_kernels_match_the_reference_and_write_every_output(rng, layer):
    spec, x, k, bias = _layer(rng, *layer)
    assert direct.unsupported(x.shape, k.shape, spec) is None          # the direct path, not the fallback
    ref, bound = reference_and_bound(x, k, bias, spec)
    out = np.full(ref.shape, np.nan, np.float32)                      # no zeroing pass: every output written
    assert direct.conv2d_forward_direct(x, k, bias, spec, out) is out
    _within(out, ref, bound, "direct")
    start = rng.standard_normal(ref.shape).astype(np.float32)          # req='add': each output added once
    total = direct.conv2d_forward_direct(x, k, bias, spec, start.copy(), accumulate=True)
    _within(total - start, ref, bound + 1e-6 * np.abs(start), "direct, accumulate")


def test_one_thread_and_many_chunks_give_the_same_result(rng, monkeypatch):
    spec, x, k, bias = _layer(rng, 2, 8, 30, 30, 12, dict(kernel=3, pad=1))
    one = direct.conv2d_forward_direct(x, k, bias, spec, np.empty(spec.output_shape(x.shape), np.float32), threads=1)
    monkeypatch.setattr(direct, "CHUNK_BYTES", 1)                       # a chunk per block of positions
    many = direct.conv2d_forward_direct(x, k, bias, spec, np.empty_like(one), threads=2)
    assert np.array_equal(one, many)


def test_rows_kernel_serves_layers_of_few_taps_and_flat_the_rest(rng):
    course = direct.plan_for((2, 1, 28, 28), (50, 1, 5, 5), ConvSpec.from_attrs(num_filter=50, kernel=5))
    assert course.row_tile == (8, 8)                       # 56 padded filters x 24 columns: the fewest
    later = direct.plan_for((2, 1, 70, 70), (12, 1, 5, 5), ConvSpec.from_attrs(num_filter=12, kernel=5))
    assert later.row_tile == (4, 16)
    conv2 = direct.plan_for((2, 6, 30, 30), (16, 6, 5, 5), ConvSpec.from_attrs(num_filter=16, kernel=5))
    assert conv2.row_tile == (4, 16)
    many_taps = direct.plan_for((2, 64, 30, 30), (16, 64, 3, 3), ConvSpec.from_attrs(num_filter=16, kernel=3))
    assert many_taps.row_tile is None                      # 576 taps: the flat kernel
    narrow = direct.plan_for((2, 1, 9, 9), (4, 1, 3, 3), ConvSpec.from_attrs(num_filter=4, kernel=3))
    assert narrow.row_tile is None                         # a 7-wide output: no row block fits


def test_tiles_follow_the_filter_count():
    assert [direct.tile_for(m)[0] for m in (1, 2, 3, 4, 6, 12, 50, 64)] == [1, 2, 3, 4, 6, 4, 4, 4]
    assert all(direct.tile_for(m)[1] == direct.TILES[direct.tile_for(m)[0]] for m in (1, 2, 3, 64))


def test_tiny_outputs_take_the_blas_fallback_with_its_reason(rng):
    spec, x, k, bias = _layer(rng, 2, 3, 5, 5, 4, dict(kernel=3, no_bias=False))        # 3x3 output
    assert "smaller than one block" in direct.unsupported(x.shape, k.shape, spec)
    ref, bound = reference_and_bound(x, k, bias, spec)
    _within(conv2d_forward_cpu(x, k, bias, spec), ref, bound, "fallback")


def _run(code, env=None, timeout=300):
    full = {**os.environ, **(env or {})}
    return subprocess.run([*python_command(), "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env=full, timeout=timeout)


def test_numba_disabled_runs_the_blas_path_and_the_same_numbers():
    code = ("import numpy as np\n"
            "from ece408_op.conv import ConvSpec, conv2d_forward_cpu, direct, reference_and_bound\n"
            "rng = np.random.default_rng(3)\n"
            "x = rng.standard_normal((2, 4, 20, 20)).astype(np.float32)\n"
            "k = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)\n"
            "spec = ConvSpec.from_attrs(num_filter=8, kernel=3, pad=1)\n"
            "ref, bound = reference_and_bound(x, k, None, spec)\n"
            "print(direct.unsupported(x.shape, k.shape, spec))\n"
            "print(bool((np.abs(conv2d_forward_cpu(x, k, None, spec) - ref) <= bound).all()))\n"
            "import sys; print('numba' in sys.modules)\n")
    result = _run(code, {"ECE408_NUMBA": "0"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:3] == ["Numba unavailable: ECE408_NUMBA=0", "True", "False"]


RELAYOUT = ("import numpy as np, sys\n"
            "from ece408_op.conv import numba_env\n"
            "from ece408_op.conv import direct_loops as loops\n"
            "x = np.ones((1, 1, 4, 4), np.float32); xs = np.full((1, 60), np.nan, np.float32)\n"
            "numba_env.call(loops.relayout, xs, x, 1, 1, 1, 1, 6, 6)\n"
            "print(xs[0, :36].reshape(6, 6).sum(), numba_env.cache_key(), numba_env.cache_folder())\n"
            "print(dict(loops.relayout.stats.cache_hits).__len__())\n")


@pytest.mark.slow
def test_cache_folder_key_and_first_compile_note(tmp_path):
    env = {"ECE408_NUMBA_CACHE": str(tmp_path / "numba"), "NUMBA_SLP_VECTORIZE": ""}
    first = _run(RELAYOUT, env)
    assert first.returncode == 0, first.stderr
    total, key, folder = first.stdout.split("\n")[0].split()
    assert total == "16.0" and folder == str(tmp_path / "numba" / key)
    import numba
    assert key.startswith("slp1-") and f"numba{numba.__version__}" in key and "llvm" in key
    notes = [line for line in first.stderr.splitlines() if line.startswith("ece408_op: compiling")]
    assert len(notes) == 1 and folder in notes[0], first.stderr
    assert any(p.suffix == ".nbi" for p in (tmp_path / "numba").rglob("*")), "nothing cached"
    second = _run(RELAYOUT, env)
    assert second.returncode == 0, second.stderr
    assert "compiling" not in second.stderr and second.stdout.split("\n")[1] == "1"      # a cache hit


def test_unwritable_cache_folder_compiles_in_memory_with_a_note(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")                                # a folder below a file cannot be created, even by root
    code = ("import numpy as np\n"
            "from ece408_op.conv import numba_env\n"
            "f = numba_env.njit()(lambda a: a.sum())\n"
            "print(numba_env.call(f, np.ones(5)), numba_env.cache_folder())\n")
    result = _run(code, {"ECE408_NUMBA_CACHE": str(blocker / "numba")})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["5.0", "None"]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ece408_op: cannot write Numba's cache folder"), result.stderr


def test_numba_imported_first_gets_slp_turned_on_with_a_warning(tmp_path):
    code = ("import os; os.environ.pop('NUMBA_SLP_VECTORIZE', None)\n"
            "import numba\n"
            "from numba.core import config\n"
            "before = config.SLP_VECTORIZE\n"
            "from ece408_op.conv import numba_env\n"
            "numba_env.load()\n"
            "print(before, config.SLP_VECTORIZE, numba_env.cache_key()[:5])\n")
    result = _run(code, {"ECE408_NUMBA_CACHE": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "1", "slp1-"]
    assert "imported before ece408_op" in result.stderr
    off = _run(code.replace("os.environ.pop('NUMBA_SLP_VECTORIZE', None)", "os.environ['NUMBA_SLP_VECTORIZE'] = '0'"),
               {"ECE408_NUMBA_CACHE": str(tmp_path)})
    assert off.stdout.split() == ["0", "0", "slp0-"] and "several times slower" in off.stderr


@pytest.mark.slow
def test_warmup_command():
    result = _run("from ece408_op.cli import main; import sys; sys.exit(main(['warmup']))")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 1 and "kernels ready" in result.stdout
    # bad input: Numba switched off
    off = _run("from ece408_op.cli import main; import sys; sys.exit(main(['warmup']))", {"ECE408_NUMBA": "0"})
    assert off.returncode == 1 and off.stdout == ""
    assert off.stderr.strip().splitlines() == [off.stderr.strip()] and off.stderr.startswith("error: ")


# ---------------------------------------------------------------- Winograd (opt-in: cpu_kernel=fast)

WINOGRAD = [(3, 16, 13, 17, 5, dict(kernel=3, pad=1)), (2, 32, 18, 18, 40, dict(kernel=3)),
            (3, 20, 13, 16, 7, dict(kernel=3, pad="(1, 0)", no_bias=False)),
            (2, 64, 56, 56, 64, dict(kernel=3, pad=1)), (1, 128, 28, 28, 128, dict(kernel=3, pad=1, no_bias=False)),
            (2, 256, 14, 14, 64, dict(kernel=3, pad=1))]


@pytest.mark.slow
@pytest.mark.parametrize("layer", WINOGRAD, ids=lambda g: "B%dC%dH%dW%dM%d" % g[:5] + str(g[5]))
def test_winograd_within_a_quarter_of_the_bound_on_its_layers(layer):
    from ece408_op.conv import winograd
    rng = np.random.default_rng(12)
    spec, x, k, bias = _layer(rng, *layer)
    x = x / 20 - 0.25                                               # full mantissas, both signs (as v12's test)
    assert winograd.unsupported(x.shape, k.shape, spec) is None
    ref, bound = reference_and_bound(x, k, bias, spec)
    out = np.full(ref.shape, np.nan, np.float32)
    conv2d_forward_cpu(x, k, bias, spec, out=out, kernel="fast")
    ratio = np.abs(out - ref) / bound
    assert ratio.max() <= 0.25, f"Winograd {layer}: error up to {ratio.max():.3f}x the float32 bound"
    start = rng.standard_normal(ref.shape).astype(np.float32)
    total = conv2d_forward_cpu(x, k, bias, spec, out=start.copy(), accumulate=True, kernel="fast")
    _within(total - start, ref, bound + 1e-6 * np.abs(start), "winograd, accumulate")


def test_winograd_runs_only_when_asked_and_only_where_it_can():
    from ece408_op.conv import winograd
    from ece408_op.conv.cpu import parse_cpu_kernel
    assert "3x3" in winograd.unsupported((1, 64, 56, 56), (64, 64, 3, 3), ConvSpec.from_attrs(num_filter=64, kernel=3, stride=2))
    assert "3x3" in winograd.unsupported((1, 64, 28, 28), (64, 64, 5, 5), ConvSpec.from_attrs(num_filter=64, kernel=5))
    assert "channels" in winograd.unsupported((1, 3, 224, 224), (64, 3, 3, 3), ConvSpec.from_attrs(num_filter=64, kernel=3))
    assert "group" in winograd.unsupported((1, 32, 28, 28), (32, 1, 3, 3), ConvSpec.from_attrs(num_filter=32, kernel=3, num_group=32))
    assert "products" in winograd.unsupported((1, 64, 7, 7), (64, 64, 3, 3), ConvSpec.from_attrs(num_filter=64, kernel=3, pad=1))
    assert parse_cpu_kernel(None) == "auto" and parse_cpu_kernel("FAST") == "fast"
    # bad input: an unknown kernel name
    with pytest.raises(Exception, match="cpu_kernel='winograd' is not one of auto, fast, blas"):
        parse_cpu_kernel("winograd")


@pytest.mark.slow                                   # measured 9 s (loaded machine)
def test_winograd_error_follows_the_tile_not_the_window():
    # Why it is opt-in (as the GPU's v12): zero 3x3 windows inside tiles of large values (suitekit's case).
    from suitekit import striped_winograd_case
    spec, x, k, ref, bound = striped_winograd_case()
    direct_y = conv2d_forward_cpu(x, k, None, spec)
    wino = conv2d_forward_cpu(x, k, None, spec, kernel="fast")
    assert (np.abs(direct_y - ref) <= bound).all()
    assert (np.abs(wino - ref) > bound).any()
    assert np.abs(wino - ref).max() <= 1e-5 * np.abs(ref).max()


def test_operator_takes_cpu_kernel_and_reports_a_bad_one(rng):
    from suitekit import require_mxnet
    op = require_mxnet("ece408_op.mx.op")
    mx = op.mx
    spec, x, k, bias = _layer(rng, 2, 32, 18, 18, 16, dict(kernel=3, pad=1, no_bias=False))
    ref, bound = reference_and_bound(x, k, bias, spec)
    args = [mx.nd.array(a) for a in (x, k, bias)]
    for choice in ("auto", "fast", "blas"):
        y = mx.nd.Custom(*args, op_type="ece408_conv", num_filter=16, kernel=3, pad=1, no_bias=False,
                         device="cpu", cpu_kernel=choice).asnumpy()
        limit = bound * (0.25 if choice == "fast" else 1.0)
        assert (np.abs(y - ref) <= limit).all(), choice
    # bad input: an unknown CPU kernel
    with pytest.raises(mx.base.MXNetError):
        mx.nd.Custom(*args, op_type="ece408_conv", num_filter=16, kernel=3, pad=1, no_bias=False,
                     cpu_kernel="gemm").wait_to_read()
    assert "cpu_kernel='gemm' is not one of auto, fast, blas" in str(op.take_last_error())


@pytest.mark.slow
def test_bench_cpu_bad_options_are_one_line_errors(tmp_path):
    # bad input: no repeats, a PNG in a folder that does not exist
    for args in (["--repeats", "0"], ["--png", str(tmp_path / "missing" / "x.png")]):
        result = _run(f"from ece408_op.cli import main; import sys; sys.exit(main(['bench', 'cpu', *{args!r}]))")
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and result.stdout == "" and len(lines) == 1, result.stderr
        assert "repeats must be at least 1" in lines[0] or "does not exist" in lines[0] or "matplotlib" in lines[0]
