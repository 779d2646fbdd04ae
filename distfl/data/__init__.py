"""Datasets and partitions. ``digits`` ships with scikit-learn: no downloads."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from distfl.config import Config, GroupSpec
from distfl.data.partition import Partition, dirichlet_partition, shard_clients
from distfl.data.transforms import apply_group


@dataclass(frozen=True)
class Dataset:
    """Features and labels of a whole dataset, held as numpy arrays."""

    name: str
    x: np.ndarray  # [N, *input_shape] float32
    y: np.ndarray  # [N] int64
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])


def load_digits_dataset() -> Dataset:
    """The 1797 8x8 images of scikit-learn's ``load_digits``, scaled to [0, 1], as [N, 1, 8, 8]."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.images.astype(np.float32) / 16.0)[:, None, :, :]
    y = bunch.target.astype(np.int64)
    return Dataset(name="digits", x=x, y=y, num_classes=10)


def load_dataset(config: Config) -> Dataset:
    if config.data.dataset == "digits":
        return load_digits_dataset()
    raise ValueError(f"unknown dataset {config.data.dataset!r}")  # config validation forbids it


def make_partition(config: Config, labels: np.ndarray) -> Partition:
    return dirichlet_partition(
        labels,
        config.groups,
        samples_per_client=config.data.samples_per_client,
        test_fraction=config.data.test_fraction,
        seed=config.run.seed,
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
        x, y = apply_group(
            dataset.x[idx], dataset.y[idx], groups[g],
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
    "Dataset",
    "Partition",
    "load_clients",
    "load_dataset",
    "make_partition",
    "shard_clients",
]
