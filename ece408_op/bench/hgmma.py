"""``python -m ece408_op.bench.hgmma``: TFLOP/s per distinct convolution of ResNet-50 and VGG-16 in half
precision, channels-last: v23 (hgmma, Hopper's warpgroup MMA) and v21 (hmma, mma.sync) asked for by name,
the front-end's own choice (``kernel=auto``: the autotuner between them, and v22 for depthwise layers), and
cuDNN (``F.conv2d``, benchmark mode), beside the device's dense half-precision peak.

    python -m ece408_op.bench.hgmma [--nets resnet50,vgg16] [--batch 64] [--dtype fp16] [--repeats 10]
        [--json FILE] [--no-auto]

Each layer: random input of its shape in the network (batch ``--batch``), the four entries taking turns
within each repeat, each repeat 10 calls back to back (``timing.time_interleaved``), median; TFLOP/s =
2 * B * M * HO * WO * C/G * KH * KW / seconds. Each of ours is checked against cuDNN's output (max |error|
over max |y|, at most 2^-6). Needs PyTorch and a CUDA GPU (v23: compute capability 9.0).
"""
import argparse
import json
import sys

PEAKS = {"H100": 989.4, "H200": 989.4}      # dense fp16/bf16 tensor-core TFLOP/s of the SXM parts (NVIDIA's sheet)
ENTRIES = ("v23", "v21", "auto", "cudnn")
MAX_ERROR = 2.0 ** -6


def peak_tflops(name):
    return next((peak for key, peak in PEAKS.items() if key in name), None)


def layer_flops(conv, shape):
    b, c, h, w = shape
    kh, kw = conv.kernel_size
    ho = (h + 2 * conv.padding[0] - conv.dilation[0] * (kh - 1) - 1) // conv.stride[0] + 1
    wo = (w + 2 * conv.padding[1] - conv.dilation[1] * (kw - 1) - 1) // conv.stride[1] + 1
    return 2.0 * b * conv.out_channels * ho * wo * (c // conv.groups) * kh * kw


def layer_rows(torch, name, batch, dtype, repeats, auto, log):
    from ..kernels import wait_for_specialised
    from ..torch import Conv2d
    from ..torch.nets import NETWORKS, conv_layers, describe
    from .timing import time_interleaved
    torch.manual_seed(408)
    cl = torch.channels_last
    model = NETWORKS[name]().cuda().eval().to(dtype).to(memory_format=cl)
    x0 = torch.rand(batch, 3, 224, 224, device="cuda").to(dtype).to(memory_format=cl)
    rows = []
    for names, conv, shape in conv_layers(model, x0):
        x = (torch.rand(shape, device="cuda") * 2 - 1).to(dtype).to(memory_format=cl)
        entries = {"v23": Conv2d.from_conv(conv, kernel="23"), "v21": Conv2d.from_conv(conv, kernel="21")}
        if auto:
            entries["auto"] = Conv2d.from_conv(conv)
        row = {"network": name, "layer": names[0], "count": len(names), "what": describe(conv, shape),
               "batch": batch, "dtype": str(dtype).replace("torch.", ""), "gflop": layer_flops(conv, shape) / 1e9}
        with torch.inference_mode():
            want = conv(x)
            fns = {}
            for key, module in entries.items():
                try:
                    y = module(x)
                except RuntimeError as exc:                  # (v23 refuses the layer: one line)
                    row[f"{key}_refused"] = str(exc).splitlines()[0]
                    continue
                wait_for_specialised(300)
                y = module(x)
                row[f"{key}_error"] = float((y.double() - want.double()).abs().max() / want.double().abs().max())
                layer = next(iter(module._layers.values()))
                if layer.call is not None:
                    row[f"{key}_version"] = layer.call.plan.version.label
                    row[f"{key}_tile"] = layer.call.plan.tuning_overrides
                fns[key] = lambda module=module: module(x)
            fns["cudnn"] = lambda: conv(x)
            times = time_interleaved(torch, list(fns.values()), repeats, warmup=3, calls=10)
        for key, summary in zip(fns, times):
            row[f"{key}_ms"] = summary["median_s"] * 1e3
            row[f"{key}_tflops"] = row["gflop"] / summary["median_s"] / 1e3
        row["valid"] = all(row.get(f"{k}_error", 0.0) <= MAX_ERROR for k in ENTRIES)
        log("  {:9s} {:24s} x{:<2d} ".format(name, row["what"], row["count"]) + "  ".join(
            f"{k} {row[k + '_tflops']:6.1f}" for k in ENTRIES if k + "_tflops" in row)
            + (f"  (auto: {row.get('auto_version')})" if auto else "") + ("" if row["valid"] else "  INVALID"))
        rows.append(row)
    del model
    torch.cuda.empty_cache()
    return rows


def markdown(result):
    peak = result["peak_tflops"]
    lines = [f"TFLOP/s per distinct convolution, {result['dtype']} channels-last, batch {result['batch']}, "
             f"{result['device']} (dense peak {peak} TFLOP/s), {result['date']}:", "",
             "| network | layer | count | v23 hgmma | v21 hmma | auto (version) | cuDNN | v23 / cuDNN |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in result["rows"]:
        fig = lambda k: f"{r[k + '_tflops']:.0f}" if k + "_tflops" in r else "-"      # noqa: E731
        auto = f"{fig('auto')} ({r.get('auto_version', '-')})" if "auto_tflops" in r else "-"
        ratio = f"{r['cudnn_ms'] / r['v23_ms']:.2f}" if "v23_ms" in r else "-"
        lines.append(f"| {r['network']} | {r['what']} | {r['count']} | {fig('v23')} | {fig('v21')} | {auto} | "
                     f"{fig('cudnn')} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m ece408_op.bench.hgmma", description=__doc__.splitlines()[0],
                                     allow_abbrev=False)
    parser.add_argument("--nets", default="resnet50,vgg16")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", default=None, help="write the rows here")
    parser.add_argument("--no-auto", action="store_true", help="leave out the front-end's own choice")
    args = parser.parse_args(argv)
    import datetime

    import torch
    if not torch.cuda.is_available():
        print("ece408_op.bench.hgmma: needs a CUDA GPU (PyTorch sees none)", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    device = torch.cuda.get_device_name(0)
    result = {"device": device, "peak_tflops": peak_tflops(device), "batch": args.batch, "dtype": args.dtype,
              "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "cudnn": torch.backends.cudnn.version(), "command": " ".join(["python -m ece408_op.bench.hgmma",
                                                                          *(argv or sys.argv[1:])]), "rows": []}
    for name in [n for n in args.nets.split(",") if n]:
        result["rows"] += layer_rows(torch, name, args.batch, dtype, args.repeats, not args.no_auto, print)
    text = markdown(result)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=1)
        with open(args.json.rsplit(".", 1)[0] + ".md", "w", encoding="utf-8") as out:
            out.write(text)
    return 0 if all(r["valid"] for r in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
