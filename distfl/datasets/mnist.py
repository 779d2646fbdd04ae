"""MNIST from its four IDX files under ``data.root`` (never downloaded)."""

from __future__ import annotations

from distfl.datasets.base import DatasetSpec
from distfl.datasets.registry import register


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
        from distfl.data.files import check_root, load_mnist

        check_root(config.data.root, cls.name)
        return load_mnist(config.data.root)
