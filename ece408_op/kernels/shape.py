"""The shape class a module is compiled for: everything of a layer but the batch size (its data's element
type and layouts included: a half-precision or channels-last layer is another class)."""
from dataclasses import dataclass, replace

from ..conv.spec import ConvSpec
from ..errors import ShapeError


DTYPES = {"float32": 4, "float16": 2, "bfloat16": 2}     # element types of x, the weights and y: bytes


@dataclass(frozen=True)
class ConvShape:
    """C, H, W, M, kernel KH x KW, stride, padding, dilation, groups G and whether there is a bias; the
    data's element type (DTYPE: one of DTYPES) and layouts: XL 1 for channels-last x (NHWC; 0: NCHW), WL 1
    for channels-last weights (M x KH x KW x C/G; 0: M x C/G x KH x KW). y is channels-last where x or the
    weights are (``YL``), as PyTorch's convolutions return it."""
    C: int
    H: int
    W: int
    M: int
    KH: int
    KW: int = None                  # None: square (KW = KH)
    SH: int = 1
    SW: int = 1
    PH: int = 0
    PW: int = 0
    DH: int = 1
    DW: int = 1
    G: int = 1
    BIAS: int = 0
    DTYPE: str = "float32"
    XL: int = 0
    WL: int = 0

    def __post_init__(self):
        if self.KW is None:
            object.__setattr__(self, "KW", self.KH)
        if self.DTYPE not in DTYPES:
            raise ShapeError(f"unknown element type {self.DTYPE!r}; use one of {', '.join(DTYPES)}")

    @classmethod
    def of(cls, x_shape, k_shape, spec=None, dtype="float32", x_layout=0, w_layout=0):
        """The shape class of x (B,C,H,W) and k (M,C/G,KH,KW) under ``spec`` (None: the course's layer), of
        element type ``dtype`` and layouts ``x_layout``, ``w_layout`` (1: channels-last; the shapes as
        given are the logical ones, NCHW order, whatever the layout)."""
        if len(x_shape) != 4 or len(k_shape) != 4:
            raise ShapeError(f"need 4-D data and weight, got {tuple(x_shape)} and {tuple(k_shape)}")
        spec = spec or ConvSpec.course(k_shape)
        spec.check(x_shape, k_shape, None if spec.no_bias else (spec.num_filter,))
        _, c, h, w = (int(v) for v in x_shape)
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = spec.kernel, spec.stride, spec.pad, spec.dilate
        return cls(c, h, w, spec.num_filter, kh, kw, sh, sw, ph, pw, dh, dw, spec.num_group, int(not spec.no_bias),
                   str(dtype), int(bool(x_layout)), int(bool(w_layout)))

    @property
    def element_bytes(self):
        return DTYPES[self.DTYPE]

    @property
    def YL(self):
        """1 where y is channels-last (x or the weights are), else 0."""
        return int(bool(self.XL or self.WL))

    @property
    def K(self):
        """The kernel edge, for the versions that need a square kernel."""
        return self.KH

    @property
    def HO(self):
        return (self.H + 2 * self.PH - self.DH * (self.KH - 1) - 1) // self.SH + 1

    @property
    def WO(self):
        return (self.W + 2 * self.PW - self.DW * (self.KW - 1) - 1) // self.SW + 1

    @property
    def CKK(self):
        """Weights per filter: C/G x KH x KW."""
        return self.C // self.G * self.KH * self.KW

    def outputs(self, batch):
        """Elements of y for ``batch`` images."""
        return batch * self.M * self.HO * self.WO

    def course_reason(self):
        """None if this is the course's kind of layer up to padding and bias (stride 1, no dilation,
        one group, square kernel), else what differs."""
        differs = [what for what, odd in (
            ("stride", (self.SH, self.SW) != (1, 1)), ("dilation", (self.DH, self.DW) != (1, 1)),
            ("groups", self.G != 1), ("a rectangular kernel", self.KH != self.KW)) if odd]
        return f"needs stride 1, no dilation, one group and a square kernel (this layer has {', '.join(differs)})" \
            if differs else None

    def unpadded(self):
        """The layer a course-style kernel sees: x already padded by the launcher, bias added after."""
        return replace(self, H=self.H + 2 * self.PH, W=self.W + 2 * self.PW, PH=0, PW=0, BIAS=0)

    def defines(self):
        return {"CONV_C": self.C, "CONV_H": self.H, "CONV_W": self.W, "CONV_M": self.M, "CONV_K": self.KH,
                "CONV_KH": self.KH, "CONV_KW": self.KW, "CONV_SH": self.SH, "CONV_SW": self.SW,
                "CONV_PH": self.PH, "CONV_PW": self.PW, "CONV_DH": self.DH, "CONV_DW": self.DW,
                "CONV_G": self.G, "CONV_BIAS": self.BIAS}
