"""Shape rules and attribute parsing of the convolution (strings as MXNet passes them)."""
import ast

from ..errors import ShapeError


def output_shape(x_shape, k_shape):
    """Shape of y for x (B,C,H,W) and k (M,C,KH,KW); raises ShapeError when they don't fit."""
    if len(x_shape) != 4:
        raise ShapeError(f"data must be 4-D (B, C, H, W), got shape {tuple(x_shape)}")
    if len(k_shape) != 4:
        raise ShapeError(f"weight must be 4-D (M, C, K, K), got shape {tuple(k_shape)}")
    b, c, h, w = x_shape
    m, kc, kh, kw = k_shape
    if kc != c:
        raise ShapeError(f"weight has {kc} input channels but data has {c}")
    if kh < 1 or kw < 1 or kh > h or kw > w:
        raise ShapeError(f"kernel {kh}x{kw} does not fit a {h}x{w} input")
    return (b, m, h - kh + 1, w - kw + 1)


def parse_kernel(text):
    """'5', '(5, 5)', '[5,5]' or '(5,)' -> 5. Raises ShapeError for non-square or bad values."""
    try:
        value = ast.literal_eval(str(text).strip())
    except (ValueError, SyntaxError) as exc:
        raise ShapeError(f"kernel={text!r} is not a size; use e.g. kernel=(5, 5)") from exc
    sizes = list(value) if isinstance(value, (tuple, list)) else [value]
    if not sizes or len(sizes) > 2 or not all(isinstance(s, int) and s > 0 for s in sizes):
        raise ShapeError(f"kernel={text!r} must be one or two positive integers")
    if len(set(sizes)) != 1:
        raise ShapeError(f"kernel={text!r}: only square kernels are supported")
    return sizes[0]


def parse_num_filter(text):
    """'50' -> 50; at least 1."""
    try:
        value = int(str(text))
    except ValueError as exc:
        raise ShapeError(f"num_filter={text!r} is not an integer") from exc
    if value < 1:
        raise ShapeError(f"num_filter={text!r} must be at least 1")
    return value
