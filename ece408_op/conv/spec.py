"""The convolution's hyper-parameters and shape rules, with MXNet ``Convolution``'s names and
string formats (``kernel='(3, 3)'``, ``stride``, ``pad``, ``dilate``, ``num_group``, ``no_bias``,
``num_filter``, ``layout``), so that a swapped node keeps its attributes.

    x: B x C x H x W     weight: M x C/G x KH x KW     bias: M (unless no_bias)
    y: B x M x HO x WO,  HO = (H + 2*PH - DH*(KH-1) - 1) // SH + 1   (likewise WO)
    y[b][m][i][j] = bias[m] + sum over c < C/G, p < KH, q < KW of
                    xpad[b][g*C/G + c][i*SH + p*DH][j*SW + q*DW] * weight[m][c][p][q],   g = m // (M/G)

The course's layer is the special case stride 1, no padding, no dilation, one group, no
bias (``ConvSpec.is_course``). Parsing raises ShapeError with the reason, never anything else.
"""
import ast
from dataclasses import dataclass, replace

from ..errors import ShapeError

# Convolution attributes that only tune MXNet's own implementation: accepted and ignored.
IGNORED_ATTRS = ("workspace", "cudnn_tune", "cudnn_off")
LAYOUTS = ("None", "NCHW")


def _pair(name, text, default, minimum):
    """MXNet's tuple formats -> (a, b): '(3, 3)', '[3,3]', '3', '(3,)' (square); '()'/None: default."""
    if text is None or (isinstance(text, str) and text.strip() in ("", "()", "[]", "None")):
        return default
    if isinstance(text, str):
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
            raise ShapeError(f"{name}={text!r} is not a size; use e.g. {name}=(3, 3)") from exc
    else:
        value = text
    values = list(value) if isinstance(value, (tuple, list)) else [value]
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ShapeError(f"{name}={text!r} must be one or two integers (2-D convolution)")
    if any(v < minimum for v in values):
        raise ShapeError(f"{name}={text!r} must be at least {minimum}")
    return tuple(values)


def _int(name, text, minimum):
    try:
        value = int(str(text).strip())
    except ValueError as exc:
        raise ShapeError(f"{name}={text!r} is not an integer") from exc
    if value < minimum:
        raise ShapeError(f"{name}={text!r} must be at least {minimum}")
    return value


def _bool(name, text):
    key = str(text).strip().lower()
    if key in ("true", "1"):
        return True
    if key in ("false", "0"):
        return False
    raise ShapeError(f"{name}={text!r} is not a boolean; use True or False")


@dataclass(frozen=True)
class ConvSpec:
    num_filter: int
    kernel: tuple
    stride: tuple = (1, 1)
    pad: tuple = (0, 0)
    dilate: tuple = (1, 1)
    num_group: int = 1
    no_bias: bool = True          # the course's layer has none (Convolution's own default is False)

    @classmethod
    def from_attrs(cls, num_filter, kernel, stride=None, pad=None, dilate=None, num_group=1, no_bias=True,
                   layout=None):
        """From MXNet-style (string) attributes; raises ShapeError naming the bad one."""
        if layout is not None and str(layout).strip() not in LAYOUTS:
            raise ShapeError(f"layout={layout!r} is not supported; use NCHW")
        spec = cls(num_filter=_int("num_filter", num_filter, 1), kernel=_pair("kernel", kernel, None, 1),
                   stride=_pair("stride", stride, (1, 1), 1), pad=_pair("pad", pad, (0, 0), 0),
                   dilate=_pair("dilate", dilate, (1, 1), 1), num_group=_int("num_group", num_group, 1),
                   no_bias=_bool("no_bias", no_bias))
        if spec.kernel is None:
            raise ShapeError("kernel is required, e.g. kernel=(5, 5)")
        if spec.num_filter % spec.num_group:
            raise ShapeError(f"num_filter={spec.num_filter} is not a multiple of num_group={spec.num_group}")
        return spec

    @classmethod
    def course(cls, weight_shape):
        """The course's layer for a weight M x C x KH x KW: stride 1, no padding, no bias."""
        if len(weight_shape) != 4:
            raise ShapeError(f"weight must be 4-D (M, C, KH, KW), got shape {tuple(weight_shape)}")
        return cls(num_filter=int(weight_shape[0]), kernel=(int(weight_shape[2]), int(weight_shape[3])))

    def to_attrs(self):
        """MXNet-style string attributes (what ``from_attrs`` reads back)."""
        return {"num_filter": str(self.num_filter), "kernel": str(self.kernel), "stride": str(self.stride),
                "pad": str(self.pad), "dilate": str(self.dilate), "num_group": str(self.num_group),
                "no_bias": str(self.no_bias)}

    def with_(self, **changes):
        return replace(self, **changes)

    @property
    def is_course(self):
        """Stride 1, no padding, no dilation, one group, no bias: what the course's kernels compute."""
        return (self.stride == (1, 1) and self.pad == (0, 0) and self.dilate == (1, 1)
                and self.num_group == 1 and self.no_bias)

    def weight_shape(self, channels):
        if channels % self.num_group:
            raise ShapeError(f"data has {channels} channels, not a multiple of num_group={self.num_group}")
        return (self.num_filter, channels // self.num_group) + tuple(self.kernel)

    def output_size(self, h, w):
        """(HO, WO) for an H x W input; ShapeError where the (dilated) kernel does not fit.
        An unknown size (0 or -1) gives an unknown output size (UNKNOWN)."""
        sizes = []
        for n, k, s, p, d, axis in zip((h, w), self.kernel, self.stride, self.pad, self.dilate, ("height", "width")):
            if not _known(n):
                sizes.append(UNKNOWN)
                continue
            span = d * (k - 1) + 1
            if n + 2 * p < span:
                raise ShapeError(f"kernel {self.kernel[0]}x{self.kernel[1]} (dilated to {span} in {axis}) "
                                 f"does not fit a {h}x{w} input padded by {self.pad}")
            sizes.append((n + 2 * p - span) // s + 1)
        return tuple(sizes)

    def output_shape(self, x_shape):
        if len(x_shape) != 4:
            raise ShapeError(f"data must be 4-D (B, C, H, W), got shape {tuple(x_shape)}")
        b, c, h, w = x_shape
        self.weight_shape(c)
        return (b, self.num_filter) + self.output_size(h, w)

    def check(self, x_shape, weight_shape, bias_shape=None):
        """y's shape, after checking x, the weight (and the bias) against the spec."""
        y_shape = self.output_shape(x_shape)
        want = self.weight_shape(x_shape[1])
        if tuple(weight_shape) != want:
            raise ShapeError(f"weight has shape {tuple(weight_shape)}, expected {want} for data {tuple(x_shape)}")
        if not self.no_bias:
            if bias_shape is None or tuple(bias_shape) != (self.num_filter,):
                raise ShapeError(f"bias has shape {None if bias_shape is None else tuple(bias_shape)}, "
                                 f"expected ({self.num_filter},)")
        return y_shape


UNKNOWN = -1      # an unknown dimension, as MXNet 1.9 passes and takes it (0 is read as unknown too)


def _known(n):
    return n is not None and n > 0


def _merge(name, given, want):
    """``given`` (may hold unknowns, or be empty) completed by ``want``; ShapeError on a conflict."""
    if not given:
        return tuple(want)
    if len(given) != len(want) or any(_known(g) and _known(w) and g != w for g, w in zip(given, want)):
        shown = tuple(g if _known(g) else "?" for g in given)
        raise ShapeError(f"{name} has shape {shown}, expected {tuple(w if _known(w) else '?' for w in want)}")
    return tuple(g if _known(g) else (w if _known(w) else UNKNOWN) for g, w in zip(given, want))


def infer_shapes(spec, x_shape, w_shape=(), b_shape=()):
    """Shape inference with unknown dimensions (0 or -1, or an empty shape: not known yet):
    returns (x, weight, bias or None, y) shapes with every dimension that follows from the others
    filled in, UNKNOWN where nothing tells. Gluon's deferred initialisation (``in_channels=0``)
    and ``__shape__`` hints such as (64, 0, 3, 3) are completed from the data; the data's
    channels from the weight where the data's are unknown. ShapeError names any conflict."""
    x_shape, w_shape = tuple(x_shape or ()), tuple(w_shape or ())
    if x_shape and len(x_shape) != 4:
        raise ShapeError(f"data must be 4-D (B, C, H, W), got shape {x_shape}")
    if w_shape and len(w_shape) != 4:
        raise ShapeError(f"weight must be 4-D (M, C/num_group, KH, KW), got shape {w_shape}")
    b, c, h, w = x_shape or (UNKNOWN,) * 4
    if not _known(c) and len(w_shape) == 4 and _known(w_shape[1]):
        c = w_shape[1] * spec.num_group
    if _known(c) and c % spec.num_group:
        raise ShapeError(f"data has {c} channels, not a multiple of num_group={spec.num_group}")
    want_w = (spec.num_filter, c // spec.num_group if _known(c) else UNKNOWN) + tuple(spec.kernel)
    w_full = _merge("weight", w_shape, want_w)
    bias = None if spec.no_bias else _merge("bias", tuple(b_shape or ()), (spec.num_filter,))
    ho, wo = spec.output_size(h, w)
    x_full = (b if _known(b) else UNKNOWN, c if _known(c) else UNKNOWN,
              h if _known(h) else UNKNOWN, w if _known(w) else UNKNOWN)
    return x_full, w_full, bias, (x_full[0], spec.num_filter, ho, wo)


def output_shape(x_shape, k_shape, spec=None):
    """Shape of y for x (B,C,H,W) and k (M,C/G,KH,KW); raises ShapeError when they don't fit.
    Without ``spec``: the course's layer (stride 1, no padding, no bias)."""
    if len(x_shape) != 4:
        raise ShapeError(f"data must be 4-D (B, C, H, W), got shape {tuple(x_shape)}")
    if len(k_shape) != 4:
        raise ShapeError(f"weight must be 4-D (M, C, K, K), got shape {tuple(k_shape)}")
    if spec is None:
        if k_shape[1] != x_shape[1]:
            raise ShapeError(f"weight has {k_shape[1]} input channels but data has {x_shape[1]}")
        if k_shape[2] > x_shape[2] or k_shape[3] > x_shape[3] or min(k_shape[2:]) < 1:
            raise ShapeError(f"kernel {k_shape[2]}x{k_shape[3]} does not fit a {x_shape[2]}x{x_shape[3]} input")
        spec = ConvSpec.course(k_shape)
    return spec.check(x_shape, k_shape, None if spec.no_bias else (spec.num_filter,))


def parse_kernel(text):
    """'5', '(5, 5)', '[5,5]' or '(5,)' -> 5 (square kernels; ``ConvSpec`` takes rectangular ones)."""
    kh, kw = _pair("kernel", text, None, 1) if text is not None else (None, None)
    if kh is None:
        raise ShapeError("kernel is required, e.g. kernel=(5, 5)")
    if kh != kw:
        raise ShapeError(f"kernel={text!r}: only square kernels are supported here")
    return kh


def parse_num_filter(text):
    """'50' -> 50; at least 1."""
    return _int("num_filter", text, 1)
