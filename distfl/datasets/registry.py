"""Datasets by name: each registers itself with :func:`register`.

The modules of ``distfl/datasets/`` are found and imported the first time a name is looked
up; a dataset defined elsewhere registers when its module is imported, e.g. through
``run.plugins``, which every rank reads from the config before the config is checked.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

from distfl.algorithms.registry import _origin  # one file imported twice is one class
from distfl.datasets.base import NATURAL, DatasetSpec
from distfl.errors import ConfigError, did_you_mean

_REGISTRY: dict[str, type[DatasetSpec]] = {}
_DISCOVERED = False
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
#: modules of this package that hold no dataset
_INTERFACE = {"base", "registry"}


def register(cls: type[DatasetSpec]) -> type[DatasetSpec]:
    """Class decorator: make ``cls`` available as ``data.dataset = cls.name``."""
    if not (isinstance(cls, type) and issubclass(cls, DatasetSpec)):
        raise TypeError(f"{cls!r} is not a DatasetSpec subclass")
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"{cls.__name__}.name = {name!r}: a dataset needs a lower-case name "
            "(letters, digits, _)"
        )
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
    previous = _REGISTRY.get(name)
    if previous is not None and _origin(previous) != _origin(cls):
        raise ValueError(
            f"dataset name {name!r} is taken by {previous.__module__}.{previous.__qualname__}; "
            f"{cls.__module__}.{cls.__qualname__} needs another name"
        )
    _REGISTRY[name] = cls
    return cls


def _discover() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    package = importlib.import_module("distfl.datasets")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name not in _INTERFACE and not info.name.startswith("_"):
            importlib.import_module(f"distfl.datasets.{info.name}")


def dataset_names() -> list[str]:
    """Every registered name, sorted."""
    _discover()
    return sorted(_REGISTRY)


def dataset_spec(name: str) -> type[DatasetSpec]:
    """The spec registered as ``name``; ConfigError naming the registered ones otherwise
    (never a default)."""
    _discover()
    cls = _REGISTRY.get(name)
    if cls is None:
        raise ConfigError(
            f"data.dataset = {name!r}{did_you_mean(name, _REGISTRY)}: allowed values are "
            f"{', '.join(dataset_names())} "
            "(a dataset of your own registers when its module is imported: run.plugins)"
        )
    return cls


def dataset_specs() -> list[type[DatasetSpec]]:
    """Every registered spec, by name."""
    return [dataset_spec(name) for name in dataset_names()]
