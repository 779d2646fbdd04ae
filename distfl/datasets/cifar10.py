"""CIFAR-10 from its python pickle batches under ``data.root`` (never downloaded)."""

from __future__ import annotations

from distfl.datasets.base import DatasetSpec
from distfl.datasets.registry import register


@register
class Cifar10(DatasetSpec):
    name = "cifar10"
    source = "python pickle batches"
    files = (
        "`cifar-10-batches-py/` with `data_batch_1`..`5` and `test_batch` (`data.root` may "
        "be that directory or its parent)"
    )
    num_classes = 10
    sample_shape = (3, 32, 32)
    sample_bytes = 3 * 32 * 32 + 8 + 1  # uint8 pixels, an int64 label, the test flag
    num_samples = 60_000
    needs_root = True

    @classmethod
    def load(cls, config):
        from distfl.data.files import check_root, load_cifar

        check_root(config.data.root, cls.name)
        return load_cifar(config.data.root, cls.num_classes)
