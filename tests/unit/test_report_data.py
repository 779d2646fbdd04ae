"""The arithmetic behind ``distfl report``'s figures, on small hand-made inputs: the order
of a split's members, block edges, the 2-D spectral embedding (against scikit-learn's
SpectralEmbedding), class fractions, group mixes, per-cluster series, the tree layout;
and Config.to_toml, which the report prints, read back by tomllib."""

from __future__ import annotations

import math

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import numpy as np
import pytest
from sklearn.manifold import SpectralEmbedding

from distfl.algorithms.emdcfl.figures import epsilon_window
from distfl.algorithms.fedgwc.figures import embedding_2d
from distfl.config import PRESETS, build, load
from distfl.hierarchy import HierarchyNode
from distfl.runfile.run import recorded_statistics
from distfl.runfile.view import (
    RunData,
    boundaries,
    class_fractions,
    group_mix,
    member_order,
    series,
    tree_layout,
)


def test_members_are_ordered_by_label_then_group_then_id():
    labels = np.array([1, 0, 1, 0, 0])
    groups = np.array([0, 1, 1, 0, 1])
    # label 0: clients 1 (g1), 3 (g0), 4 (g1) -> 3, 1, 4; label 1: 0 (g0), 2 (g1) -> 0, 2
    assert member_order(labels, groups).tolist() == [3, 1, 4, 0, 2]


def test_epsilon_window_is_the_gap_between_same_and_cross_group_pairs():
    # clients 0, 1 in group 0, client 2 in group 1; d is not symmetric
    d = np.array([[-0.1, 0.3, 0.9], [0.2, -0.2, 0.7], [1.1, 0.6, -0.3]])
    # same: max(d01, d10) = 0.3; cross: max(0.9, 1.1) = 1.1, max(0.7, 0.6) = 0.7 -> min 0.7
    assert epsilon_window(d, np.array([0, 0, 1])) == (0.3, 0.7)
    # overlapping: client 1 is as close to 2 as to 0
    d[1, 2] = d[2, 1] = 0.25
    lo, hi = epsilon_window(d, np.array([0, 0, 1]))
    assert (lo, hi) == (0.3, 0.25) and lo >= hi
    assert epsilon_window(d, np.array([0, 1, 2]))[0] == -math.inf
    assert epsilon_window(d, np.array([0, 0, 0]))[1] == math.inf
    # the window is where EMD-CFL's own rule recovers the groups
    from distfl.algorithms.emdcfl import mutual_adjacency, neighbourhood_clusters

    d[1, 2] = d[2, 1] = 0.7
    for eps, exact in ((0.3, False), (0.31, True), (0.7, True), (0.71, False)):
        labels = neighbourhood_clusters(mutual_adjacency(d, eps))
        assert (labels.tolist() == [0, 0, 1]) == exact, eps


def test_block_edges():
    assert boundaries(np.array([0, 0, 1, 1, 1, 2])).tolist() == [2, 5]
    assert boundaries(np.array([4, 4, 4])).tolist() == []


def two_blocks(n1: int, n2: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = n1 + n2
    W = np.full((n, n), 0.05) + 0.02 * rng.random((n, n))
    W[:n1, :n1] += 0.8
    W[n1:, n1:] += 0.6
    W[: n1 // 2, : n1 // 2] += 0.1  # a sub-block, so that the third eigenvalue is distinct
    W = (W + W.T) / 2
    np.fill_diagonal(W, 1.0)
    return W


def test_the_embedding_is_scikit_learns_two_dimensional_spectral_embedding():
    W = two_blocks(7, 5)
    ours = embedding_2d(W, seed=0)
    theirs = SpectralEmbedding(n_components=2, affinity="precomputed").fit_transform(W)
    assert ours.shape == (12, 2)
    for j in range(2):  # each column up to its sign (both fix it, by different rules)
        sign = np.sign(ours[np.argmax(np.abs(ours[:, j])), j]) * np.sign(
            theirs[np.argmax(np.abs(ours[:, j])), j]
        )
        np.testing.assert_allclose(ours[:, j], sign * theirs[:, j], rtol=1e-6, atol=1e-9)
    # the first coordinate separates the two blocks
    assert len(set(np.sign(ours[:7, 0]))) == 1 and len(set(np.sign(ours[7:, 0]))) == 1
    assert np.sign(ours[0, 0]) != np.sign(ours[7, 0])


def test_the_embedding_of_two_members_has_one_coordinate():
    out = embedding_2d(np.array([[1.0, 0.3], [0.3, 1.0]]), seed=0)
    assert out.shape == (2, 2) and (out[:, 1] == 0).all()


def test_class_fractions_and_group_mix_by_hand():
    counts = np.array([[3, 1, 0], [1, 1, 2], [0, 0, 5], [2, 2, 0]])
    assignment = np.array([0, 0, 2, 0])  # cluster 1 is empty
    fractions, totals = class_fractions(counts, assignment, 3)
    assert totals.tolist() == [12, 0, 5]
    np.testing.assert_allclose(fractions[0], [6 / 12, 4 / 12, 2 / 12])
    assert fractions[1].tolist() == [0, 0, 0]
    assert fractions[2].tolist() == [0, 0, 1]
    mix = group_mix(np.array([0, 1, 1, 0]), assignment, 3, 2)
    assert mix.tolist() == [[2, 1], [0, 0], [0, 1]]


def test_series_keeps_the_finite_values_of_each_cluster():
    table = {
        "round": np.array([1, 1, 2, 2, 3]),
        "cluster": np.array(["0.1", "0.0", "0.1", "0.0", "0.10"], dtype=object),
        "mse": np.array([0.5, math.nan, 0.25, 0.1, 0.3]),
    }
    out = series(table, "mse")
    assert list(out) == ["0.0", "0.1", "0.10"]  # numeric id order, not string order
    assert out["0.0"][0].tolist() == [2] and out["0.0"][1].tolist() == [0.1]
    assert out["0.1"][0].tolist() == [1, 2] and out["0.1"][1].tolist() == [0.5, 0.25]
    assert series(table, "absent") == {} and series({}, "mse") == {}


def node(i, parent, created, split, members):
    return HierarchyNode(
        id=i, parent=parent, created_round=created, split_round=split, members=np.array(members)
    )


def test_tree_layout_centres_parents_over_children():
    hierarchy = [
        node("0", "", 0, 10, range(6)),
        node("0.0", "0", 10, -1, [0, 1]),
        node("0.1", "0", 10, 20, [2, 3, 4, 5]),
        node("0.1.0", "0.1", 20, -1, [2]),
        node("0.1.1", "0.1", 20, -1, [3, 4, 5]),
    ]
    layout = tree_layout(hierarchy)
    assert {i: n.x for i, n in layout.items()} == {
        "0.0": 0.0,
        "0.1.0": 1.0,
        "0.1.1": 2.0,
        "0.1": 1.5,
        "0": 0.75,
    }
    assert layout["0"].children == ["0.0", "0.1"] and layout["0.1.1"].size == 3
    # IFCA-style: several roots from round 0, side by side
    flat = tree_layout([node("1", "", 0, -1, [1]), node("0", "", 0, -1, [0, 2])])
    assert (flat["0"].x, flat["1"].x) == (0.0, 1.0)


def test_child_labels_come_from_the_children_when_a_split_stores_none():
    hierarchy = [
        node("0", "", 0, 3, [4, 1, 7, 2]),
        node("0.0", "0", 3, -1, [1, 2]),
        node("0.1", "0", 3, -1, [4, 7]),
    ]
    data = RunData(
        path="", config=load(), created="", written="", version="", world_size=1, rounds_done=3,
        metrics={}, cluster_metrics={}, evaluation={}, hierarchy=hierarchy,
        groups=np.zeros(8, dtype=np.int64), class_counts=np.zeros((8, 2)),
        client_accuracy=np.zeros(8), leaves=["0.0", "0.1"], assignment=np.zeros(8, dtype=int),
    )  # fmt: skip
    (split,) = data.splits()
    assert split.labels.tolist() == [1, 0, 1, 0] and split.id == "0" and split.round == 3
    # eleven children: "0.10" is child 10, not child 2 (ids sort by number, not as text)
    many = [node("0", "", 0, 3, range(11))] + [node(f"0.{c}", "0", 3, -1, [c]) for c in range(11)]
    data.hierarchy, data.groups = many, np.zeros(11, dtype=np.int64)
    (split,) = data.splits()
    assert split.labels.tolist() == list(range(11))


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_to_toml_reads_back_to_the_same_config(preset):
    config = load(preset=preset)
    assert build(tomllib.loads(config.to_toml())) == config


def test_to_toml_escapes_strings_and_keeps_floats_exact():
    config = load(
        overrides=[
            'run.out="dir \\"a\\"\\\\b.h5"',
            'algorithm.name="fedgwc"',
            "algorithm.epsilon=1.2345678901234567e-7",
        ]
    )
    assert config.run.out == 'dir "a"\\b.h5' and config.algorithm.epsilon == 1.2345678901234567e-7
    assert build(tomllib.loads(config.to_toml())) == config


def test_the_statistics_are_the_columns_beyond_the_fixed_ones_with_a_finite_value():
    nan = math.nan
    table = {
        "round": np.array([1, 2]),
        "cluster": np.array(["0", "0"], dtype=object),
        "size": np.array([3, 3]),
        "sampled": np.array([2, 1]),
        "mse": np.array([nan, 0.5]),
        "p_within": np.array([nan, nan]),  # written for every run, recorded by none here
        "zeta": np.array([1.0, nan]),
        "gap": np.array([-np.inf, 2.0]),
    }
    assert recorded_statistics(table) == ["gap", "mse", "zeta"]
    assert recorded_statistics({}) == []


def test_a_statistics_plot_file_is_a_plain_name_of_its_own():
    from distfl.report import _statistic_files

    names = ["regret", "a b", "a_b", "a/b", "ε", "."]
    assert _statistic_files(names) == [
        "stat-regret.png", "stat-a_b.png", "stat-a_b-2.png", "stat-a_b-3.png",
        "stat-statistic.png", "stat-statistic-2.png",
    ]  # fmt: skip


def test_the_algorithms_register_their_figures_and_the_report_lists_them():
    """The package's algorithm-specific figures are registered next to their algorithms;
    the run's algorithm's come first, a file name once."""
    from distfl.algorithms import ReportFigure, algorithm_class, report_figures

    files = {f.file: name for name, f in report_figures()}
    assert files["mse.png"] == "fedgwc" and files["contrast.png"] == "fedgwc"
    assert files["norms.png"] == "cfl" and files["emd-distances.png"] == "emdcfl"
    listed = report_figures("cfl")
    assert listed[0] == ("cfl", algorithm_class("cfl").figures[0])
    assert len({f.file for _, f in listed}) == len(listed)
    assert all(isinstance(f, ReportFigure) and callable(f.function()) for _, f in listed)
    assert report_figures("not_registered") == report_figures()


def test_a_figure_is_refused_at_registration_unless_it_is_of_its_own_name():
    from distfl.algorithms import ClusteringAlgorithm, ReportFigure, register

    def make(file, draw="distfl.algorithms.fedgwc.figures:mse"):
        class Drawn(ClusteringAlgorithm):
            name = "drawn_twice"
            figures = (ReportFigure(ReportFigure.TRAINING, file, draw),)

            def plan(self, round_index):
                raise NotImplementedError

        return Drawn

    for file in ("accuracy.png", "split-0-db.png", "stat-x.png", "a/b.png", "x.svg"):
        with pytest.raises(ValueError, match=f"file {file!r}"):
            register(make(file))
    with pytest.raises(TypeError, match="expected a function"):
        register(make("mine.png", draw=42))


def test_a_tree_of_any_depth_is_drawn_and_laid_out():
    """A chain of 3,000 splits (each cluster's one child splits again): inspect's drawing,
    the Python API's tree and the report's dendrogram do not recurse per level."""
    from distfl.runfile.run import Tree, tree_lines

    depth = 3000
    ids = ["0"] + [f"{i}" for i in range(1, depth)]
    nodes = [
        HierarchyNode(id=cid, parent=ids[i - 1] if i else "", created_round=i,
                      members=np.arange(2), split_round=i + 1 if i < depth - 1 else -1)
        for i, cid in enumerate(ids)
    ]  # fmt: skip
    lines = tree_lines(nodes, np.full(2, 0.5))
    assert len(lines) == depth and lines[-1].strip().startswith(f"└── {depth - 1} ")
    assert Tree(nodes, np.full(2, 0.5))[str(depth - 1)].depth == depth - 1
    layout = tree_layout(nodes)
    assert len(layout) == depth and layout["0"].x == layout[str(depth - 1)].x == 0.0
