"""Client partitions: dirichlet_partition, class_quota, shard_clients."""

from __future__ import annotations

import numpy as np
import pytest

from distfl.config import GroupSpec
from distfl.data.partition import class_quota, dirichlet_partition, shard_clients

NUM_CLASSES = 10
PER_CLASS = 200


@pytest.fixture(scope="module")
def labels() -> np.ndarray:
    """2000 samples, 200 of each of 10 classes, interleaved (label = index % 10)."""
    return np.arange(NUM_CLASSES * PER_CLASS) % NUM_CLASSES


def partition(labels, groups, *, spc=40, tf=0.25, seed=0):
    return dirichlet_partition(
        labels, tuple(groups), samples_per_client=spc, test_fraction=tf, seed=seed
    )


def client_labels(p, labels, k) -> np.ndarray:
    return labels[np.concatenate([p.train[k], p.test[k]])]


# --------------------------------------------------------------------------- dirichlet_partition


def test_alpha_zero_gives_exactly_one_class_per_client(labels):
    p = partition(labels, [GroupSpec(count=30, alpha=0.0)], spc=40)
    assert p.num_clients == 30
    for k in range(30):
        lab = client_labels(p, labels, k)
        assert len(np.unique(lab)) == 1, k
    # with 30 clients drawing among 10 classes, more than one class is used overall
    used = {int(client_labels(p, labels, k)[0]) for k in range(30)}
    assert len(used) > 1


def test_class_counts_matches_labels(labels):
    p = partition(labels, [GroupSpec(count=5, alpha=0.5)], spc=40)
    counts = p.class_counts(labels)
    assert counts.shape == (5, NUM_CLASSES)
    for k in range(5):
        expected = np.bincount(client_labels(p, labels, k), minlength=NUM_CLASSES)
        assert counts[k].tolist() == expected.tolist()
        assert counts[k].sum() == 40


@pytest.mark.parametrize(
    "spc, tf, n_test", [(40, 0.25, 10), (60, 0.25, 15), (10, 0.33, 3), (7, 0.5, 4), (9, 0.5, 4)]
)
def test_sizes_per_client(labels, spc, tf, n_test):
    # n_test is round(spc * tf), computed by hand (Python rounds halves to even: 3.5 -> 4,
    # 4.5 -> 4)
    groups = [GroupSpec(count=4, alpha=1.0), GroupSpec(count=3, alpha=0.0)]
    p = partition(labels, groups, spc=spc, tf=tf)
    assert p.num_clients == 7
    assert p.num_test().tolist() == [n_test] * 7
    assert p.num_train().tolist() == [spc - n_test] * 7
    for k in range(7):
        assert len(p.train[k]) + len(p.test[k]) == spc


def test_train_and_test_are_disjoint_and_valid(labels):
    groups = [
        GroupSpec(count=6, alpha=0.1),
        GroupSpec(count=6, alpha=0.0),
        GroupSpec(count=6, alpha=100.0),
    ]
    p = partition(labels, groups, spc=50)
    for k in range(p.num_clients):
        tr, te = p.train[k], p.test[k]
        assert len(np.intersect1d(tr, te)) == 0
        # no sample twice within one client (every class pool is larger than 50)
        both = np.concatenate([tr, te])
        assert len(np.unique(both)) == len(both)
        assert both.min() >= 0 and both.max() < len(labels)
        # stored sorted
        assert np.all(np.diff(tr) > 0) and np.all(np.diff(te) > 0)
        assert tr.dtype.kind == "i" and te.dtype.kind == "i"


def test_same_seed_same_partition_different_seed_different(labels):
    groups = [GroupSpec(count=8, alpha=0.5), GroupSpec(count=4, alpha=0.0)]
    a = partition(labels, groups, seed=3)
    b = partition(labels, groups, seed=3)
    c = partition(labels, groups, seed=4)
    for k in range(a.num_clients):
        assert np.array_equal(a.train[k], b.train[k])
        assert np.array_equal(a.test[k], b.test[k])
    assert np.array_equal(a.group, b.group)
    assert any(
        not np.array_equal(a.train[k], c.train[k]) or not np.array_equal(a.test[k], c.test[k])
        for k in range(a.num_clients)
    )


def test_groups_recorded_in_order(labels):
    groups = [
        GroupSpec(count=3, alpha=1000.0),
        GroupSpec(count=2, alpha=0.0),
        GroupSpec(count=1, alpha=0.3, name="x"),
    ]
    p = partition(labels, groups)
    assert p.group.tolist() == [0, 0, 0, 1, 1, 2]
    # the alpha = 0 group is the one with single-class clients
    for k in (3, 4):
        assert len(np.unique(client_labels(p, labels, k))) == 1


def test_large_alpha_is_near_uniform(labels):
    spc = 100  # 10 per class on average
    p = partition(labels, [GroupSpec(count=20, alpha=1000.0)], spc=spc, tf=0.2)
    counts = p.class_counts(labels)
    # Dir(1000 * 1) proportions have std ~ sqrt(0.1 * 0.9 / 10001) ~ 0.003, i.e. ~0.3
    # samples here; a deviation of 2 would be a > 6 sigma event
    assert np.all(np.abs(counts - spc / NUM_CLASSES) <= 2), counts
    assert np.all(counts.sum(axis=1) == spc)


def test_small_alpha_is_skewed(labels):
    p = partition(labels, [GroupSpec(count=20, alpha=0.01)], spc=100)
    counts = p.class_counts(labels)
    # with alpha = 0.01 almost all mass sits on one class for almost every client
    top_share = counts.max(axis=1) / counts.sum(axis=1)
    assert np.median(top_share) > 0.9


def test_federation_larger_than_dataset_reuses_samples():
    labels = np.array([0, 1] * 10)  # 10 samples per class
    p = dirichlet_partition(
        labels, (GroupSpec(count=6, alpha=0.0),), samples_per_client=8, test_fraction=0.25, seed=1
    )
    for k in range(6):
        both = np.concatenate([p.train[k], p.test[k]])
        assert len(both) == 8
        assert len(np.unique(both)) == 8  # a client never repeats (8 <= 10 per class)
        assert np.all(labels[both] == labels[both[0]])
    # 6 clients x 8 samples = 48 > 20 samples: some index is shared across clients
    all_idx = np.concatenate([np.concatenate([p.train[k], p.test[k]]) for k in range(6)])
    assert len(np.unique(all_idx)) < len(all_idx)


def test_num_classes_from_labels():
    labels = np.array([0, 1, 2, 0, 2, 1, 0, 2])
    p = dirichlet_partition(
        labels, (GroupSpec(count=2, alpha=0.0),), samples_per_client=4, test_fraction=0.25, seed=0
    )
    assert p.num_classes == 3
    assert p.class_counts(labels).shape == (2, 3)


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")
def test_absent_class_id_does_not_crash():
    labels = np.array([0, 2, 2, 0, 2, 0, 0, 2])  # class 1 absent: still 3 class ids
    p = dirichlet_partition(
        labels, (GroupSpec(count=2, alpha=1.0),), samples_per_client=4, test_fraction=0.25, seed=0
    )
    assert p.num_classes == 3
    for k in range(2):
        assert set(labels[np.concatenate([p.train[k], p.test[k]])]) <= {0, 2}


# --------------------------------------------------------------------------- class_quota


@pytest.mark.parametrize(
    "p, n, expected",
    [
        # raw [3.5, 2.1, 1.4] -> floor [3, 2, 1], one short; largest remainder is 0.5
        ([0.5, 0.3, 0.2], 7, [4, 2, 1]),
        # raw 3.33 each -> [3, 3, 3], one short, equal remainders: lowest index first
        ([1 / 3, 1 / 3, 1 / 3], 10, [4, 3, 3]),
        # raw 0.5 each -> two short, ties by index
        ([0.25, 0.25, 0.25, 0.25], 2, [1, 1, 0, 0]),
        # raw [0.6, 5.4, 4.0] -> [0, 5, 4], one short; remainders 0.6, 0.4, 0
        ([0.06, 0.54, 0.40], 10, [1, 5, 4]),
        # one-hot
        ([0.0, 1.0, 0.0], 13, [0, 13, 0]),
        # exact
        ([0.1] * 10, 60, [6] * 10),
        ([0.7, 0.2, 0.1], 0, [0, 0, 0]),
    ],
)
def test_class_quota_hand_computed(p, n, expected):
    q = class_quota(np.array(p), n)
    assert q.tolist() == expected
    assert int(q.sum()) == n


def test_class_quota_sums_to_n_and_is_within_one_of_proportions():
    rng = np.random.default_rng(0)
    for _ in range(300):
        c = int(rng.integers(2, 15))
        n = int(rng.integers(1, 300))
        p = rng.dirichlet(np.full(c, float(rng.choice([0.05, 1.0, 50.0]))))
        q = class_quota(p, n)
        assert int(q.sum()) == n
        assert np.all(q >= 0)
        assert np.all(np.abs(q - p * n) < 1.0 + 1e-9)


# --------------------------------------------------------------------------- shard_clients


def check_shards(shards, k, w):
    assert len(shards) == w
    covered = [i for s in shards for i in s]
    assert covered == list(range(k))  # contiguous, in order, each client once
    assert all(len(s) > 0 for s in shards)
    assert all(s.step == 1 for s in shards)


def test_shard_hand_example_two_workers():
    # total 44, target 22: cuts after client 2 (20 | 24) or client 3 (30 | 14); 20 is nearer
    shards = shard_clients(np.array([10, 10, 10, 10, 1, 1, 1, 1]), 2)
    assert shards == [range(0, 2), range(2, 8)]


def test_shard_hand_example_reversed():
    # cum [0,1,2,3,4,14,24,34,44], target 22: cut at 6 (24) beats 5 (14)
    shards = shard_clients(np.array([1, 1, 1, 1, 10, 10, 10, 10]), 2)
    assert shards == [range(0, 6), range(6, 8)]


def test_shard_equal_weights():
    assert shard_clients(np.full(12, 5), 4) == [range(0, 3), range(3, 6), range(6, 9), range(9, 12)]
    assert shard_clients(np.ones(5), 5) == [range(i, i + 1) for i in range(5)]
    assert shard_clients(np.ones(5), 1) == [range(0, 5)]


def test_shard_one_heavy_client_still_leaves_every_shard_non_empty():
    shards = shard_clients(np.array([100, 1, 1, 1]), 3)
    check_shards(shards, 4, 3)
    assert shards[0] == range(0, 1)
    shards = shard_clients(np.array([1, 1, 1, 100]), 3)
    check_shards(shards, 4, 3)
    assert shards[-1] == range(3, 4)


def test_shard_zero_weights():
    check_shards(shard_clients(np.zeros(4), 2), 4, 2)


def test_shard_random_cover_and_balance():
    rng = np.random.default_rng(2)
    for _ in range(200):
        k = int(rng.integers(1, 60))
        w = int(rng.integers(1, k + 1))
        weights = rng.integers(1, 100, size=k)
        shards = shard_clients(weights, w)
        check_shards(shards, k, w)
        loads = [int(weights[list(s)].sum()) for s in shards]
        # every cut is chosen nearest its target, so no shard exceeds the ideal share by
        # more than two client weights (one at each end)
        assert max(loads) <= weights.sum() / w + 2 * weights.max()


def test_shard_more_workers_than_clients_raises():
    with pytest.raises(ValueError, match="3 workers for 2 clients"):
        shard_clients(np.array([1, 1]), 3)
