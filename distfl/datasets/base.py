"""What a dataset declares: one :class:`DatasetSpec` subclass per dataset, registered by
name (:func:`distfl.datasets.register`).

A spec says, in one place, what the config check, the capacity estimate, the runtime and
the docs need to know of a dataset: its classes, the shape of one sample, whether it is read
from files under ``data.root`` (and which), whether it has natural owners (a FEMNIST
writer: ``data.partition = "natural"``), whether it is generated from the config, what it
holds in memory on every rank, and its loader. Nothing here imports numpy or torch: the
config is checked, and ``distfl keys`` answers, without them; the loader imports what it
needs when it runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from distfl.settings import Params

if TYPE_CHECKING:
    from distfl.config import Config
    from distfl.data.dataset import Dataset

#: ``natural``: whether the dataset has natural owners, one client each
NATURAL = ("never", "optional", "always")


@dataclass(frozen=True)
class NoParams(Params):
    """A dataset without keys of its own."""


class DatasetSpec:
    """One dataset. Subclass it, set the class attributes, write :meth:`load`, and decorate
    the class with :func:`distfl.datasets.register`."""

    #: ``data.dataset = name`` (lower case: letters, digits, _)
    name: ClassVar[str] = ""
    #: the docs' dataset table: where the samples come from
    source: ClassVar[str] = ""
    #: the docs' dataset table: the files it reads under ``data.root`` ("none")
    files: ClassVar[str] = "none"
    #: the docs' dataset table: the classes, when more is to be said than their number
    classes_text: ClassVar[str] = ""
    #: classes of the labels (0 .. num_classes - 1)
    num_classes: ClassVar[int] = 0
    #: the shape of one sample ([C, H, W] for images)
    sample_shape: ClassVar[tuple[int, ...]] = ()
    #: bytes one sample takes in memory as the loader holds it (features and label)
    sample_bytes: ClassVar[int] = 0
    #: samples the loader holds on every rank (0: none, a dataset generated when asked)
    num_samples: ClassVar[int] = 0
    #: read from files under ``data.root`` (which must then be given)
    needs_root: ClassVar[bool] = False
    #: ``"never"``; ``"optional"``: ``data.partition = "natural"`` gives one client per
    #: natural owner; ``"always"``: every client is a natural owner, whatever data.partition
    natural: ClassVar[str] = "never"
    #: the samples are made from the config (each owner's size from data.samples_per_client
    #: and the groups), not read: a client's samples follow the config's sizes
    generated: ClassVar[bool] = False
    #: its own keys under ``[data]``: a frozen dataclass of :class:`~distfl.algorithms.Params`
    #: whose fields are declared with ``setting(default, allowed, doc)`` and whose ``check``
    #: refuses impossible values (``config.data.<key>`` reads them)
    Params: ClassVar[type[Params]] = NoParams

    @classmethod
    def shape_text(cls) -> str:
        """The sample shape as the docs show it."""
        return "[" + ", ".join(str(n) for n in cls.sample_shape) + "]"

    @classmethod
    def input_shape(cls, config: Config) -> tuple[int, ...]:
        """One sample's shape under ``config`` (without loading anything)."""
        return cls.sample_shape

    @classmethod
    def classes(cls, config: Config) -> int:
        return cls.num_classes

    @classmethod
    def natural_partition(cls, config: Config) -> bool:
        """Whether ``config``'s clients are the dataset's natural owners."""
        return cls.natural == "always" or (
            cls.natural == "optional" and config.data.partition == "natural"
        )

    @classmethod
    def memory_terms(cls, config: Config) -> dict[str, tuple[int, str]]:
        """What the loaded dataset holds on every rank, for the capacity check: term name
        -> (bytes, what it is). By default its ``num_samples`` samples of ``sample_bytes``."""
        if not cls.num_samples:
            return {}
        features = math.prod(cls.input_shape(config))
        return {
            "dataset": (
                cls.num_samples * cls.sample_bytes,
                f"the {cls.name} dataset of {cls.num_samples:,} samples of {features:,} "
                "features, held on every rank,",
            )
        }

    @classmethod
    def size_keys(cls) -> dict[str, tuple[int, str]]:
        """Keys of this dataset's own (its ``Params``) that grow the memory estimate: key ->
        (its least value, the unit one step of it adds)."""
        return {}

    @classmethod
    def load(cls, config: Config) -> Dataset:
        """The whole dataset (a :class:`~distfl.data.dataset.Dataset`); a
        :class:`~distfl.errors.DataError` naming the path and the expected format when a
        file is missing or malformed. What it gives is checked against this spec before
        anything is partitioned (:func:`~distfl.data.dataset.check_dataset`)."""
        raise NotImplementedError(f"{cls.__name__} has no loader")
