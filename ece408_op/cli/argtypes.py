"""The number types of the command lines' options (argparse ``type=``): a bad value is a usage
error naming the option and the kind of number it takes (``invalid positive whole number value``)."""
import math


def positive(text):
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(text)
    return value


positive.__name__ = "finite positive number"


def whole(text):
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


whole.__name__ = "positive whole number"


def count(text):
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


count.__name__ = "whole number"
