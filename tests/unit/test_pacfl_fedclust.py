"""PACFL's and FedClust's math against independent values: principal angles against
scipy.linalg.subspace_angles, data bases against subspaces built by hand, the hierarchical
clustering against hand-worked merges, scipy's fcluster and a plain merge loop; their keys
refused in one line; and their server halves on synthetic rows (one-shot split, newcomers,
resume to the same state)."""

from __future__ import annotations

import numpy as np
import pytest
from algostate import restore_from
from scipy.cluster.hierarchy import fcluster
from scipy.linalg import subspace_angles

from distfl.algorithms.api.base import ClientReports, Federation
from distfl.algorithms.common.agglomerative import (
    LINKAGES,
    agglomerate,
    cut,
    merge_tree,
    nearest_cluster,
)
from distfl.algorithms.fedclust import FedClust, euclidean
from distfl.algorithms.pacfl import PACFL, basis_ranks, data_basis, principal_angles
from distfl.config import load
from distfl.errors import ConfigError
from distfl.metrics import adjusted_rand_index


def orthonormal(rng, d, p):
    q, _ = np.linalg.qr(rng.standard_normal((d, p)))
    return q


def same_partition(a, b) -> bool:
    return adjusted_rand_index(np.asarray(a), np.asarray(b)) == 1.0


# -- principal angles ------------------------------------------------------------------


@pytest.mark.parametrize("p", [1, 3, 5])
def test_principal_angles_are_scipys(p):
    rng = np.random.default_rng(p)
    d = 12
    bases = [orthonormal(rng, d, p) for _ in range(5)]
    rows = np.stack([b.reshape(-1) for b in bases])
    smallest = principal_angles(rows, rows, p, "smallest")
    total = principal_angles(rows, rows, p, "sum")
    for i, a in enumerate(bases):
        for j, b in enumerate(bases):
            want = np.degrees(subspace_angles(a, b))
            assert smallest[i, j] == pytest.approx(want.min(), abs=1e-5)
            assert total[i, j] == pytest.approx(want.sum(), abs=1e-5)
    assert np.abs(np.diag(smallest)).max() < 1e-5  # a subspace with itself


def test_angles_ignore_signs_and_order_of_basis_vectors():
    rng = np.random.default_rng(7)
    a, b = orthonormal(rng, 9, 3), orthonormal(rng, 9, 3)
    flipped = (a * np.array([-1.0, 1.0, -1.0]))[:, [2, 0, 1]]
    rows = np.stack([a.reshape(-1), flipped.reshape(-1), b.reshape(-1)])
    angles = principal_angles(rows, rows, 3)
    assert angles[0, 1] == pytest.approx(0.0, abs=1e-5)
    assert angles[0, 2] == pytest.approx(angles[1, 2], abs=1e-9)


def test_rank_deficient_and_empty_bases():
    rng = np.random.default_rng(3)
    d, p = 8, 3
    full = orthonormal(rng, d, p)
    small = np.zeros((d, p))
    small[:, :2] = orthonormal(rng, d, 2)
    rows = np.stack([full.reshape(-1), small.reshape(-1), np.zeros(d * p)])
    assert basis_ranks(rows, p).tolist() == [3, 2, 0]
    total = principal_angles(rows, rows, p, "sum")
    want = np.degrees(subspace_angles(full, small[:, :2]))  # two angles
    assert len(want) == 2
    assert total[0, 1] == pytest.approx(want.sum(), abs=1e-5)
    assert np.isnan(total[2]).all() and np.isnan(total[:, 2]).all()


def test_data_basis_spans_the_datas_subspace():
    rng = np.random.default_rng(11)
    d = 10
    span = orthonormal(rng, d, 2)
    samples = (span @ rng.standard_normal((2, 40))).T.reshape(40, 2, 5)  # [n, 2, 5]: d = 10
    basis = data_basis(samples, 3)
    assert basis.shape == (d, 3)
    assert np.count_nonzero(np.linalg.norm(basis, axis=0) > 0.5) == 2  # rank 2: third is 0
    got = basis[:, :2]
    assert np.allclose(got.T @ got, np.eye(2), atol=1e-10)
    assert np.degrees(subspace_angles(got, span)).max() < 1e-5


def test_data_basis_of_degenerate_data():
    assert not data_basis(np.zeros((5, 4)), 3).any()  # all zero: no subspace
    bad = np.ones((5, 4))
    bad[2, 1] = np.nan
    assert not data_basis(bad, 3).any()  # not finite: no subspace
    constant = data_basis(np.full((6, 4), 2.0), 3)  # every sample the same: one direction
    assert np.count_nonzero(np.linalg.norm(constant, axis=0) > 0.5) == 1
    assert np.allclose(np.abs(constant[:, 0]), 0.5)
    fewer = data_basis(np.random.default_rng(0).standard_normal((2, 6)), 3)  # 2 samples < p
    assert np.count_nonzero(np.linalg.norm(fewer, axis=0) > 0.5) == 2


# -- hierarchical clustering -------------------------------------------------------------


def line(points):
    x = np.asarray(points, dtype=np.float64)
    return np.abs(x[:, None] - x[None, :])


def test_threshold_cuts_worked_by_hand():
    d = line([0.0, 1.0, 2.5, 10.0, 11.0])
    # single: 0–1 (1), 1–2.5 (1.5), 10–11 (1); then 2.5–10 (7.5) stays above 1.5
    assert agglomerate(d, linkage="single", threshold=1.5).tolist() == [0, 0, 0, 1, 1]
    # complete: {0, 1} to 2.5 is max(2.5, 1.5) = 2.5 > 1.5
    assert agglomerate(d, linkage="complete", threshold=1.5).tolist() == [0, 0, 1, 2, 2]
    # average (UPGMA): {0, 1} to 2.5 is (2.5 + 1.5) / 2 = 2.0
    assert agglomerate(d, linkage="average", threshold=2.0).tolist() == [0, 0, 0, 1, 1]
    assert agglomerate(d, linkage="average", threshold=1.9).tolist() == [0, 0, 1, 2, 2]
    # a number of clusters wins over the threshold
    assert agglomerate(d, linkage="average", threshold=100.0, num_clusters=2).tolist() == [
        0, 0, 0, 1, 1,
    ]  # fmt: skip
    assert agglomerate(d, linkage="single", threshold=0.0, num_clusters=5).tolist() == [
        0, 1, 2, 3, 4,
    ]  # fmt: skip


@pytest.mark.parametrize("linkage", LINKAGES)
def test_cuts_are_scipys_fcluster(linkage):
    rng = np.random.default_rng(5)
    pts = rng.standard_normal((30, 3)) + np.repeat(rng.standard_normal((3, 3)) * 6, 10, axis=0)
    d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    Z = merge_tree(d, linkage)
    for t in np.quantile(Z[:, 2], [0.2, 0.5, 0.9, 0.97]):
        labels = agglomerate(d, linkage=linkage, threshold=float(t))
        assert same_partition(labels, fcluster(Z, t, criterion="distance"))
    for k in (1, 2, 3, 7):
        labels = agglomerate(d, linkage=linkage, threshold=0.0, num_clusters=k)
        assert len(np.unique(labels)) == k
        assert same_partition(labels, fcluster(Z, k, criterion="maxclust"))


def reference_loop(A, thresh):
    """PACFL's public code's procedure, written plainly: merge the closest pair while its
    distance is at most thresh, the merged row the mean of the two rows."""
    A = A.astype(float).copy()
    groups = [[i] for i in range(len(A))]
    while len(A) > 1:
        B = A + np.diag(np.full(len(A), np.inf))
        i, j = np.unravel_index(np.argmin(B), B.shape)
        if B[i, j] > thresh:
            break
        i, j = min(i, j), max(i, j)
        z = (A[:, i] + A[:, j]) / 2
        A[:, i], A[i, :] = z, z
        A = np.delete(np.delete(A, j, axis=0), j, axis=1)
        groups[i] += groups.pop(j)
    labels = np.empty(sum(len(g) for g in groups), dtype=np.int64)
    for c, g in enumerate(groups):
        labels[g] = c
    return labels


def test_weighted_linkage_is_pacfls_merge_loop():
    rng = np.random.default_rng(9)
    for trial in range(5):
        pts = rng.standard_normal((20, 4)) + np.repeat(rng.standard_normal((4, 4)) * 4, 5, axis=0)
        d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
        for t in (1.0, 2.5, 5.0):
            got = agglomerate(d, linkage="weighted", threshold=t)
            assert same_partition(got, reference_loop(d, t)), (trial, t)


def test_missing_distances_count_as_farthest_and_tiny_inputs():
    d = line([0.0, 0.5, 0.7])
    d[2, 0] = d[0, 2] = np.nan  # one pair without a result
    # 1–2 merge first (0.2); {0} to {1, 2}: single min(0.5, missing) = 0.5, complete the
    # missing one, farther than any measured distance
    assert agglomerate(d, linkage="single", threshold=0.6).tolist() == [0, 0, 0]
    assert agglomerate(d, linkage="complete", threshold=0.6).tolist() == [0, 1, 1]
    assert agglomerate(d, linkage="complete", threshold=1e9).tolist() == [0, 1, 1]
    assert agglomerate(d, linkage="complete", threshold=0.0, num_clusters=1).tolist() == [0] * 3
    # nothing measured: no pair is within any threshold, and a count still cuts
    nothing = np.full((3, 3), np.nan)
    assert agglomerate(nothing, linkage="average", threshold=50.0).tolist() == [0, 1, 2]
    assert len(set(agglomerate(nothing, linkage="average", threshold=0.0, num_clusters=2))) == 2
    assert agglomerate(np.zeros((1, 1)), linkage="single", threshold=1.0).tolist() == [0]
    assert agglomerate(np.zeros((4, 4)), linkage="average", threshold=0.0).tolist() == [0] * 4
    with pytest.raises(ValueError):
        cut(merge_tree(line([0, 1]), "single"), 2, num_clusters=3)


def test_nearest_cluster_by_linkage():
    labels = np.array([0, 0, 1, 1])
    d = np.array([[1.0, 9.0, 4.0, 4.0], [np.nan, np.nan, np.nan, np.nan]])
    assert nearest_cluster(d, labels, linkage="average").tolist() == [1, 0]  # 5 > 4
    assert nearest_cluster(d, labels, linkage="single").tolist() == [0, 0]  # 1 < 4
    assert nearest_cluster(d, labels, linkage="complete").tolist() == [1, 0]  # 9 > 4


@pytest.mark.parametrize(
    ("linkage", "reduce"),
    [("average", np.mean), ("weighted", np.mean), ("single", np.min), ("complete", np.max)],
)
def test_nearest_cluster_is_the_plain_per_cluster_reduction(linkage, reduce):
    rng = np.random.default_rng(1)
    d = rng.random((30, 50))
    labels = rng.permutation(np.arange(50) % 7)
    per = np.stack([reduce(d[:, labels == c], axis=1) for c in range(7)], axis=1)
    assert nearest_cluster(d, labels, linkage=linkage).tolist() == per.argmin(axis=1).tolist()


def test_euclidean_is_the_norm_of_differences():
    a = np.array([[0.0, 0.0], [3.0, 4.0]])
    assert euclidean(a, a).tolist() == [[0.0, 5.0], [5.0, 0.0]]


# -- keys --------------------------------------------------------------------------------


def error(*items) -> str:
    with pytest.raises(ConfigError) as info:
        load(preset="rotated", overrides=list(items))
    assert info.value.exit_code == 2
    text = str(info.value)
    assert "\n" not in text
    return text


def test_keys_are_refused_in_one_line():
    # rotated digits: 40 clients of 8 × 8 = 64 features
    pacfl = 'algorithm.name="pacfl"'
    assert "algorithm.num_basis = 65: must be at most the 64 features" in error(
        pacfl, "algorithm.num_basis=65"
    )
    # 20 samples a client, a quarter of them for testing: 15 to train on
    text = error(pacfl, "algorithm.num_basis=20", "data.samples_per_client=20")
    assert "algorithm.num_basis = 20: must be at most the 15 train samples" in text
    assert "algorithm.num_clusters = 41: must be -1 (the threshold)" in error(
        pacfl, "algorithm.num_clusters=41"
    )
    assert "to the one-shot round's 10 clients" in error(
        pacfl, "algorithm.probe_clients=10", "algorithm.num_clusters=11"
    )
    assert "algorithm.threshold = 91.0: must be between 0 and 90 degrees" in error(
        pacfl, "algorithm.threshold=91"
    )
    load(
        preset="rotated", overrides=[pacfl, "algorithm.threshold=200", 'algorithm.proximity="sum"']
    )
    assert "algorithm.probe_clients = 41" in error(pacfl, "algorithm.probe_clients=41")
    assert "algorithm.linkage" in error(pacfl, 'algorithm.linkage="ward"')
    fedclust = 'algorithm.name="fedclust"'
    assert "algorithm.threshold = -1.0: must be a distance of 0 or more" in error(
        fedclust, "algorithm.threshold=-1"
    )
    assert "algorithm.num_clusters = 41" in error(fedclust, "algorithm.num_clusters=41")
    assert "algorithm.steps = -1" in error(fedclust, "algorithm.steps=-1")


# -- the server halves on synthetic rows ----------------------------------------------------


def planted_rows(groups, rng, d=6, p=2):
    """One flattened d × p basis a client, near its group's subspace."""
    centres = [orthonormal(rng, d, p) for _ in range(max(groups) + 1)]
    rows = []
    for g in groups:
        q, _ = np.linalg.qr(centres[g] + 0.01 * rng.standard_normal((d, p)))
        rows.append(q.reshape(-1))
    return np.stack(rows)


def pacfl(num_clients, **settings):
    algorithm = PACFL(num_clients=num_clients, clients_per_round=4, seed=1,
                      num_basis=2, **settings)  # fmt: skip
    algorithm.federation = Federation(num_clients, 4, 1, input_dim=6)
    return algorithm


def play(algorithm, rows_of, rounds):
    """Run rounds of the server half, each probed client answering its row."""
    for t in range(1, rounds + 1):
        request = algorithm.plan_probe(t)
        if request is not None:
            algorithm.update_probe(t, request, rows_of[request.clients])
        plan = algorithm.plan(t)
        clients = np.array(sorted(plan.train), dtype=np.int64)
        reports = ClientReports(clients, np.zeros((len(clients), 1)), np.ones(len(clients), int))
        algorithm.update(t, plan, reports)


def test_one_shot_split_then_newcomers_join_their_group():
    groups = np.array([0, 1, 2] * 8)
    rows = planted_rows(groups, np.random.default_rng(2))
    algorithm = pacfl(24, threshold=10.0, probe_clients=9)
    play(algorithm, rows, 1)
    first = algorithm.first
    assert len(first) == 9
    # three clusters of the one-shot round's clients, then the waiting leaf of the others
    leaves = algorithm.tree.leaf_ids()
    assert leaves == ["0.0", "0.1", "0.2", "0.3"]
    assert algorithm.waiting().tolist() == np.setdiff1d(np.arange(24), first).tolist()
    _, assign = algorithm.tree.assignment()
    assert same_partition(assign[first], groups[first])
    assert algorithm.rows is not None  # newcomers may still come
    for t in range(2, 30):
        waiting = algorithm.waiting()
        request = algorithm.plan_probe(t)
        if request is not None:
            assert np.isin(request.clients, waiting).all()  # only newcomers are probed
            algorithm.update_probe(t, request, rows[request.clients])
        plan = algorithm.plan(t)
        assert "0.3" not in plan.train.values()  # nobody trains from the waiting leaf
    _, assign = algorithm.tree.assignment()
    placed = np.setdiff1d(np.arange(24), algorithm.waiting())
    assert len(placed) > 9
    assert same_partition(assign[placed], groups[placed])
    assert (assign[placed] < 3).all()


def test_resume_gives_the_same_state():
    groups = [0, 1] * 10
    rows = planted_rows(groups, np.random.default_rng(4))
    whole = pacfl(20, threshold=10.0, probe_clients=6)
    play(whole, rows, 6)
    first = pacfl(20, threshold=10.0, probe_clients=6)
    play(first, rows, 3)
    resumed = pacfl(20, threshold=10.0, probe_clients=6)
    restore_from(resumed, first)
    for t in range(4, 7):  # the resumed one continues
        request = resumed.plan_probe(t)
        if request is not None:
            resumed.update_probe(t, request, rows[request.clients])
        plan = resumed.plan(t)
        resumed.update(t, plan, ClientReports(np.zeros(0, int), np.zeros((0, 1)), np.zeros(0, int)))
    assert np.array_equal(whole.tree.assignment()[1], resumed.tree.assignment()[1])
    assert whole.rng.bit_generator.state == resumed.rng.bit_generator.state


def test_one_cluster_keeps_the_root_and_every_client():
    rows = planted_rows([0] * 6, np.random.default_rng(6))
    algorithm = pacfl(6, threshold=45.0)
    play(algorithm, rows, 2)
    assert algorithm.tree.leaf_ids() == ["0"]
    assert "labels" in algorithm.tree["0"].datasets
    assert algorithm.rows is None


def test_fedclust_needs_the_last_layer_and_asks_for_it():
    algorithm = FedClust(num_clients=5, clients_per_round=2, seed=0)
    algorithm.federation = Federation(5, 2, 0, local_steps=7, last_layer=(10, 16))
    request = algorithm.plan_probe(1)
    assert request.width == 6 and request.args == (7, 10, 16)
    assert request.clients.tolist() == [0, 1, 2, 3, 4]
    bare = FedClust(num_clients=5, clients_per_round=2, seed=0)
    with pytest.raises(RuntimeError, match="last linear layer"):
        bare.plan_probe(1)


def test_last_layer_span_is_the_last_linears_weight_and_bias():
    import torch

    from distfl.models import build_model, flat_params, last_layer_span, last_linear

    model = build_model("mlp", (8, 8), 10, hidden=(8,))
    start, stop = last_layer_span(model)
    last = last_linear(model)
    flat = flat_params(model)
    want = torch.cat([last.weight.detach().reshape(-1), last.bias.detach()])
    assert stop - start == 8 * 10 + 10
    assert torch.equal(flat[start:stop], want)


def test_pacfls_probe_counts_the_bases_uploaded():
    algorithm = pacfl(5)
    request = algorithm.plan_probe(1)
    assert request.width == 6 * 2 and request.args == (2,)
    assert request.federation_bytes == 5 * 12 * 8
    assert FedClust(num_clients=5, clients_per_round=2, seed=0).probe_bytes(5) is None


def test_fedclusts_initial_model_is_the_seeded_build_and_leaves_the_random_state():
    import types

    import torch

    from distfl.algorithms.fedclust.client import FedClustClient
    from distfl.models import build_model, flat_params

    config = load(preset="rotated")
    dataset = types.SimpleNamespace(input_shape=(1, 8, 8), num_classes=10)
    context = types.SimpleNamespace(config=config, dataset=dataset)
    half = FedClustClient(config.algorithm.params, context)
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    got = half.initial_model()
    assert torch.equal(torch.random.get_rng_state(), before)  # nothing else's draws change
    torch.manual_seed(config.run.seed)  # as the server builds the run's initial model
    want = flat_params(build_model(config.model.name, (1, 8, 8), 10, hidden=config.model.hidden))
    assert torch.equal(got, want)
    assert half.initial_model() is got  # built once
