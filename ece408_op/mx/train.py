"""Train the course models (``ece408-high``, ``ece408-low``) on the Fashion-MNIST training split.

The saved checkpoints take raw 0..255 pixels, as the course's did. Training
feeds pixels scaled by 1/255 to the same network; since the convolution has no
bias, conv(x / 255, w) == conv(x, w / 255), so the scale is folded into the
saved conv1 weights exactly. Weights are stored as float16 (MXNet casts them to
float32 on load) to keep each checkpoint near 7 MB.
"""
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..data import load_fashion_mnist
from .compat import import_mxnet
from .models import course_symbol

mx = import_mxnet()

SCALE = 1.0 / 255.0


@dataclass(frozen=True)
class Recipe:
    name: str
    train_images: int      # first N of the training split
    epochs: int
    learning_rate: float
    batch_size: int = 100
    seed: int = 408


RECIPES = {
    "ece408-high": Recipe("ece408-high", train_images=60000, epochs=10, learning_rate=1e-3),
    # Deliberately weak: few images, one short pass, so Correctness cannot be hard-coded.
    "ece408-low": Recipe("ece408-low", train_images=600, epochs=1, learning_rate=3e-4),
}


def _training_symbol():
    return course_symbol(data=mx.sym.Variable("data") * SCALE)


def train(recipe, data_dir=None, progress=True):
    """Train one recipe; return (arg_params, aux_params) for raw-pixel inputs, in float32."""
    mx.random.seed(recipe.seed)
    np.random.seed(recipe.seed)
    images, labels = load_fashion_mnist("train", recipe.train_images, data_dir)
    x = images.astype(np.float32).reshape(-1, 1, 28, 28)
    it = mx.io.NDArrayIter(x, labels.astype(np.float32), batch_size=recipe.batch_size,
                           shuffle=True, label_name="softmax_label")
    module = mx.mod.Module(_training_symbol(), context=mx.cpu())
    bar = _epoch_bar(recipe, progress)
    module.fit(it, num_epoch=recipe.epochs, optimizer="adam",
               optimizer_params={"learning_rate": recipe.learning_rate},
               initializer=mx.init.Xavier(magnitude=2.0), eval_metric="acc",
               epoch_end_callback=lambda *args: bar.update(1))
    bar.close()
    arg_params, aux_params = module.get_params()
    arg_params["conv1_weight"] = arg_params["conv1_weight"] * SCALE
    return arg_params, aux_params


def _epoch_bar(recipe, progress):
    from tqdm import tqdm
    return tqdm(total=recipe.epochs, desc=f"training {recipe.name}", unit="epoch", disable=not progress)


def save_float16(prefix, arg_params, aux_params, epoch=1):
    """Save the course symbol (built-in Convolution) with float16 weights."""
    half = {k: v.astype(np.float16) for k, v in arg_params.items()}
    half_aux = {k: v.astype(np.float16) for k, v in aux_params.items()}
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    mx.model.save_checkpoint(str(prefix), epoch, course_symbol(), half, half_aux)


def evaluate(prefix_or_name, data_dir=None, count=10000):
    """Accuracy of a saved checkpoint on the first ``count`` test images (built-in Convolution)."""
    from .inference import run_inference
    return run_inference(prefix_or_name, count, use_custom=False, data_dir=data_dir)["accuracy"]


def train_and_save(names, out_dir, data_dir=None, progress=True):
    logging.getLogger().setLevel(logging.WARNING)
    results = {}
    for name in names:
        recipe = RECIPES[name]
        start = time.time()
        arg_params, aux_params = train(recipe, data_dir, progress)
        prefix = Path(out_dir) / name
        save_float16(prefix, arg_params, aux_params)
        accuracy = evaluate(str(prefix), data_dir)
        results[name] = {"test_accuracy": accuracy, "seconds": round(time.time() - start, 1),
                         **recipe.__dict__}
        print(f"{name}: test accuracy {accuracy} ({results[name]['seconds']} s)", flush=True)
    return results
