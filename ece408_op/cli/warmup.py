"""``python -m ece408_op warmup``: compile the CPU path's Numba kernels (or load them from the cache)
now, so that the first milestone or network run does not wait for the compiler. One line of result.

    python -m ece408_op warmup --gpu [--arch sm_90] [--precision fp32]
        the GPU modules most layers share (v8, v9, v20 tiles, v13 windows), built by nvcc into the GPU cache
        folder ($ECE408_GPU_CACHE, else ~/.cache/ece408_op): no GPU needed
    python -m ece408_op warmup --gpu --network resnet50 --batch 64,1
        and one network's layers tuned on this GPU at those batches (PyTorch and torchvision): its first
        forward afterwards neither compiles nor times anything; copy the folder to machines of the same GPU
"""
import time

from ..base.extras import install_hint
from ..errors import Ece408Error, UsageError
from .errors import ArgumentParser, run


def command(argv):
    parser = ArgumentParser(prog="ece408_op warmup",
                            description="Compile the CPU path's Numba kernels into the cache folder (a few seconds "
                                        "each, once per machine); --gpu: the GPU modules (and a network's tunings).")
    parser.add_argument("--gpu", action="store_true", help="the GPU path's modules instead (nvcc; no GPU needed)")
    parser.add_argument("--arch", help="with --gpu: the GPU architecture (default: the GPU's, else sm_90)")
    parser.add_argument("--precision", help="with --gpu: tf32x3 (default) or fp32")
    parser.add_argument("--network", help="with --gpu: also tune this network's layers on this GPU (torchvision's)")
    parser.add_argument("--batch", default="64,1", help="with --network: the batches (default 64,1)")
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    args = parser.parse_args(argv)
    if args.gpu:
        return gpu_warmup(args)
    from ..conv import direct, numba_env
    if not direct.available():
        raise Ece408Error(f"the CPU path's Numba kernels are unavailable ({numba_env.unavailable()}); the CPU "
                          "path uses its im2col + BLAS fallback. Numba comes with the mxnet extra: "
                          f"{install_hint('mxnet')}")
    start = time.perf_counter()
    layers = direct.warm_up_kernels()
    folder = numba_env.cache_folder()
    where = f"cached in {folder}" if folder is not None else "not cached: the cache folder cannot be written"
    print(f"{len(layers)} layers' kernels ready in {time.perf_counter() - start:.1f} s ({where})")
    return 0


def _arch(given):
    if given:
        return given
    try:
        from ..kernels.device import GpuDevice
        return GpuDevice.get().arch
    except Ece408Error:
        return "sm_90"


def gpu_warmup(args):
    from ..kernels import autotune, parse_precision
    from ..kernels.build import cubin_cache_dir, gpu_cache_dir, precompile
    precision = parse_precision(args.precision)
    start = time.perf_counter()
    arch = _arch(args.arch)
    count = precompile(autotune.shared_modules(arch, precision), arch)
    print(f"{count} GPU modules for {arch} ({precision}) ready in {time.perf_counter() - start:.1f} s "
          f"(cached in {cubin_cache_dir()})", flush=True)
    if not args.network:
        return 0
    try:
        batches = [int(b) for b in args.batch.split(",") if b]
    except ValueError:
        batches = []
    if not batches or min(batches) < 1:
        raise UsageError(f"--batch {args.batch!r}: give positive batch sizes, e.g. 64,1")
    from ..bench.cold import NETWORKS, build_network, input_size
    if args.network not in NETWORKS:
        raise UsageError(f"unknown network {args.network!r}; choose from {', '.join(NETWORKS)}")
    try:
        import torch
    except ImportError as exc:
        raise Ece408Error(f"--network needs PyTorch ({exc}): pip install torch torchvision") from None
    from ..torch import swap_convolutions, warmup
    model = swap_convolutions(build_network(args.network).cuda().eval(), precision=precision).result
    size = input_size(args.network)
    seconds = warmup(model, torch.rand(max(batches), 3, size, size, device="cuda"), batches=batches)
    print(f"{args.network} tuned at batch " + ", ".join(f"{b} in {s:.1f} s" for b, s in seconds.items())
          + f" (cached in {gpu_cache_dir('autotune')})")
    return 0


def main(argv):
    return run(command, argv)
