"""FEMNIST from LEAF's JSON files under ``data.root``: one natural owner per writer."""

from __future__ import annotations

from distfl.datasets.base import DatasetSpec
from distfl.datasets.registry import register


@register
class Femnist(DatasetSpec):
    name = "femnist"
    source = "LEAF JSON"
    files = "`train/*.json` and `test/*.json` (or LEAF's own `data/train`, `data/test`)"
    num_classes = 62
    sample_shape = (1, 28, 28)
    #: float32 pixels, an int64 label, an int64 owner, the test flag
    sample_bytes = 784 * 4 + 8 + 8 + 1
    num_samples = 805_263  # LEAF's full set; a sampled one holds fewer
    needs_root = True
    natural = "optional"

    @classmethod
    def load(cls, config):
        from distfl.data.files import check_root, load_femnist

        check_root(config.data.root, cls.name)
        return load_femnist(config.data.root)
