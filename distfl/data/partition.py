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
    owners: np.ndarray | None = None  # natural partitions: the owner index of each client

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


def sample_counts(
    groups: tuple[GroupSpec, ...], *, samples_per_client: int, quantity_skew: float, seed: int
) -> np.ndarray:
    """[K] samples per client: its group's ``samples_per_client`` (or the federation's),
    times a log-normal factor exp(σz - σ²/2), z ~ N(0, 1), when ``quantity_skew`` σ > 0 —
    mean preserved, at least 2 samples (one to train on, one to test on)."""
    base = np.concatenate(
        [np.full(g.count, g.samples_per_client or samples_per_client) for g in groups]
    ).astype(np.int64)
    if quantity_skew == 0.0:
        return base
    rng = np.random.default_rng([seed, 0x5EED, 2])
    factor = np.exp(quantity_skew * rng.standard_normal(len(base)) - quantity_skew**2 / 2)
    return np.maximum(np.rint(base * factor).astype(np.int64), 2)


def test_count(n: int, fraction: float) -> int:
    """Test samples out of a client's n: round(n·fraction), leaving at least one of each."""
    return int(min(max(round(n * fraction), 1), n - 1))


def dirichlet_partition(
    labels: np.ndarray,
    groups: tuple[GroupSpec, ...],
    *,
    samples_per_client: int,
    test_fraction: float,
    seed: int,
    quantity_skew: float = 0.0,
    num_classes: int | None = None,
) -> Partition:
    """Draw each client's samples: class proportions from its group's Dirichlet(alpha) over
    the group's ``classes`` (all classes when empty), samples from per-class pools shuffled
    once. A pool is reused from its start once exhausted, so a federation larger than the
    dataset shares samples across clients (never within a client unless one client asks for
    more than a class holds)."""
    labels = np.asarray(labels)
    if num_classes is None:
        num_classes = int(labels.max()) + 1
    rng = np.random.default_rng([seed, 0x5EED, 1])
    pools = [rng.permutation(np.flatnonzero(labels == c)) for c in range(num_classes)]
    present = np.array([c for c in range(num_classes) if len(pools[c])], dtype=np.int64)
    cursor = np.zeros(num_classes, dtype=np.int64)
    sizes = sample_counts(
        groups, samples_per_client=samples_per_client, quantity_skew=quantity_skew, seed=seed
    )
    train, test, group = [], [], []
    for g_index, g in enumerate(groups):
        allowed = present
        if g.classes:
            bad = [c for c in g.classes if c >= num_classes]
            if bad:
                raise ValueError(
                    f"class {bad[0]} of group {g_index} does not exist ({num_classes} classes)"
                )
            allowed = np.intersect1d(present, np.asarray(g.classes, dtype=np.int64))
            if not len(allowed):
                raise ValueError(f"no sample of the classes of group {g_index} exists")
        fraction = g.test_fraction or test_fraction
        for _ in range(g.count):
            n = int(sizes[len(group)])
            quota = np.zeros(num_classes, dtype=np.int64)
            p = dirichlet_proportions(g.alpha, len(allowed), rng)
            quota[allowed] = class_quota(p, n)
            picked = []
            for c in np.flatnonzero(quota):
                pool = pools[c]
                take = (cursor[c] + np.arange(quota[c])) % len(pool)
                cursor[c] = (cursor[c] + quota[c]) % len(pool)
                picked.append(pool[take])
            idx = rng.permutation(np.concatenate(picked))
            n_test = test_count(n, fraction)
            test.append(np.sort(idx[:n_test]))
            train.append(np.sort(idx[n_test:]))
            group.append(g_index)
    return Partition(
        train=tuple(train),
        test=tuple(test),
        group=np.array(group, dtype=np.int64),
        num_classes=num_classes,
    )


def natural_partition(
    owner: np.ndarray,
    is_test: np.ndarray | None,
    groups: tuple[GroupSpec, ...],
    *,
    test_fraction: float,
    seed: int,
    num_classes: int,
) -> Partition:
    """One client per natural owner (a FEMNIST writer, a synthetic client): with as many
    clients as owners, owner k is client k; with fewer, the clients are a seeded choice of
    the owners holding at least 2 samples, in owner order. The provider's test split is
    kept where an owner has one; otherwise its group's test fraction is drawn at random."""
    owner = np.asarray(owner, dtype=np.int64)
    num_clients = sum(g.count for g in groups)
    num_owners = int(owner.max()) + 1 if len(owner) else 0
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(num_owners + 1))
    samples = [order[bounds[o] : bounds[o + 1]] for o in range(num_owners)]
    if num_clients == num_owners:
        chosen = np.arange(num_owners)
    else:
        eligible = np.array([o for o in range(num_owners) if len(samples[o]) >= 2], dtype=int)
        if num_clients > len(eligible):
            raise ValueError(
                f"{num_clients} clients asked for, but the data has {len(eligible)} owners "
                "with at least 2 samples"
            )
        rng = np.random.default_rng([seed, 0x0A7E, 1])
        chosen = np.sort(rng.choice(eligible, size=num_clients, replace=False))
    fractions = [g.test_fraction or test_fraction for g in groups for _ in range(g.count)]
    group = np.repeat(np.arange(len(groups)), [g.count for g in groups])
    train, test = [], []
    for k, o in enumerate(chosen):
        idx = samples[o]
        if is_test is not None and is_test[idx].any() and not is_test[idx].all():
            train.append(np.sort(idx[~is_test[idx]]))
            test.append(np.sort(idx[is_test[idx]]))
            continue
        if len(idx) < 2:
            raise ValueError(f"owner {o} holds {len(idx)} sample; a client needs at least 2")
        perm = np.random.default_rng([seed, 0x0A7E, 2, k]).permutation(idx)
        n_test = test_count(len(idx), fractions[k])
        test.append(np.sort(perm[:n_test]))
        train.append(np.sort(perm[n_test:]))
    return Partition(
        train=tuple(train),
        test=tuple(test),
        group=group.astype(np.int64),
        num_classes=num_classes,
        owners=chosen.astype(np.int64),
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
