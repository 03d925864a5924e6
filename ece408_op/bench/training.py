"""Training on the backward kernels (kernels/backward/) against cuDNN: a whole training step (forward,
backward, SGD step) of a torchvision network with every convolution swapped against the same network on
cuDNN, the two taking turns (bench/timing.py: CUDA events, medians, TF32 off); then per distinct
convolution layer of the network the data and weight gradients alone, each version against
torch.nn.grad's (cuDNN).

    python -m ece408_op.bench.training [--network resnet50] [--batch 64] [--dtype fp32|fp16]
                                       [--channels-last] [--repeats 10] [--layers] [--json out.json]
"""
import argparse
import copy
import json
import sys

from .timing import cuda_torch, time_interleaved

DTYPES = ("fp32", "fp16", "bf16")


def _dtype(torch, name):
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def _network(torch, name, batch, dtype, channels_last):
    import torchvision
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)().cuda().to(dtype).train()
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
    label = torch.randint(0, 1000, (batch,), device="cuda")
    return model, x, label


def _step(torch, model, x, label):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x).float(), label)
        loss.backward()
        opt.step()
    return step


def training_steps(torch, name="resnet50", batch=64, dtype="fp32", channels_last=False, repeats=10):
    """{"ours_s", "cudnn_s", "ratio", ...}: a training step's median on each, interleaved."""
    from ..torch import swap_convolutions
    model, x, label = _network(torch, name, batch, _dtype(torch, dtype), channels_last)
    ours = copy.deepcopy(model)
    swapped = swap_convolutions(ours).swapped
    fns = [_step(torch, ours, x, label), _step(torch, model, x, label)]
    a, b = time_interleaved(torch, fns, repeats, warmup=3)
    return {"network": name, "batch": batch, "dtype": dtype, "channels_last": channels_last,
            "convolutions": len(swapped), "ours_s": a["median_s"], "cudnn_s": b["median_s"],
            "ratio": a["median_s"] / b["median_s"], "repeats": repeats}


def distinct_layers(torch, model, x):
    """(x shape, weight shape, stride, padding, dilation, groups) of each distinct nn.Conv2d of ``model``."""
    seen, hooks = {}, []
    for conv in [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]:
        def hook(module, inputs, _out):
            key = (tuple(inputs[0].shape), tuple(module.weight.shape), module.stride, module.padding,
                   module.dilation, module.groups)
            seen[key] = seen.get(key, 0) + 1
        hooks.append(conv.register_forward_hook(hook))
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return seen


def layer_rows(torch, name="resnet50", batch=64, dtype="fp32", repeats=10):
    """Per distinct layer: dx and dw of the versions the rule picks (kernels/backward: ``choose``) against
    cuDNN's (torch.nn.grad), timed in turns."""
    from ..kernels.backward import backward_call
    from ..torch.backward import cuda_gradients
    dt = _dtype(torch, dtype)
    model, x, _ = _network(torch, name, batch, dt, False)
    rows = []
    for (xs, ws, stride, padding, dilation, groups), count in distinct_layers(torch, model, x).items():
        xt = torch.randn(xs, device="cuda", dtype=dt)
        wt = torch.randn(ws, device="cuda", dtype=dt)
        y = torch.nn.functional.conv2d(xt, wt, None, stride, padding, dilation, groups)
        dy = torch.randn_like(y)
        conv = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
        fns = {
            "dx_ours": lambda: cuda_gradients(xt, wt, dy, wants=(1, 0, 0), **conv),
            "dx_cudnn": lambda: torch.nn.grad.conv2d_input(xs, wt, dy, stride, padding, dilation, groups),
            "dw_ours": lambda: cuda_gradients(xt, wt, dy, wants=(0, 1, 0), **conv),
            "dw_cudnn": lambda: torch.nn.grad.conv2d_weight(xt, ws, dy, stride, padding, dilation, groups)}
        times = time_interleaved(torch, list(fns.values()), repeats, warmup=2)
        row = {"x": xs, "w": ws, "stride": stride, "count": count,
               **{k: t["median_s"] for k, t in zip(fns, times)}}
        row["dx_ratio"], row["dw_ratio"] = row["dx_ours"] / row["dx_cudnn"], row["dw_ours"] / row["dw_cudnn"]
        call = backward_call(xs, ws, stride, padding, dilation, groups, str(dt).split(".")[1])
        row["versions"] = f"{call.versions['data']}, {call.versions['weight']}"
        rows.append(row)
    return rows


def markdown(steps, rows):
    lines = ["| network | batch | type | layout | ours ms | cuDNN ms | ours / cuDNN |", "|---|---|---|---|---|---|---|"]
    for s in steps:
        lines.append(f"| {s['network']} | {s['batch']} | {s['dtype']} | {'NHWC' if s['channels_last'] else 'NCHW'} | "
                     f"{s['ours_s'] * 1e3:.1f} | {s['cudnn_s'] * 1e3:.1f} | {s['ratio']:.2f} |")
    if rows:
        lines += ["", "| x | weights | stride | count | versions | dx ms | cuDNN dx | ratio | dw ms | cuDNN dw "
                  "| ratio |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            ms = [f"{r[k] * 1e3:.3f}" for k in ("dx_ours", "dx_cudnn", "dw_ours", "dw_cudnn")]
            lines.append(f"| {'x'.join(map(str, r['x']))} | {'x'.join(map(str, r['w']))} | {r['stride'][0]} | "
                         f"{r['count']} | {r['versions']} | {ms[0]} | {ms[1]} | {r['dx_ratio']:.2f} | {ms[2]} | "
                         f"{ms[3]} | {r['dw_ratio']:.2f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m ece408_op.bench.training", description=__doc__.splitlines()[0],
                                     allow_abbrev=False)
    parser.add_argument("--network", default="resnet50")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--dtype", choices=DTYPES, action="append")
    parser.add_argument("--channels-last", action="store_true", help="the half-precision runs channels-last")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--layers", action="store_true", help="also per-layer dx and dw (float32)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    torch = cuda_torch()
    steps = []
    for dtype in args.dtype or ["fp32"]:
        cl = args.channels_last and dtype != "fp32"
        steps.append(training_steps(torch, args.network, args.batch, dtype, cl, args.repeats))
        print(json.dumps(steps[-1]), flush=True)
    rows = layer_rows(torch, args.network, args.batch, "fp32", args.repeats) if args.layers else []
    print(markdown(steps, rows), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"steps": steps, "layers": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
