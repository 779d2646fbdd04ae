"""Population scale on small arrays: the per-client draw's vectorised pieces against their
scalar forms, the client cache's bound, per-step placement, and the capacity check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distfl import config as C
from distfl.config import GroupSpec
from distfl.data import ClientCache, ClientData
from distfl.data.partition import (
    class_quota,
    class_quota_rows,
    dirichlet_rows,
    per_client_population,
    shard_clients,
    split_counts,
)
from distfl.data.partition import test_count as split_count
from distfl.errors import ConfigError
from distfl.runtime.capacity import check_population, fitting_clients, population_bytes
from distfl.runtime.placement import home_workers, place

# --------------------------------------------------------------------------- the draw


def test_quota_rows_are_the_scalar_quota_of_each_row():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.full(7, 0.3), size=200)
    n = rng.integers(2, 500, size=200)
    rows = class_quota_rows(p, n)
    for i in range(200):
        assert rows[i].tolist() == class_quota(p[i], int(n[i])).tolist()


def test_quota_rows_ties_go_to_the_lowest_index():
    # 10 samples over four equal shares: 2 each, the two left over to classes 0 and 1
    rows = class_quota_rows(np.full((1, 4), 0.25), np.array([10]))
    assert rows.tolist() == [[3, 3, 2, 2]]


def test_split_counts_are_the_scalar_test_count():
    n = np.arange(2, 300)
    for f in (0.1, 0.25, 0.5, 0.9):
        assert split_counts(n, f).tolist() == [split_count(int(v), f) for v in n]


def test_dirichlet_rows_are_proportions_and_alpha_zero_is_one_class():
    rng = np.random.default_rng(1)
    p = dirichlet_rows(0.5, 100, 6, rng)
    assert p.shape == (100, 6) and np.allclose(p.sum(axis=1), 1.0) and (p >= 0).all()
    one = dirichlet_rows(0.0, 50, 6, rng)
    assert ((one == 1.0).sum(axis=1) == 1).all() and ((one == 0.0).sum(axis=1) == 5).all()
    assert len(np.unique(one.argmax(axis=1))) > 1
    tiny = dirichlet_rows(1e-300, 20, 4, rng)  # every gamma draw underflows: one class
    assert np.allclose(tiny.sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="alpha"):
        dirichlet_rows(-1.0, 2, 3, rng)


def test_a_large_population_reuses_each_sample_evenly():
    labels = np.array([0, 1] * 10)  # 10 samples of each class
    pop = per_client_population(
        labels, (GroupSpec(count=50, alpha=1.0),), samples_per_client=8, test_fraction=0.25,
        seed=3,
    )  # fmt: skip
    uses = np.zeros(len(labels), dtype=np.int64)
    for k in range(50):
        train, test = pop.indices(k)
        both = np.concatenate([train, test])
        np.add.at(uses, both, 1)
        assert len(np.unique(both)) == len(both)  # no client needs more than 10 of a class
    for c in (0, 1):  # runs wrap around each class pool: uses differ by at most one
        mine = uses[labels == c]
        assert mine.max() - mine.min() <= 1, mine
    assert uses.sum() == 50 * 8


def test_a_client_is_drawn_from_its_own_generator():
    labels = np.arange(400) % 10
    groups = (GroupSpec(count=30, alpha=0.5),)
    a = per_client_population(labels, groups, samples_per_client=20, test_fraction=0.25, seed=1)
    b = per_client_population(labels, groups, samples_per_client=20, test_fraction=0.25, seed=1)
    # drawing client 17 first, alone, gives what it gives after every other client
    alone = b.indices(17)
    for k in range(30):
        a.indices(k)
    assert all(np.array_equal(x, y) for x, y in zip(alone, a.indices(17), strict=True))


def test_the_population_holds_numbers_per_client_not_samples():
    labels = np.arange(1797) % 10
    K = 100_000
    pop = per_client_population(
        labels, (GroupSpec(count=K, alpha=0.3),), samples_per_client=80, test_fraction=0.25,
        seed=0,
    )  # fmt: skip
    held = pop.quota.nbytes + pop.start.nbytes + pop.n_test.nbytes + pop.group.nbytes
    assert held == K * (10 * 8 + 16)  # [K, C] int32 twice, two [K] int64
    assert (pop.num_train() + pop.num_test() == 80).all()
    assert pop.class_counts().sum() == 80 * K
    train, test = pop.indices(K - 1)
    assert len(train) + len(test) == 80


# --------------------------------------------------------------------------- the cache


def fake_client(k: int, n: int) -> ClientData:
    x = torch.full((n, 4), float(k))  # 16 bytes per sample, plus an 8-byte label
    y = torch.zeros(n, dtype=torch.int64)
    return ClientData(x, y, x[:1].clone(), y[:1].clone())


def test_cache_keeps_at_most_its_bound_least_recently_used_first_out():
    # 264 bytes a client (10 samples of 4 floats and a label, one test sample): three fit
    cache = ClientCache(lambda k: fake_client(k, 10), limit_bytes=800)
    assert fake_client(0, 10).nbytes == 264
    for k in [0, 1, 2, 0, 3, 4, 0, 5]:
        data = cache.get(k)
        assert float(data.x_train[0, 0]) == k
        assert cache.nbytes <= 800 and cache.nbytes == 264 * len(cache)
    # by hand: 3 evicts 1 (0 was used again), 4 evicts 2, 5 evicts 3
    assert list(cache._items) == [4, 0, 5]
    assert cache.loaded == 6
    cache.get(0)
    assert cache.loaded == 6  # a hit materialises nothing


def test_cache_of_zero_keeps_nothing_and_a_huge_client_passes_through():
    cache = ClientCache(lambda k: fake_client(k, 1000), limit_bytes=0)
    cache.get(1)
    cache.get(1)
    assert len(cache) == 0 and cache.nbytes == 0 and cache.loaded == 2


def test_cache_gives_the_heap_back_every_eighth_of_its_bound_evicted(monkeypatch):
    import distfl.data as data

    calls = []
    monkeypatch.setattr(data, "_TRIM", lambda pad: calls.append(pad))
    # 2 MiB bound: a trim once 1 MiB (the floor) has been evicted since the last one;
    # clients of 405,528 bytes: 5 fit, and every third eviction trims
    cache = ClientCache(lambda k: fake_client(k, 16 * 1024 + 512), limit_bytes=2 << 20)
    assert fake_client(0, 16 * 1024 + 512).nbytes == 405_528
    for k in range(40):
        cache.get(k)
    assert len(cache) == 5
    assert calls == [0] * (35 // 3)  # malloc_trim(0): keep no padding at the heap's top
    data.release_free_heap()
    assert len(calls) == 35 // 3 + 1


# --------------------------------------------------------------------------- placement


def test_home_workers_are_the_contiguous_shards():
    w = np.array([5, 1, 1, 1, 1, 1, 5, 5])
    home = home_workers(w, 3)
    for i, shard in enumerate(shard_clients(w, 3)):
        assert (home[shard.start : shard.stop] == i).all()
    assert (home_workers(w, 1) == 0).all()


def test_static_placement_is_home():
    home = np.repeat([0, 1, 2], 10)
    clients = np.array([0, 1, 2, 3, 12, 29])
    out = place(clients, np.ones(6), home, 3, balanced=False)
    assert out.tolist() == [0, 0, 0, 0, 1, 2]


def test_balanced_placement_by_hand():
    # 6 clients of worker 0's shard and 1 of worker 1's, equal costs: worker 0 keeps its
    # fair share (3.5 -> 3 tasks, in client order), the rest go to the least loaded
    home = np.repeat([0, 1], 10)
    clients = np.array([0, 1, 2, 3, 4, 5, 15])
    out = place(clients, np.ones(7), home, 2)
    assert out.tolist() == [0, 0, 0, 1, 1, 0, 1]  # client 5 to worker 0: loads 3 vs 3 (tie)
    assert np.bincount(out).tolist() == [4, 3]


def test_balanced_placement_keeps_clients_home_when_the_shares_are_even():
    home = np.repeat([0, 1, 2], 100)
    clients = np.concatenate([np.arange(0, 10), np.arange(100, 110), np.arange(200, 210)])
    out = place(clients, np.ones(30), home, 3)
    assert out.tolist() == home[clients].tolist()


@pytest.mark.parametrize("seed", range(5))
def test_balanced_placement_evens_the_cost_of_random_cohorts(seed):
    rng = np.random.default_rng(seed)
    K, W = 1000, 4
    home = home_workers(np.ones(K), W)
    clients = np.sort(rng.choice(K, size=100, replace=False))
    costs = rng.integers(1, 20, size=100).astype(float)
    out = place(clients, costs, home, W)
    load = np.bincount(out, weights=costs, minlength=W)
    assert load.sum() == costs.sum()
    # greedy: no worker ends more than the largest task above the fair share
    assert load.max() <= costs.sum() / W + costs.max()
    static = np.bincount(home[clients], weights=costs, minlength=W)
    assert load.max() <= static.max()
    assert np.array_equal(out, place(clients, costs, home, W))  # deterministic


def test_placement_of_nothing_and_of_one_worker():
    assert place(np.array([], dtype=np.int64), np.array([]), np.zeros(5, np.int64), 3).size == 0
    assert place(np.array([1, 2]), np.ones(2), np.zeros(5, np.int64), 1).tolist() == [0, 0]


# --------------------------------------------------------------------------- capacity


def config(**data) -> C.Config:
    return C.load(preset="digits", overrides=[f"data.{k}={v}" for k, v in data.items()])


def test_fitting_clients_inverts_the_estimate():
    for per_client, per_pair in [(300, 0), (300, 16), (1000, 8)]:
        budget = 10**9
        k = fitting_clients(budget, per_client, per_pair)
        assert k * per_client + k * k * per_pair <= budget
        assert (k + 1) * per_client + (k + 1) ** 2 * per_pair > budget


def test_a_population_that_cannot_fit_is_refused_with_what_fits():
    cfg = config(num_clients=10**9)
    need, per_client, _ = population_bytes(cfg)
    assert need == 10**9 * per_client
    with pytest.raises(ConfigError) as err:
        check_population(cfg, 16 * 2**30)
    text = str(err.value)
    assert text.startswith("data.num_clients = 1000000000: ")
    assert "16.0 GiB" in text and f"{16 * 2**30 // per_client:,} clients fit" in text
    check_population(config(num_clients=100_000), 16 * 2**30)  # fits: no error
    check_population(cfg, None)  # memory unknown: no check


def test_pairs_are_counted_for_the_algorithms_that_keep_them():
    base = ["data.num_clients=200000", 'algorithm.name="fedgwc"']
    cfg = C.load(preset="digits", overrides=[*base, 'algorithm.interaction="dense"'])
    _, _, per_pair = population_bytes(cfg)
    assert per_pair == 32  # P, W and the Gram product, and a Gaussian reference's
    with pytest.raises(ConfigError, match="fedgwc keeps K×K matrices"):
        check_population(cfg, 16 * 2**30)
    # at its default (auto: 10 of 200,000 a round is below 5%) it keeps the observed
    # entries, which the rounds bound: admitted
    check_population(C.load(preset="digits", overrides=base), 16 * 2**30)


def test_gaussian_references_count_their_own_pairs():
    base = ["data.num_clients=20000", 'algorithm.name="fedgwc"', 'algorithm.interaction="dense"']
    plain = C.load(preset="digits", overrides=[*base, "algorithm.reference_draws=0"])
    calibrated = C.load(preset="digits", overrides=base)  # 15 references, the default
    assert population_bytes(plain)[2] == 16
    assert population_bytes(calibrated)[2] == 32  # a reference's rows and its affinity
    # 20,000 clients: 6.4 GB of pairs fit in 8 GiB, 12.8 GB with references do not
    check_population(plain, 8 * 2**30)
    with pytest.raises(ConfigError, match="32 bytes per pair"):
        check_population(calibrated, 8 * 2**30)
