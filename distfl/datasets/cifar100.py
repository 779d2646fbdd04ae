"""CIFAR-100 from its python pickle files under ``data.root`` (never downloaded)."""

from __future__ import annotations

from distfl.datasets.base import DatasetSpec
from distfl.datasets.registry import register


@register
class Cifar100(DatasetSpec):
    name = "cifar100"
    source = "python pickle batches"
    files = "`cifar-100-python/` with `train` and `test`"
    classes_text = "100 (fine labels)"
    num_classes = 100
    sample_shape = (3, 32, 32)
    sample_bytes = 3 * 32 * 32 + 8 + 1  # uint8 pixels, an int64 label, the test flag
    num_samples = 60_000
    needs_root = True

    @classmethod
    def load(cls, config):
        from distfl.data.files import check_root, load_cifar

        check_root(config.data.root, cls.name)
        return load_cifar(config.data.root, cls.num_classes)
