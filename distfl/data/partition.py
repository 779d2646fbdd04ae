"""Client partitions: label skew per group (Dirichlet(alpha), exactly k classes per client,
or shards of the label-sorted samples), train/test splits, and the workers' shards of
clients.

Everything here is a pure function of (labels, config, seed), so every rank computes the
same partition and then materialises only the samples of the clients it runs.

Two kinds: :class:`Partition` holds every client's index arrays (natural partitions,
:mod:`distfl.data.natural`, and the ``sequential`` draw of distfl 0.1.0);
:class:`Population` (the ``per_client`` draw)
holds a few numbers per client and draws a client's indices when the client is used, so
that a population of 100,000 clients costs megabytes, not the samples of every client.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distfl.config import MAX_SAMPLES_PER_CLIENT, GroupSpec


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

    def indices(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Client k's (train, test) sample indices into the dataset, each sorted."""
        return self.train[k], self.test[k]

    def eager(self) -> Partition:
        return self


class LazyClients:
    """What a partition that draws each client's samples when it is used shares: [K] arrays
    ``group`` and ``n_test``, ``indices(k)``, and :meth:`eager`."""

    group: np.ndarray
    n_test: np.ndarray
    num_classes: int
    owners: np.ndarray | None

    @property
    def num_clients(self) -> int:
        return len(self.group)

    def num_test(self) -> np.ndarray:
        return self.n_test.copy()

    def indices(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def eager(self) -> Partition:
        """Every client's indices drawn (small populations, tests)."""
        both = [self.indices(k) for k in range(self.num_clients)]
        return Partition(
            train=tuple(b[0] for b in both),
            test=tuple(b[1] for b in both),
            group=self.group,
            num_classes=self.num_classes,
            owners=self.owners,
        )


@dataclass(frozen=True)
class Population(LazyClients):
    """The ``per_client`` draw: client k holds ``quota[k, c]`` samples of class c, taken
    from class c's shuffled pool starting at ``start[k, c]`` (wrapping around the pool),
    and splits them into train and test with its own generator, (seed, k). Nothing of a
    client's samples is held until :meth:`indices` draws them; the arrays here are
    [K] (int64) and [K, C] (int32): 8·C + 16 bytes per client."""

    group: np.ndarray  # [K] int64
    quota: np.ndarray  # [K, C] int32
    start: np.ndarray  # [K, C] int32, positions in the class pools
    n_test: np.ndarray  # [K] int64
    pools: tuple[np.ndarray, ...]  # per class: the dataset indices of that class, shuffled
    seed: int
    num_classes: int
    owners: np.ndarray | None = None
    #: per group, its :class:`ShardDeal` where the group's partition is ``shards`` (its
    #: clients' rows of ``quota`` are then their class counts, and ``start`` is unused)
    deals: tuple[ShardDeal | None, ...] = ()

    def num_train(self) -> np.ndarray:
        return self.quota.sum(axis=1, dtype=np.int64) - self.n_test

    def class_counts(self, labels: np.ndarray | None = None) -> np.ndarray:
        """[K, C] counts of each class over each client's train and test samples: the
        quotas themselves (a pool holds one class)."""
        return self.quota.astype(np.int64)

    def indices(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Client k's (train, test) sample indices, drawn from (seed, k) alone."""
        q, s = self.quota[k], self.start[k]
        deal = self.deals[int(self.group[k])] if self.deals else None
        if deal is not None:
            parts = [deal.samples(k, int(q.sum(dtype=np.int64)))]
        else:
            parts = []
            for c in np.flatnonzero(q):
                pool = self.pools[c]
                parts.append(pool[(int(s[c]) + np.arange(int(q[c]))) % len(pool)])
        idx = np.random.default_rng([self.seed, 0x5EED, 4, k]).permutation(np.concatenate(parts))
        n_test = int(self.n_test[k])
        return np.sort(idx[n_test:]), np.sort(idx[:n_test])


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
    return class_quota_rows(np.asarray(p, dtype=np.float64)[None, :], np.array([n]))[0]


def dirichlet_rows(
    alpha: float, count: int, num_classes: int, rng: np.random.Generator
) -> np.ndarray:
    """[count, num_classes] class proportions, each row ~ Dir(alpha·1), drawn at once;
    alpha = 0 (or a row whose gamma draws all underflow) is one class, drawn uniformly."""
    if not (np.isfinite(alpha) and alpha >= 0.0):
        raise ValueError(f"alpha must be finite and non-negative, not {alpha!r}")
    one = rng.integers(num_classes, size=count)
    if alpha == 0.0:
        g = np.zeros((count, num_classes))
    else:
        g = rng.gamma(alpha, size=(count, num_classes))
    total = g.sum(axis=1)
    empty = total <= 0.0
    g[empty, one[empty]] = 1.0
    total[empty] = 1.0
    return g / total[:, None]


def class_quota_rows(p: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Split n[i] samples by the proportions p[i], for each row i: floor, then the largest
    remainders (ties by index)."""
    raw = p * np.asarray(n, dtype=np.float64)[:, None]
    counts = np.floor(raw).astype(np.int64)
    short = np.asarray(n, dtype=np.int64) - counts.sum(axis=1)
    order = np.argsort(-(raw - counts), axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(p.shape[1])[None, :], axis=1)
    counts += rank < short[:, None]
    return counts


def chosen_classes(choice: str, k: int, count: int, num_allowed: int, rng) -> np.ndarray:
    """[count, k] positions (into a group's classes, in increasing order) of the k classes of
    each of a ``classes_per_client`` group's ``count`` clients, client i being the group's
    i-th: ``first_deterministic`` position i mod C first, then k−1 of the other C−1 drawn
    without replacement; ``random`` k of the C drawn without replacement; ``deterministic``
    positions i, i+1, …, i+k−1 mod C. The draws are one [count, C] array of uniform keys
    from ``rng``, each row's k smallest keys chosen (the first class's key set below all)."""
    i = np.arange(count, dtype=np.int64)[:, None]
    if choice == "deterministic":
        return (i + np.arange(k, dtype=np.int64)[None, :]) % num_allowed
    keys = rng.random((count, num_allowed))
    if choice == "first_deterministic":
        keys[np.arange(count), np.arange(count) % num_allowed] = -1.0
    elif choice != "random":
        raise ValueError(f"class_choice {choice!r} is unknown")
    return np.argsort(keys, axis=1, kind="stable")[:, :k]


def equal_quota_rows(chosen: np.ndarray, n: np.ndarray, num_allowed: int) -> np.ndarray:
    """[count, C] quotas: client i's n[i] samples split equally over its classes
    ``chosen[i]`` (positions into the group's C classes): n // k each, and one more to each
    of the n mod k lowest of them."""
    count, k = chosen.shape
    n = np.asarray(n, dtype=np.int64)
    order = np.sort(chosen, axis=1)
    extra = (np.arange(k)[None, :] < (n % k)[:, None]).astype(np.int64)
    quota = np.zeros((count, num_allowed), dtype=np.int64)
    np.put_along_axis(quota, order, (n // k)[:, None] + extra, axis=1)
    return quota


@dataclass(frozen=True)
class ShardDeal:
    """The shards of one ``shards`` group. ``order`` is the dataset's samples of the group's
    classes sorted by label (class by class in increasing order, each class's samples in its
    pool's shuffled order); shard j is ``order[j·size : (j+1)·size]`` (the last
    ``len(order) mod size`` samples make no shard). The group's i-th client, client
    ``first + i``, holds the shards ``perm[(i·per_client + j) mod num_shards]``,
    j = 0 .. per_client−1: ``perm`` is a permutation of the shards drawn from (seed, group),
    dealt in client order and again from its start once every shard is dealt. A client
    holding n samples takes from its j-th shard a run of n // per_client samples (one more
    for the first n mod per_client shards) starting at the shard's start: the shard itself
    without quantity skew, a run into the next shards (wrapping around ``order``) when the
    client holds more."""

    order: np.ndarray  # [N_g] int64, dataset indices
    perm: np.ndarray  # [num_shards] int64
    size: int
    per_client: int
    first: int

    @property
    def num_shards(self) -> int:
        return len(self.perm)

    def runs(self, k: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The (start, length) in ``order`` of each run of clients ``k`` holding ``n``
        samples: two [len(k), per_client] arrays."""
        k = np.asarray(k, dtype=np.int64)
        n = np.asarray(n, dtype=np.int64)
        s = self.per_client
        j = np.arange(s, dtype=np.int64)[None, :]
        shard = self.perm[((k - self.first)[:, None] * s + j) % self.num_shards]
        length = (n // s)[:, None] + (j < (n % s)[:, None])
        return shard * self.size, length

    def samples(self, k: int, n: int) -> np.ndarray:
        """Client k's n dataset indices: its runs, in shard order."""
        start, length = self.runs(np.array([k]), np.array([n]))
        pos = np.concatenate(
            [a + np.arange(b, dtype=np.int64) for a, b in zip(start[0], length[0], strict=True)]
        )
        return self.order[pos % len(self.order)]


def shard_deal(
    pools: list[np.ndarray],
    allowed: np.ndarray,
    *,
    size: int,
    per_client: int,
    first: int,
    seed: int,
    group: int,
) -> ShardDeal:
    """Group ``group``'s :class:`ShardDeal`: its classes' pools concatenated in class order,
    cut into shards of ``size``, their permutation drawn from (seed, group). ValueError when
    the samples make fewer shards than one client holds."""
    order = np.concatenate([pools[c] for c in allowed]).astype(np.int64)
    num_shards = len(order) // size
    if num_shards < per_client:
        raise ValueError(
            f"the {len(order)} samples of the classes of group {group} make {num_shards} "
            f"shards of {size}; a client of the group holds {per_client}"
        )
    perm = np.random.default_rng([seed, 0x5EED, 5, group]).permutation(num_shards)
    return ShardDeal(order=order, perm=perm, size=size, per_client=per_client, first=first)


def deal_class_counts(
    deal: ShardDeal, labels_sorted_bounds: np.ndarray, allowed: np.ndarray,
    k: np.ndarray, n: np.ndarray, num_classes: int,
) -> np.ndarray:  # fmt: skip
    """[len(k), num_classes] class counts of clients ``k`` holding ``n`` samples of ``deal``:
    per run and class, the overlap of the run (wrapping around ``order``) with the class's
    positions ``labels_sorted_bounds[i] .. labels_sorted_bounds[i+1]`` of allowed class i."""
    start, length = deal.runs(k, n)
    N = len(deal.order)
    lo = labels_sorted_bounds[:-1][None, None, :]
    size = np.diff(labels_sorted_bounds)[None, None, :]

    def below(x):  # samples of each class at positions [0, x), x in [0, N]
        return np.clip(x[:, :, None] - lo, 0, size)

    wraps, rest = np.divmod(length, N)
    end = start + rest
    counts = wraps[:, :, None] * size + below(np.minimum(end, N)) - below(start)
    counts += below(np.maximum(end - N, 0))
    out = np.zeros((len(k), num_classes), dtype=np.int64)
    out[:, allowed] = counts.sum(axis=1)
    return out


def split_counts(n: np.ndarray, fraction: np.ndarray) -> np.ndarray:
    """Test samples out of each client's n: round(n·fraction) (halves to even), leaving at
    least one of each."""
    n = np.asarray(n, dtype=np.int64)
    return np.minimum(np.maximum(np.rint(n * fraction).astype(np.int64), 1), n - 1)


def sample_counts(
    groups: tuple[GroupSpec, ...], *, samples_per_client: int, quantity_skew: float, seed: int
) -> np.ndarray:
    """[K] samples per client: its group's ``samples_per_client`` (or the federation's),
    times a log-normal factor exp(σz - σ²/2), z ~ N(0, 1), when ``quantity_skew`` σ > 0 —
    mean preserved, at least 2 samples (one to train on, one to test on) and at most
    :data:`~distfl.config.MAX_SAMPLES_PER_CLIENT` (a count the size check refuses rather
    than an int64 overflow; σ is at most :data:`~distfl.config.checks.MAX_QUANTITY_SKEW`)."""
    base = np.concatenate(
        [np.full(g.count, g.samples_per_client or samples_per_client) for g in groups]
    ).astype(np.int64)
    if quantity_skew == 0.0:
        return base
    rng = np.random.default_rng([seed, 0x5EED, 2])
    factor = np.exp(quantity_skew * rng.standard_normal(len(base)) - quantity_skew**2 / 2)
    counts = np.minimum(np.rint(base * factor), MAX_SAMPLES_PER_CLIENT)
    return np.maximum(counts.astype(np.int64), 2)


def test_count(n: int, fraction: float) -> int:
    """Test samples out of a client's n: round(n·fraction), leaving at least one of each."""
    return int(split_counts(np.array([n]), fraction)[0])


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
    once; a ``classes_per_client`` group's quotas and a ``shards`` group's shards are those
    of :func:`per_client_population`, each client's split drawn by the walking generator.
    A pool is reused from its start once exhausted, so a federation larger than the
    dataset shares samples across clients (never within a client unless one client asks for
    more than a class holds)."""
    rng, pools, present, num_classes = _class_pools(labels, seed, num_classes)
    cursor = np.zeros(num_classes, dtype=np.int64)
    sizes = sample_counts(
        groups, samples_per_client=samples_per_client, quantity_skew=quantity_skew, seed=seed
    )
    train, test, group = [], [], []
    for g_index, g in enumerate(groups):
        allowed = _allowed(g, g_index, present, num_classes)
        fraction = g.test_fraction or test_fraction
        lo = len(group)
        rows = deal = None
        if g.partition == "classes_per_client":
            sizes[lo : lo + g.count] = np.maximum(sizes[lo : lo + g.count], g.classes_per_client)
            rows = _classes_quota(g, g_index, allowed, sizes[lo : lo + g.count], seed)
        elif g.partition == "shards":
            deal = _deal(g, g_index, pools, allowed, lo, samples_per_client, seed)
        for i in range(g.count):
            n = int(sizes[len(group)])
            if deal is not None:
                idx = rng.permutation(deal.samples(lo + i, n))
            else:
                quota = np.zeros(num_classes, dtype=np.int64)
                if rows is None:
                    p = dirichlet_proportions(g.alpha, len(allowed), rng)
                    quota[allowed] = class_quota(p, n)
                else:
                    quota[allowed] = rows[i]
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


def _class_pools(
    labels: np.ndarray, seed: int, num_classes: int | None
) -> tuple[np.random.Generator, list[np.ndarray], np.ndarray, int]:
    """The generator (seed, 1) both Dirichlet draws start from, after it has shuffled each
    class's samples into a pool; the classes that have samples; the number of classes."""
    labels = np.asarray(labels)
    if num_classes is None:
        num_classes = int(labels.max()) + 1
    rng = np.random.default_rng([seed, 0x5EED, 1])
    pools = [rng.permutation(np.flatnonzero(labels == c)) for c in range(num_classes)]
    present = np.array([c for c in range(num_classes) if len(pools[c])], dtype=np.int64)
    return rng, pools, present, num_classes


def _classes_quota(
    g: GroupSpec, index: int, allowed: np.ndarray, sizes: np.ndarray, seed: int
) -> np.ndarray:
    """[count, len(allowed)] quotas of a ``classes_per_client`` group: each client's k classes
    chosen by :func:`chosen_classes` with the generator (seed, group), its samples split
    equally over them (:func:`equal_quota_rows`)."""
    k = g.classes_per_client
    if not 1 <= k <= len(allowed):
        raise ValueError(
            f"group {index} asks for {k} classes per client; its classes with samples are "
            f"{len(allowed)}"
        )
    rng = np.random.default_rng([seed, 0x5EED, 3, index])
    chosen = chosen_classes(g.class_choice, k, g.count, len(allowed), rng)
    return equal_quota_rows(chosen, sizes, len(allowed))


def _deal(
    g: GroupSpec,
    index: int,
    pools: list[np.ndarray],
    allowed: np.ndarray,
    first: int,
    samples_per_client: int,
    seed: int,
) -> ShardDeal:
    """The :class:`ShardDeal` of a ``shards`` group whose first client is ``first``: shards of
    the group's samples per client / ``shards_per_client``."""
    n, s = g.samples_per_client or samples_per_client, g.shards_per_client
    if s < 1 or n % s:
        raise ValueError(f"{s} shards per client do not divide group {index}'s {n} samples")
    return shard_deal(
        pools, allowed, size=n // s, per_client=s, first=first, seed=seed, group=index
    )


def _allowed(g: GroupSpec, index: int, present: np.ndarray, num_classes: int) -> np.ndarray:
    """The classes group ``index`` draws from: its ``classes`` that have samples, or all
    present classes."""
    if not g.classes:
        return present
    bad = [c for c in g.classes if c >= num_classes]
    if bad:
        raise ValueError(f"class {bad[0]} of group {index} does not exist ({num_classes} classes)")
    allowed = np.intersect1d(present, np.asarray(g.classes, dtype=np.int64))
    if not len(allowed):
        raise ValueError(f"no sample of the classes of group {index} exists")
    return allowed


def per_client_population(
    labels: np.ndarray,
    groups: tuple[GroupSpec, ...],
    *,
    samples_per_client: int,
    test_fraction: float,
    seed: int,
    quantity_skew: float = 0.0,
    num_classes: int | None = None,
) -> Population:
    """The ``per_client`` draw, vectorised over clients (no per-client Python work).

    Per group, one generator (seed, group) draws every client's class proportions from
    the group's Dirichlet(alpha) over its ``classes`` (all when empty) and splits the
    client's sample count by them (floor, then largest remainders); a
    ``classes_per_client`` group draws each client's k classes with it instead
    (:func:`chosen_classes`) and splits the count equally over them; a ``shards`` group's
    clients hold shards of its label-sorted samples (:class:`ShardDeal`), their class
    counts standing in their rows of the quotas. The class pools are
    the dataset's samples of each class, shuffled once; clients take consecutive runs of
    each pool in client order, wrapping around, so a population larger than the dataset
    reuses samples evenly (a client repeats a sample only if it asks for more than its
    class holds). A client's train/test split is drawn from (seed, client) when its
    indices are."""
    _, pools, present, num_classes = _class_pools(labels, seed, num_classes)
    sizes = sample_counts(
        groups, samples_per_client=samples_per_client, quantity_skew=quantity_skew, seed=seed
    )
    K = len(sizes)
    quota = np.zeros((K, num_classes), dtype=np.int32)
    n_test = np.empty(K, dtype=np.int64)
    pooled = np.ones(K, dtype=bool)  # the clients that take runs of the class pools
    deals: list[ShardDeal | None] = [None] * len(groups)
    lo = 0
    for g_index, g in enumerate(groups):
        allowed = _allowed(g, g_index, present, num_classes)
        hi = lo + g.count
        if g.partition == "shards":
            deal = _deal(g, g_index, pools, allowed, lo, samples_per_client, seed)
            bounds = np.concatenate([[0], np.cumsum([len(pools[c]) for c in allowed])])
            clients = np.arange(lo, hi, dtype=np.int64)
            quota[lo:hi] = deal_class_counts(deal, bounds, allowed, clients, sizes[lo:hi],
                                             num_classes)  # fmt: skip
            pooled[lo:hi] = False
            deals[g_index] = deal
        elif g.partition == "classes_per_client":
            sizes[lo:hi] = np.maximum(sizes[lo:hi], g.classes_per_client)
            quota[lo:hi, allowed] = _classes_quota(g, g_index, allowed, sizes[lo:hi], seed)
        else:
            rng_g = np.random.default_rng([seed, 0x5EED, 3, g_index])
            p = dirichlet_rows(g.alpha, g.count, len(allowed), rng_g)
            quota[lo:hi, allowed] = class_quota_rows(p, sizes[lo:hi])
        n_test[lo:hi] = split_counts(sizes[lo:hi], g.test_fraction or test_fraction)
        lo = hi
    lengths = np.array([max(len(pool), 1) for pool in pools], dtype=np.int64)
    taken = np.where(pooled[:, None], quota, 0)
    start = np.cumsum(taken, axis=0, dtype=np.int64)
    start -= taken
    start %= lengths
    return Population(
        group=np.repeat(np.arange(len(groups), dtype=np.int64), [g.count for g in groups]),
        quota=quota,
        start=start.astype(np.int32),
        n_test=n_test,
        pools=tuple(pools),
        seed=seed,
        num_classes=num_classes,
        deals=tuple(deals) if any(d is not None for d in deals) else (),
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
