"""The grader's inputs to a run: its models, its Fashion-MNIST test split and the hidden model,
read here (outside every sandbox) and sent to the measuring process over its channel."""
import base64
import os
import sys
from pathlib import Path

from ..errors import Ece408Error
from ..base.names import printable
from .request import SubmitError

MAX_HIDDEN_BYTES = 256 << 20


def model_dirs():
    """The folders the grader's models are in (as ``mx.models.model_dirs`` finds them, without MXNet)."""
    dirs = []
    if os.environ.get("ECE408_MODEL_DIR"):
        dirs.append(Path(os.environ["ECE408_MODEL_DIR"]))
    dirs.append(Path(__file__).resolve().parents[2] / "models")
    dirs.append(Path(sys.prefix) / "share" / "ece408_op" / "models")
    return [d for d in dirs if d.is_dir()]


def data_dir():
    """The folder the grader's Fashion-MNIST test split is in; SubmitError where there is none."""
    from ..data.lookup import inspect_folder, search_order
    for folder, role in search_order():
        try:
            if inspect_folder(folder, "test", role) is not None:
                return Path(folder).resolve()
        except Ece408Error as exc:
            raise SubmitError(f"the grader's data: {exc}") from exc
    raise SubmitError("no Fashion-MNIST test split here for the runs: python -m ece408_op fetch")


def hidden_files(prefix):
    """The checkpoint files of a hidden model prefix (``name-symbol.json`` + the newest ``name-NNNN.params``)."""
    prefix = Path(prefix)
    symbol = prefix.parent / f"{prefix.name}-symbol.json"
    params = sorted(prefix.parent.glob(f"{prefix.name}-[0-9][0-9][0-9][0-9].params"))
    if not symbol.is_file() or not params:
        raise SubmitError(f"hidden model {printable(str(prefix))}: needs {printable(symbol.name)} and "
                          f"{printable(prefix.name)}-NNNN.params beside it")
    return symbol, params[-1]


def read_hidden(prefix):
    """The hidden model as the job carries it: its name, symbol JSON and parameters (base64)."""
    symbol, params = hidden_files(prefix)
    for path in (symbol, params):
        if path.stat().st_size > MAX_HIDDEN_BYTES:
            raise SubmitError(f"hidden model file {printable(path.name)} is larger than {MAX_HIDDEN_BYTES >> 20} MiB")
    return {"name": "hidden", "symbol": symbol.read_text(encoding="utf-8"),
            "params": base64.b64encode(params.read_bytes()).decode("ascii")}


def course_model_files(name):
    """{symbol, params (base64)} of the grader's course model ``name``, for the job."""
    for folder in model_dirs():
        if (folder / f"{name}-symbol.json").is_file():
            symbol, params = hidden_files(folder / name)
            return {"symbol": symbol.read_text(encoding="utf-8"),
                    "params": base64.b64encode(params.read_bytes()).decode("ascii")}
    raise SubmitError(f"the grader's model {name} is not installed here (looked in "
                      f"{', '.join(str(d) for d in model_dirs()) or 'no model folder'}); set $ECE408_MODEL_DIR")


def test_images(size):
    """{images, labels (base64), shape} of the first ``size`` test images, for the job: the
    measuring process gets them over its channel, never as a file its sandbox shows."""
    from ..data import load_fashion_mnist
    try:
        images, labels = load_fashion_mnist("test", size)
    except Ece408Error as exc:
        raise SubmitError(f"the grader's data: {exc}") from exc
    return {"images": base64.b64encode(images.tobytes()).decode("ascii"),
            "labels": base64.b64encode(labels.tobytes()).decode("ascii"), "shape": list(images.shape)}
