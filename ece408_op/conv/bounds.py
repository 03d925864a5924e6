"""Error models of the two GPU versions that do not keep the float32 bound: v17 (FP16 storage and
arithmetic) and v19 (FFT overlap-add). Each returns the float64 reference and an elementwise bound
its results must meet; ``*_errors`` give the measured figures the docs quote (error / own bound,
error / float32 bound, and for FP16 the RMS error against the random-walk model).

FP16 (v17): x and k rounded to half (unit roundoff u16 = 2^-11, 8192 x float32's), then n = C*K*K
fused multiply-adds into a half accumulator, each rounding once. The classic worst case is
|error| <= gamma_(n+2) * sum |x k| (two input roundings and n accumulation roundings, Higham's
gamma_n = n u / (1 - n u), taken as 1.1 n u), plus what subnormal halves lose in absolute terms
(2^-25 per rounding, below 2^-14) and the float32 bias. The worst case grows with n but real
rounding errors add like a random walk, about u16 * sqrt(n) * |sum|: the tests also check the RMS
error against u16 * sqrt(n + 2) * RMS(sum |x k|), which a wrong index or window misses by 7x or more
(a NumPy simulation of the kernel's order measured 0.02-0.64 of it on the test shapes).

FFT (v19): a convolution by transforms of size F x F is accurate norm-wise, not elementwise: each
output carries rounding of the energy of the whole tile it comes from. Model: |error| <= u32 *
(2 log2 F + C) * sum over c of ||x_bc||_2 ||k_mc||_2 (whole images; log2 F^2 for the transform
pairs, C for the sum over channels), plus the float32 bound (the bias, added after). A NumPy float32
simulation reached 0.006-0.11 of it; a wrong index misses it by 10^3 or more.
"""
import math

import numpy as np

from .reference import conv2d_forward_reference, reference_and_bound

U32 = 2.0 ** -24
U16 = 2.0 ** -11
HALF_SUBNORMAL = 2.0 ** -24          # spacing of half's subnormals (below 2^-14)


def _terms(k):
    return k.shape[1] * k.shape[2] * k.shape[3]


def _worst(err, bound):
    """Largest err / bound; infinite where a NaN is present (an element never written)."""
    return float("inf") if np.isnan(err).any() else float((err / bound).max(initial=0.0))


def fp16_reference_and_bound(x, k, bias=None, spec=None):
    """(float64 reference, elementwise worst-case bound of a half-precision result)."""
    ref, bound32 = reference_and_bound(x, k, bias, spec)
    magnitude = conv2d_forward_reference(np.abs(x), np.abs(k), None, spec)
    n = _terms(k)
    subnormal = n * HALF_SUBNORMAL * (1.0 + float(np.abs(x).max(initial=0.0)))
    return ref, bound32 + 1.1 * (n + 2) * U16 * magnitude + subnormal


def fp16_errors(y, x, k, bias=None, spec=None):
    """{'vs_bound', 'rms_vs_model', 'vs_float32'} of a half-precision result ``y``."""
    ref, bound = fp16_reference_and_bound(x, k, bias, spec)
    bound32 = reference_and_bound(x, k, bias, spec)[1]
    magnitude = conv2d_forward_reference(np.abs(x), np.abs(k), None, spec)
    err = np.abs(np.asarray(y, np.float64) - ref)
    rms_model = U16 * math.sqrt(_terms(k) + 2) * math.sqrt(float((magnitude ** 2).mean()))
    return {"vs_bound": _worst(err, bound), "rms_vs_model": math.sqrt(float((err ** 2).mean())) / max(rms_model, 1e-300),
            "vs_float32": _worst(err, bound32)}


def fft_reference_and_bound(x, k, bias=None, spec=None, size=32):
    """(float64 reference, elementwise bound of an FFT result with F x F = ``size`` x ``size`` transforms)."""
    ref, bound32 = reference_and_bound(x, k, bias, spec)
    x_norms = np.sqrt((np.asarray(x, np.float64) ** 2).sum(axis=(2, 3)))          # B x C
    k_norms = np.sqrt((np.asarray(k, np.float64) ** 2).sum(axis=(2, 3)))          # M x C/G
    groups = 1 if spec is None else spec.num_group
    if groups != 1:
        raise ValueError("the FFT model is for one group")
    energy = x_norms @ k_norms.T                                                      # B x M
    scale = U32 * (2 * math.log2(size) + x.shape[1])
    return ref, bound32 + scale * energy[:, :, None, None]


def fft_errors(y, x, k, bias=None, spec=None, size=32):
    """{'vs_bound', 'vs_float32'} of an FFT result ``y``."""
    ref, bound = fft_reference_and_bound(x, k, bias, spec, size)
    bound32 = reference_and_bound(x, k, bias, spec)[1]
    err = np.abs(np.asarray(y, np.float64) - ref)
    return {"vs_bound": _worst(err, bound), "vs_float32": _worst(err, bound32)}
