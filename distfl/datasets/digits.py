"""scikit-learn's handwritten digits: the embedded default, no download."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from distfl.datasets.base import DatasetSpec
from distfl.datasets.registry import register

if TYPE_CHECKING:
    from distfl.data.dataset import Dataset


@register
class Digits(DatasetSpec):
    name = "digits"
    source = "scikit-learn's wheel"
    files = "none"
    num_classes = 10
    sample_shape = (1, 8, 8)
    sample_bytes = 64 * 4 + 8  # float32 pixels, an int64 label
    num_samples = 1797

    @classmethod
    def load(cls, config):
        return load_digits_dataset()


def load_digits_dataset() -> Dataset:
    """The 1797 8x8 images of scikit-learn's ``load_digits``, scaled to [0, 1], as [N, 1, 8, 8].

    Read from the file scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``) as
    ``load_digits`` reads it, without importing ``sklearn.datasets`` (0.8 s of every
    process's start-up); ``load_digits`` itself where the file is not found."""
    from distfl.data.dataset import Dataset

    spec = importlib.util.find_spec("sklearn")
    files = [
        Path(p) / "datasets" / "data" / "digits.csv.gz"
        for p in (spec.submodule_search_locations or [] if spec else [])
    ]
    path = next((f for f in files if f.is_file()), None)
    if path is not None:
        with gzip.open(path, "rt") as fh:
            data = np.loadtxt(fh, delimiter=",")
        images, target = data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)
    else:
        from sklearn.datasets import load_digits

        bunch = load_digits()
        images, target = bunch.images, bunch.target
    x = (images.astype(np.float32) / 16.0)[:, None, :, :]
    y = target.astype(np.int64)
    return Dataset(name="digits", x=x, y=y, num_classes=10)
