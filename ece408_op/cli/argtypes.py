"""The number types of the command lines' options (argparse ``type=``): a bad value is a usage
error naming the option and the kind of number it takes (``invalid positive whole number value``)."""
import math


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
