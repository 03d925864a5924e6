"""``python -m ece408_op bench cpu|overhead|zoo|gpu|memory ...``: the CPU benchmarks against MXNet's
built-in (need MXNet), the model-zoo table (MXNet), the GPU one (PyCUDA and PyTorch, no MXNet), or
how fast this machine maps fresh host memory (NumPy only: the floor under the GPU path's wall time
with MXNet's CPU build). The command lines are here; what they measure is in ``ece408_op/bench/``."""
import argparse
import importlib.util
import json
import shlex

from ..base.extras import install_hint
from ..errors import Ece408Error, UsageError
from .errors import ArgumentParser, run

HELP = ("-h", "--help")


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


def short_name(layer):
    """A layer's name to type: 'ResNet 3x3 (pad 1)' -> 'resnet-3x3'."""
    return layer.split(" (")[0].strip().lower().replace(" ", "-")


def cpu_command(argv):
    _mxnet_with_all_cores()
    from ..bench.cpu import CPU_TABLE_HEAD, LAYERS, bench_cpu, cpu_png, cpu_row, machine
    names = {short_name(name): name for name in LAYERS}
    names.update({name.lower(): name for name in LAYERS})
    parser = ArgumentParser(prog="ece408_op bench cpu",
                            description="ece408_conv (CPU) against MXNet's built-in Convolution, same run, "
                                        "same threads: whole calls and Op Time, course and real-network layers.")
    parser.add_argument("--layers", nargs="+", metavar="NAME",
                        help=f"default: all of {', '.join(map(short_name, LAYERS))}")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--png", help="draw the ratios to the built-in here (needs matplotlib)")
    args = _parse(parser, argv)
    for name in args.layers or ():
        if name.lower() not in names:
            parser.error(f"unknown layer {name!r}; choose from {', '.join(map(short_name, LAYERS))}")
    layers = [names[name.lower()] for name in args.layers] if args.layers else None
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
    result = bench_cpu(layers, args.repeats, progress=lambda name, r: print(cpu_row(name, r), flush=True))
    _write_json(args.json, result)
    if args.png:
        cpu_png(result, args.png)
    return 0


def overhead_command(argv):
    _mxnet_with_all_cores()
    from ..bench.cpu import bench_overhead, overhead_table
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
    from ..bench import zoo as timing
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
            result.seconds = timing.time_pair(name, args.batch, size, args.repeats, device=args.device)
            result.timed_shape = (args.batch, 3, size, size)
        results.append(result)
        print(f"{name}: {result.swapped}/{result.convolutions} swapped, max rel. diff "
              f"{max(result.max_rel.values()):.1e}, argmax {'same' if all(result.argmax_equal.values()) else 'DIFFERS'}",
              flush=True)
    print(timing.table(results))
    if args.json:
        with open(args.json, "w") as handle:
            handle.write(timing.to_json(results))
    return 0 if all(r.ok for r in results) else 1


def memory_command(argv):
    from ..bench.memory import fault_in_table
    parser = ArgumentParser(prog="ece408_op bench memory",
                            description="How fast this machine faults in fresh anonymous memory (as MXNet's new "
                                        "output is) with 1, 4 and all-core threads, with and without transparent "
                                        "huge pages asked for, the first mapping and later ones, and how many huge "
                                        "pages it actually got.")
    parser.add_argument("--mb", type=int, default=1024, help="size of each mapping in MB (default 1024)")
    args = _parse(parser, argv)
    if args.mb <= 0:
        raise UsageError(f"--mb must be a positive number of megabytes, got {args.mb}")
    rows = fault_in_table(args.mb << 20)
    print(f"{args.mb} MB of fresh private memory per mapping (as malloc gives MXNet's outputs), faulted in for "
          "writing in 16 MB pieces (MADV_POPULATE_WRITE where the kernel has it, else a write per page); three "
          "mappings per row: the first, and the median of the next two (memory just released)")
    print("| threads | huge pages asked | first mapping GB/s | later mappings GB/s | huge pages obtained |\n"
          "| --- | --- | --- | --- | --- |")
    for r in rows:
        got = "unknown" if r["huge_pages_MB"] is None else f"{r['huge_pages_MB']:.0f} MB"
        print(f"| {r['threads']} | {'yes' if r['huge'] else 'no'} | {r['first_GB_per_s']:.1f} | "
              f"{r['GB_per_s']:.1f} | {got} |")
    _write_json(args.json, {"mb": args.mb, "rows": rows})
    return 0


def gpu_command(argv):
    missing = [name for module, name in (("torch", "PyTorch"), ("pycuda", "PyCUDA"))
               if importlib.util.find_spec(module) is None]
    if missing and not set(HELP) & set(argv) and "--precompile" not in argv:   # precompiling needs nvcc only
        raise Ece408Error(f"bench gpu needs {' and '.join(missing)} (cuDNN through PyTorch is the baseline, "
                          f"the kernels run through PyCUDA), on a machine with a CUDA GPU: {install_hint('bench')}")
    argv = [a for a in argv if a != "--debug"]
    if "--network" in argv:
        return network_command(argv)
    if "--precompile" in argv:
        return precompile_command(argv)
    from ..bench.gpu import COURSE_LAYER
    parser = _gpu_parser(COURSE_LAYER)
    args = parser.parse_args(argv)
    if args.suite:
        if args.repeats == parser.get_default("repeats"):
            args.repeats = 10
        return suite_command(args)
    if args.course_map:
        from ..bench import coursemap
        return coursemap.run(args.batch, args.repeats, args.out, streams=not args.no_streams)
    layer = [getattr(args, key) for key in COURSE_LAYER]
    if args.sweep:
        return sweep_command(layer, args)
    from ..bench import gpu
    versions = [int(v) for v in args.versions.split(",")] if args.versions else None
    result = gpu.run(*layer, repeats=args.repeats, versions=versions)
    gpu.save(result, args.out)
    gpu.print_table(result)
    bad = [name for name, e in result["entries"].items() if e.get("valid") is False]
    if bad:
        print(f"INVALID results: {', '.join(bad)}")
        return 1
    return 0


def _gpu_parser(course_layer):
    from ..bench import gpu
    parser = argparse.ArgumentParser(prog="ece408_op bench gpu", description=gpu.__doc__.splitlines()[0],
                                     allow_abbrev=False)
    for key, value in course_layer.items():
        parser.add_argument(f"--{key}", type=int, default=value)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--versions", help="comma-separated version numbers (default: all)")
    parser.add_argument("--out", default="bench-gpu", help="folder for the JSON/CSV/PNG (and the sweep's table)")
    parser.add_argument("--sweep", action="store_true", help="run v7's tuning sweep instead")
    parser.add_argument("--suite", action="store_true",
                        help="run the suite instead: every layer of the course models and real networks, several batches")
    parser.add_argument("--quick", action="store_true", help="with --suite: one batch per layer")
    parser.add_argument("--layers", help="with --suite: comma-separated layer names (default: all)")
    parser.add_argument("--tiles", nargs="?", const="all",
                        help="with --suite: first sweep tile sizes (of 'all', or e.g. '9,10,fused')")
    parser.add_argument("--course-map", action="store_true",
                        help="the course's optimisation list instead: v14-v19 against the versions they improve on the "
                             "course layers, and ECE408_STREAMS (bench/coursemap.py; --batch, --repeats, --out)")
    parser.add_argument("--no-streams", action="store_true", help="with --course-map: the kernels only")
    parser.add_argument("--apply", action="store_true",
                        help="with --sweep: store the winner in tuning.json; with --suite: the defaults in defaults.json")
    return parser


def sweep_command(layer, args):
    """``bench gpu --sweep [--apply]``: v7's sweep on the course layer, its table; the winner stored."""
    from ..bench import sweep
    from ..kernels import tuning
    result = sweep.sweep(*layer, repeats=args.repeats)
    best = sweep.save_sweep(result, args.out, apply=args.apply)
    print(sweep.sweep_markdown(result))
    if best is None:
        print("INVALID results: no v7 configuration was valid")
        return 1
    print("winner (ties within {:.0%} keep the stored tuning): {}{}".format(
        sweep.NOISE, {key: best[key] for key in tuning.V7_KEYS}, ", stored in tuning.json" if args.apply else ""))
    return 0


def suite_command(args):
    """``bench gpu --suite``: precompile, the tile sweep first (``--tiles``), the suite; JSON/CSV/plots/Markdown
    saved, the summary printed; 1 if any entry is invalid."""
    import json
    from pathlib import Path
    from ..bench import suite, tiles
    from ..bench.precompile import suite_modules
    from ..kernels.build import precompile
    from ..kernels.device import GpuDevice
    layers = args.layers.split(",") if args.layers else None
    dev = GpuDevice.get()
    print(f"precompiled {precompile(suite_modules(layers=layers, tiles=bool(args.tiles)), dev.arch)} modules",
          flush=True)
    if args.tiles:
        owners = None if args.tiles == "all" else args.tiles.split(",")
        swept = tiles.sweep_tiles(args.repeats, layers or tiles.TILE_LAYERS, owners=owners)
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "tiles.json").write_text(json.dumps(swept, indent=1))
        (Path(args.out) / "tiles.md").write_text(tiles.tiles_markdown(swept))
    result = suite.run_suite(args.repeats, args.quick, layers, progress=lambda partial: suite.save(partial, args.out))
    suite.save(result, args.out)
    defaults = suite.choose_defaults(result)
    if args.apply:
        suite.apply_defaults(result)
    (Path(args.out) / "suite_defaults.json").write_text(json.dumps({result["device"]: defaults}, indent=2) + "\n")
    (Path(args.out) / "suite.md").write_text(suite.markdown_table(result, defaults))
    suite.plot(result, args.out)
    print("\n".join(suite.summary_lines(result, defaults)))
    return 0 if all(r["valid"] for r in result["rows"]) else 1


def network_command(argv):
    """``bench gpu --network``: real networks' convolutions through ece408_op.torch (bench/network_layers.py)."""
    from ..bench import network_layers
    from ..bench.cold import NETWORKS as WHOLE
    from ..torch.nets import NETWORKS
    parser = argparse.ArgumentParser(prog="ece408_op bench gpu --network",
                                     description=network_layers.__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--network", action="store_true")
    parser.add_argument("--nets", default=",".join(NETWORKS),
                        help=f"per-layer tables: comma-separated, of {', '.join(NETWORKS)} ('' for none)")
    parser.add_argument("--whole", default=",".join(WHOLE),
                        help=f"networks timed whole (default all of {', '.join(WHOLE)}; '' for none)")
    parser.add_argument("--batches", default="64,1", help="the whole networks' batches; the first is the cold start's")
    parser.add_argument("--no-cold", action="store_true", help="no cold-start processes")
    parser.add_argument("--profile-cold", action="store_true", help="where each cold start's seconds went")
    parser.add_argument("--compile", default="resnet18", help="networks compiled with torch.compile ('' for none)")
    parser.add_argument("--compile-batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--autotune-check", choices=("none", "new", "suite"), default="new",
                        help="re-measure the autotuner's candidates on new layers (and the suite's: 'suite')")
    parser.add_argument("--precision", default="",
                        help="the whole networks in these precisions, ours against cuDNN in the same (comma-separated "
                             "of fp32, tf32, fp16, bf16; default: the fp32/TF32 steady state)")
    parser.add_argument("--channels-last", nargs="?", const="all", default="",
                        help="channels-last networks and inputs: for every --precision, or those listed")
    parser.add_argument("--no-hot-path", action="store_true")
    parser.add_argument("--out", default="bench-gpu")
    args = parser.parse_args(argv)
    names = [n for n in args.nets.split(",") if n]
    whole = [n for n in args.whole.split(",") if n]
    compiled = [n for n in args.compile.split(",") if n]
    unknown = sorted(set(names) - set(NETWORKS))
    if unknown:
        raise UsageError(f"unknown network(s) {', '.join(unknown)}; choose from {', '.join(NETWORKS)}")
    unknown = sorted(set(whole + compiled) - set(WHOLE))
    if unknown:
        raise UsageError(f"unknown network(s) {', '.join(unknown)}; choose from {', '.join(WHOLE)}")
    needs = sorted(set(whole + compiled) - set(NETWORKS))
    if needs and importlib.util.find_spec("torchvision") is None:
        raise UsageError(f"--whole/--compile {', '.join(needs)} need torchvision (pip install torchvision); "
                         f"without it: {', '.join(NETWORKS)}")
    try:
        batches = tuple(int(b) for b in args.batches.split(",") if b)
    except ValueError:
        batches = ()
    if not batches or min(batches) < 1:
        raise UsageError(f"--batches {args.batches!r}: give positive batch sizes, e.g. 64,1")
    precisions, channels_last = _precisions(args.precision, args.channels_last)
    return network_layers.run(names, whole, args.repeats, args.autotune_check, not args.no_hot_path, args.out,
                              "python -m ece408_op bench gpu " + shlex.join(argv), batches=batches,
                              cold=not args.no_cold, compile_names=compiled, compile_batch=args.compile_batch,
                              profile=args.profile_cold, precisions=precisions, channels_last=channels_last)


def _precisions(text, channels_last):
    """(precisions, those run channels-last) from --precision and --channels-last; UsageError for a name
    that is none of bench/precisions.py's, or channels-last without a precision."""
    from ..bench.precisions import PRECISIONS
    precisions = tuple(dict.fromkeys(p.strip().lower() for p in text.split(",") if p.strip()))
    layouts = precisions if channels_last == "all" else tuple(p.strip().lower() for p in channels_last.split(",")
                                                             if p.strip())
    unknown = sorted(set(precisions + layouts) - set(PRECISIONS))
    if unknown:
        raise UsageError(f"unknown precision(s) {', '.join(unknown)}; choose from {', '.join(PRECISIONS)}")
    if set(layouts) - set(precisions) or channels_last and not precisions:
        raise UsageError("--channels-last names precisions that --precision does not list")
    return precisions, layouts


def precompile_command(argv):
    """``bench gpu --precompile``: no GPU needed; build into the cubin cache every module the suite (with
    its tiles), the network benchmark and their autotuning load (the network layers need PyTorch)."""
    from ..bench.precompile import network_modules, suite_modules
    from ..kernels.build import cubin_cache_dir, precompile
    parser = ArgumentParser(prog="ece408_op bench gpu --precompile", description=precompile_command.__doc__)
    parser.add_argument("--precompile", action="store_true")
    parser.add_argument("--arch", default="sm_90", help="the GPU architecture (default sm_90: H100, H200)")
    parser.add_argument("--device-name", default="NVIDIA H100 80GB HBM3",
                        help="the device whose defaults.json entries the network layers follow")
    parser.add_argument("--no-suite", action="store_true", help="only the network benchmark's modules")
    args = parser.parse_args(argv)
    modules = [] if args.no_suite else suite_modules()
    try:
        modules += network_modules(device_name=args.device_name)
    except ImportError as exc:
        print(f"network layers skipped: {exc}")
    print(f"{precompile(modules, args.arch)} modules for {args.arch} in {cubin_cache_dir()}")
    return 0


# benchmark -> (function, its arguments, one line for ``python -m ece408_op --help``, the extra it needs)
BENCHMARKS = {
    "cpu": (cpu_command, "[--layers NAME ...] [--repeats N] [--json FILE]",
            "ece408_conv (CPU) against MXNet's built-in Convolution, course and real-network layers", "mxnet"),
    "overhead": (overhead_command, "[--rounds N] [--json FILE]",
                 "the fixed cost of one call: ece408_conv, an empty CustomOp, the built-in", "mxnet"),
    "zoo": (zoo_command, "[--nets NAME ...] [--batch N] [--size N] [--repeats N] [--device cpu|gpu] [--json FILE]",
            "model-zoo networks, the original against every convolution swapped", "mxnet"),
    "gpu": (gpu_command, "[--batch N] [--repeats N] [--out DIR] [--sweep [--apply]] [--suite ...] | --network "
                         "[--nets NAME,...] | --precompile [--arch sm_90]",
            "every GPU kernel version against cuDNN (PyTorch and PyCUDA, no MXNet)", "bench"),
    "memory": (memory_command, "[--mb N] [--json FILE]", "how fast this machine maps fresh host memory", "mxnet"),
}
USAGE = "\n".join(f"{'usage:' if i == 0 else '':6s} ece408_op bench {name} {arguments}"
                  for i, (name, (_, arguments, _, _)) in enumerate(BENCHMARKS.items()))


def command(argv):
    if argv and argv[0] in HELP:
        print(USAGE)
        return 0
    if not argv or argv[0] not in BENCHMARKS:
        reason = f"unknown benchmark {argv[0]!r}" if argv else "which benchmark?"
        raise UsageError(f"{USAGE}\nerror: {reason}; choose one of {', '.join(BENCHMARKS)}")
    return BENCHMARKS[argv[0]][0](argv[1:])


def main(argv):
    return run(command, argv)
