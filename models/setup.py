"""ece408_op_models: the course's trained checkpoints (ece408-high, ece408-low, ece408-2018, ece408-2019),
a distribution of their own, built from this folder, so that the class's client (the base install, what
every laptop carries) holds none of their 23 MB. The package's mxnet extra (and every extra built on it)
depends on it; from a clone: pip install ./models '.[mxnet]'. They install where the package looks for
them: <prefix>/share/ece408_op/models (ece408_op/mx/models.py, ece408_op/grading/inputs.py)."""
import os
from glob import glob

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = sorted(os.path.relpath(p, HERE) for p in glob(os.path.join(HERE, "*-symbol.json")) +
               glob(os.path.join(HERE, "*.params")))

setup(
    name="ece408_op_models",
    version="0.1.0",
    description="The trained Fashion-MNIST checkpoints of ece408_op (the UIUC ECE 408 project harness)",
    license="MIT",
    python_requires=">=3.9",
    packages=[],
    py_modules=[],
    data_files=[("share/ece408_op/models", FILES)],
)
