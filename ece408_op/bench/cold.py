"""A first forward in a fresh process: the child ``bench gpu --network`` starts for each network's cold
start, with the GPU cache folder it is given (empty for a cold start, filled for a warm one).

    python -m ece408_op.bench.cold --net resnet50 --batch 64 --then 1 --mode ours --cache DIR [--profile]

Prints one JSON line: the seconds of the imports, of building the network on the GPU, of its first
forward (``first_s``: what a user waits for; CUDA synchronised before and after), of a second one, and
of a first forward at each ``--then`` batch (a new batch size of the network just tuned). ``--mode
cudnn``: the same network unswapped, cuDNN in benchmark mode with TF32 off (its own first-call tuning).
``--profile``: where the ours-mode first forward went (cProfile on this thread: nvcc builds, in
parallel threads, count as the wall time this thread waited for them), by the kernel layer's functions.
Runs as a plain script too (``python ece408_op/bench/cold.py ...``) against another checkout's package on
PYTHONPATH (an older one, whose cold start it measures the same way): it imports only ``ece408_op.torch``
(``swap_convolutions``, ``nets``), what such a checkout has too.
"""
import argparse
import json
import os
import sys
import time

# The networks whose first forward is timed (torchvision's, random weights): name -> (torchvision builder, input size)
NETWORKS = {"resnet50": ("resnet50", 224), "mobilenet_v2": ("mobilenet_v2", 224), "efficientnet_b0": ("efficientnet_b0", 224),
            "convnext_tiny": ("convnext_tiny", 224), "resnext50": ("resnext50_32x4d", 224),
            "densenet121": ("densenet121", 224), "inception_v3": ("inception_v3", 299), "resnet18": ("resnet18", 224),
            "vgg16": ("vgg16", 224)}


def build_network(name):
    """Network ``name`` of NETWORKS with random weights (torchvision's; without torchvision, the four that
    ece408_op.torch.nets builds with torch.nn alone)."""
    try:
        import torchvision
    except ImportError:
        from ece408_op.torch.nets import NETWORKS as OWN
        if name not in OWN:
            raise SystemExit(f"{name} needs torchvision (pip install torchvision)") from None
        return OWN[name]()
    builder = getattr(torchvision.models, NETWORKS[name][0])
    if name == "inception_v3":
        return builder(weights=None, aux_logits=False, init_weights=True)
    return builder(weights=None)


def input_size(name):
    return NETWORKS[name][1]


# where the seconds of a first forward go, by function (module file, function name): the profile's
# cumulative time of each, as seen from the calling thread
PROFILED = {
    "compile (nvcc, waited for)": ("build.py", "precompile"),
    "compile one (nvcc, on this thread)": ("build.py", "build_cubin"),
    "autotune (all, with its compiles)": ("autotune.py", "measure_on_device"),
    "plans (module load, set-up)": ("plans.py", "__init__"),
    "module load (cuModuleLoadData)": ("cudadrv.py", "__init__"),
    "tuning cache writes": ("autotune.py", "put"),
    "layer resolution (all)": ("launch.py", "_resolve"),
}


def _sync(torch):
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _forward(torch, model, x):
    _sync(torch)
    start = time.perf_counter()
    with torch.inference_mode():
        model(x)
    _sync(torch)
    return time.perf_counter() - start


def _profile_rows(profile):
    import pstats
    stats = pstats.Stats(profile).stats
    rows = {}
    for label, (file, name) in PROFILED.items():
        rows[label] = sum(entry[3] for (path, _, func), entry in stats.items()
                          if func == name and path.endswith(os.sep + file) and "ece408_op" in path)
    rows["total"] = max(entry[3] for entry in stats.values())
    return {k: round(v, 3) for k, v in rows.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="ece408_op.bench.cold", description=__doc__.splitlines()[0],
                                     allow_abbrev=False)
    parser.add_argument("--net", required=True, choices=sorted(NETWORKS))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--then", default="", help="comma-separated batches, each a first forward after --batch")
    parser.add_argument("--mode", choices=("ours", "cudnn"), default="ours")
    parser.add_argument("--precision", default=None)
    parser.add_argument("--dtype", choices=("fp32", "fp16", "bf16"), default="fp32",
                        help="the network's and the input's type (fp16/bf16: .half()/.bfloat16())")
    parser.add_argument("--channels-last", action="store_true", help="the network and the input channels-last")
    parser.add_argument("--cache", help="the GPU cache folder (ECE408_GPU_CACHE; and ECE408_CUBIN_CACHE below it)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    if args.cache:
        os.environ["ECE408_GPU_CACHE"] = args.cache
        os.environ["ECE408_CUBIN_CACHE"] = os.path.join(args.cache, "cubin")     # (older checkouts read this one)
        os.environ["XDG_CACHE_HOME"] = args.cache                                  # (and their tunings under it)
    began = time.perf_counter()
    import torch
    from ece408_op.torch import swap_convolutions
    imported = time.perf_counter() - began
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = args.mode == "cudnn"
    start = time.perf_counter()
    torch.manual_seed(408)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    layout = torch.channels_last if args.channels_last else torch.contiguous_format
    model = build_network(args.net).cuda().eval().to(dtype=dtype, memory_format=layout)
    if args.mode == "ours":
        kwargs = {"precision": args.precision} if args.precision else {}
        swap_convolutions(model, **kwargs)
    size = input_size(args.net)
    x = torch.rand(args.batch, 3, size, size, device="cuda", dtype=dtype).contiguous(memory_format=layout)
    _sync(torch)
    built = time.perf_counter() - start
    profile = None
    if args.profile:
        import cProfile
        profile = cProfile.Profile()
        profile.enable()
    first = _forward(torch, model, x)
    if profile is not None:
        profile.disable()
    result = {"net": args.net, "batch": args.batch, "mode": args.mode, "precision": args.precision,
              "dtype": args.dtype, "channels_last": args.channels_last,
              "device": torch.cuda.get_device_name(), "import_s": round(imported, 3), "build_s": round(built, 3),
              "first_s": round(first, 3), "second_s": round(_forward(torch, model, x), 4), "then": {}}
    for batch in [int(b) for b in args.then.split(",") if b]:
        other = torch.rand(batch, 3, size, size, device="cuda", dtype=dtype).contiguous(memory_format=layout)
        result["then"][str(batch)] = round(_forward(torch, model, other), 3)
    if profile is not None:
        result["profile"] = _profile_rows(profile)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
