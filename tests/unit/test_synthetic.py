"""The FLCL Gaussian-mixture federation of distfl.datasets.gaussian."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distfl import config as C
from distfl.data import load_client, load_dataset, make_partition
from distfl.data.natural import natural_partition
from distfl.data.partition import sample_counts
from distfl.datasets.gaussian import (
    client_parameters,
    client_samples,
    gaussian_dataset,
    gaussian_mixture,
    mixture_plane,
)


@pytest.mark.parametrize("dim", [2, 3, 10, 64])
def test_mixture_plane_is_orthonormal(dim):
    u, v = mixture_plane(dim, seed=5)
    assert u.shape == v.shape == (dim,)
    assert abs(np.dot(u, u) - 1) < 1e-12 and abs(np.dot(v, v) - 1) < 1e-12
    assert abs(np.dot(u, v)) < 1e-12
    u2, v2 = mixture_plane(dim, seed=5)
    assert np.array_equal(u, u2) and np.array_equal(v, v2)


def test_mixture_plane_depends_on_the_seed():
    u0, _ = mixture_plane(10, seed=0)
    u1, _ = mixture_plane(10, seed=1)
    assert not np.allclose(np.abs(u0), np.abs(u1))


@pytest.mark.parametrize("dim", [2, 7])
def test_client_parameters_in_the_papers_ranges(dim):
    u, v = mixture_plane(dim, seed=3)
    sigma2s, radii = [], []
    for k in range(300):
        mu, sigma2 = client_parameters(k, dim, seed=3)
        assert mu.shape == (dim,)
        assert 0.1 <= sigma2 <= 1.0
        r = float(np.linalg.norm(mu))
        assert 1.0 <= r <= 10.0
        a, b = float(mu @ u), float(mu @ v)
        # in the plane of u and v: nothing left after projecting on them
        assert np.linalg.norm(mu - a * u - b * v) < 1e-9 * r
        # the angle lies in [0, pi]: the v component is never negative
        assert b >= -1e-12
        sigma2s.append(sigma2)
        radii.append(r)
    # uniform draws fill their ranges: 300 draws all above 0.2 (or 2) has probability < 1e-15
    assert min(sigma2s) < 0.2 and max(sigma2s) > 0.9
    assert min(radii) < 2.0 and max(radii) > 9.0
    assert client_parameters(4, dim, seed=3)[1] == client_parameters(4, dim, seed=3)[1]
    assert client_parameters(4, dim, seed=3)[1] != client_parameters(4, dim, seed=4)[1]


def test_a_clients_data_does_not_depend_on_the_federation_size():
    small = gaussian_mixture(np.full(5, 30), dim=4, seed=2)
    large = gaussian_mixture(np.full(50, 30), dim=4, seed=2)
    rows = slice(3 * 30, 4 * 30)
    assert np.array_equal(small.x[rows], large.x[rows])
    assert np.array_equal(small.y[rows], large.y[rows])
    x, y = client_samples(3, 30, dim=4, seed=2)
    assert np.array_equal(small.x[rows], x) and np.array_equal(small.y[rows], y)
    # other sizes of the other clients move client 3's rows but not its data
    mixed = gaussian_mixture(np.array([7, 90, 2, 30, 11]), dim=4, seed=2)
    assert np.array_equal(mixed.x[99:129], x)
    # and another seed is other data
    assert not np.array_equal(client_samples(3, 30, dim=4, seed=3)[0], x)


@pytest.mark.parametrize("n, positives", [(40, 20), (41, 21), (1, 1), (2, 1)])
def test_balanced_labels(n, positives):
    x, y = client_samples(0, n, dim=3, seed=0)
    assert x.dtype == np.float32 and x.shape == (n, 3)
    assert y.dtype == np.int64 and y.shape == (n,)
    assert set(y.tolist()) <= {0, 1}
    assert int(y.sum()) == positives


def test_labels_are_shuffled():
    _, y = client_samples(1, 200, dim=2, seed=0)
    assert 0 < y[:100].sum() < 100  # not all positives first


@pytest.mark.parametrize("client", [0, 5, 17])
def test_class_means_and_spread(client):
    n, dim = 4000, 6
    x, y = client_samples(client, n, dim=dim, seed=9)
    mu, sigma2 = client_parameters(client, dim, seed=9)
    x = x.astype(np.float64)
    pos, neg = x[y == 1], x[y == 0]
    assert len(pos) == len(neg) == 2000
    se = np.sqrt(sigma2 / 2000)  # standard error of each coordinate of a class mean
    assert np.all(np.abs(pos.mean(axis=0) - mu) < 5 * se), (pos.mean(axis=0), mu)
    assert np.all(np.abs(neg.mean(axis=0) + mu) < 5 * se), (neg.mean(axis=0), -mu)
    # isotropic noise of variance sigma2: 24000 squared deviations, relative SE ~1%
    resid = np.concatenate([pos - mu, neg + mu])
    assert abs(resid.var() / sigma2 - 1) < 0.05
    cov = np.cov(resid.T)
    off = cov - np.diag(np.diag(cov))
    assert np.abs(off).max() < 0.1 * sigma2


def test_gaussian_mixture_owners_and_layout():
    ds = gaussian_mixture(np.array([3, 0, 5, 2]), dim=3, seed=1)
    assert ds.name == "gaussian" and ds.num_classes == 2
    assert ds.owner.tolist() == [0, 0, 0, 2, 2, 2, 2, 2, 3, 3]
    assert ds.owner.dtype == np.int64
    assert ds.x.shape == (10, 3) and ds.x.dtype == np.float32
    assert ds.y.shape == (10,) and ds.y.dtype == np.int64
    assert ds.is_test is None
    assert ds.input_shape == (3,) and ds.num_owners == 4
    assert np.array_equal(ds.x[3:8], client_samples(2, 5, dim=3, seed=1)[0])
    empty = gaussian_mixture(np.array([], dtype=np.int64), dim=3, seed=1)
    assert empty.x.shape == (0, 3) and empty.y.shape == (0,)


def test_gaussian_config_gives_one_client_per_owner():
    config = C.load(
        overrides=[
            "data.dataset=gaussian",
            "data.dim=5",
            "data.num_clients=6",
            "data.samples_per_client=30",
            "data.quantity_skew=0.5",
            "server.clients_per_round=3",
            "run.seed=4",
            "data.groups=[{count = 4, alpha = 1.0}, "
            "{count = 2, alpha = 1.0, permute_labels = true, samples_per_client = 12}]",
        ]
    )
    ds = load_dataset(config)
    sizes = sample_counts(config.groups, samples_per_client=30, quantity_skew=0.5, seed=4)
    assert ds.owner is None and ds.owner_sizes.tolist() == sizes.tolist()  # nothing held
    assert ds.x.shape == (int(sizes.sum()), 5) and ds.num_owners == 6
    p = make_partition(config, ds)
    assert p.owners.tolist() == list(range(6))
    assert p.group.tolist() == [0, 0, 0, 0, 1, 1]
    assert (p.num_train() + p.num_test()).tolist() == sizes.tolist()
    owner = np.repeat(np.arange(6), sizes)
    for k in range(6):
        both = np.sort(np.concatenate(p.indices(k)))
        assert both.tolist() == np.flatnonzero(owner == k).tolist()


def test_the_dataset_made_when_used_is_the_held_one():
    """gaussian_dataset holds no sample: its rows, labels, class counts, partition and every
    client's materialised data equal those of the held gaussian_mixture."""
    sizes = np.array([7, 2, 12, 5, 9, 3, 8])
    lazy, held = gaussian_dataset(sizes, dim=3, seed=2), gaussian_mixture(sizes, dim=3, seed=2)
    assert lazy.x.shape == held.x.shape and lazy.input_shape == (3,)
    idx = np.random.default_rng(0).permutation(len(held.y))[:25]
    assert lazy.x[idx].tobytes() == held.x[idx].tobytes()
    assert np.array_equal(lazy.y[idx], held.y[idx]) and lazy.y[idx].dtype == np.int64
    assert lazy.x[2:9].tobytes() == held.x[2:9].tobytes()
    with pytest.raises(IndexError):
        lazy.x[np.array([len(held.y)])]
    groups = (C.GroupSpec(count=4, alpha=1.0), C.GroupSpec(count=3, alpha=1.0, permute_labels=True))
    kw = dict(test_fraction=0.25, seed=2, num_classes=2)
    a = natural_partition(None, None, groups, owner_sizes=lazy.owner_sizes,
                          owner_counts=lazy.owner_class_counts, **kw)  # fmt: skip
    b = natural_partition(held.owner, None, groups, **kw)
    assert np.array_equal(a.class_counts(lazy.y), b.class_counts(held.y))
    for k in range(len(sizes)):
        assert all(np.array_equal(u, v) for u, v in zip(a.indices(k), b.indices(k), strict=True))
        one = load_client(lazy, a, k, torch.device("cpu"), groups=groups, seed=2)
        two = load_client(held, b, k, torch.device("cpu"), groups=groups, seed=2)
        for name in ("x_train", "y_train", "x_test", "y_test"):
            assert torch.equal(getattr(one, name), getattr(two, name)), (k, name)
