"""v12 winograd: F(4x4, 3x3), the transforms around 36 GEMMs by v8's or v9's plan (v12_winograd.cu)."""
import math

import numpy as np

from ..shape import ConvShape
from .registry import VERSIONS, register
from .version import Version


@register
class Winograd(Version):
    """Winograd F(4x4, 3x3) for 3x3 stride-1 layers: filter and input transforms, 36 GEMMs (v8's or v9's
    kernel on a grouped 1x1 convolution, V12_GEMM; V8_*/V9_* overrides go to that GEMM's plan), the
    output transform, a chunk of images at a time (at most V12_CHUNK_MB of transformed input and GEMM
    output; chunks small enough to stay in L2 measured slower, docs/kernel-notes.md). Opt-in only
    (``defaultable``): its error follows each 6x6 input tile's magnitude, not each output's own
    window, so it can exceed the elementwise float32 bound the default versions keep."""
    number, name, kernels = 12, "winograd", ("wino_filter", "wino_input", "wino_output")
    general = True
    exact = False
    defaultable = False
    tuning_keys = ("V12_GEMM", "V12_CHUNK_MB")
    MIN_C = 16                # fewer channels: its error nears the bound even on random data (measured)
    POINTS = 36               # 6x6 transform points
    CHUNK_MB = 1024           # default V12_CHUNK_MB

    @staticmethod
    def tiles(inner):
        return math.ceil(inner.HO / 4), math.ceil(inner.WO / 4)

    def values(self, tuning_overrides=None):
        values = {"V12_GEMM": 0, "V12_CHUNK_MB": self.CHUNK_MB, **self.own(tuning_overrides)}
        values = {k: int(v) for k, v in values.items()}
        if values["V12_GEMM"] not in (0, 8, 9):
            raise ValueError(f"V12_GEMM must be 8, 9 or 0 (by the layer), not {values['V12_GEMM']}")
        if values["V12_CHUNK_MB"] < 1:
            raise ValueError(f"V12_CHUNK_MB must be at least 1, not {values['V12_CHUNK_MB']}")
        return values

    def gemm_shape(self, inner):
        """The 36 GEMMs as one grouped 1x1 convolution: 36*C channels of TH x TW tiles -> 36*M filters."""
        th, tw = self.tiles(inner)
        return ConvShape(self.POINTS * inner.C, th, tw, self.POINTS * inner.M, 1, G=self.POINTS)

    def gemm_tuning(self, inner, tuning_overrides=None):
        """(version, overrides) of the GEMMs' plan. V12_GEMM 0 (the default) picks by the layer, from the
        tile sweep on ResNet-18's stride-1 layers (H100, docs/kernel-notes.md): below 128 channels v8 in
        128 positions x 64 filters (C=64: 0.246 ms, v9's best 0.265); else v9 in 2 x 2 warps of 4 filter
        fragments and 2 position fragments (4 from 256 channels). V8_*/V9_* overrides replace the tile."""
        number = self.values(tuning_overrides)["V12_GEMM"] or (8 if inner.C < 128 else 9)
        given = {k: v for k, v in (tuning_overrides or {}).items() if k.startswith(f"V{number}_")}
        if given:
            return number, given
        if number == 8:
            return 8, {"V8_BP": 128, "V8_BF": 64, "V8_TP": 8, "V8_TF": 8}
        return 9, {"V9_WP": 2, "V9_WF": 2, "V9_MI": 4 if inner.C >= 256 else 2, "V9_NI": 4}

    def limits(self, inner, tuning_overrides=None):
        s = inner
        if (s.KH, s.KW, s.SH, s.SW, s.DH, s.DW, s.G) != (3, 3, 1, 1, 1, 1, 1):
            return "needs a 3x3 kernel, stride 1, no dilation and one group"
        if s.C < self.MIN_C:
            return f"{s.C} channels: below {self.MIN_C} its error nears the float32 bound"
        number, overrides = self.gemm_tuning(s, tuning_overrides)
        return VERSIONS[number].limits(self.gemm_shape(s), overrides)

    def defines(self, inner, tuning_overrides=None):
        return self.values(tuning_overrides)      # (not read by its kernels: they key the plan)

    def images_per_chunk(self, inner, batch, tuning_overrides=None):
        th, tw = self.tiles(inner)
        per_image = self.POINTS * th * tw * (inner.C + inner.M) * 4
        return max(1, min(batch, (self.values(tuning_overrides)["V12_CHUNK_MB"] << 20) // per_image))

    def launch(self, plan, y, x, k, bias, batch):
        s, dev, overrides = plan.inner, plan.device, plan.tuning_overrides
        gemm = getattr(plan, "winograd_gemm", None)
        if gemm is None:                      # the GEMMs' own plan, on the same device
            gemm = plan.winograd_gemm = plan.subplan(self.gemm_shape(s), *self.gemm_tuning(s, overrides))
        th, tw = self.tiles(s)
        tt = th * tw
        u = int(dev.buffer("winograd U", self.POINTS * s.M * s.C * 4))
        chunk = self.images_per_chunk(s, batch, overrides)
        v = int(dev.buffer("winograd V", chunk * self.POINTS * s.C * tt * 4))
        mh = int(dev.buffer("winograd M", chunk * self.POINTS * s.M * tt * 4))
        filt, inp, out = plan.kernels
        filt(np.uintp(u), np.uintp(k), block=(256, 1, 1), grid=(math.ceil(s.M * s.C / 256), 1))
        image, plane = s.C * s.H * s.W, s.M * s.HO * s.WO
        for b0 in range(0, batch, chunk):
            n = min(chunk, batch - b0)
            inp(np.uintp(v), np.uintp(x + 4 * b0 * image), np.int32(n), block=(256, 1, 1),
                grid=(math.ceil(n * s.C * tt / 256), 1))
            gemm.version.launch(gemm, mh, v, u, 0, n)
            out(np.uintp(y + 4 * b0 * plane), np.uintp(mh), np.uintp(bias), np.int32(n), block=(256, 1, 1),
                grid=(math.ceil(n * s.M * tt / 256), 1))
