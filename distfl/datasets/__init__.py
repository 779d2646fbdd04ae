"""Datasets: the interface (:mod:`~distfl.datasets.base`), the registry
(:mod:`~distfl.datasets.registry`) and one module per dataset, each registering itself
(see the docs' "Adding a dataset").

Nothing here imports a dataset module: the registry finds them when a name is first looked
up (:func:`dataset_spec`).
"""

from __future__ import annotations

from distfl.datasets.base import DatasetSpec
from distfl.datasets.registry import dataset_names, dataset_spec, dataset_specs, register
from distfl.presets import DEFAULT_DATASET

__all__ = [
    "DEFAULT_DATASET",
    "DatasetSpec",
    "dataset_names",
    "dataset_spec",
    "dataset_specs",
    "register",
]
