"""ece408_op: the UIUC ECE 408 convolution project harness as an MXNet 1.9.1 plugin.

``import ece408_op`` makes ``ece408_conv`` available to MXNet: at once where MXNet is
already imported, else as soon as it is (``mx/hook.py``), in either import order. It
never imports MXNet itself, so the NumPy layer (``conv``), the PyCUDA layer (``kernels``)
and the data layer (``data``) work where MXNet is missing or unusable (NumPy 2).

Wings, each importing only those before it in this list (docs/architecture.md; tests/package/test_layering.py
checks it):

    errors.py, course.py, console.py, base/   the leaves: errors, the course's facts, the transcript
                                              writer, small helpers (files, extras, processes)
    conv/      NumPy: shape rules, float64 reference, CPU path, thread pool
    tasks/     the course's task as a folder: reference, template, solutions (data)
    kernels/   PyCUDA: the version ladder and its registry, choice, autotuning, launch, device
    data/      Fashion-MNIST: IDX format, lookup, fetchers, resize
    team/      a team project: template use, launch plan, the team process and its checks
    torch/     the PyTorch front-end (needs PyTorch)
    mx/        the only MXNet importer: shims, the operator, models, graph swap, inference
    bench/     every benchmark
    grading/   ranked and development runs in sandboxes, records, ranking, grading on Slurm
    selftest/  every bad input and fault tried
    service/   the class's submission service: server, queue, workers, clients, pages
    cli/       python -m ece408_op <command>
"""
from .course import OP_TYPE, __version__  # noqa: F401  (the package's name for both: course.py holds them)


def require_mxnet():
    """Import the MXNet layer (registering the operator) and return the ``mxnet`` module,
    or raise a one-line Ece408Error saying why MXNet is unusable here (``mx/hook.py``), or the
    ModuleNotFoundError of a package the mxnet extra brings (the command line names the extra)."""
    from .mx.hook import require_mxnet as require
    return require()


def mxnet_unavailable():
    """None where MXNet and the operator are usable, else the reason (one line)."""
    from .base.extras import missing_line
    from .errors import Ece408Error
    try:
        require_mxnet()
    except Ece408Error as exc:
        return str(exc)
    except ModuleNotFoundError as exc:
        line = missing_line("ece408_op's MXNet layer", exc.name, "mxnet")
        if line is None:
            raise
        return line
    return None


def __getattr__(name):
    if name == "swap_convolutions":
        require_mxnet()
        from .mx.swap import swap_convolutions
        return swap_convolutions
    if name == "gluon":                     # ece408_op.gluon.Conv2D without importing it first
        import importlib
        return importlib.import_module(".gluon", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _install_hook():
    from .mx import hook
    hook.install()


_install_hook()
