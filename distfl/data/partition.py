"""Client partitions: label skew by Dirichlet(alpha) per group, train/test splits, shards.

Everything here is a pure function of (labels, config, seed), so every rank computes the
same partition and then loads only the samples of its own clients.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distfl.config import GroupSpec


@dataclass(frozen=True)
class Partition:
    """Which samples each of the K clients holds.

    ``train[k]`` and ``test[k]`` are index arrays into the dataset; ``group[k]`` is the
    ground-truth group (the index into the config's groups list)."""

    train: tuple[np.ndarray, ...]
    test: tuple[np.ndarray, ...]
    group: np.ndarray
    num_classes: int

    @property
    def num_clients(self) -> int:
        return len(self.train)

    def num_train(self) -> np.ndarray:
        return np.array([len(t) for t in self.train], dtype=np.int64)

    def num_test(self) -> np.ndarray:
        return np.array([len(t) for t in self.test], dtype=np.int64)

    def class_counts(self, labels: np.ndarray) -> np.ndarray:
        """[K, C] counts of each class over each client's train and test samples."""
        out = np.zeros((self.num_clients, self.num_classes), dtype=np.int64)
        for k in range(self.num_clients):
            idx = np.concatenate([self.train[k], self.test[k]])
            out[k] = np.bincount(labels[idx], minlength=self.num_classes)
        return out


def dirichlet_proportions(alpha: float, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Class proportions ~ Dir(alpha·1); alpha = 0 is one class, drawn uniformly."""
    if alpha == 0.0:
        p = np.zeros(num_classes)
        p[rng.integers(num_classes)] = 1.0
        return p
    if not (np.isfinite(alpha) and alpha > 0.0):
        raise ValueError(f"alpha must be finite and non-negative, not {alpha!r}")
    g = rng.gamma(alpha, size=num_classes)
    total = g.sum()
    if total <= 0.0:  # a tiny alpha underflows every draw: the limit is one class
        p = np.zeros(num_classes)
        p[rng.integers(num_classes)] = 1.0
        return p
    return g / total


def class_quota(p: np.ndarray, n: int) -> np.ndarray:
    """Split n samples by proportions p: floor, then the largest remainders (ties by index)."""
    raw = p * n
    counts = np.floor(raw).astype(np.int64)
    short = n - int(counts.sum())
    if short > 0:
        order = np.argsort(-(raw - counts), kind="stable")
        counts[order[:short]] += 1
    return counts


def dirichlet_partition(
    labels: np.ndarray,
    groups: tuple[GroupSpec, ...],
    *,
    samples_per_client: int,
    test_fraction: float,
    seed: int,
) -> Partition:
    """Draw each client's samples: class proportions from its group's Dirichlet(alpha),
    samples from per-class pools shuffled once. A pool is reused from its start once
    exhausted, so a federation larger than the dataset shares samples across clients
    (never within a client unless one client asks for more than a class holds)."""
    labels = np.asarray(labels)
    num_classes = int(labels.max()) + 1
    rng = np.random.default_rng([seed, 0x5EED, 1])
    pools = [rng.permutation(np.flatnonzero(labels == c)) for c in range(num_classes)]
    present = np.array([c for c in range(num_classes) if len(pools[c])], dtype=np.int64)
    cursor = np.zeros(num_classes, dtype=np.int64)
    n_test = round(samples_per_client * test_fraction)
    train, test, group = [], [], []
    for g_index, g in enumerate(groups):
        for _ in range(g.count):
            quota = np.zeros(num_classes, dtype=np.int64)
            p = dirichlet_proportions(g.alpha, len(present), rng)
            quota[present] = class_quota(p, samples_per_client)
            picked = []
            for c in np.flatnonzero(quota):
                pool = pools[c]
                take = (cursor[c] + np.arange(quota[c])) % len(pool)
                cursor[c] = (cursor[c] + quota[c]) % len(pool)
                picked.append(pool[take])
            idx = rng.permutation(np.concatenate(picked))
            test.append(np.sort(idx[:n_test]))
            train.append(np.sort(idx[n_test:]))
            group.append(g_index)
    return Partition(
        train=tuple(train),
        test=tuple(test),
        group=np.array(group, dtype=np.int64),
        num_classes=num_classes,
    )


def shard_clients(weights: np.ndarray, num_workers: int) -> list[range]:
    """Split clients 0..K-1 into ``num_workers`` contiguous ranges of near-equal total weight
    (sample count). Contiguous shards keep gathered rows in client order."""
    k = len(weights)
    if num_workers > k:
        raise ValueError(f"{num_workers} workers for {k} clients")
    cum = np.concatenate([[0], np.cumsum(weights, dtype=np.float64)])
    total = cum[-1]
    bounds = [0]
    for w in range(1, num_workers):
        target = total * w / num_workers
        b = int(np.searchsorted(cum, target, side="left"))
        # the cut nearest the target, leaving at least one client per shard on both sides
        if b > 0 and abs(cum[b - 1] - target) <= abs(cum[b] - target):
            b -= 1
        b = min(max(b, bounds[-1] + 1), k - (num_workers - w))
        bounds.append(b)
    bounds.append(k)
    return [range(bounds[i], bounds[i + 1]) for i in range(num_workers)]
