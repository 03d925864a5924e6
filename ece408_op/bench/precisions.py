"""``bench gpu --network --precision fp16,bf16,tf32 [--channels-last [fp16,bf16]]``: the whole networks in
the precisions PyTorch users run, ours against cuDNN in the same precision and layout.

Per network and batch and precision: the network (random weights, its batch-norm statistics set by one
float32 forward of random data in training mode, as a trained network's are set by its data: with
torchvision's initialisation alone, MobileNetV2's activations shrink layer after layer until float16
flushes them to zero, and every half-precision network's output is then as far from float64 as it can
be, cuDNN's too) converted as a user converts it (``.half()``,
``.bfloat16()``; float32 for 'tf32' and 'fp32'; ``.to(memory_format=torch.channels_last)`` and a
channels-last input where asked), its convolutions swapped (``ece408_op.torch``: precision 'tf32' or 'fp32'
for float32 networks, the half-precision versions for the others) against the unswapped network on cuDNN
(benchmark mode, TF32 allowed exactly under 'tf32'), whole forwards back to back (the two taking turns,
median), the convolutions alone (CUDA events around each convolution, as ``bench/convshare.py`` measures:
their sum per forward, ours and cuDNN's, and their share of cuDNN's network), each output against the
network in float64 run on the same (rounded) weights and input (max |error| / max |y|), and whether every
image's argmax is cuDNN's. Targets (issue's): convolutions <= 0.9x cuDNN's at batch 64 and <= 1.0x at
batch 1, the whole network <= 1.0x, error within 2x cuDNN's, every argmax equal.
"""
import copy

from .cold import build_network, input_size
from .convshare import _time as conv_time

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
CONV_TARGETS = {64: 0.9, 1: 1.0}            # our convolutions / cuDNN's (larger batches: the batch-64 target)
WHOLE_TARGET = 1.0
ERROR_FACTOR = 2.0


def _dtype(torch, precision):
    return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32)


def _relative_error(out, want):
    return float((out.double() - want).abs().max() / want.abs().max())


def precision_rows(torch, names, batches, precisions, channels_last, timer, log, rows=None, save=None):
    """[row per (network, batch, precision)] (module doc); ``channels_last``: the precisions run channels-last.
    Rows go into ``rows`` (a list, returned), ``save()`` called after each network."""
    from ..kernels import wait_for_specialised
    from ..torch import swap_convolutions
    rows = [] if rows is None else rows
    saved = torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.benchmark = True
    try:
        for precision in precisions:                      # (every network in one precision first: a run cut
            for name in names:                            # short keeps whole precisions)
                rows += _network_rows(torch, name, batches, precision, precision in channels_last, timer, log,
                                      swap_convolutions, wait_for_specialised)
                if save is not None:
                    save()
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32 = saved
    return rows


def calibrated(torch, name):
    """Network ``name`` (random weights, seed 408) on the GPU in float32, its batch-norm statistics those of one
    training-mode forward of 16 random images (module doc), in eval mode."""
    torch.manual_seed(408)
    model = build_network(name).cuda()
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None                              # (a cumulative average: this one batch's statistics)
    model.train()
    with torch.no_grad():
        model(torch.rand(16, 3, input_size(name), input_size(name), device="cuda") * 2 - 1)
    return model.eval()


def _network_rows(torch, name, batches, precision, cl, timer, log, swap_convolutions, wait_for_specialised):
    dtype, layout = _dtype(torch, precision), torch.channels_last if cl else torch.contiguous_format
    repeats = max(3, timer.repeats)
    model = calibrated(torch, name).to(dtype).to(memory_format=layout)
    ours = swap_convolutions(copy.deepcopy(model), precision=precision if precision in ("tf32", "fp32") else None).result
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    rows = []
    for batch in batches:
        size = input_size(name)
        x = (torch.rand(batch, 3, size, size, device="cuda") * 2 - 1).to(dtype).contiguous(memory_format=layout)
        reference = copy.deepcopy(model).double().to(memory_format=torch.contiguous_format)
        with torch.inference_mode():
            want = reference(x.double().contiguous())
            del reference
            ours(x), model(x)                             # resolved (tuned) and cuDNN's benchmark-mode choice
            wait_for_specialised(300)                     # the layers' own modules, built in the background
            out_ours, out_cudnn = ours(x), model(x)
            seconds = timer.back_to_back(lambda: ours(x), lambda: model(x), calls=3 if batch >= 32 else 10)
        ours_convs, _ = conv_time(torch, ours, x, repeats)
        cudnn_convs, cudnn_total = conv_time(torch, model, x, repeats)
        row = {"network": name, "batch": batch, "precision": precision, "channels_last": cl,
               "ours_s": seconds[0], "cudnn_s": seconds[1], "ratio": seconds[0] / seconds[1],
               "ours_conv_ms": ours_convs, "cudnn_conv_ms": cudnn_convs, "conv_ratio": ours_convs / cudnn_convs,
               "conv_share": cudnn_convs / cudnn_total, "ours_error": _relative_error(out_ours, want),
               "cudnn_error": _relative_error(out_cudnn, want),
               "argmax_equal": bool((out_ours.argmax(1) == out_cudnn.argmax(1)).all()),
               "finite": bool(torch.isfinite(out_ours).all() and torch.isfinite(out_cudnn).all()),
               "versions": _versions(ours)}
        row["error_ratio"] = row["ours_error"] / max(row["cudnn_error"], 1e-12)
        row["conv_met"] = row["conv_ratio"] <= CONV_TARGETS.get(batch, CONV_TARGETS[64])
        row["whole_met"] = row["ratio"] <= WHOLE_TARGET
        row["error_met"] = row["error_ratio"] <= ERROR_FACTOR
        log(f"  {precision}{' CL' if cl else ''} {name:16s} B={batch:<3d} ours {row['ours_s'] * 1e3:8.2f} ms, cuDNN "
            f"{row['cudnn_s'] * 1e3:8.2f}: {row['ratio']:.2f}x; convolutions {ours_convs:.2f} / {cudnn_convs:.2f} ms = "
            f"{row['conv_ratio']:.2f}x ({row['conv_share']:.0%} of cuDNN's network); error {row['ours_error']:.1e} / "
            f"cuDNN {row['cudnn_error']:.1e} ({row['error_ratio']:.2f}x); argmax equal {row['argmax_equal']}; "
            f"versions {row['versions']}")
        rows.append(row)
        del x, want, out_ours, out_cudnn
    del model, ours
    torch.cuda.empty_cache()
    return rows


def _versions(model):
    """{version label: layers} of the swapped layers' resolved plans."""
    counts = {}
    for module in model.modules():
        for layer in getattr(module, "_layers", {}).values():
            call = getattr(layer, "call", None)
            if call is not None:
                label = call.plan.version.label
                counts[label] = counts.get(label, 0) + 1
    return counts


def markdown(rows):
    if not rows:
        return ""
    lines = ["## Precisions and layouts: ours against cuDNN in the same precision and layout", "",
             "Whole network back to back (median); convolutions: CUDA events around each, summed per forward; "
             "share: cuDNN's convolutions of its network; error: max |error| / max |y| against the network in "
             "float64 on the same weights and input. Targets: convolutions <= 0.9x at B64 (1.0x at B1), whole "
             "<= 1.0x, error <= 2x cuDNN's, argmax equal.", "",
             "| network | batch | precision | ours ms | cuDNN ms | whole x | conv ms ours | conv ms cuDNN | conv x | "
             "conv share | error ours | error cuDNN | error x | argmax equal | met (conv, whole, error) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        met = ", ".join("yes" if r[k] else "no" for k in ("conv_met", "whole_met", "error_met"))
        lines.append(f"| {r['network']} | {r['batch']} | {r['precision']}{' CL' if r['channels_last'] else ''} | "
                     f"{r['ours_s'] * 1e3:.2f} | {r['cudnn_s'] * 1e3:.2f} | **{r['ratio']:.2f}** | "
                     f"{r['ours_conv_ms']:.2f} | {r['cudnn_conv_ms']:.2f} | **{r['conv_ratio']:.2f}** | "
                     f"{r['conv_share']:.0%} | {r['ours_error']:.1e} | {r['cudnn_error']:.1e} | {r['error_ratio']:.2f} | "
                     f"{r['argmax_equal']} | {met} |")
    lines.append("")
    return "\n".join(lines)
