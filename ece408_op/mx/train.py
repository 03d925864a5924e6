"""Train the course models on the Fashion-MNIST training split: ``ece408-high`` and
``ece408-low`` (2017 layout, 28x28), ``ece408-2018`` (2018 spring, 64x64) and
``ece408-2019`` (2019 fall, 70x70; both on the bilinear resize of data/resize.py).

The saved checkpoints take raw 0..255 pixels, as the course's did. Training
feeds pixels scaled by 1/255 to the same network; since the convolution has no
bias, conv(x / 255, w) == conv(x, w / 255), so the scale is folded into the
saved conv1 weights exactly. Weights are stored as float16 (MXNet casts them to
float32 on load) to keep each checkpoint small (7 MB, 3 MB, 6.5 MB).
"""
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..data import load_fashion_mnist
from ..data.resize import resize_bilinear
from .compat import import_mxnet
from .models import LATER_LAYOUTS, course_symbol, later_course_symbol

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
    layout: str = "2017"   # "2017" (course_symbol) or a key of models.LATER_LAYOUTS

    def symbol(self, data=None):
        """The network as saved (data=None: a raw-pixel data variable) or on ``data``."""
        if self.layout == "2017":
            return course_symbol(data=data)
        return later_course_symbol(**LATER_LAYOUTS[self.layout], data=data)

    @property
    def size(self):
        return LATER_LAYOUTS[self.layout]["size"] if self.layout != "2017" else 28


RECIPES = {
    "ece408-high": Recipe("ece408-high", train_images=60000, epochs=10, learning_rate=1e-3),
    # Deliberately weak: few images, one short pass, so Correctness cannot be hard-coded.
    "ece408-low": Recipe("ece408-low", train_images=600, epochs=1, learning_rate=3e-4),
    # The later course layouts, on inputs resized to 64x64 and 70x70.
    "ece408-2018": Recipe("ece408-2018", train_images=60000, epochs=10, learning_rate=1e-3, layout="2018"),
    "ece408-2019": Recipe("ece408-2019", train_images=60000, epochs=10, learning_rate=1e-3, layout="2019"),
}


def training_images(recipe, data_dir=None):
    """The recipe's training images as float32 N x 1 x size x size raw pixels (resized, rounded
    to uint8 first exactly as the test inputs are), and their labels."""
    images, labels = load_fashion_mnist("train", recipe.train_images, data_dir)
    if recipe.size != images.shape[1]:
        images = resize_bilinear(images, recipe.size)
    return images.astype(np.float32).reshape(-1, 1, recipe.size, recipe.size), labels


def train(recipe, data_dir=None, progress=True, custom=False):
    """Train one recipe; return (arg_params, aux_params) for raw-pixel inputs, in float32.
    ``custom``: every convolution is ece408_conv (CPU path), forward and backward (conv/backward.py);
    the checkpoint saved is the same built-in network either way."""
    mx.random.seed(recipe.seed)
    np.random.seed(recipe.seed)
    x, labels = training_images(recipe, data_dir)
    it = mx.io.NDArrayIter(x, labels.astype(np.float32), batch_size=recipe.batch_size,
                           shuffle=True, label_name="softmax_label")
    symbol = recipe.symbol(data=mx.sym.Variable("data") * SCALE)
    if custom:
        from .swap import swap_graph
        symbol = swap_graph(symbol, guard=False, device="cpu")[0]
    module = mx.mod.Module(symbol, context=mx.cpu())
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


def save_float16(prefix, arg_params, aux_params, epoch=1, recipe=None):
    """Save the recipe's symbol (built-in Convolution; default the 2017 layout) with float16 weights."""
    half = {k: v.astype(np.float16) for k, v in arg_params.items()}
    half_aux = {k: v.astype(np.float16) for k, v in aux_params.items()}
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    symbol = (recipe or RECIPES["ece408-high"]).symbol()
    mx.model.save_checkpoint(str(prefix), epoch, symbol, half, half_aux)


def evaluate(prefix_or_name, data_dir=None, count=10000):
    """Accuracy of a saved checkpoint on the first ``count`` test images (built-in Convolution)."""
    from .inference import run_inference
    return run_inference(prefix_or_name, count, use_custom=False, data_dir=data_dir)["accuracy"]


def train_and_save(names, out_dir, data_dir=None, progress=True, custom=False):
    logging.getLogger().setLevel(logging.WARNING)
    results = {}
    for name in names:
        recipe = RECIPES[name]
        start = time.time()
        arg_params, aux_params = train(recipe, data_dir, progress, custom)
        prefix = Path(out_dir) / name
        save_float16(prefix, arg_params, aux_params, recipe=recipe)
        accuracy = evaluate(str(prefix), data_dir)
        results[name] = {"test_accuracy": accuracy, "seconds": round(time.time() - start, 1),
                         "convolution": "ece408_conv" if custom else "Convolution", **recipe.__dict__}
        print(f"{name}: test accuracy {accuracy} ({results[name]['seconds']} s)", flush=True)
    return results
