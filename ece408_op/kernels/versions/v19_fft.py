"""v19 fft: FFT overlap-add with cuFFT (v19_fft.cu; kernels/libraries.py)."""
import math

import numpy as np

from ...conv.bounds import fft_reference_and_bound
from .. import libraries
from ..shape import ConvShape
from .registry import register
from .version import Version


@register
class Fft(Version):
    """v19: FFT overlap-add with cuFFT (libraries.py): x in V19_F - K + 1 square tiles, each padded to
    V19_F x V19_F; R2C of the tiles and of the flipped filters, the products summed over channels per
    frequency, C2R, the overlapping tile outputs added into y; a chunk of images at a time (at most
    V19_CHUNK_MB of workspace). Checked against conv/bounds.py's FFT model (norm-wise), never a default."""
    number, name = 19, "fft"
    kernels = ("fft_tiles", "fft_weights", "fft_multiply", "fft_overlap_add")
    exact = False
    defaultable = False
    own_error_model = True
    tuning_keys = ("V19_F", "V19_CHUNK_MB")
    SIZES = (8, 16, 32, 64, 128)
    CHUNK_MB = 1024

    @staticmethod
    def tiles(inner, size):
        edge = size - inner.K + 1
        return math.ceil(inner.H / edge), math.ceil(inner.W / edge)

    def size(self, inner):
        """The transform size of least work (tiles x F^2; the smaller F on a tie) whose tile is >= 1."""
        fits = [f for f in self.SIZES if f >= inner.K]
        return min(fits, key=lambda f: (math.prod(self.tiles(inner, f)) * f * f, f)) if fits else self.SIZES[-1]

    def values(self, inner, tuning_overrides=None):
        values = {"V19_F": self.size(inner), "V19_CHUNK_MB": self.CHUNK_MB, **self.own(tuning_overrides)}
        values = {key: int(value) for key, value in values.items()}
        if values["V19_F"] not in self.SIZES:
            raise ValueError(f"V19_F must be one of {', '.join(map(str, self.SIZES))}, not {values['V19_F']}")
        return values

    def limits(self, inner, tuning_overrides=None):
        size = self.values(inner, tuning_overrides)["V19_F"]
        if size < inner.K:
            return f"a {inner.K}x{inner.K} kernel does not fit its {size}x{size} transforms"
        return None

    def defines(self, inner, tuning_overrides=None):
        return self.values(inner, tuning_overrides)

    def available(self):
        return libraries.missing("libcufft")

    def reference_and_bound(self, x, k, bias=None, spec=None):
        inner = self.inner(ConvShape.of(x.shape, k.shape, spec))
        return fft_reference_and_bound(x, k, bias, spec, self.size(inner))

    def workspace_per_image(self, inner, size):
        """Bytes of tiles, spectra and tile outputs per image."""
        nt, nf = math.prod(self.tiles(inner, size)), size * (size // 2 + 1)
        return nt * (inner.C + inner.M) * (size * size * 4 + nf * 8)

    def launch(self, plan, y, x, k, bias, batch):
        s, d, dev = plan.inner, plan.defines, plan.device
        fft, size = libraries.cufft(self.label), d["V19_F"]
        nt, nf, area = math.prod(self.tiles(s, size)), size * (size // 2 + 1), size * size
        tiles, weights, multiply, overlap_add = plan.kernels

        def grid(count):
            return (min(math.ceil(count / 256), 1 << 20), 1)
        kt = int(dev.buffer("fft filter tiles", s.M * s.C * area * 4))
        kh = int(dev.buffer("fft filter spectra", s.M * s.C * nf * 8))
        weights(np.uintp(kt), np.uintp(k), block=(256, 1, 1), grid=grid(s.M * s.C * area))
        fft.r2c(fft.plan(dev.index, size, fft.R2C, s.M * s.C), kt, kh)
        chunk = max(1, min(batch, (d["V19_CHUNK_MB"] << 20) // self.workspace_per_image(s, size)))
        xt = int(dev.buffer("fft x tiles", chunk * s.C * nt * area * 4))
        xh = int(dev.buffer("fft x spectra", chunk * s.C * nt * nf * 8))
        yh = int(dev.buffer("fft y spectra", chunk * s.M * nt * nf * 8))
        z = int(dev.buffer("fft y tiles", chunk * s.M * nt * area * 4))
        for b0 in range(0, batch, chunk):
            n = min(chunk, batch - b0)
            tiles(np.uintp(xt), np.uintp(x + 4 * b0 * s.C * s.H * s.W), np.int32(n), block=(256, 1, 1),
                  grid=grid(n * s.C * nt * area))
            fft.r2c(fft.plan(dev.index, size, fft.R2C, n * s.C * nt), xt, xh)
            multiply(np.uintp(yh), np.uintp(xh), np.uintp(kh), np.int32(n), block=(256, 1, 1),
                     grid=grid(n * s.M * nt * nf))
            fft.c2r(fft.plan(dev.index, size, fft.C2R, n * s.M * nt), yh, z)
            overlap_add(np.uintp(y + 4 * b0 * s.M * s.HO * s.WO), np.uintp(z), np.int32(n), block=(256, 1, 1),
                        grid=grid(n * s.M * s.HO * s.WO))
