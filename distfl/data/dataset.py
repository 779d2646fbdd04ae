"""The in-memory form of a dataset, shared by every loader."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Dataset:
    """Features and labels of a whole dataset, held as numpy arrays.

    ``x`` is float32, or uint8 for image files (pixel values 0..255, scaled to [0, 1] only
    when a client's samples are materialised, which keeps CIFAR at 180 MiB per rank).
    ``owner`` and ``is_test`` describe a natural partition where the data has one (FEMNIST's
    writers, the synthetic Gaussian clients): the owner index of each sample and whether
    the provider put it in the test split. A generated dataset may hold none of its samples:
    its ``x`` and ``y`` are then array-likes that make the rows asked for (indexing with an
    integer array, ``shape``, ``dtype``), its samples lie owner by owner, and ``owner`` is
    None with ``owner_sizes`` and ``owner_class_counts`` in its place."""

    name: str
    x: np.ndarray  # [N, *input_shape] float32 or uint8
    y: np.ndarray  # [N] int64
    num_classes: int
    owner: np.ndarray | None = None  # [N] int64, natural client of each sample
    is_test: np.ndarray | None = None  # [N] bool, the provider's test split
    owner_names: tuple[str, ...] = ()  # e.g. FEMNIST writer ids, indexed by owner
    #: [owners] samples of each owner, the samples in owner order (a generated dataset)
    owner_sizes: np.ndarray | None = None
    #: [owners, C] class counts of each owner (a generated dataset, whose labels are not held)
    owner_class_counts: np.ndarray | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    @property
    def num_owners(self) -> int:
        if self.owner is None:
            return 0 if self.owner_sizes is None else len(self.owner_sizes)
        return int(self.owner.max()) + 1


def as_float(x: np.ndarray) -> np.ndarray:
    """Features as float32: uint8 pixels scaled to [0, 1], float arrays as they are."""
    if x.dtype == np.uint8:
        return x.astype(np.float32) / np.float32(255.0)
    return x.astype(np.float32, copy=False)
