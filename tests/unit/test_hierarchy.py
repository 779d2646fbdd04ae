"""The cluster tree: leaves, splits, moves of clients between leaves, the assignment, and
the round trip through a run file's /hierarchy. Expected values are written out by hand."""

from __future__ import annotations

import io

import h5py
import numpy as np
import pytest

from distfl.hierarchy import ClusterTree, node_order
from distfl.runfile.reader import read_hierarchy
from distfl.runfile.writer import write_hierarchy


def members(tree: ClusterTree) -> dict[str, list[int]]:
    return {cid: m.tolist() for cid, m in tree.leaves().items()}


def test_a_root_splits_twice():
    tree = ClusterTree({"0": range(6)}, num_clients=6)
    assert members(tree) == {"0": [0, 1, 2, 3, 4, 5]}
    split = tree.split("0", {"0.0": [4, 0, 2], "0.1": [5, 1, 3]}, 3, {"labels": np.arange(6)})
    assert split.parent == "0" and split.children["0.0"].tolist() == [0, 2, 4]  # ascending
    assert members(tree) == {"0.0": [0, 2, 4], "0.1": [1, 3, 5]}
    root = tree["0"]
    assert (root.split_round, root.members.tolist()) == (3, [0, 1, 2, 3, 4, 5])
    assert root.datasets["labels"].tolist() == list(range(6))
    assert (tree["0.1"].parent, tree["0.1"].created_round, tree["0.1"].is_leaf) == ("0", 3, True)
    tree.split("0.0", {"0.0.0": [0], "0.0.1": [2, 4]}, 7)
    assert tree.leaf_ids() == ["0.0.0", "0.0.1", "0.1"]
    leaves, index = tree.assignment()
    assert leaves == ["0.0.0", "0.0.1", "0.1"]
    assert index.tolist() == [0, 2, 1, 2, 1, 2]
    assert [n.id for n in tree.to_nodes()] == ["0", "0.0", "0.0.0", "0.0.1", "0.1"]


def test_only_a_leaf_splits_and_ids_are_new():
    tree = ClusterTree({"0": range(4)}, num_clients=4)
    tree.split("0", {"0.0": [0, 1], "0.1": [2, 3]}, 1)
    with pytest.raises(ValueError, match="not a leaf"):
        tree.split("0", {"0.2": [0]}, 2)
    with pytest.raises(ValueError, match="exists already"):
        tree.split("0.0", {"0.1": [0]}, 2)


def test_leaves_sort_as_strings_and_nodes_by_number():
    tree = ClusterTree({str(j): [j] for j in range(12)}, num_clients=12)
    assert tree.leaf_ids()[:4] == ["0", "1", "10", "11"]  # the order algorithms iterate in
    assert sorted(["0.10", "0.2", "0"], key=node_order) == ["0", "0.2", "0.10"]


def test_reassign_moves_clients_and_counts_the_moves():
    tree = ClusterTree({"0": [], "1": [], "2": []}, num_clients=5)
    leaves, index = tree.assignment()
    assert index.tolist() == [-1] * 5  # nobody anywhere yet (IFCA before its first probe)
    assert tree.reassign([0, 1, 2, 3, 4], ["1", "1", "0", "2", "1"]) == 5
    assert members(tree) == {"0": [2], "1": [0, 1, 4], "2": [3]}
    assert tree.reassign([1, 3], ["1", "0"]) == 1  # client 1 stays in "1"
    assert members(tree) == {"0": [2, 3], "1": [0, 1, 4], "2": []}
    assert tree.index_in(["2", "1", "0"]).tolist() == [1, 1, 2, 2, 1]
    assert tree.index_in(["1"]).tolist() == [0, 0, -1, -1, 0]
    with pytest.raises(ValueError, match="not leaves"):
        tree.reassign([0], ["7"])
    with pytest.raises(ValueError):
        tree.reassign([0, 1], ["1"])


def test_round_trip_through_the_run_files_hierarchy():
    tree = ClusterTree({"0": range(5)}, num_clients=5)
    tree.split("0", {"0.0": [0, 1], "0.1": [2, 3, 4]}, 2, {"affinity": np.eye(5)})
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        write_hierarchy(f.create_group("hierarchy"), tree.to_nodes())
    back = ClusterTree({"0": range(5)}, num_clients=5)
    with h5py.File(buf, "r") as f:
        back.restore(read_hierarchy(f["hierarchy"]))
    assert members(back) == members(tree)
    assert [(n.id, n.parent, n.created_round, n.split_round) for n in back.to_nodes()] == [
        (n.id, n.parent, n.created_round, n.split_round) for n in tree.to_nodes()
    ]
    assert np.array_equal(back["0"].datasets["affinity"], np.eye(5))
    # the restored tree goes on like the original
    for t in (tree, back):
        t.split("0.1", {"0.1.0": [2], "0.1.1": [3, 4]}, 5)
    assert members(back) == members(tree)
