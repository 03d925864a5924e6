"""A device's kind: what the ranking groups runs by and what a team may ask its job to run on.

A kind is the device's name exactly as the run's machine reported it (nvidia-smi's or the CUDA
driver's GPU name, /proc/cpuinfo's CPU model), whitespace-normalised (runs of blanks as one
space, none at either end): ``NVIDIA H100 80GB HBM3``, ``NVIDIA H100 PCIe`` and ``NVIDIA H100
NVL`` are three kinds. Their memory, clocks and power limits differ, and so do Op Times: merging
the variants of a model would rank a team against runs on a faster card than its own. Only a name
reported with other spacing is the same kind.

A name a person types (``ranking --device``, ``submit --gpu``, the grading kind) names the kind
it equals (ignoring case and spacing), else the one kind it begins, or begins one of the words of
(``H100`` names ``NVIDIA H100 80GB HBM3`` where no other kind has a word starting ``H100``).
"""
from ..errors import Ece408Error
from ..base.names import printable


class KindError(Ece408Error):
    """A typed name that names no kind, or several."""


def kind_of(device):
    """The kind of a reported device name; None where there is none (a run that reached no device)."""
    if not isinstance(device, str):
        return None
    kind = " ".join(device.split())
    return kind or None


def matching(name, kinds):
    """The kinds of ``kinds`` that ``name`` names (see the module docstring): the one it equals,
    else every one it begins or begins a word of."""
    typed = " ".join(str(name).split()).casefold()
    if not typed:
        return []
    exact = [k for k in kinds if k.casefold() == typed]
    if exact:
        return exact[:1]
    return [k for k in kinds if (" " + k.casefold()).find(" " + typed) >= 0]


def listed(kinds):
    """The kinds as one line: ``A; B`` (``none`` where there are none)."""
    return "; ".join(printable(k, 80) for k in kinds) or "none"


def resolve(name, kinds, what="--device", among="device kind of these runs"):
    """The one kind of ``kinds`` that ``name`` names; KindError where it names none or several,
    one line: ``what`` and the name, then ``among`` (singular, e.g. "GPU kind seen lately") and
    the kinds to choose from."""
    found = matching(name, kinds)
    if len(found) == 1:
        return found[0]
    typed = printable(" ".join(str(name).split()), 60)
    if found:
        raise KindError(f"{what} {typed} names more than one {among}: {listed(found)}; give more of the name")
    raise KindError(f"{what} {typed} names no {among}; the kinds: {listed(sorted(kinds))}")
