"""The in-memory form of a dataset, shared by every loader."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distfl.errors import ConfigError


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


#: elements of the features scanned for NaN and infinity at a time
_SCAN = 1 << 20


def check_dataset(dataset: object, *, who: str, shape: tuple[int, ...], num_classes: int) -> None:
    """Refuse, in one line that begins with ``who`` (the dataset and where it is defined),
    what a loader gave that its spec does not declare or a run cannot train on. Required: a
    :class:`Dataset` whose ``x`` and ``y`` are arrays; as many labels as samples, at least
    one; samples of the declared ``shape``, floating (trained as float32) or uint8,
    finite; integer labels in [0, ``num_classes``); the owners and test flags of a natural
    dataset, one a sample. Features and labels made on demand (a generated dataset's) are
    checked for their shape and dtype only."""

    def refuse(what: str) -> ConfigError:
        return ConfigError(f"{who}: load() {what}")

    if not isinstance(dataset, Dataset):
        raise refuse(f"returned {type(dataset).__name__}, not a distfl.data.dataset.Dataset")
    x, y = _array("x", dataset.x, refuse), _array("y", dataset.y, refuse)
    if len(y.shape) != 1:
        raise refuse(f"gave labels y of shape {list(y.shape)}; expected [N], one label a sample")
    n = y.shape[0]
    if not x.shape or x.shape[0] != n:
        samples = f"{x.shape[0]:,} samples" if x.shape else "no samples"
        raise refuse(f"gave {samples} in x and {n:,} labels in y; expected one label a sample")
    if not n:
        raise refuse("gave no samples")
    if tuple(x.shape[1:]) != tuple(shape):
        raise refuse(f"gave samples of shape {list(x.shape[1:])}; its spec declares "
                     f"{list(shape)} (sample_shape)")  # fmt: skip
    if x.dtype.kind != "f" and x.dtype != np.uint8:
        raise refuse(f"gave features x of dtype {x.dtype}; expected float32 (or uint8 pixels, "
                     "scaled to [0, 1] when a client is materialised)")  # fmt: skip
    if y.dtype.kind not in "iu":
        raise refuse(f"gave labels y of dtype {y.dtype}; expected int64")
    if dataset.num_classes != num_classes:
        raise refuse(f"gave num_classes = {dataset.num_classes!r}; its spec declares "
                     f"{num_classes}")  # fmt: skip
    if isinstance(y, np.ndarray) and (y.min() < 0 or y.max() >= num_classes):
        raise refuse(f"gave labels from {y.min()} to {y.max()}; expected 0 … {num_classes - 1} "
                     f"(num_classes = {num_classes})")  # fmt: skip
    if isinstance(x, np.ndarray) and x.dtype.kind == "f" and (bad := _not_finite(x)) >= 0:
        raise refuse(f"gave features x holding NaN or infinity (sample {bad}); a run trains on "
                     "finite numbers")  # fmt: skip
    for name in ("owner", "is_test"):
        a = getattr(dataset, name)
        if a is not None and np.shape(a) != (n,):
            raise refuse(f"gave {name} of shape {list(np.shape(a))}; expected [{n:,}], one "
                         "a sample")  # fmt: skip


def _array(name: str, a: object, refuse) -> np.ndarray:
    """``a`` when it is an array, or makes rows like one (a shape of ints and a numpy
    dtype)."""
    try:
        ok = all(isinstance(n, (int, np.integer)) for n in a.shape) and isinstance(
            a.dtype, np.dtype
        )
    except (AttributeError, TypeError):
        ok = False
    if not ok:
        raise refuse(f"gave {name} as {type(a).__name__}; expected a numpy array")
    return a


def _not_finite(x: np.ndarray) -> int:
    """The first sample of ``x`` holding NaN or infinity, or -1 (scanned in pieces: no copy
    of the features)."""
    rows = max(1, _SCAN // max(1, int(np.prod(x.shape[1:]))))
    for lo in range(0, len(x), rows):
        bad = ~np.isfinite(x[lo : lo + rows]).reshape(min(rows, len(x) - lo), -1).all(axis=1)
        if bad.any():
            return lo + int(np.argmax(bad))
    return -1
