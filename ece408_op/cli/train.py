"""``python -m ece408_op train``: retrain the shipped models (fixed seeds)."""
import json
from pathlib import Path

from .errors import ArgumentParser, run

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"


def command(argv):
    from .. import require_mxnet
    require_mxnet()
    from ..mx.train import RECIPES, train_and_save
    parser = ArgumentParser(prog="ece408_op train", description="Train the shipped models (ece408-high, ece408-low, ece408-2018, ece408-2019).")
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"models to train (default: all of {', '.join(RECIPES)})")
    parser.add_argument("--out", default=str(MODELS_DIR), help="folder for the checkpoints (default: %(default)s)")
    parser.add_argument("--data-dir")
    parser.add_argument("--custom", action="store_true",
                        help="train through ece408_conv (the CPU path's forward and backward) instead of "
                             "MXNet's Convolution; the checkpoint is the same network")
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in RECIPES]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r}; choose from {', '.join(RECIPES)}")
    results = train_and_save(args.names or list(RECIPES), args.out, args.data_dir, custom=args.custom)
    print(json.dumps(results, indent=2))
    return 0


def main(argv):
    return run(command, argv)
