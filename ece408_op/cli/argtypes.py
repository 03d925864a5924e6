"""The number types of the command lines' options (argparse ``type=``): a bad value is a usage
error naming the option and the kind of number it takes (``invalid positive whole number value``)."""
import math
import re


def positive(text):
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(text)
    return value


positive.__name__ = "finite positive number"


def _integer_from(low, kind):
    """The type of whole numbers from ``low`` up, named ``kind`` in argparse's error."""
    def parse(text):
        value = int(text)
        if value < low:
            raise ValueError(text)
        return value
    parse.__name__ = kind
    return parse


whole = _integer_from(1, "positive whole number")
count = _integer_from(0, "whole number")


UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:(?<=[KMGT])I?B|B)?\s*", re.I)


def byte_size(text):
    """Bytes, as ``1048576``, ``500M``, ``20G``, ``1.5TiB`` (K, M, G, T: powers of 1024, with or
    without ``iB`` or ``B``); at least 1."""
    match = SIZE.fullmatch(text)
    if match is None:
        raise ValueError(text)
    value = float(match.group(1)) * UNITS[match.group(2).upper()]
    if not (math.isfinite(value) and value >= 1):
        raise ValueError(text)
    return int(value)


byte_size.__name__ = "size in bytes (1048576, 500M, 20G)"
