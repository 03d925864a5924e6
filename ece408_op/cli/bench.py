"""``python -m ece408_op bench cpu|gpu ...``: the CPU benchmark (needs MXNet) or the GPU one
(needs PyCUDA and PyTorch, no MXNet)."""
import json

from ..errors import UsageError
from .errors import ArgumentParser, run

USAGE = ("usage: ece408_op bench cpu [--images N] [--repeats N] [--json FILE]\n"
         "       ece408_op bench gpu [--batch N ...] [--repeats N] [--out DIR] [--sweep [--apply]]")


def cpu_command(argv):
    from .. import require_mxnet
    require_mxnet()
    from ..mx.bench import bench_cpu
    parser = ArgumentParser(prog="ece408_op bench cpu",
                            description="Op Time of ece408_conv (CPU) vs MXNet's built-in Convolution.")
    parser.add_argument("--model", default="ece408-high")
    parser.add_argument("--images", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data-dir")
    parser.add_argument("--json", help="write the results here as JSON")
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    args = parser.parse_args(argv)
    result = bench_cpu(args.model, args.images, args.repeats, args.data_dir)
    layer = result["layer"]
    print(f"layer B={layer['B']} C={layer['C']} M={layer['M']} {layer['H']}x{layer['H']} K={layer['K']}, "
          f"median of {args.repeats} after a warm-up, {result['machine']['cpus']} CPUs")
    for key, label in (("builtin_convolution", "MXNet built-in Convolution"),
                       ("ece408_op_time", "ece408_conv Op Time"),
                       ("ece408_call_with_copies", "ece408_conv whole call (with copies)")):
        s = result[key]
        print(f"  {label:40s} {s['median_s']:.4f} s  (min {s['min_s']:.4f}, max {s['max_s']:.4f})")
    print(f"  ratio Op Time / built-in: {result['ratio_op_time_vs_builtin']:.2f}x")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    return 0


def gpu_command(argv):
    from ..kernels.bench import main as gpu_main
    return gpu_main([a for a in argv if a != "--debug"])


def command(argv):
    if not argv or argv[0] not in ("cpu", "gpu"):
        raise UsageError(USAGE)
    return (cpu_command if argv[0] == "cpu" else gpu_command)(argv[1:])


def main(argv):
    return run(command, argv)
