"""How much of a network's time its convolutions take: the ceiling of what swapping them can win.

    python -m ece408_op.bench.convshare [--nets convnext_tiny:64,densenet121:64,resnet18:1] [--repeats 20]

For each network of ``bench/cold.py``'s NETWORKS (random weights, seed 408) at its batch: the
network unswapped with cuDNN fp32 (TF32 off, benchmark mode) and swapped (``ece408_op.torch``), CUDA
events recorded before and after every ``nn.Conv2d`` (their sum: the convolutions' milliseconds) and the
network's milliseconds per forward timed again without the events. One line per network: the
convolutions' share of cuDNN's network, the ratio ours/cuDNN the network would reach if our convolutions
cost nothing ((network - convolutions) / network), and our convolutions against cuDNN's.
"""
import argparse
import copy


def _time(torch, model, x, repeats):
    """(convolutions ms, network ms) per forward: events around each Conv2d, then the network alone."""
    marks = []

    def before(module, inputs):
        marks.append([torch.cuda.Event(enable_timing=True)])
        marks[-1][0].record()

    def after(module, inputs, output):
        marks[-1].append(torch.cuda.Event(enable_timing=True))
        marks[-1][1].record()

    hooks = []
    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d):
            hooks += [module.register_forward_pre_hook(before), module.register_forward_hook(after)]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.no_grad():
        for _ in range(3):
            model(x)
        torch.cuda.synchronize()
        marks.clear()
        for _ in range(repeats):
            model(x)
        torch.cuda.synchronize()
        convs = sum(a.elapsed_time(b) for a, b in marks) / repeats
        for hook in hooks:
            hook.remove()
        start.record()
        for _ in range(repeats):
            model(x)
        end.record()
        torch.cuda.synchronize()
    return convs, start.elapsed_time(end) / repeats


def main(argv=None):
    from .cold import NETWORKS, build_network
    parser = argparse.ArgumentParser(prog="python -m ece408_op.bench.convshare", description=__doc__.splitlines()[0],
                                     allow_abbrev=False)
    parser.add_argument("--nets", default="convnext_tiny:64,convnext_tiny:1,densenet121:64,resnet18:1",
                        help="NAME:BATCH, comma-separated, of " + ", ".join(NETWORKS))
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    wanted = []
    for item in filter(None, args.nets.split(",")):
        name, _, batch = item.partition(":")
        if name not in NETWORKS or not batch.isdigit() or int(batch) < 1:
            parser.error(f"--nets {item!r}: give NAME:BATCH with NAME one of {', '.join(NETWORKS)}")
        wanted.append((name, int(batch)))
    if args.repeats < 1:
        parser.error("--repeats: give a positive count")
    import torch
    from ..torch import swap_convolutions
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    for name, batch in wanted:
        torch.manual_seed(408)
        reference = build_network(name).cuda().eval()
        ours = copy.deepcopy(reference)
        swap_convolutions(ours)
        x = torch.randn(batch, 3, NETWORKS[name][1], NETWORKS[name][1], device="cuda")
        c_convs, c_total = _time(torch, reference, x, args.repeats)
        o_convs, o_total = _time(torch, ours, x, args.repeats)
        print(f"{name} B{batch}: cuDNN fp32 convolutions {c_convs:.2f} of {c_total:.2f} ms ({c_convs / c_total:.0%}); "
              f"ours {o_convs:.2f} of {o_total:.2f} ms; network ratio if ours cost nothing "
              f"{(c_total - c_convs) / c_total:.2f}x; our convolutions / cuDNN's {o_convs / c_convs:.2f}x", flush=True)


if __name__ == "__main__":
    main()
