"""The layer's sizes as a kernel argument against sizes as #defines: kernel time of v8, v9, v13 and v20
(their default tile for the layer) built three ways, on the distinct layers of a network: per shape
(``$ECE408_STATIC_SIZES=1``, nvcc: a module per layer shape), one module per tile built by NVRTC, and
the same by nvcc. Back to back (a network's way), the three taking turns within each repeat; median.

    python -m ece408_op.bench.sizes [--nets resnet50,mobilenet_v2] [--batch 64] [--repeats 15] [--json FILE]

Needs PyTorch (the layers' shapes on the meta device; CUDA events) and PyCUDA.
"""
import argparse
import json
import os
import statistics
import sys

MODES = {"static nvcc": {"ECE408_STATIC_SIZES": "1", "ECE408_NVRTC": "0"},
         "dynamic nvrtc": {"ECE408_STATIC_SIZES": "0", "ECE408_NVRTC": "1"},
         "dynamic nvcc": {"ECE408_STATIC_SIZES": "0", "ECE408_NVRTC": "0"}}


def _shapes(torch, name, batch):
    from ..conv import ConvSpec
    from ..kernels.shape import ConvShape
    from .cold import build_network, input_size
    seen = {}
    model = build_network(name).to("meta").eval()
    hooks = []
    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d):
            def hook(mod, args):
                spec = ConvSpec(num_filter=mod.out_channels, kernel=tuple(mod.kernel_size), stride=tuple(mod.stride),
                                pad=tuple(mod.padding), dilate=tuple(mod.dilation), num_group=mod.groups,
                                no_bias=mod.bias is None)
                shape = ConvShape.of(tuple(args[0].shape), tuple(mod.weight.shape), spec)
                seen.setdefault(shape, 0)
                seen[shape] += 1
            hooks.append(module.register_forward_pre_hook(hook))
    with torch.no_grad():
        model(torch.empty(batch, 3, input_size(name), input_size(name), device="meta"))
    return list(seen)


class _Mode:
    """Inside: the environment of one way of building (MODES) and its own cubin cache."""

    def __init__(self, mode):
        self.mode = mode

    def __enter__(self):
        from ..kernels import build
        self.saved = {k: os.environ.get(k) for k in (*MODES[self.mode], build.CACHE_ENV)}
        os.environ.update(MODES[self.mode])
        os.environ[build.CACHE_ENV] = f"{self.saved[build.CACHE_ENV]}-{self.mode.replace(' ', '-')}"
        build._nvrtc.clear()
        return self

    def __exit__(self, *exc):
        from ..kernels import build
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        build._nvrtc.clear()


def _plan(dev, shape, number, mode):
    from ..kernels import plans
    with _Mode(mode):
        dev._modules.clear()                   # (the modules already loaded stay alive in their plans)
        dev._plans.clear()
        return plans.plan_for(dev, shape, number)


def run(nets, batch, repeats, log=print):
    import torch
    from ..kernels import cudadrv
    from ..kernels.build import CACHE_ENV, cubin_cache_dir
    from ..kernels.device import GpuDevice
    from ..kernels.versions import VERSIONS
    os.environ.setdefault(CACHE_ENV, str(cubin_cache_dir()))
    from ..kernels.build import precompile
    from ..kernels.plans import module_spec
    dev = GpuDevice.get()
    layers = [(name, shape, number) for name in nets for shape in _shapes(torch, name, batch) for number in (20, 9, 8, 13)
              if not VERSIONS[number].unsupported(shape) and not VERSIONS[number].available()]
    for mode in MODES:                                  # every module of each way, built in parallel first
        with _Mode(mode):
            precompile([module_spec(n, VERSIONS[n].inner(s)) for _, s, n in layers], dev.arch)
    rows = []
    for name, shape, number in layers:
        with dev.active():
            sizes = (batch * shape.C * shape.H * shape.W, shape.M * shape.CKK, shape.M, shape.outputs(batch))
            x, k, b, y = (dev.buffer(f"sizes {i}", 4 * n) for i, n in enumerate(sizes))
            for pointer, count in zip((x, k, b), sizes):
                cudadrv.memset_d32_async(pointer, 0x3F000000, count)        # 0.5f: finite sums
            runs = {}
            for mode in MODES:
                plan = _plan(dev, shape, number, mode)
                with cudadrv.Recording(()) as recording:
                    plan.launch(int(y), int(x), int(k), int(b) if shape.BIAS else 0, batch)
                runs[mode] = recording
            times = {mode: [] for mode in MODES}
            start, end = dev.cuda.Event(), dev.cuda.Event()
            for _ in range(repeats + 2):
                for mode, recording in runs.items():
                    start.record()
                    for _ in range(10):
                        recording.replay((), 0)
                    end.record()
                    end.synchronize()
                    times[mode].append(start.time_till(end) / 10)
        row = {"network": name, "layer": str(shape), "batch": batch, "version": number,
               **{mode: statistics.median(t[2:]) for mode, t in times.items()}}
        row["dynamic/static"] = row["dynamic nvrtc"] / row["static nvcc"]
        row["nvrtc/nvcc"] = row["dynamic nvrtc"] / row["dynamic nvcc"]
        log(f"  {name} v{number} {shape}: static {row['static nvcc']:.4f} ms, dynamic {row['dynamic nvrtc']:.4f} "
            f"(nvcc {row['dynamic nvcc']:.4f}): {row['dynamic/static']:.3f}x")
        rows.append(row)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="ece408_op.bench.sizes", description=__doc__.splitlines()[0],
                                     allow_abbrev=False)
    parser.add_argument("--nets", default="resnet50,mobilenet_v2")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    rows = run([n for n in args.nets.split(",") if n], args.batch, args.repeats)
    for version in (20, 9, 8, 13):
        ratios = [r["dynamic/static"] for r in rows if r["version"] == version]
        if ratios:
            print(f"v{version}: dynamic/static over {len(ratios)} layers: median {statistics.median(ratios):.3f}, "
                  f"min {min(ratios):.3f}, max {max(ratios):.3f}; nvrtc/nvcc median "
                  f"{statistics.median(r['nvrtc/nvcc'] for r in rows if r['version'] == version):.3f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
