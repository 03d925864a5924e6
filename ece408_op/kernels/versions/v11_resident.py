"""v11 resident: 3xTF32 tensor cores on whole images held in shared memory, the taps read in an
order against bank conflicts (``tap_order``) (v11_resident.cu)."""
import functools
import math

import numpy as np

from .registry import register
from .version import MAX_SHARED, Version


@register
class Resident(Version):
    """3xTF32 tensor cores like v9, on whole images kept in shared memory (no im2col gather): the x
    operand read at tap offsets (``tap_order``) from each position's window corner, the weights split
    once per block in fragment order."""
    number, name, kernels = 11, "resident", ("conv_forward_v11",)
    exact = False
    tf32 = True
    fallback_rank = 120       # after v1 (every layer, exact): in practice the table's or the autotuner's
    tune_rank = 50            # a module per layer shape: timed only where autotune.worth_timing says
    tuning_keys = ("V11_WARPS", "V11_MT", "V11_BUFFERS", "TF32_PASSES")
    MAX_M = 64                # 8 fragments of 8 filters per warp (their accumulators in registers)
    MAX_CKK = 512             # the k-loop is unrolled fully: at most 64 k-steps of 8 taps

    def values(self, inner, tuning_overrides=None):
        # From the tile sweep (H100, docs/bench/tiles_v11.md): 2 fragments per warp and one image buffer
        # (other blocks on the SM compute while one loads); 4 warps for at most 16 filters (2018 conv2:
        # 0.588 ms, 8 warps 0.614), else 8 (2019 conv2: 1.90 ms, 4 warps 2.08)
        values = {"V11_WARPS": 4 if inner.M <= 16 else 8, "V11_MT": 2, "V11_BUFFERS": 1}
        values.update(self.own(tuning_overrides))
        return {k: int(v) for k, v in values.items()}

    @staticmethod
    def _shared(c, h, w, m, k, buffers):
        ks, nt = math.ceil(c * k * k / 8), math.ceil(m / 8)
        return ks * nt * 32 * 16 + ks * 4 * 8 + buffers * math.ceil(c * h * w / 4) * 16

    def shared_bytes(self, defines):
        d = defines
        return self._shared(d["CONV_C"], d["CONV_H"], d["CONV_W"], d["CONV_M"], d["CONV_K"], d["V11_BUFFERS"])

    def limits(self, inner, tuning_overrides=None):
        if inner.M > self.MAX_M:
            return f"{inner.M} filters exceed its {self.MAX_M} (accumulators in registers)"
        if inner.CKK > self.MAX_CKK:
            return f"C*K*K = {inner.CKK} exceeds its fully unrolled {self.MAX_CKK}"
        buffers = self.values(inner, tuning_overrides)["V11_BUFFERS"]
        shared = self._shared(inner.C, inner.H, inner.W, inner.M, inner.K, buffers)
        if shared > MAX_SHARED:
            return f"{buffers} image buffers and the split weights need {shared} bytes of shared memory (at most {MAX_SHARED})"
        return None

    def defines(self, inner, tuning_overrides=None):
        enabled = inner.course_reason() is None and self.limits(inner, tuning_overrides) is None
        return {**self.values(inner, tuning_overrides), "V11_ENABLED": int(enabled)}

    def blocks(self, plan):
        """Blocks resident on the device at once (the grid: each loops over images)."""
        cached = getattr(plan, "resident_blocks", None)
        if cached:
            return cached
        cuda, dev, kernel = plan.device.cuda, plan.device.device, plan.kernels[0]
        warps = plan.defines["V11_WARPS"]
        per_warp = math.ceil(kernel.num_regs * 32 / 256) * 256
        per_sm = min(dev.get_attribute(cuda.device_attribute.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)
                     // (plan.shared_bytes + 1024),
                     dev.get_attribute(cuda.device_attribute.MAX_THREADS_PER_MULTIPROCESSOR) // (32 * warps),
                     dev.get_attribute(cuda.device_attribute.MAX_REGISTERS_PER_MULTIPROCESSOR) // per_warp // warps)
        plan.resident_blocks = max(1, per_sm) * dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)
        return plan.resident_blocks

    def launch(self, plan, y, x, k, bias, batch):
        order = getattr(plan, "resident_order", None)
        if order is None:                     # the tap order, copied to the device once per plan (the
            s = plan.inner                    # device's buffer: freed with its other memory)
            taps = np.array(tap_order(s.C, s.H, s.W, s.K), np.int32)
            order = plan.device.buffer(f"v11 tap order C{s.C} H{s.H} W{s.W} K{s.K}", taps.nbytes)
            plan.device.cuda.memcpy_htod(order, taps)
            plan.resident_order = order
        plan.kernels[0](np.uintp(y), np.uintp(x), np.uintp(k), order, np.int32(batch),
                        block=(32 * plan.defines["V11_WARPS"], 1, 1), grid=(min(batch, self.blocks(plan)), 1),
                        shared=plan.shared_bytes)


def _read_cost(C, H, W, K):
    """(tap offsets, cost): cost(groups) is the mean number of shared-memory wavefronts of one warp-wide
    read of v11's x operand (8 adjacent positions x the 4 taps of each row of ``groups``, tap indices),
    over the layer's patterns of 8 positions (an output row's wrap included), weighted by frequency."""
    WO, HO = W - K + 1, H - K + 1
    offsets = np.array([c * H * W + p * W + q for c in range(C) for p in range(K) for q in range(K)])
    counts = {}
    for t in range(0, HO * WO, 8):
        corners = [(n // WO) * W + n % WO for n in (min(t + g, HO * WO - 1) for g in range(8))]
        key = tuple(c - corners[0] for c in corners)
        counts[key] = counts.get(key, 0) + 1
    patterns = np.array(list(counts))                              # (P, 8)
    weights = np.array(list(counts.values()), dtype=float) / sum(counts.values())

    def cost(groups):
        addresses = np.sort((patterns[None, :, :, None] + offsets[groups][:, None, None, :]).reshape(
            len(groups), len(patterns), -1), axis=-1)                # (G, P, 8n)
        first = np.ones(addresses.shape, bool)
        first[..., 1:] = addresses[..., 1:] != addresses[..., :-1]  # each distinct address once
        rows = np.arange(addresses.shape[0] * addresses.shape[1]).reshape(addresses.shape[:2] + (1,))
        per_bank = np.bincount((rows * 32 + addresses % 32).ravel(), weights=first.ravel(),
                               minlength=rows.size * 32)            # distinct addresses per (row, bank)
        return per_bank.reshape(addresses.shape[:2] + (32,)).max(axis=-1) @ weights
    return offsets, cost


def _mean_wavefronts(cost, order):
    """Mean of ``cost`` (``_read_cost``) over the groups of 4 taps of ``order`` (padding reads tap 0)."""
    taps = [r if r >= 0 else 0 for r in order]
    return float(cost(np.array(taps + [0] * (-len(taps) % 4)).reshape(-1, 4)).mean())


def read_wavefronts(C, H, W, K, order):
    """Mean shared-memory wavefronts per x read of v11 with the tap ``order`` (1.0: conflict-free)."""
    return _mean_wavefronts(_read_cost(C, H, W, K)[1], order)


@functools.lru_cache(maxsize=32)
def tap_order(C, H, W, K, look=64):
    """v11's order of the C*K*K taps along the GEMM's k (one permutation for x and the weights), padded
    with -1 to whole k-steps of 8. The lanes tig = 0..3 of a warp read taps 4j .. 4j+3 at once, each for
    8 adjacent positions: the order groups taps whose 4 x 8 shared-memory reads fall in distinct banks.
    Greedily: each group starts with the first tap left and adds, among the next ``look``, the one with
    the fewest bank conflicts (``_read_cost``); the natural order where that is no better. Padding only
    at the end (the kernel zeroes the last k-step's tail). 2018 conv2: 1.49 -> 1.19 wavefronts per read."""
    offsets, cost = _read_cost(C, H, W, K)
    remaining, order = list(range(len(offsets))), []
    while remaining:
        group = [remaining.pop(0)]
        while len(group) < 4 and remaining:
            candidates = remaining[:look]
            best = candidates[int(np.argmin(np.round(cost(np.array([group + [r] for r in candidates])), 6)))]
            group.append(best)
            remaining.remove(best)
        order += group
    natural = list(range(len(offsets)))
    best = order if _mean_wavefronts(cost, order) < _mean_wavefronts(cost, natural) else natural
    return tuple(best + [-1] * (-len(best) % 8))
