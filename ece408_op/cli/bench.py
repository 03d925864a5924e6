"""``python -m ece408_op bench cpu|gpu ...``: the CPU benchmark (needs MXNet) or the GPU one
(needs PyCUDA and PyTorch, no MXNet)."""
import json

from ..errors import UsageError
from .errors import ArgumentParser, run

USAGE = ("usage: ece408_op bench cpu [--images N] [--repeats N] [--json FILE]\n"
         "       ece408_op bench gpu [--batch N ...] [--repeats N] [--out DIR] [--sweep [--apply]]\n"
         "       ece408_op bench zoo [--nets NAME ...] [--batch N] [--size N] [--repeats N] [--device cpu|gpu] "
         "[--json FILE]")


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


def zoo_command(argv):
    from .. import require_mxnet
    require_mxnet()
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
    parser.add_argument("--json", help="write the results here as JSON")
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    args = parser.parse_args(argv)
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


def gpu_command(argv):
    from ..kernels.bench import main as gpu_main
    return gpu_main([a for a in argv if a != "--debug"])


def command(argv):
    commands = {"cpu": cpu_command, "gpu": gpu_command, "zoo": zoo_command}
    if not argv or argv[0] not in commands:
        raise UsageError(USAGE)
    return commands[argv[0]](argv[1:])


def main(argv):
    return run(command, argv)
