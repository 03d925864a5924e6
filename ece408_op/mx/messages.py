"""MXNet's error texts in one line (standard library only: no MXNet import).

MXNet 1.9.1 formats its C++ errors as a fake Python traceback:

    Traceback (most recent call last):
      File "../src/ndarray/ndarray.cc", line 1860
    MXNetError: Check failed: fi->Read(data): Invalid NDArray file format

``mxnet_error_line`` keeps the part a person can act on ("Invalid NDArray file format").
"""
import re

_NOISE = re.compile(r"^(Traceback \(most recent call last\)|File \"|\[bt\]|Stack trace)")


def mxnet_error_line(exc):
    """The meaningful line of an MXNetError (or of any exception whose text looks like one)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip() and not _NOISE.match(line.strip())]
    if not lines:
        return type(exc).__name__
    text = next((line for line in lines if re.match(r"^\w+: ", line) and "Check failed" in line
                 or line.startswith("MXNetError:")), lines[-1])
    text = re.sub(r"^\w+: (?=Check failed)", "", text)
    text = re.sub(r"^MXNetError: ", "", text)
    checked = re.match(r"^Check failed: .*?: (.+)$", text)
    if checked:
        text = checked.group(1).lstrip(": ")
    return text
