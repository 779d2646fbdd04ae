"""Natural partitions: a dataset's own owners (FEMNIST's writers, a file's ``owner``
column) become the clients. :class:`OwnerPopulation` draws each client's samples when it
is used; :func:`natural_partition` makes it (or, for the ``sequential`` draw, every index
array) from the owners, the groups and the seed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distfl.config import GroupSpec
from distfl.data.partition import LazyClients, split_counts


@dataclass(frozen=True)
class OwnerPopulation(LazyClients):
    """A natural partition, each client's samples drawn when it is used: client k is owner
    ``owners[k]`` and holds ``order[start[k] : start[k] + count[k]]`` (the dataset's indices,
    owner by owner), split into train and test by the provider's split where the owner has
    one (``provided[k]``), otherwise with its own generator, (seed, k). Nothing per client
    is held but [K] arrays; ``order`` is the dataset's [N] indices sorted by owner (None
    where the dataset is in owner order already, as a generated one is)."""

    order: np.ndarray | None  # [N] int64
    start: np.ndarray  # [K] int64
    count: np.ndarray  # [K] int64
    n_test: np.ndarray  # [K] int64
    provided: np.ndarray  # [K] bool
    is_test: np.ndarray | None  # [N] bool, the provider's test split (None: none)
    group: np.ndarray  # [K] int64
    seed: int
    num_classes: int
    owners: np.ndarray | None = None
    #: [K, C] class counts of each client where the dataset knows them without its labels
    counts: np.ndarray | None = None

    def num_train(self) -> np.ndarray:
        return self.count - self.n_test

    def class_counts(self, labels: np.ndarray) -> np.ndarray:
        """[K, C] counts of each class over each client's train and test samples: per class,
        a running count over the samples in owner order, read at each client's ends (a few
        bytes a sample at a time, whatever K); the known counts of a generated dataset."""
        if self.counts is not None:
            return self.counts.astype(np.int64)
        in_order = labels if self.order is None else labels[self.order]
        out = np.zeros((self.num_clients, self.num_classes), dtype=np.int64)
        ends = self.start + self.count
        for c in range(self.num_classes):
            running = np.concatenate([[0], np.cumsum(in_order == c, dtype=np.int64)])
            out[:, c] = running[ends] - running[self.start]
        return out

    def indices(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Client k's (train, test) sample indices into the dataset, each sorted."""
        a, n = int(self.start[k]), int(self.count[k])
        idx = np.arange(a, a + n, dtype=np.int64) if self.order is None else self.order[a : a + n]
        if self.provided[k]:
            test = self.is_test[idx]
            return np.sort(idx[~test]), np.sort(idx[test])
        perm = np.random.default_rng([self.seed, 0x0A7E, 2, k]).permutation(idx)
        n_test = int(self.n_test[k])
        return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def natural_partition(
    owner: np.ndarray | None,
    is_test: np.ndarray | None,
    groups: tuple[GroupSpec, ...],
    *,
    test_fraction: float,
    seed: int,
    num_classes: int,
    owner_sizes: np.ndarray | None = None,
    owner_counts: np.ndarray | None = None,
) -> OwnerPopulation:
    """One client per natural owner (a FEMNIST writer, a synthetic client): with as many
    clients as owners, owner k is client k; with fewer, the clients are a seeded choice of
    the owners holding at least 2 samples, in owner order. The provider's test split is
    kept where an owner has one; otherwise its group's test fraction is drawn at random
    (when the client is used: :class:`OwnerPopulation`). A generated dataset, in owner
    order, gives ``owner_sizes`` (and ``owner_counts``, [owners, C]) instead of ``owner``."""
    num_clients = sum(g.count for g in groups)
    if owner is None:
        sizes = np.asarray(owner_sizes, dtype=np.int64)
        num_owners, order = len(sizes), None
        bounds = np.concatenate([[0], np.cumsum(sizes)])
    else:
        owner = np.asarray(owner, dtype=np.int64)
        num_owners = int(owner.max()) + 1 if len(owner) else 0
        in_order = len(owner) < 2 or bool((owner[1:] >= owner[:-1]).all())
        order = None if in_order else np.argsort(owner, kind="stable")
        bounds = np.searchsorted(owner if in_order else owner[order], np.arange(num_owners + 1))
        sizes = np.diff(bounds)
    if num_clients == num_owners:
        chosen = np.arange(num_owners)
    else:
        eligible = np.flatnonzero(sizes >= 2)
        if num_clients > len(eligible):
            raise ValueError(
                f"{num_clients} clients asked for, but the data has {len(eligible)} owners "
                "with at least 2 samples"
            )
        rng = np.random.default_rng([seed, 0x0A7E, 1])
        chosen = np.sort(rng.choice(eligible, size=num_clients, replace=False))
    fractions = np.repeat(
        np.array([g.test_fraction or test_fraction for g in groups], dtype=np.float64),
        [g.count for g in groups],
    )
    group = np.repeat(np.arange(len(groups)), [g.count for g in groups])
    count = sizes[chosen].astype(np.int64)
    if is_test is not None:
        assert owner is not None, "a provider's test split comes with its owners"
        tests = np.bincount(owner[np.asarray(is_test, dtype=bool)], minlength=num_owners)
        held = tests[chosen]
        provided = (held > 0) & (held < count)
    else:
        held = np.zeros(len(chosen), dtype=np.int64)
        provided = np.zeros(len(chosen), dtype=bool)
    small = np.flatnonzero(~provided & (count < 2))
    if small.size:
        o = int(chosen[small[0]])
        raise ValueError(f"owner {o} holds {int(sizes[o])} sample; a client needs at least 2")
    drawn = split_counts(count, fractions) if len(count) else count
    return OwnerPopulation(
        order=None if order is None else order.astype(np.int64),
        start=bounds[chosen].astype(np.int64),
        count=count,
        n_test=np.where(provided, held, drawn).astype(np.int64),
        provided=provided,
        is_test=None if is_test is None else np.asarray(is_test, dtype=bool),
        group=group.astype(np.int64),
        seed=seed,
        num_classes=num_classes,
        owners=chosen.astype(np.int64),
        counts=None if owner_counts is None else np.asarray(owner_counts)[chosen],
    )


__all__ = ["OwnerPopulation", "natural_partition"]
