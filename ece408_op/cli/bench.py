"""``python -m ece408_op bench cpu|overhead|zoo|gpu|memory ...``: the CPU benchmarks against MXNet's
built-in (need MXNet), the model-zoo table (MXNet), the GPU one (PyCUDA and PyTorch, no MXNet), or
how fast this machine maps fresh host memory (NumPy only: the floor under the GPU path's wall time
with MXNet's CPU build)."""
import json

from ..errors import UsageError
from .errors import ArgumentParser, run

USAGE = ("usage: ece408_op bench cpu [--layers NAME ...] [--repeats N] [--json FILE] [--png FILE]\n"
         "       ece408_op bench overhead [--rounds N] [--json FILE]\n"
         "       ece408_op bench memory [--mb N] [--json FILE]\n"
         "       ece408_op bench gpu [--batch N ...] [--repeats N] [--out DIR] [--sweep [--apply]]\n"
         "       ece408_op bench zoo [--nets NAME ...] [--batch N] [--size N] [--repeats N] [--device cpu|gpu] "
         "[--json FILE]")


def _mxnet_with_all_cores():
    """MXNet's built-in CPU operators use OMP_NUM_THREADS threads, one by default on some machines:
    compare with as many threads as ece408_conv's pool has (set before MXNet loads)."""
    import os
    import sys
    from ..conv.parallel import pool_size
    if "mxnet" not in sys.modules:
        os.environ.setdefault("OMP_NUM_THREADS", str(pool_size()))
    from .. import require_mxnet
    require_mxnet()


def _parse(parser, argv):
    """The options every MXNet benchmark shares (--json, --debug), then parse."""
    parser.add_argument("--json", help="write the results here as JSON")
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    return parser.parse_args(argv)


def _write_json(path, result):
    if path:
        with open(path, "w") as handle:
            json.dump(result, handle, indent=2)


def cpu_command(argv):
    _mxnet_with_all_cores()
    from ..mx.bench import CPU_TABLE_HEAD, LAYERS, bench_cpu, cpu_png, cpu_row, machine
    parser = ArgumentParser(prog="ece408_op bench cpu",
                            description="ece408_conv (CPU) against MXNet's built-in Convolution, same run, "
                                        "same threads: whole calls and Op Time, course and real-network layers.")
    parser.add_argument("--layers", nargs="+", choices=list(LAYERS), metavar="NAME",
                        help=f"default: all of {', '.join(LAYERS)}")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--png", help="draw the ratios to the built-in here (needs matplotlib)")
    args = _parse(parser, argv)
    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {args.repeats}")
    if args.png:
        try:
            import matplotlib  # noqa: F401
        except ImportError as exc:
            raise UsageError(f"--png needs matplotlib ({exc}); pip install matplotlib") from exc
        import os
        folder = os.path.dirname(os.path.abspath(args.png))
        if not os.path.isdir(folder):
            raise UsageError(f"--png {args.png}: folder {folder} does not exist; create it or give another path")
    m = machine()
    print(f"{m['cpus']} CPUs, MXNet OMP_NUM_THREADS={m['OMP_NUM_THREADS']}, ece408_conv threads={m['ece408_threads']}, "
          f"median of {args.repeats} after a warm-up; one row per layer as it finishes", flush=True)
    print("\n".join(CPU_TABLE_HEAD), flush=True)
    result = bench_cpu(args.layers, args.repeats, progress=lambda name, r: print(cpu_row(name, r), flush=True))
    _write_json(args.json, result)
    if args.png:
        cpu_png(result, args.png)
    return 0


def overhead_command(argv):
    _mxnet_with_all_cores()
    from ..mx.bench import bench_overhead, overhead_table
    parser = ArgumentParser(prog="ece408_op bench overhead",
                            description="The fixed cost of one ece408_conv call, of an empty CustomOp and of the "
                                        "built-in Convolution (negligible computation).")
    parser.add_argument("--rounds", type=int, default=9)
    args = _parse(parser, argv)
    result = bench_overhead(args.rounds)
    print(overhead_table(result))
    _write_json(args.json, result)
    return 0


def zoo_command(argv):
    _mxnet_with_all_cores()
    from ..mx import zoo
    parser = ArgumentParser(prog="ece408_op bench zoo",
                            description="Model-zoo networks, original vs every convolution swapped: agreement on "
                                        "every path (small inputs) and forward time (executor, --batch x --size).")
    parser.add_argument("--nets", nargs="+", default=list(zoo.NETS), choices=list(zoo.NETS), metavar="NAME")
    parser.add_argument("--batch", type=int, default=8, help="images per timed forward (default 8)")
    parser.add_argument("--size", type=int, default=224, help="timed input size (default 224; inceptionv3: 299)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu", help="the swapped layers' path")
    parser.add_argument("--no-timing", action="store_true", help="agreement only")
    args = _parse(parser, argv)
    results = []
    for name in args.nets:
        small = zoo.NETS[name]
        result = zoo.validate(name, batch=1 if small >= 224 else 2, device=args.device)
        if not args.no_timing:
            size = max(args.size, small) if name != "inceptionv3" else max(args.size, 299)
            result.seconds = zoo.time_pair(name, args.batch, size, args.repeats, device=args.device)
            result.timed_shape = (args.batch, 3, size, size)
        results.append(result)
        print(f"{name}: {result.swapped}/{result.convolutions} swapped, max rel. diff "
              f"{max(result.max_rel.values()):.1e}, argmax {'same' if all(result.argmax_equal.values()) else 'DIFFERS'}",
              flush=True)
    print(zoo.table(results))
    if args.json:
        with open(args.json, "w") as handle:
            handle.write(zoo.to_json(results))
    return 0 if all(r.ok for r in results) else 1


def memory_command(argv):
    from ..kernels.hostcopy import fault_in_table
    parser = ArgumentParser(prog="ece408_op bench memory",
                            description="How fast this machine faults in fresh anonymous memory (as MXNet's new "
                                        "output is) with 1, 4 and all-core threads, with and without transparent "
                                        "huge pages asked for, and how many huge pages it actually got.")
    parser.add_argument("--mb", type=int, default=1024, help="size of each mapping in MB (default 1024)")
    args = _parse(parser, argv)
    if args.mb <= 0:
        raise UsageError(f"--mb must be a positive number of megabytes, got {args.mb}")
    rows = fault_in_table(args.mb << 20)
    print(f"{args.mb} MB of fresh memory per row, faulted in for writing in 16 MB pieces "
          "(MADV_POPULATE_WRITE where the kernel has it, else a write per page)")
    print("| threads | huge pages asked | GB/s | huge pages obtained |\n| --- | --- | --- | --- |")
    for r in rows:
        got = "unknown" if r["huge_pages_MB"] is None else f"{r['huge_pages_MB']:.0f} MB"
        print(f"| {r['threads']} | {'yes' if r['huge'] else 'no'} | {r['GB_per_s']:.1f} | {got} |")
    _write_json(args.json, {"mb": args.mb, "rows": rows})
    return 0


def gpu_command(argv):
    from ..kernels.bench import main as gpu_main
    return gpu_main([a for a in argv if a != "--debug"])


def command(argv):
    commands = {"cpu": cpu_command, "gpu": gpu_command, "zoo": zoo_command, "overhead": overhead_command,
                "memory": memory_command}
    if not argv or argv[0] not in commands:
        raise UsageError(USAGE)
    return commands[argv[0]](argv[1:])


def main(argv):
    return run(command, argv)
