"""scikit-learn's handwritten digits: the embedded default, no download."""

from __future__ import annotations

from distfl.datasets.base import DatasetSpec
from distfl.datasets.registry import register


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
        from distfl.data import load_digits_dataset

        return load_digits_dataset()
