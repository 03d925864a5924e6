"""Which version runs a layer: parsing a request, the measured defaults table and the fallback order.

    parse_version('v3') -> 3          ('auto'/None -> None, 'fast' -> FAST; GpuError for anything else)
    parse_precision('fp32') -> 'fp32' (None/'auto' -> $ECE408_PRECISION, else 'tf32x3')
    resolve_version(request, shape, device_name, tune, precision) -> (version, tuning overrides)

Precision (of float32 data; half-precision data computes in its own type, whatever the precision):
'tf32x3' (the default) lets every version run, the error-compensated TF32 tensor-core ones too (three
TF32 products per pair of operands, each layer inside the float32 bound, but a deep network 10-100x
further from float64 than cuDNN fp32: docs/gpu-dropin.md); 'tf32' lets every version run and those
versions compute one TF32 product per pair (``Version.tf32``: ``TF32_PASSES`` 1, tf32.cuh), as cuDNN's
convolutions with TF32 allowed (PyTorch's default) do; 'fp32' only versions of plain float32 arithmetic
(``Version.exact``). The table, the autotuner and the fallback order skip the others; asking for one
explicitly under 'fp32' is an error.

Which version runs a layer by default: the per-device table ``defaults.json`` (written by
``python -m ece408_op bench gpu --suite --apply`` from measurements on that device, keyed by the
device's name and the layer's shape class), else the autotuner's choice where the caller passes one
(``tune``: ``autotune.choose`` on the network call path), else the first version of the fallback order
(``fallback_order``: the versions' ``fallback_rank``) that runs the layer and suits it (``suits``: v7 only
where every channel's strip fits in registers).
"""
import json
import os
from pathlib import Path

from ..errors import GpuError, ShapeError
from .versions import VERSIONS
from .versions.registry import in_order

KERNEL_ENV = "ECE408_KERNEL"
PRECISION_ENV = "ECE408_PRECISION"
PRECISIONS = ("tf32x3", "tf32", "fp32")
DEFAULT_PRECISION = "tf32x3"
DEFAULTS_FILE = Path(__file__).with_name("defaults.json")
FAST = "fast"             # the request "v12 (Winograd) where it runs the layer, else the default"


def parse_version(text):
    """'auto' / None -> None; '3', 'v3', 'constant' -> 3; 'fast' -> FAST. Raises GpuError for anything else."""
    if text is None or str(text).strip().lower() in ("", "auto"):
        return None
    key = str(text).strip().lower()
    if key == FAST:
        return FAST
    for version in VERSIONS.values():
        if key in (str(version.number), f"v{version.number}", version.name):
            return version.number
    names = ", ".join(f"{v.number}/{v.name}" for v in VERSIONS.values())
    raise GpuError(f"unknown kernel {text!r}; choose auto, {FAST} (v12 where it runs, else auto) or one of {names}")


def parse_precision(text):
    """'tf32x3', 'tf32' or 'fp32' from a precision as given (None, '' or 'auto': $ECE408_PRECISION, else
    'tf32x3'; 'float32' for 'fp32'); GpuError for anything else."""
    if text is None or str(text).strip().lower() in ("", "auto", "default"):
        text = os.environ.get(PRECISION_ENV) or DEFAULT_PRECISION
    key = str(text).strip().lower()
    key = {"float32": "fp32", "ieee": "fp32"}.get(key, key)
    if key not in PRECISIONS:
        raise GpuError(f"unknown precision {text!r}; choose auto, tf32x3 (the default: error-compensated TF32 "
                       "tensor cores allowed), tf32 (one TF32 product, as cuDNN's TF32 mode) or fp32 (plain "
                       "float32 arithmetic only)")
    return key


def allowed(number, precision):
    """Whether version ``number`` may run under ``precision`` ('fp32': plain float32 arithmetic only, where
    the version computes float32 data at all: the precision does not govern half-precision data)."""
    version = VERSIONS[number]
    return precision != "fp32" or version.exact or "float32" not in version.dtypes


def precision_overrides(number, precision):
    """The tuning overrides ``precision`` sets on version ``number``: one TF32 product (TF32_PASSES 1) on the
    TF32 tensor-core versions under 'tf32', else none."""
    return {"TF32_PASSES": 1} if precision == "tf32" and VERSIONS[number].tf32 else {}


def _with_precision(number, overrides, precision):
    """(number, overrides with ``precision_overrides`` under them, or None where there are none)."""
    merged = {**precision_overrides(number, precision), **(overrides or {})}
    return number, merged or None


def shape_key(shape):
    """The defaults table's key of a shape class (its bias aside; the element type and layouts where not
    float32 NCHW)."""
    s = shape
    key = f"C{s.C} H{s.H} W{s.W} M{s.M} K{s.KH}x{s.KW} S{s.SH}x{s.SW} P{s.PH}x{s.PW} D{s.DH}x{s.DW} G{s.G}"
    if s.DTYPE != "float32":
        key += f" {s.DTYPE}"
    return key + (f" L{s.XL}{s.WL}" if s.XL or s.WL else "")


def load_defaults():
    """The measured defaults table: {device name: {"shapes": {shape key: version}, ...}}, read from disk."""
    if not DEFAULTS_FILE.exists():
        return {}
    return json.loads(DEFAULTS_FILE.read_text(encoding="utf-8"))


_measured = {}


def measured_defaults():
    """``load_defaults()`` read once per process and file (``reload_defaults`` forgets it)."""
    if DEFAULTS_FILE not in _measured:
        _measured[DEFAULTS_FILE] = load_defaults()
    return _measured[DEFAULTS_FILE]


def reload_defaults():
    _measured.clear()


def measured_version(shape, device_name, precision=DEFAULT_PRECISION):
    """The version defaults.json names for ``shape`` on this device, where it is still defaultable, runs
    the layer and is allowed under ``precision``; else None."""
    if device_name is None:
        return None
    measured = measured_defaults().get(device_name, {}).get("shapes", {}).get(shape_key(shape))
    if measured in VERSIONS and VERSIONS[measured].defaultable and VERSIONS[measured].unsupported(shape) is None \
            and allowed(measured, precision):
        return measured
    return None


def fallback_order():
    """The version numbers in fallback order: where no table measured on this device names the layer's
    shape, the first that runs it and suits it. Each version's ``fallback_rank`` (its Python file says why
    its place: mostly the course layer's H100 timings, docs/benchmarks.md)."""
    return in_order("fallback_rank")


def fallback_version(shape, precision=DEFAULT_PRECISION):
    """The first of ``fallback_order()`` that runs ``shape``, is allowed under ``precision`` and suits it."""
    supported = [n for n in fallback_order() if VERSIONS[n].unsupported(shape) is None and allowed(n, precision)]
    if not supported:
        why = "; ".join(f"{VERSIONS[n].label}: {VERSIONS[n].unsupported(shape) or 'not under ' + precision}"
                        for n in fallback_order() if shape.DTYPE in VERSIONS[n].dtypes)
        raise ShapeError(f"no kernel version runs this layer ({shape_key(shape)}): {why}")
    return next((n for n in supported if VERSIONS[n].suits(shape)), supported[0])


def default_version(shape, device_name=None, precision=DEFAULT_PRECISION):
    """The version measured fastest for ``shape`` on this device (defaults.json), else the first of the
    fallback order that runs ``shape`` and suits it (under ``precision``)."""
    return measured_version(shape, device_name, precision) or fallback_version(shape, precision)


def _requested(requested):
    """The request as a version number, FAST or None (auto), $ECE408_KERNEL standing in for auto."""
    if requested is None or str(requested).strip().lower() in ("", "auto"):
        requested = os.environ.get(KERNEL_ENV)
    return parse_version(requested)


def choose_version(requested, shape, device_name=None, precision=None):
    """Resolve 'auto'/None (then $ECE408_KERNEL) and 'fast' (for a whole network: v12 on its 3x3 stride-1
    layers, the default on the others) and check support; returns a version number."""
    return resolve_version(requested, shape, device_name, precision=precision)[0]


def resolve_version(requested, shape, device_name=None, tune=None, precision=None):
    """(version, tuning overrides or None) to run ``shape`` under ``precision`` (``parse_precision``): an
    explicit request (checked), else 'fast''s v12 where it runs (not under 'fp32'), else the measured table
    (defaults.json), else ``tune(shape)`` (the autotuner's (version, overrides), or None), else the fallback
    order."""
    precision = parse_precision(precision)
    number = _requested(requested)
    if number == FAST and VERSIONS[12].unsupported(shape) is None and allowed(12, precision):
        return 12, None
    if number in (None, FAST):
        measured = measured_version(shape, device_name, precision)
        if measured is not None:
            return _with_precision(measured, None, precision)
        tuned = tune(shape) if tune is not None else None
        return _with_precision(*(tuned if tuned is not None else (fallback_version(shape, precision), None)),
                               precision)
    reason = VERSIONS[number].unsupported(shape)
    if reason:
        raise ShapeError(f"kernel {VERSIONS[number].label} cannot run this layer: {reason}; use kernel=auto")
    if not allowed(number, precision):
        raise GpuError(f"kernel {VERSIONS[number].label} is not plain float32 arithmetic and precision='fp32' "
                       "was asked for; use kernel=auto or precision='tf32x3'")
    if VERSIONS[number].arch_features:        # (v20: built for sm_90a; elsewhere its entry point traps)
        missing = VERSIONS[number].available()
        if missing:
            raise GpuError(f"kernel {VERSIONS[number].label} cannot run here: {missing}; use kernel=auto")
    return _with_precision(number, None, precision)

