"""Datasets' in-memory form, partitions and per-group transforms.

Which datasets there are, and how each is read, is :mod:`distfl.datasets`' (one module per
dataset: its spec and its loader); what their loaders share (the root check, plain or
gzipped files, IDX files, numpy-only pickles) is :mod:`~distfl.data.files`. Nothing here
imports :mod:`distfl.datasets`: a dataset's spec is looked up by name in
:data:`distfl.plugins.DATASETS`, as the config looks it up.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np
import torch

from distfl.config import Config, GroupSpec
from distfl.config.held_out import held_out_counts
from distfl.data.dataset import Dataset, as_float, check_dataset
from distfl.data.natural import OwnerPopulation, natural_partition
from distfl.data.partition import (
    Partition,
    Population,
    dirichlet_partition,
    per_client_population,
    shard_clients,
)
from distfl.data.transforms import apply_group
from distfl.errors import ConfigError
from distfl.plugins import DATASETS, defined_in, raised


def load_dataset(config: Config) -> Dataset:
    """The dataset of ``data.dataset``, by its registered spec's loader
    (:mod:`distfl.datasets`): built in, generated or read from files under ``data.root``
    (a :class:`~distfl.errors.DataError` when they are missing or malformed), checked
    against its spec (:func:`~distfl.data.dataset.check_dataset`: a ConfigError naming the
    dataset and where it is defined). A loader's ``sys.exit`` is such an error too; what
    else it raises goes up as it is (a failed loader)."""
    spec = DATASETS.get(config.data.dataset)
    who = f"data.dataset = {config.data.dataset!r} ({defined_in(spec)})"
    try:
        dataset = spec.load(config)
    except (Exception, KeyboardInterrupt):
        raise
    except BaseException as exc:  # its sys.exit: exit code 0 and no run, were it let through
        raise ConfigError(f"{who}: load() raised {raised(exc)}") from None
    check_dataset(dataset, who=who, shape=tuple(spec.input_shape(config)),
                  num_classes=spec.classes(config))  # fmt: skip
    return dataset


def make_partition(config: Config, dataset: Dataset) -> Partition | Population | OwnerPopulation:
    """Which samples each client holds: a draw per group from the pooled samples, by the
    group's ``partition`` (Dirichlet, k classes per client or shards; ``data.draw``: a
    :class:`Population` drawn per client, or 0.1.0's sequential :class:`Partition`), or one
    client per natural owner (``data.partition = "natural"``, or a dataset whose clients
    always are its owners: its spec's ``natural``)."""
    check_transforms(config.groups, dataset)
    spec = DATASETS.get(config.data.dataset)
    if not (spec.natural_partition(config) or spec.generated):
        check_enough(config, dataset, spec)
    try:
        if spec.natural_partition(config):
            if dataset.owner is None and dataset.owner_sizes is None:
                raise ConfigError(
                    f"data.partition = 'natural': {dataset.name} has no natural owners"
                )
            return natural_partition(
                dataset.owner,
                dataset.is_test,
                config.groups,
                test_fraction=config.data.test_fraction,
                seed=config.run.effective_data_seed(),
                num_classes=dataset.num_classes,
                owner_sizes=dataset.owner_sizes,
                owner_counts=dataset.owner_class_counts,
            )
        draw = per_client_population if config.data.draw == "per_client" else dirichlet_partition
        groups, origin = with_newcomers(config)
        partition = draw(
            dataset.y,
            groups,
            samples_per_client=config.data.samples_per_client,
            test_fraction=config.data.test_fraction,
            seed=config.run.effective_data_seed(),
            quantity_skew=config.data.quantity_skew,
            num_classes=dataset.num_classes,
        )
        if len(origin) > len(config.groups):  # the newcomers' groups are their groups'
            partition = replace(partition, group=np.asarray(origin)[partition.group])
        return partition
    except ValueError as exc:
        raise ConfigError(f"data.groups / data.num_clients: {exc} in {dataset.name}") from None


def with_newcomers(config: Config) -> tuple[tuple[GroupSpec, ...], tuple[int, ...]]:
    """The groups a pooled partition is drawn from: ``data.groups``, then, for the
    newcomers of ``data.held_out``, each group again with its count of newcomers (those of
    none left out), and the index in ``data.groups`` of each. The newcomers are drawn after
    every trained client, so that the trained clients and their samples are those of the
    run without them: clients K, K + 1, ... are the newcomers, group by group."""
    counts = held_out_counts(config.data.held_out, [g.count for g in config.groups])
    pairs = enumerate(zip(config.groups, counts, strict=True))
    extra = [(i, replace(g, count=n)) for i, (g, n) in pairs if n]
    origin = (*range(len(config.groups)), *(i for i, _ in extra))
    return (*config.groups, *(g for _, g in extra)), origin


def check_enough(config: Config, dataset: Dataset, spec) -> None:
    """Refuse a dataset of fewer samples than a client of the config holds: that client
    would hold some of them several times, in its train and its test split alike."""
    have = int(dataset.y.shape[0])
    for i, g in enumerate(config.groups):
        need = max(g.samples_per_client or config.data.samples_per_client,
                   g.classes_per_client if g.partition == "classes_per_client" else 0)  # fmt: skip
        if need > have:
            key = f"data.groups[{i}].samples_per_client" if g.samples_per_client else (
                "data.samples_per_client")  # fmt: skip
            raise ConfigError(
                f"{key} = {need:,}: data.dataset = {config.data.dataset!r} "
                f"({defined_in(spec)}) holds {have:,} samples; a client needs at least as many "
                "distinct samples as it holds, or its train and test splits share samples"
            )


def check_transforms(groups: tuple[GroupSpec, ...], dataset: Dataset) -> None:
    """Refuse, on every rank before any collective, a transform the data cannot take."""
    shape = dataset.input_shape
    image = len(shape) == 3
    for i, g in enumerate(groups):
        key = f"data.groups[{i}]"
        if not image and (g.blur or g.patch):
            what = "blur" if g.blur else "patch"
            raise ConfigError(
                f"{key}.{what}: {dataset.name} features have shape {list(shape)}; blur and "
                "patch apply to images only"
            )
        if image and g.patch > min(shape[1:]):
            raise ConfigError(
                f"{key}.patch = {g.patch}: larger than the {shape[1]}x{shape[2]} images"
            )
        if image and shape[1] != shape[2] and g.rotation % 180 and not g.rotation % 90:
            raise ConfigError(
                f"{key}.rotation = {g.rotation}: a quarter turn of {shape[1]}x{shape[2]} "
                "images changes their shape"
            )


@dataclass
class ClientData:
    """One client's local data, as tensors on the worker's device."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    @property
    def num_train(self) -> int:
        return int(self.y_train.shape[0])

    @property
    def nbytes(self) -> int:
        return sum(
            t.numel() * t.element_size()
            for t in (self.x_train, self.y_train, self.x_test, self.y_test)
        )


def load_client(
    dataset: Dataset,
    partition: Partition | Population | OwnerPopulation,
    k: int,
    device: torch.device,
    *,
    groups: tuple[GroupSpec, ...],
    seed: int,
) -> ClientData:
    """Materialise client k: its samples, with the transforms of its group applied to its
    train and test splits alike. A pure function of (dataset, partition, seed, k)."""
    g = int(partition.group[k])
    train, test = partition.indices(k)
    idx = np.concatenate([train, test])
    # make_partition's check_transforms has refused what apply_group cannot do
    x, y = apply_group(
        as_float(dataset.x[idx]), dataset.y[idx], groups[g],
        num_classes=dataset.num_classes, seed=seed, group=g, client=k,
    )  # fmt: skip
    n = len(train)
    return ClientData(
        x_train=torch.from_numpy(x[:n]).to(device),
        y_train=torch.from_numpy(y[:n]).to(device),
        x_test=torch.from_numpy(x[n:]).to(device),
        y_test=torch.from_numpy(y[n:]).to(device),
    )


def load_clients(
    dataset: Dataset,
    partition: Partition | Population | OwnerPopulation,
    clients: Iterable[int],
    device: torch.device,
    *,
    groups: tuple[GroupSpec, ...],
    seed: int,
) -> dict[int, ClientData]:
    """:func:`load_client` of each of ``clients``."""
    return {
        k: load_client(dataset, partition, k, device, groups=groups, seed=seed) for k in clients
    }


def _malloc_trim():
    """glibc's ``malloc_trim``, or None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


def release_free_heap() -> None:
    """Give the free pages inside the C heap back to the system (glibc's malloc_trim).

    A cached client's small objects (tensor headers, arrays) stay between the freed
    temporaries of the steps that used it, and the heap returns memory only from its top:
    without this, a worker materialising IFCA's probes of 100,000 clients through a 256 MiB
    cache held about 1.7 GiB, with it about 1.3 GiB (with no cache: 0.74 GiB). Giving each
    client's data a memory map of its own saved a little more but cost 20% of the time."""
    if _TRIM is not None:
        _TRIM(0)


class ClientCache:
    """Materialised clients, least recently used first out, holding at most
    ``limit_bytes`` of tensors between uses (a client larger than the limit is not kept).
    ``loaded`` counts materialisations (cache misses). Every eighth of the limit evicted,
    the C heap's free pages go back to the system (:func:`release_free_heap`)."""

    def __init__(self, load, limit_bytes: int):
        self._load = load
        self.limit = int(limit_bytes)
        self._items: OrderedDict[int, ClientData] = OrderedDict()
        self.nbytes = 0
        self.loaded = 0
        self._evicted = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, k: int) -> bool:
        return k in self._items

    def get(self, k: int) -> ClientData:
        data = self._items.get(k)
        if data is not None:
            self._items.move_to_end(k)
            return data
        data = self._load(k)
        self.loaded += 1
        size = data.nbytes
        if size <= self.limit:
            while self.nbytes + size > self.limit:
                _, old = self._items.popitem(last=False)
                self.nbytes -= old.nbytes
                self._evicted += old.nbytes
            if self._evicted >= max(self.limit // 8, 1 << 20):
                release_free_heap()
                self._evicted = 0
            self._items[k] = data
            self.nbytes += size
        return data


__all__ = [
    "ClientCache",
    "ClientData",
    "OwnerPopulation",
    "Population",
    "load_client",
    "check_enough",
    "check_transforms",
    "Dataset",
    "Partition",
    "load_clients",
    "load_dataset",
    "make_partition",
    "shard_clients",
]
