"""What keeps a team's timed runs honest, in NumPy: the layer the team interface computes, fresh
inputs, the check of every timed output against the float64 reference, and the physical floor.

* Secret randomness: every fresh input and every choice of what is checked is drawn from the
  operating system (``os.urandom``/``secrets``), independently, each time; nothing a team sees
  (an input, an output, a time) is derived from a value that decides anything else. A fresh
  input is NumPy's Philox generator under a new 128-bit key from ``secrets`` (about 1 GB/s here;
  the key is used for that one input only and never leaves the harness).
* Every value checked: a timed output is compared with the float64 reference within the float32
  bound, all of it where the reference costs at most ``WHOLE_CHECK_MACS`` multiply-adds (the GPU
  path always checks all of it, with the grader's own kernel: ``kernels/team.py``); beyond that
  on the CPU, ``SAMPLED_VALUES`` output values chosen after the run from ``os.urandom``, uniformly
  over the whole output. A forward that skips 1% of its outputs passes one sampled check with
  probability 0.99^2048 = 1.1e-9 (1,375 values would already give 1e-6); one that skips whole
  images, channels or rows is caught the same way, the sample being uniform over every index.
* Floor: ``floor_seconds`` is the least time the device could take for the layer; an Op Time
  below it is refused (``Peaks`` says which rates and why).
"""
import os
import secrets
from dataclasses import dataclass

import numpy as np

from ..conv import reference_and_bound
from ..errors import Ece408Error, ShapeError

SAMPLED_VALUES = 2048                  # values of one output checked where the whole costs too much
WHOLE_CHECK_MACS = 50_000_000         # whole-output float64 reference on the CPU up to this many multiply-adds (~0.5 s)
BOUND_ABS, BOUND_REL = 1e-6, 1.2e-7   # conv.reference_and_bound's float32 bound: abs + terms x rel x sum|x k|


class CheckError(Ece408Error):
    """A team's output that does not match the reference, or a time that cannot be."""


@dataclass(frozen=True)
class Layer:
    """The course's layer: x B x C x H x W, k M x C x K x K, y B x M x (H-K+1) x (W-K+1)."""
    B: int
    M: int
    C: int
    H: int
    W: int
    K: int

    @property
    def HO(self):
        return self.H - self.K + 1

    @property
    def WO(self):
        return self.W - self.K + 1

    @property
    def x_shape(self):
        return (self.B, self.C, self.H, self.W)

    @property
    def k_shape(self):
        return (self.M, self.C, self.K, self.K)

    @property
    def y_shape(self):
        return (self.B, self.M, self.HO, self.WO)

    def as_dict(self):
        return {"B": self.B, "M": self.M, "C": self.C, "H": self.H, "W": self.W, "K": self.K}

    @property
    def flops(self):
        return 2 * self.B * self.M * self.HO * self.WO * self.C * self.K * self.K

    @property
    def bytes(self):
        """x read and y written once, the least a forward moves."""
        return 4 * (self.B * self.C * self.H * self.W + self.B * self.M * self.HO * self.WO)


def course_layer(x_shape, k_shape, spec=None):
    """The Layer of x and k, or ShapeError where the layer is not the course's kind (the team
    interface computes stride 1, no padding, no dilation, one group, a square kernel, no bias)."""
    if spec is not None:
        odd = [what for what, bad in (
            ("stride", tuple(spec.stride) != (1, 1)), ("padding", tuple(spec.pad) != (0, 0)),
            ("dilation", tuple(spec.dilate) != (1, 1)), ("groups", spec.num_group != 1),
            ("a bias", not spec.no_bias)) if bad]
        if odd:
            raise ShapeError("a team's forward computes the course's layer (stride 1, no padding, no dilation, "
                             f"one group, no bias); this layer has {', '.join(odd)}: run it with the reference "
                             "kernels (no --team)")
    b, c, h, w = (int(v) for v in x_shape)
    m, c2, kh, kw = (int(v) for v in k_shape)
    if c2 != c or kh != kw or kh > h or kw > w:
        raise ShapeError(f"a team's forward computes square kernels no larger than the input; got x {tuple(x_shape)}, "
                         f"k {tuple(k_shape)}")
    return Layer(b, m, c, h, w, kh)


def fresh_input(shape):
    """A fresh input: float32 values in [0, 1) from Philox under a new secret 128-bit key."""
    generator = np.random.Generator(np.random.Philox(key=secrets.randbits(128)))
    return generator.random(shape, dtype=np.float32)


def fill_fresh(out):
    """Write a fresh input (``fresh_input``) into ``out``, a float32 array (shared memory)."""
    generator = np.random.Generator(np.random.Philox(key=secrets.randbits(128)))
    generator.random(out=out.reshape(-1), dtype=np.float32)
    return out


def secret_indices(count, n):
    """``n`` indices in [0, count), uniform, independent, from the operating system's randomness."""
    words = np.frombuffer(os.urandom(8 * n), dtype=np.uint64)
    return np.sort(words % np.uint64(count)).astype(np.int64)         # modulo bias < count / 2^64


def _values_reference(x, k, flat, layer):
    """(float64 reference, float32 bound) of the output values at flat indices ``flat``."""
    b, m, h, w = np.unravel_index(flat, layer.y_shape)
    K = layer.K
    windows = np.lib.stride_tricks.sliding_window_view(np.asarray(x, np.float32), (K, K), axis=(2, 3))
    patches = windows[b, :, h, w].astype(np.float64)                   # n x C x K x K
    weights = np.asarray(k, np.float64)[m]                             # n x C x K x K
    products = patches * weights
    ref = products.sum(axis=(1, 2, 3))
    magnitude = np.abs(products).sum(axis=(1, 2, 3))
    return ref, BOUND_ABS + magnitude * (layer.C * K * K) * BOUND_REL


def check_output(got, x, k, layer, what):
    """The team's whole output ``got`` (B x M x HO x WO) against the float64 reference of ``x`` and
    ``k`` (the harness's own copies): every value where that costs at most WHOLE_CHECK_MACS
    multiply-adds, else SAMPLED_VALUES values at secret random indices, chosen now (after the
    run). CheckError with the first differing value."""
    got = np.asarray(got)
    count = got.size
    if count * layer.C * layer.K * layer.K <= WHOLE_CHECK_MACS:
        ref, bound = reference_and_bound(np.asarray(x, np.float32), np.asarray(k, np.float32))
        flat_got, flat_ref, flat_bound = got.reshape(-1).astype(np.float64), ref.reshape(-1), bound.reshape(-1)
        where = np.arange(count)
    else:
        where = secret_indices(count, SAMPLED_VALUES)
        flat_ref, flat_bound = _values_reference(x, k, where, layer)
        flat_got = got.reshape(-1)[where].astype(np.float64)
    bad = ~(np.abs(flat_got - flat_ref) <= flat_bound)
    if bad.any():
        i = int(np.argmax(bad))
        raise CheckError(mismatch_line(what, layer, int(where[i]), float(flat_got[i]), float(flat_ref[i]),
                                       int(bad.sum()), len(where)))


def mismatch_line(what, layer, flat, got, want, bad, checked):
    """One line naming the first wrong value of a team's output."""
    b, m, h, w = (int(v) for v in np.unravel_index(flat, layer.y_shape))
    return (f"{what}: the output differs from the reference at (b, m, h, w) = ({b}, {m}, {h}, {w}): got {got:.6g}, "
            f"want {want:.6g} ({bad} of {checked} checked values); a forward must compute every value of every call "
            "from its inputs")


@dataclass(frozen=True)
class Peaks:
    """What no forward can beat on a device: ``bandwidth`` (bytes/s) for the bytes that cannot stay
    in its ``cache`` (bytes: on a GPU its L2, which can hold part of x and y across the timed
    region), and ``flop_rate`` (FLOP/s)."""
    bandwidth: float
    flop_rate: float
    cache: int = 0


def floor_seconds(layer, peaks):
    """The least time a device of ``peaks`` needs for the layer: x read and y written once (less
    what its cache can hold) at its bandwidth, or its FLOPs at its rate, whichever is more."""
    moved = max(0, layer.bytes - peaks.cache)
    return max(moved / peaks.bandwidth, layer.flops / peaks.flop_rate)


def check_floor(seconds, layer, peaks, what):
    floor = floor_seconds(layer, peaks)
    if not seconds >= floor:
        raise CheckError(f"{what}: Op Time {seconds:.6f} s is below what this device can do for the layer "
                         f"({floor:.6f} s: {layer.bytes / 1e6:.0f} MB, {peaks.cache / 1e6:.0f} MB of it cacheable, "
                         f"at {peaks.bandwidth / 1e9:.0f} GB/s; {layer.flops / 1e9:.1f} GFLOP at "
                         f"{peaks.flop_rate / 1e12:.1f} TFLOP/s); the time is refused")
