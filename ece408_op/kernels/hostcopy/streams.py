"""``ECE408_STREAMS=N``: the course's streams (m3's copy path in its later terms): x and y through
page-locked staging buffers, the batch in N chunks of whole images, chunk i's copy in on one stream
while chunk i - 1's kernels run and chunk i - 2's y leaves on another, then the host copies each chunk
into the caller's memory as it lands (``streamed``). N = 1 is the same path with nothing overlapped,
the baseline the overlap is measured against. Team kernels (``forward_into``'s ``entry``) keep the
other modes.
"""
import os
import time

import numpy as np

from ...errors import GpuError
from ..choice import choose_version
from ..device import GpuDevice, cuda_error_line
from ..launch import spec_with_bias
from ..plans import fused_plan_for, plan_for
from ..shape import ConvShape
from .host_memory import address, copy_bytes, wait_all

STREAMS_ENV = "ECE408_STREAMS"         # N: the streams path in N chunks of the batch (unset: the copy mode's)
MAX_STREAM_CHUNKS = 64
NON_BLOCKING = 1                       # CU_STREAM_NON_BLOCKING: no implicit ordering with the null stream


def stream_chunks():
    """None (``ECE408_STREAMS`` unset: the copy mode's path), else its number of chunks."""
    text = os.environ.get(STREAMS_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or not 1 <= int(text) <= MAX_STREAM_CHUNKS:
        raise GpuError(f"{STREAMS_ENV}={text!r}: give a number of chunks from 1 to {MAX_STREAM_CHUNKS} "
                       "(1: the streams path with nothing overlapped), or unset it")
    return int(text)


def _layer_plan(dev, x, k, bias, spec, version, fused, precision=None):
    """The plan the device-pointer entry points would run for this layer (inside ``dev.active()``)."""
    spec = spec_with_bias(spec, k, bias)
    shape = ConvShape.of(x.shape, k.shape, spec)
    if fused:
        return fused_plan_for(dev, shape, version, precision=precision)
    return plan_for(dev, shape, choose_version(version, shape, dev.name, precision))


def streamed(record, out, x, k, bias, spec, version, fused, device, precision=None):
    """The streams path (module doc): chunks of whole images, so that chunk i's pointers are the whole
    batch's at image b0 and every kernel sees the addresses (and alignment) it sees in one launch.
    Kernels run on the null stream (one after another, sharing the plan's workspaces); the copies on
    two non-blocking streams, ordered with them by events: chunk i's kernels are launched once its copy
    in has landed (the host waits on that event while the GPU runs chunk i - 1), its copy out waits on
    the event after its kernels. Op Time, on the GPU's clock: from the start of the first chunk's
    kernels to the end of the last chunk's, the course's "from the last copy before the first kernel
    to the first copy after the last" where copies run between kernels (with N = 1, the kernels
    alone); ``record.kernels`` is the kernels' own time added up, ``record.gpu_pipeline`` the whole
    pipeline's."""
    dev, batch, chunks = GpuDevice.get(device), len(x), record.streams
    cuda = dev.cuda
    edges = sorted({round(i * batch / chunks) for i in range(chunks + 1)})
    parts = list(zip(edges[:-1], edges[1:]))
    x_image, y_image = x.nbytes // batch, out.nbytes // batch
    with dev.active():
        tasks = []
        try:
            plan = _layer_plan(dev, x, k, bias, spec, version, fused, precision)
            xd, yd = int(dev.buffer("hostcopy-x", x.nbytes)), int(dev.buffer("hostcopy-y", out.nbytes))
            kd = dev.buffer("hostcopy-k", k.nbytes)
            cuda.memcpy_htod(kd, k)
            bd = 0
            if bias is not None:
                bd = dev.buffer("hostcopy-bias", bias.nbytes)
                cuda.memcpy_htod(bd, bias)
            xs = dev.pinned("streams-x", x.size).view(np.uint8)
            ys = dev.pinned("streams-y", out.size).view(np.uint8)
            t = time.perf_counter()
            staged = [copy_bytes(address(xs) + b0 * x_image, address(x) + b0 * x_image, (b1 - b0) * x_image)
                      for b0, b1 in parts]
            tasks += [f for chunk in staged for f in chunk]
            if not plan.warm:                   # first-launch costs out of the timing (as plan.forward does)
                plan.launch(yd, xd, int(kd), int(bd), parts[0][1] - parts[0][0])
                dev.synchronize()
                plan.warm = True
            s_in, s_out = dev.stream("streams-in", NON_BLOCKING), dev.stream("streams-out", NON_BLOCKING)
            n = len(parts)
            events = dev.events("streams", 4 * n + 1)
            first, landed, began, ended, left = events[0], events[1:n + 1], events[n + 1:2 * n + 1], \
                events[2 * n + 1:3 * n + 1], events[3 * n + 1:]
            first.record(s_in)
            for i in range(n + 1):
                if i < n:                       # chunk i in (staged by the pool) ...
                    b0, b1 = parts[i]
                    wait_all(staged[i])
                    cuda.memcpy_htod_async(xd + b0 * x_image, xs[b0 * x_image:b1 * x_image], s_in)
                    landed[i].record(s_in)
                if i > 0:                       # ... while chunk i - 1's kernels wait for theirs, then run
                    b0, b1 = parts[i - 1]
                    landed[i - 1].synchronize()
                    began[i - 1].record()
                    plan.launch(yd + b0 * y_image, xd + b0 * x_image, int(kd), int(bd), b1 - b0)
                    ended[i - 1].record()
                    s_out.wait_for_event(ended[i - 1])
                    cuda.memcpy_dtoh_async(ys[b0 * y_image:b1 * y_image], yd + b0 * y_image, s_out)
                    left[i - 1].record(s_out)
            record.kernel_call = time.perf_counter() - t     # (x's staging and copies in are inside it)
            t = time.perf_counter()
            for i, (b0, b1) in enumerate(parts):
                left[i].synchronize()
                tasks += copy_bytes(address(out) + b0 * y_image, address(ys) + b0 * y_image, (b1 - b0) * y_image,
                                    fault_first=True)
            wait_all(tasks)
            record.copy_out = time.perf_counter() - t
            record.kernels = sum(began[i].time_till(ended[i]) for i in range(n)) / 1e3
            record.gpu_pipeline = first.time_till(left[-1]) / 1e3
            record.notes.append(f"streams: {n} chunks, kernels {record.kernels * 1e3:.3f} ms, GPU pipeline "
                                f"{record.gpu_pipeline * 1e3:.2f} ms")
            return began[0].time_till(ended[-1]) / 1e3
        except cuda.Error as exc:
            raise GpuError(f"streams ({chunks}) failed: {cuda_error_line(exc)}") from exc
        finally:
            for future in tasks:
                if not future.cancel():
                    future.exception()
