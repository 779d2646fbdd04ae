"""Datasets by name: each registers itself with :func:`register`, which checks what a
dataset declares and adds it to :data:`distfl.plugins.DATASETS`.

The modules of ``distfl/datasets/`` are found and imported the first time a name is looked
up; a dataset defined elsewhere registers when its module is imported, e.g. through
``run.plugins``, which every rank reads from the config before the config is checked.
"""

from __future__ import annotations

from distfl.datasets.base import NATURAL, DatasetSpec
from distfl.plugins import DATASETS
from distfl.settings import Params


def register(cls: type[DatasetSpec]) -> type[DatasetSpec]:
    """Class decorator: make ``cls`` available as ``data.dataset = cls.name``."""
    DATASETS.check_class(cls, DatasetSpec)
    if not isinstance(cls.num_classes, int) or cls.num_classes < 2:
        raise ValueError(f"{cls.__name__}.num_classes = {cls.num_classes!r}: at least 2")
    if cls.natural not in NATURAL:
        raise ValueError(f"{cls.__name__}.natural = {cls.natural!r}: one of {NATURAL}")
    shape = cls.sample_shape
    if not cls.generated and not (
        isinstance(shape, tuple) and shape and all(isinstance(n, int) and n > 0 for n in shape)
    ):
        raise ValueError(f"{cls.__name__}.sample_shape = {shape!r}: a tuple of positive ints")
    if cls.load.__func__ is DatasetSpec.load.__func__:
        raise TypeError(f"{cls.__name__} has no loader (its load)")
    if isinstance(cls.Params, type) and issubclass(cls.Params, Params):
        cls.Params.check_declarations(cls.__name__)
    return DATASETS.add(cls)


def dataset_names() -> list[str]:
    """Every registered name, sorted."""
    return DATASETS.names()


def dataset_spec(name: str) -> type[DatasetSpec]:
    """The spec registered as ``name``; ConfigError naming the registered ones otherwise
    (never a default)."""
    return DATASETS.get(name)


def dataset_specs() -> list[type[DatasetSpec]]:
    """Every registered spec, by name."""
    return DATASETS.classes()
