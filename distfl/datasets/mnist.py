"""MNIST from its four IDX files under ``data.root`` (never downloaded): plain or gzipped, in
``data.root``, ``data.root/MNIST/raw`` (torchvision's layout) or ``data.root/mnist``.

Every problem with a file raises :class:`~distfl.errors.DataError` with one line naming the
path and the layout that was expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from distfl.datasets.base import DatasetSpec
from distfl.datasets.registry import register
from distfl.errors import DataError

if TYPE_CHECKING:
    from distfl.data.dataset import Dataset

_MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
_MNIST_LAYOUT = (
    "expected train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and "
    "t10k-labels-idx1-ubyte (plain or .gz) in data.root, data.root/MNIST/raw or data.root/mnist"
)


@register
class Mnist(DatasetSpec):
    name = "mnist"
    source = "IDX files"
    files = (
        "`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`, "
        "`t10k-labels-idx1-ubyte` (plain or `.gz`), in `data.root`, `data.root/MNIST/raw` "
        "or `data.root/mnist`"
    )
    num_classes = 10
    sample_shape = (1, 28, 28)
    sample_bytes = 784 + 8 + 1  # uint8 pixels, an int64 label, the test flag
    num_samples = 70_000
    needs_root = True

    @classmethod
    def load(cls, config):
        from distfl.data.files import check_root

        check_root(config.data.root, cls.name)
        return load_mnist(config.data.root)


def _mnist_dirs(root: Path) -> list[Path]:
    return [root, root / "MNIST" / "raw", root / "mnist"]


def _mnist_paths(root: Path) -> list[Path]:
    """The four IDX files, all from the first candidate directory holding any of them."""
    from distfl.data.files import find_in

    for d in _mnist_dirs(root):
        found = [find_in(d, base) for base in _MNIST_FILES]
        if any(p is not None for p in found):
            missing = [base for base, p in zip(_MNIST_FILES, found, strict=True) if p is None]
            if missing:
                raise DataError(f"{d / missing[0]} (or .gz) does not exist: {_MNIST_LAYOUT}")
            return [p for p in found if p is not None]
    raise DataError(f"{root} holds no MNIST IDX files: {_MNIST_LAYOUT}")


def _mnist_split(images_path: Path, labels_path: Path) -> tuple[np.ndarray, np.ndarray]:
    from distfl.data.files import IDX_IMAGES, IDX_LABELS, read_idx

    images = read_idx(images_path, IDX_IMAGES, _MNIST_LAYOUT)
    labels = read_idx(labels_path, IDX_LABELS, _MNIST_LAYOUT)
    if images.shape[0] != labels.shape[0]:
        raise DataError(
            f"{labels_path} has {labels.shape[0]} labels but {images_path} has "
            f"{images.shape[0]} images: expected one label per image"
        )
    if labels.size and int(labels.max()) >= 10:
        raise DataError(f"{labels_path} has label {int(labels.max())}: expected MNIST labels 0..9")
    return images, labels


def load_mnist(root: str) -> Dataset:
    """MNIST from its four IDX files: x uint8 [N, 1, rows, cols], the 60,000 train samples
    first, then the t10k test samples (``is_test`` True)."""
    from distfl.data.dataset import Dataset

    paths = _mnist_paths(Path(root).expanduser())
    x_train, y_train = _mnist_split(paths[0], paths[1])
    x_test, y_test = _mnist_split(paths[2], paths[3])
    if x_train.shape[1:] != x_test.shape[1:]:
        raise DataError(
            f"{paths[2]} has {x_test.shape[1]}x{x_test.shape[2]} images but {paths[0]} has "
            f"{x_train.shape[1]}x{x_train.shape[2]}: expected train and t10k images of one size"
        )
    x = np.concatenate([x_train, x_test])[:, None, :, :]
    y = np.concatenate([y_train, y_test]).astype(np.int64)
    is_test = np.zeros(len(y), dtype=bool)
    is_test[len(y_train) :] = True
    return Dataset(name="mnist", x=x, y=y, num_classes=10, owner=None, is_test=is_test)
