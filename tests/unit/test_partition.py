"""Client partitions: dirichlet_partition (with per-group sizes and classes and quantity
skew), sample_counts, natural_partition, make_partition, class_quota, shard_clients."""

from __future__ import annotations

import numpy as np
import pytest

from distfl import config as C
from distfl.config import GroupSpec
from distfl.data import make_partition
from distfl.data.natural import natural_partition
from distfl.data.partition import (
    class_quota,
    dirichlet_partition,
    per_client_population,
    sample_counts,
    shard_clients,
)
from distfl.data.partition import test_count as split_count  # not a test: keep pytest off it
from distfl.datasets.digits import load_digits_dataset
from distfl.errors import ConfigError

NUM_CLASSES = 10
PER_CLASS = 200


@pytest.fixture(scope="module")
def labels() -> np.ndarray:
    """2000 samples, 200 of each of 10 classes, interleaved (label = index % 10)."""
    return np.arange(NUM_CLASSES * PER_CLASS) % NUM_CLASSES


#: the two Dirichlet draws; the tests of the draw's properties run on both
DRAWS = {"sequential": dirichlet_partition, "per_client": per_client_population}
_DRAW = {"fn": dirichlet_partition}


@pytest.fixture(autouse=True, params=sorted(DRAWS))
def draw(request):
    _DRAW["fn"] = DRAWS[request.param]
    yield request.param
    _DRAW["fn"] = dirichlet_partition


def draw_partition(*args, **kwargs):
    """The draw under test, every client's indices drawn."""
    return _DRAW["fn"](*args, **kwargs).eager()


def partition(labels, groups, *, spc=40, tf=0.25, seed=0):
    return draw_partition(
        labels, tuple(groups), samples_per_client=spc, test_fraction=tf, seed=seed
    )


def client_labels(p, labels, k) -> np.ndarray:
    return labels[np.concatenate(p.indices(k))]


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
    p = draw_partition(
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
    p = draw_partition(
        labels, (GroupSpec(count=2, alpha=0.0),), samples_per_client=4, test_fraction=0.25, seed=0
    )
    assert p.num_classes == 3
    assert p.class_counts(labels).shape == (2, 3)


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")
def test_absent_class_id_does_not_crash():
    labels = np.array([0, 2, 2, 0, 2, 0, 0, 2])  # class 1 absent: still 3 class ids
    p = draw_partition(
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


# --------------------------------------------------------------------------- sample_counts


def test_sample_counts_without_skew_are_the_group_or_federation_value():
    groups = (
        GroupSpec(count=3, alpha=1.0),
        GroupSpec(count=2, alpha=1.0, samples_per_client=30),
        GroupSpec(count=1, alpha=0.0, samples_per_client=7),
    )
    counts = sample_counts(groups, samples_per_client=50, quantity_skew=0.0, seed=4)
    assert counts.tolist() == [50, 50, 50, 30, 30, 7]
    assert counts.dtype == np.int64


def test_sample_counts_skewed_are_varied_deterministic_and_at_least_two():
    groups = (GroupSpec(count=200, alpha=1.0),)
    a = sample_counts(groups, samples_per_client=10, quantity_skew=1.5, seed=3)
    b = sample_counts(groups, samples_per_client=10, quantity_skew=1.5, seed=3)
    c = sample_counts(groups, samples_per_client=10, quantity_skew=1.5, seed=4)
    assert a.tolist() == b.tolist()
    assert a.tolist() != c.tolist()
    assert len(np.unique(a)) > 10
    # 10 exp(1.5 z - 1.125) < 2.5 (rounds to 2, or below 2 and is raised to it) for
    # z < -0.174: P = 0.431, so 86 +- 7 of the 200 clients hold exactly 2
    assert a.min() == 2 and 60 < int((a == 2).sum()) < 112


@pytest.mark.parametrize("sigma", [0.3, 0.5])
def test_sample_counts_log_normal_statistics(sigma):
    """4000 clients with base 80: the mean stays at the base (E exp(σz - σ²/2) = 1) and the
    log of the counts is N(log 80 - σ²/2, σ²)."""
    k = 4000
    counts = sample_counts(
        (GroupSpec(count=k, alpha=1.0),), samples_per_client=80, quantity_skew=sigma, seed=11
    )
    assert len(counts) == k and counts.min() >= 2
    # the std of the factor is sqrt(exp(σ²) - 1) <= 0.54, so the standard error of the mean
    # is <= 0.54 * 80 / sqrt(4000) ~ 0.7 samples: 5% (4 samples) is > 5 standard errors
    assert abs(counts.mean() - 80) < 0.05 * 80, counts.mean()
    logs = np.log(counts)
    # standard errors: σ/sqrt(4000) <= 0.008 (mean), σ/sqrt(8000) <= 0.006 (std); rounding
    # to integers adds ~0.01 of jitter around 80
    assert abs(logs.mean() - (np.log(80) - sigma**2 / 2)) < 0.04, logs.mean()
    assert abs(logs.std() - sigma) < 0.03, logs.std()


def test_sample_counts_skew_keeps_each_group_base():
    groups = (
        GroupSpec(count=2000, alpha=1.0, samples_per_client=40),
        GroupSpec(count=2000, alpha=1.0, samples_per_client=200),
    )
    counts = sample_counts(groups, samples_per_client=80, quantity_skew=0.4, seed=0)
    assert abs(counts[:2000].mean() - 40) < 0.05 * 40
    assert abs(counts[2000:].mean() - 200) < 0.05 * 200


@pytest.mark.parametrize(
    "n, fraction, expected",
    [
        (40, 0.25, 10),
        (10, 0.25, 2),  # round(2.5) = 2 (half to even)
        (14, 0.25, 4),  # round(3.5) = 4
        (3, 0.25, 1),  # round(0.75)
        (2, 0.25, 1),  # round(0.5) = 0, raised to one test sample
        (5, 0.05, 1),  # round(0.25) = 0, raised to one
        (2, 0.9, 1),  # round(1.8) = 2 would leave no train sample
        (10, 0.99, 9),
    ],
)
def test_test_count_hand_computed(n, fraction, expected):
    assert split_count(n, fraction) == expected


# --------------------------------------------------------------------------- dirichlet options


def test_no_skew_is_the_partition_of_the_plain_arguments(labels):
    groups = (GroupSpec(count=6, alpha=0.3), GroupSpec(count=3, alpha=0.0))
    plain = partition(labels, groups, spc=30, seed=2)
    explicit = draw_partition(
        labels,
        groups,
        samples_per_client=30,
        test_fraction=0.25,
        seed=2,
        quantity_skew=0.0,
        num_classes=NUM_CLASSES,
    )
    # a group's samples_per_client and test_fraction equal to the federation's change nothing
    overridden = draw_partition(
        labels,
        tuple(
            GroupSpec(g.count, g.alpha, samples_per_client=30, test_fraction=0.25) for g in groups
        ),
        samples_per_client=30,
        test_fraction=0.25,
        seed=2,
    )
    for other in (explicit, overridden):
        assert all(np.array_equal(a, b) for a, b in zip(plain.train, other.train, strict=True))
        assert all(np.array_equal(a, b) for a, b in zip(plain.test, other.test, strict=True))
        assert np.array_equal(plain.group, other.group)
        assert other.owners is None


def test_no_skew_partition_is_pinned():
    """The indices drawn before per-group sizes, classes and quantity skew existed (computed
    with that version of dirichlet_partition): the new options at their defaults keep them."""
    labels = np.arange(24) % 3
    groups = (GroupSpec(count=2, alpha=1000.0), GroupSpec(count=1, alpha=0.0))
    p = dirichlet_partition(labels, groups, samples_per_client=8, test_fraction=0.25, seed=5)
    assert [t.tolist() for t in p.train] == [
        [2, 4, 6, 7, 13, 23],
        [3, 8, 15, 17, 19, 21],
        [0, 3, 6, 15, 18, 21],
    ]
    assert [t.tolist() for t in p.test] == [[0, 11], [1, 5], [9, 12]]


def test_quantity_skew_sizes_are_sample_counts(labels):
    groups = (GroupSpec(count=12, alpha=1.0), GroupSpec(count=8, alpha=0.0))
    p = draw_partition(
        labels, groups, samples_per_client=40, test_fraction=0.25, seed=6, quantity_skew=0.8
    )
    sizes = sample_counts(groups, samples_per_client=40, quantity_skew=0.8, seed=6)
    assert (p.num_train() + p.num_test()).tolist() == sizes.tolist()
    assert len(np.unique(sizes)) > 5  # skewed, not 40 each
    assert p.num_test().tolist() == [split_count(int(n), 0.25) for n in sizes]
    assert sizes.max() <= PER_CLASS  # so no client needs a sample twice
    for k in range(p.num_clients):
        both = np.concatenate([p.train[k], p.test[k]])
        assert len(np.unique(both)) == len(both)
    for k in range(12, 20):  # alpha = 0 stays one class however many samples
        assert len(np.unique(client_labels(p, labels, k))) == 1


def test_group_samples_and_test_fraction_overrides(labels):
    groups = (
        GroupSpec(count=3, alpha=1.0, samples_per_client=20, test_fraction=0.2),
        GroupSpec(count=2, alpha=1.0),
        GroupSpec(count=2, alpha=0.5, test_fraction=0.5),
        GroupSpec(count=1, alpha=0.0, samples_per_client=9),
    )
    p = partition(labels, groups, spc=40, tf=0.25)
    # by hand: 20 * 0.2 = 4; 40 * 0.25 = 10; 40 * 0.5 = 20; round(9 * 0.25 = 2.25) = 2
    assert p.num_test().tolist() == [4, 4, 4, 10, 10, 20, 20, 2]
    assert p.num_train().tolist() == [16, 16, 16, 30, 30, 20, 20, 7]
    assert p.group.tolist() == [0, 0, 0, 1, 1, 2, 2, 3]


def test_group_classes_restrict_the_labels(labels):
    groups = (
        GroupSpec(count=8, alpha=1.0, classes=(2, 5, 7)),
        GroupSpec(count=30, alpha=0.0, classes=(1, 9)),
        GroupSpec(count=4, alpha=1000.0, classes=(0, 1, 2, 3)),
        GroupSpec(count=3, alpha=1000.0),
    )
    p = partition(labels, groups, spc=40)
    counts = p.class_counts(labels)
    for k in range(8):
        assert set(client_labels(p, labels, k)) <= {2, 5, 7}
    single = set()
    for k in range(8, 38):
        lab = set(client_labels(p, labels, k).tolist())
        assert len(lab) == 1 and lab <= {1, 9}, lab
        single |= lab
    assert single == {1, 9}  # 30 uniform draws of two classes use both (1 - 2^-29)
    # near-uniform over its four classes: 10 each, within the Dirichlet(1000) jitter
    assert np.all(counts[38:42, 4:] == 0)
    assert np.all(np.abs(counts[38:42, :4] - 10) <= 2), counts[38:42]
    # no classes: all ten
    assert np.all(counts[42:] > 0)


def test_group_class_beyond_num_classes_raises(labels):
    groups = (GroupSpec(count=2, alpha=1.0), GroupSpec(count=2, alpha=1.0, classes=(3, 10)))
    with pytest.raises(ValueError, match="class 10 of group 1 does not exist"):
        partition(labels, groups)


def test_num_classes_beyond_the_labels_keeps_the_width(labels):
    groups = (GroupSpec(count=5, alpha=1.0),)
    wide = draw_partition(
        labels, groups, samples_per_client=40, test_fraction=0.25, seed=1, num_classes=12
    )
    assert wide.num_classes == 12
    counts = wide.class_counts(labels)
    assert counts.shape == (5, 12)
    assert np.all(counts[:, 10:] == 0) and np.all(counts.sum(axis=1) == 40)
    # the empty classes are no class a client can draw: the same samples as without them
    plain = partition(labels, groups, seed=1)
    assert all(np.array_equal(a, b) for a, b in zip(plain.train, wide.train, strict=True))
    # a group that lists only an absent class has nothing to draw from
    with pytest.raises(ValueError, match="no sample of the classes of group 0"):
        draw_partition(
            labels,
            (GroupSpec(count=1, alpha=1.0, classes=(11,)),),
            samples_per_client=40,
            test_fraction=0.25,
            seed=1,
            num_classes=12,
        )


# --------------------------------------------------------------------------- natural_partition

# 6 owners, by hand: owner 0 has 3 train + 2 test samples, owner 1 has 4 train only, owner 2
# 1 train + 1 test, owner 3 holds 1 sample, owner 4 holds 6 samples all marked test, owner 5
# 8 train only.
NAT_OWNER = np.array(
    [0, 1, 0, 2, 1, 0, 0, 3, 0, 1, 2, 1, 4, 4, 4, 4, 4, 4] + [5] * 8, dtype=np.int64
)
NAT_TEST = np.zeros(len(NAT_OWNER), dtype=bool)
NAT_TEST[[6, 8, 10, 12, 13, 14, 15, 16, 17]] = True


def samples_of(o: int) -> np.ndarray:
    return np.flatnonzero(NAT_OWNER == o)


def natural(groups, *, seed=0, tf=0.25, owner=NAT_OWNER, is_test=NAT_TEST, num_classes=3):
    """The natural partition with every client's indices drawn (the lazy one's eager())."""
    return natural_partition(
        owner, is_test, tuple(groups), test_fraction=tf, seed=seed, num_classes=num_classes
    ).eager()


def reference_natural(owner, is_test, groups, *, test_fraction, seed):
    """The natural partition written out client by client (the form distfl drew it in before
    it drew clients when used): (train, test) of each chosen owner, in owner order."""
    owner = np.asarray(owner)
    num_clients = sum(g.count for g in groups)
    num_owners = int(owner.max()) + 1
    samples = [np.flatnonzero(owner == o) for o in range(num_owners)]
    if num_clients == num_owners:
        chosen = np.arange(num_owners)
    else:
        eligible = np.array([o for o in range(num_owners) if len(samples[o]) >= 2])
        rng = np.random.default_rng([seed, 0x0A7E, 1])
        chosen = np.sort(rng.choice(eligible, size=num_clients, replace=False))
    fractions = [g.test_fraction or test_fraction for g in groups for _ in range(g.count)]
    out = []
    for k, o in enumerate(chosen):
        idx = samples[o]
        if is_test is not None and is_test[idx].any() and not is_test[idx].all():
            out.append((np.sort(idx[~is_test[idx]]), np.sort(idx[is_test[idx]])))
            continue
        perm = np.random.default_rng([seed, 0x0A7E, 2, k]).permutation(idx)
        n_test = min(max(int(np.rint(len(idx) * fractions[k])), 1), len(idx) - 1)
        out.append((np.sort(perm[n_test:]), np.sort(perm[:n_test])))
    return chosen, out


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("provided", [True, False])
@pytest.mark.parametrize("fewer", [True, False])
@pytest.mark.parametrize("sorted_owners", [True, False])
def test_natural_drawn_when_used_equals_the_client_by_client_draw(
    seed, provided, fewer, sorted_owners
):
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, 60, size=900)
    owner[:120] = np.repeat(np.arange(60), 2)  # every owner holds at least 2 samples
    rng.shuffle(owner)
    if sorted_owners:  # a generated dataset: owner by owner (no order array is kept)
        owner = np.sort(owner)
    is_test = rng.random(900) < 0.3 if provided else None
    if provided:
        is_test[owner == 7] = True  # an owner whose samples are all marked test
    labels = rng.integers(0, 5, size=900)
    groups = (GroupSpec(count=30 if fewer else 40, alpha=1.0),
              GroupSpec(count=10 if fewer else 20, alpha=1.0, test_fraction=0.5))  # fmt: skip
    lazy = natural_partition(owner, is_test, groups, test_fraction=0.25, seed=seed,
                             num_classes=5)  # fmt: skip
    assert (lazy.order is None) == sorted_owners
    chosen, expected = reference_natural(owner, is_test, groups, test_fraction=0.25, seed=seed)
    assert lazy.owners.tolist() == chosen.tolist()
    counts = np.zeros((len(chosen), 5), dtype=np.int64)
    for k, (train, test) in enumerate(expected):
        got = lazy.indices(k)
        assert np.array_equal(got[0], train) and np.array_equal(got[1], test), k
        counts[k] = np.bincount(labels[np.concatenate([train, test])], minlength=5)
    assert lazy.num_train().tolist() == [len(t) for t, _ in expected]
    assert lazy.num_test().tolist() == [len(t) for _, t in expected]
    assert np.array_equal(lazy.class_counts(labels), counts)


def test_natural_one_client_per_owner_keeps_the_provider_split():
    # owner 3 has one sample: with all 6 owners as clients it is an error
    with pytest.raises(ValueError, match="owner 3 holds 1 sample"):
        natural([GroupSpec(count=6, alpha=1.0)])
    owner = NAT_OWNER.copy()
    owner[7] = 2  # owner 3's sample goes to owner 2: owner 3 is now empty
    owner[owner > 3] -= 1  # renumber: 5 owners
    groups = [GroupSpec(count=3, alpha=1.0), GroupSpec(count=2, alpha=1.0, test_fraction=0.5)]
    p = natural(groups, owner=owner, tf=0.25)
    assert p.num_clients == 5
    assert p.owners.tolist() == [0, 1, 2, 3, 4]
    assert p.group.tolist() == [0, 0, 0, 1, 1]
    for k in range(5):
        both = np.sort(np.concatenate([p.train[k], p.test[k]]))
        assert both.tolist() == np.flatnonzero(owner == k).tolist(), k
        assert len(np.intersect1d(p.train[k], p.test[k])) == 0
    # owner 0 and owner 2 (samples 3, 7 train, 10 test) keep the provider's split
    assert p.train[0].tolist() == [0, 2, 5] and p.test[0].tolist() == [6, 8]
    assert p.train[2].tolist() == [3, 7] and p.test[2].tolist() == [10]
    # owner 1 (4 train only): round(4 * 0.25) = 1 test; owner 3 (6 all-test, group 1's 0.5):
    # 3 test; owner 4 (8 train only, 0.5): 4 test
    assert (len(p.train[1]), len(p.test[1])) == (3, 1)
    assert (len(p.train[3]), len(p.test[3])) == (3, 3)
    assert (len(p.train[4]), len(p.test[4])) == (4, 4)
    # the random splits are seeded
    again = natural(groups, owner=owner, tf=0.25)
    assert all(np.array_equal(a, b) for a, b in zip(p.test, again.test, strict=True))
    others = [natural(groups, owner=owner, tf=0.25, seed=s) for s in range(1, 6)]
    assert any(not np.array_equal(o.test[4], p.test[4]) for o in others)
    assert all(np.array_equal(o.test[0], p.test[0]) for o in others)  # the provider's


def test_natural_without_provider_split_draws_one():
    groups = [GroupSpec(count=2, alpha=1.0), GroupSpec(count=1, alpha=1.0, test_fraction=0.5)]
    owner = np.array([0] * 8 + [1] * 5 + [2] * 6)
    p = natural(groups, owner=owner, is_test=None, tf=0.25)
    assert p.owners.tolist() == [0, 1, 2]
    # round(8 * 0.25) = 2, round(5 * 0.25 = 1.25) = 1, group 1: round(6 * 0.5) = 3
    assert p.num_test().tolist() == [2, 1, 3]
    assert p.num_train().tolist() == [6, 4, 3]


def test_natural_fewer_clients_choose_eligible_owners():
    # owners 3 (one sample) is never eligible
    eligible = {0, 1, 2, 4, 5}
    seen = set()
    for seed in range(40):
        p = natural([GroupSpec(count=2, alpha=1.0), GroupSpec(count=1, alpha=1.0)], seed=seed)
        chosen = p.owners.tolist()
        assert len(chosen) == 3 and chosen == sorted(set(chosen)), chosen
        assert set(chosen) <= eligible
        seen |= set(chosen)
        for k, o in enumerate(chosen):
            both = np.sort(np.concatenate([p.train[k], p.test[k]]))
            assert both.tolist() == samples_of(o).tolist()
            assert len(p.train[k]) >= 1 and len(p.test[k]) >= 1
        assert p.group.tolist() == [0, 0, 1]
    assert seen == eligible  # 40 draws of 3 of 5 owners reach every one of them
    a = natural([GroupSpec(count=3, alpha=1.0)], seed=7)
    b = natural([GroupSpec(count=3, alpha=1.0)], seed=7)
    assert a.owners.tolist() == b.owners.tolist()
    assert all(np.array_equal(x, y) for x, y in zip(a.train, b.train, strict=True))
    choices = {tuple(natural([GroupSpec(count=3, alpha=1.0)], seed=s).owners) for s in range(20)}
    assert len(choices) > 1


def test_natural_too_many_clients_raises():
    # 5 owners hold at least 2 samples
    with pytest.raises(ValueError, match="7 clients asked for, but the data has 5 owners"):
        natural([GroupSpec(count=7, alpha=1.0)])
    natural([GroupSpec(count=5, alpha=1.0)])  # exactly the eligible owners: fine
    with pytest.raises(ValueError, match="has 2 owners"):
        natural([GroupSpec(count=3, alpha=1.0)], owner=np.array([0, 0, 1, 1]), is_test=None)


def test_natural_class_counts_width():
    p = natural([GroupSpec(count=2, alpha=1.0)], owner=np.array([0, 0, 1, 1, 1]), is_test=None,
                num_classes=62)  # fmt: skip
    labels = np.array([3, 61, 0, 0, 5])
    counts = p.class_counts(labels)
    assert counts.shape == (2, 62)
    assert counts[0, [3, 61]].tolist() == [1, 1] and counts[1, [0, 5]].tolist() == [2, 1]


# --------------------------------------------------------------------------- make_partition


def test_make_partition_class_beyond_the_dataset_is_a_config_error():
    config = C.load(
        overrides=[
            "data.num_clients=4",
            "server.clients_per_round=2",
            "data.groups=[{count = 2, alpha = 1.0}, {count = 2, alpha = 1.0, classes = [4, 10]}]",
        ]
    )  # valid as a config: the dataset decides which classes exist
    with pytest.raises(ConfigError) as info:
        make_partition(config, load_digits_dataset())
    msg = str(info.value)
    assert "data.groups" in msg and "class 10" in msg and "digits" in msg, msg
    assert "\n" not in msg
    assert info.value.exit_code == 2


def test_make_partition_group_classes_on_digits():
    config = C.load(
        overrides=[
            "data.num_clients=6",
            "server.clients_per_round=2",
            "data.groups=[{count = 3, alpha = 1000.0, classes = [0, 8]}, {count = 3, alpha = 1.0}]",
        ]
    )
    ds = load_digits_dataset()
    p = make_partition(config, ds)
    for k in range(3):
        assert set(client_labels(p, ds.y, k).tolist()) == {0, 8}
    assert p.class_counts(ds.y).shape == (6, 10)
