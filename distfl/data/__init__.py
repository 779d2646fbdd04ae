"""Datasets, partitions and per-group transforms.

``digits`` ships with scikit-learn and ``gaussian`` is generated: neither needs a file.
MNIST, CIFAR-10/100 and FEMNIST are read from files under ``data.root`` (never downloaded).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from distfl.config import Config, GroupSpec
from distfl.data.dataset import Dataset, as_float
from distfl.data.partition import (
    Partition,
    dirichlet_partition,
    natural_partition,
    sample_counts,
    shard_clients,
)
from distfl.data.synthetic import gaussian_mixture
from distfl.data.transforms import apply_group
from distfl.errors import ConfigError


def load_digits_dataset() -> Dataset:
    """The 1797 8x8 images of scikit-learn's ``load_digits``, scaled to [0, 1], as [N, 1, 8, 8]."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.images.astype(np.float32) / 16.0)[:, None, :, :]
    y = bunch.target.astype(np.int64)
    return Dataset(name="digits", x=x, y=y, num_classes=10)


def load_dataset(config: Config) -> Dataset:
    """The dataset of ``data.dataset``: built in (digits), generated (gaussian) or read from
    files under ``data.root`` (a :class:`~distfl.errors.DataError` when they are missing or
    malformed)."""
    name = config.data.dataset
    if name == "digits":
        return load_digits_dataset()
    if name == "gaussian":
        sizes = sample_counts(
            config.groups,
            samples_per_client=config.data.samples_per_client,
            quantity_skew=config.data.quantity_skew,
            seed=config.run.seed,
        )
        return gaussian_mixture(sizes, config.data.dim, config.run.seed)
    from distfl.data.files import load_files

    return load_files(name, config.data.root)


def make_partition(config: Config, dataset: Dataset) -> Partition:
    """Which samples each client holds: a Dirichlet draw per group from the pooled samples,
    or, with ``data.partition = "natural"`` (always for gaussian), one client per owner."""
    check_transforms(config.groups, dataset)
    try:
        if config.data.partition == "natural" or dataset.name == "gaussian":
            if dataset.owner is None:
                raise ConfigError(
                    f"data.partition = 'natural': {dataset.name} has no natural owners"
                )
            return natural_partition(
                dataset.owner,
                dataset.is_test,
                config.groups,
                test_fraction=config.data.test_fraction,
                seed=config.run.seed,
                num_classes=dataset.num_classes,
            )
        return dirichlet_partition(
            dataset.y,
            config.groups,
            samples_per_client=config.data.samples_per_client,
            test_fraction=config.data.test_fraction,
            seed=config.run.seed,
            quantity_skew=config.data.quantity_skew,
            num_classes=dataset.num_classes,
        )
    except ValueError as exc:
        raise ConfigError(f"data.groups / data.num_clients: {exc} in {dataset.name}") from None


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


def load_clients(
    dataset: Dataset,
    partition: Partition,
    clients: range,
    device: torch.device,
    *,
    groups: tuple[GroupSpec, ...],
    seed: int,
) -> dict[int, ClientData]:
    """Materialise the samples of ``clients`` only (a worker's shard), with the transforms
    of each client's group applied to its train and test splits alike."""
    out = {}
    for k in clients:
        g = int(partition.group[k])
        idx = np.concatenate([partition.train[k], partition.test[k]])
        # make_partition's check_transforms has refused what apply_group cannot do
        x, y = apply_group(
            as_float(dataset.x[idx]), dataset.y[idx], groups[g],
            num_classes=dataset.num_classes, seed=seed, group=g, client=k,
        )  # fmt: skip
        n = len(partition.train[k])
        out[k] = ClientData(
            x_train=torch.from_numpy(x[:n]).to(device),
            y_train=torch.from_numpy(y[:n]).to(device),
            x_test=torch.from_numpy(x[n:]).to(device),
            y_test=torch.from_numpy(y[n:]).to(device),
        )
    return out


__all__ = [
    "ClientData",
    "check_transforms",
    "Dataset",
    "Partition",
    "load_clients",
    "load_dataset",
    "make_partition",
    "shard_clients",
]
