"""``python -m ece408_op warmup``: compile the CPU path's Numba kernels (or load them from the cache)
now, so that the first milestone or network run does not wait for the compiler. One line of result."""
import time

from ..errors import Ece408Error
from .errors import ArgumentParser, run


def command(argv):
    parser = ArgumentParser(prog="ece408_op warmup",
                            description="Compile the CPU path's Numba kernels into the cache folder "
                                        "(a few seconds each, once per machine).")
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    parser.parse_args(argv)
    from ..conv import direct, numba_env
    if not direct.available():
        raise Ece408Error(f"the CPU path's Numba kernels are unavailable ({numba_env.unavailable()}); the CPU "
                          "path uses its im2col + BLAS fallback. Install Numba: pip install numba")
    start = time.perf_counter()
    layers = direct.warm_up_kernels()
    folder = numba_env.cache_folder()
    where = f"cached in {folder}" if folder is not None else "not cached: the cache folder cannot be written"
    print(f"{len(layers)} layers' kernels ready in {time.perf_counter() - start:.1f} s ({where})")
    return 0


def main(argv):
    return run(command, argv)
