"""The shape class a module is compiled for: everything but the batch size."""
from dataclasses import dataclass

from ..errors import ShapeError


@dataclass(frozen=True)
class ConvShape:
    """C, H, W, M, K of a layer; the batch size stays a run-time argument."""
    C: int
    H: int
    W: int
    M: int
    K: int

    @classmethod
    def of(cls, x_shape, k_shape):
        if len(x_shape) != 4 or len(k_shape) != 4:
            raise ShapeError(f"need 4-D data and weight, got {tuple(x_shape)} and {tuple(k_shape)}")
        _, c, h, w = x_shape
        m, kc, kh, kw = k_shape
        if kc != c or kh != kw or not 1 <= kh <= min(h, w):
            raise ShapeError(f"weight {tuple(k_shape)} does not fit data {tuple(x_shape)} "
                             "(square kernel, same channels, no larger than the image)")
        return cls(int(c), int(h), int(w), int(m), int(kh))

    @property
    def HO(self):
        return self.H - self.K + 1

    @property
    def WO(self):
        return self.W - self.K + 1

    @property
    def CKK(self):
        return self.C * self.K * self.K

    def outputs(self, batch):
        """Elements of y for ``batch`` images."""
        return batch * self.M * self.HO * self.WO

    def defines(self):
        return {"CONV_C": self.C, "CONV_H": self.H, "CONV_W": self.W, "CONV_M": self.M, "CONV_K": self.K}
