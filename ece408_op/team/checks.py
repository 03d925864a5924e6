"""What keeps a team's timed runs honest, in NumPy: the layer the team interface computes,
fresh inputs, the reference check of random images, and the physical floor of a layer.

* Fresh inputs: ``fresh_values(seed, start, count)`` is a counter-based generator (a 32-bit
  hash of the element's index and the seed, in [0, 1)), the same bit for bit here and in the
  harness's CUDA fill kernel (``kernels/team.py``), so that the GPU fills a whole input at full
  speed and the host rebuilds only the few images it checks.
* Checks: after every timed run, ``check_images`` compares a few images chosen at random (after
  the run, from a seed the team never sees) with the float64 reference, within the float32
  bound. A kernel that replays a result kept from an earlier call fails it on fresh inputs.
* Floor: ``floor_seconds`` is the least time any device could take for the layer (its bytes at
  a generous bandwidth, its FLOPs at a generous rate); an Op Time below it is refused.
"""
from dataclasses import dataclass

import numpy as np

from ..conv import reference_and_bound
from ..errors import Ece408Error, ShapeError

CHECKED_IMAGES = 8


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


def fresh_values(seed, start, count):
    """float32 values in [0, 1) of elements ``start`` .. ``start + count`` of the fresh input
    ``seed`` (as the CUDA fill kernel computes them)."""
    i = np.arange(start, start + count, dtype=np.uint64)
    lo = (i & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    hi = (i >> np.uint64(32)).astype(np.uint32)
    with np.errstate(over="ignore"):
        h = lo * np.uint32(0x9E3779B1) + hi * np.uint32(0x85EBCA77) + np.uint32(seed & 0xFFFFFFFF)
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x7FEB352D)
        h ^= h >> np.uint32(15)
        h *= np.uint32(0x846CA68B)
        h ^= h >> np.uint32(16)
    return (h >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)


def fresh_images(seed, layer, images):
    """The fresh input's ``images`` (indices), B' x C x H x W."""
    per = layer.C * layer.H * layer.W
    return np.stack([fresh_values(seed, int(i) * per, per).reshape(layer.C, layer.H, layer.W) for i in images])


def fill_fresh(out, seed):
    """Write the whole fresh input ``seed`` into ``out`` (a float32 array), in slices."""
    flat = out.reshape(-1)
    step = 1 << 22
    for start in range(0, flat.size, step):
        n = min(step, flat.size - start)
        flat[start:start + n] = fresh_values(seed, start, n)


def pick_images(rng, batch, count=CHECKED_IMAGES):
    return np.sort(rng.choice(batch, size=min(batch, count), replace=False))


def check_images(got, x_images, k, images, what):
    """``got`` (the team's output for ``images``) against the float64 reference; CheckError with
    the first differing element where it misses the float32 bound."""
    ref, bound = reference_and_bound(np.asarray(x_images, np.float32), np.asarray(k, np.float32))
    got = np.asarray(got, np.float64)
    bad = ~(np.abs(got - ref) <= bound)
    if bad.any():
        first = tuple(int(v) for v in np.argwhere(bad)[0])
        image = int(images[first[0]])
        raise CheckError(f"{what}: the output differs from the reference on image {image} "
                         f"({int(bad.sum())} of {bad.size} checked values; at (m, h, w) = {first[1:]}: "
                         f"got {got[first]:.6g}, want {ref[first]:.6g}); a forward must compute every call "
                         "from its inputs")


def floor_seconds(layer, bandwidth, flop_rate):
    """The least time a device of ``bandwidth`` bytes/s and ``flop_rate`` FLOP/s needs for the layer."""
    return max(layer.bytes / bandwidth, layer.flops / flop_rate)


def check_floor(seconds, layer, bandwidth, flop_rate, what):
    floor = floor_seconds(layer, bandwidth, flop_rate)
    if not seconds >= floor:
        raise CheckError(f"{what}: Op Time {seconds:.6f} s is below what this device can do for the layer "
                         f"({floor:.6f} s: {layer.bytes / 1e6:.0f} MB at {bandwidth / 1e9:.0f} GB/s, "
                         f"{layer.flops / 1e9:.1f} GFLOP at {flop_rate / 1e12:.1f} TFLOP/s); the time is refused")
