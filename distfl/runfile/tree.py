"""A run's cluster tree as a reader sees it: :class:`Tree` (a mapping of cluster ids to
:class:`Node`), its lines as ``distfl inspect`` prints them (:func:`tree_lines`), and how a
score is written (:func:`score_text`)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from distfl.hierarchy import HierarchyNode, node_order
from distfl.metrics import federation_mean
from distfl.runfile.frames import make_table, readonly

# -- the cluster tree --------------------------------------------------------------------


def score_text(x: float | None, digits: int = 3) -> str:
    """A score as ``distfl inspect`` prints it: ``digits`` decimals, "n/a" for None or NaN."""
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def tree_lines(hierarchy: list[HierarchyNode], accuracy: np.ndarray) -> list[str]:
    """The cluster tree as ``distfl inspect`` draws it, one line per node, parents before
    children: the node's id under its parent's branch, its member count, and for a split
    node the round it split in, its number of children and its best Davies-Bouldin score;
    for a leaf the mean balanced accuracy of its members (``accuracy``: each client's, as
    /clients/accuracy holds it). Drawn without recursion, so that a tree of any depth
    draws."""
    out: list[str] = []
    nodes = {n.id: n for n in hierarchy}
    children: dict[str, list[str]] = {}
    for n in hierarchy:
        if n.parent:
            children.setdefault(n.parent, []).append(n.id)
    roots = sorted((n.id for n in hierarchy if not n.parent), key=node_order)
    width = max(len(i) for i in nodes) + 4 * max(i.count(".") for i in nodes) + 4

    def line(node: HierarchyNode, prefix: str, last: bool, depth: int) -> None:
        branch = "" if depth == 0 else ("└── " if last else "├── ")
        label = f"{prefix}{branch}{node.id}"
        members = np.asarray(node.members, dtype=np.int64)
        text = f"{label:<{width}} {len(members):>6} clients"
        if node.split_round >= 0:
            kids = children.get(node.id, [])
            scores = node.datasets.get("db_scores")
            best = float(np.min(scores)) if scores is not None and len(scores) else math.nan
            text += f"  split at round {node.split_round} into {len(kids)} (DB {score_text(best)})"
        else:
            acc = federation_mean(accuracy[members]) if len(members) else math.nan
            text += f"  leaf, accuracy {score_text(acc)}"
        out.append(text)

    # (node, the prefix of its line, whether it is its parent's last child, its depth)
    todo = [(nodes[root], "", True, 0) for root in reversed(roots)]
    while todo:
        node, prefix, last, depth = todo.pop()
        line(node, prefix, last, depth)
        kids = sorted(children.get(node.id, []), key=node_order)
        ext = "" if depth == 0 else ("    " if last else "│   ")
        for i in reversed(range(len(kids))):
            todo.append((nodes[kids[i]], prefix + ext, i == len(kids) - 1, depth + 1))
    return out


@dataclass(frozen=True, eq=False)
class Node:
    """A cluster of the hierarchy, as ``/hierarchy/<id>`` records it."""

    #: "0" is the root (IFCA, FeSEM and the oracle have one root per initial cluster: "0",
    #: "1", ...), "0.1" the second child of "0"
    id: str
    #: the parent's id; "" for a root
    parent: str
    #: the children's ids, in order ("0.2" before "0.10")
    children: tuple[str, ...]
    #: its clients (global ids, ascending): a split node's when it split, a leaf's at the end
    members: np.ndarray
    #: the round it was made in (0: a root)
    created_round: int
    #: the round it split in; -1 for a leaf
    split_round: int
    #: ancestors above it (0 for a root)
    depth: int
    #: what the algorithm stored at its split, by name (FedGWC: db_scores, interaction,
    #: affinity, labels; EMD-CFL: distances, adjacency, labels; CFL: similarity, ...)
    datasets: Mapping[str, np.ndarray]

    @property
    def size(self) -> int:
        """Its number of members."""
        return int(len(self.members))

    @property
    def is_leaf(self) -> bool:
        return self.split_round < 0

    def __repr__(self) -> str:
        what = "leaf" if self.is_leaf else f"split at round {self.split_round}"
        return f"Node({self.id!r}, {self.size} clients, {what})"


class Tree(Mapping[str, Node]):
    """The cluster hierarchy of a run: a mapping of cluster id to :class:`Node`, iterated
    parents before children (:func:`distfl.hierarchy.node_order`). ``print(tree)`` draws it
    as ``distfl inspect`` does (:func:`tree_lines`)."""

    def __init__(self, hierarchy: list[HierarchyNode], accuracy: np.ndarray):
        self._hierarchy = hierarchy
        self._accuracy = accuracy
        kids: dict[str, list[str]] = {}
        for n in hierarchy:
            if n.parent:
                kids.setdefault(n.parent, []).append(n.id)
        parents = {n.id: n.parent for n in hierarchy}
        depths: dict[str, int] = {}

        def depth(cid: str) -> int:
            way = []  # the ancestors whose depth is not known yet, nearest first
            while cid in parents and cid not in depths and len(way) <= len(parents):
                way.append(cid)
                cid = parents[cid]
            d = depths.get(cid, -1)  # -1: above a root
            for node in reversed(way):
                d += 1
                depths[node] = d
            return depths[way[0]] if way else depths.get(cid, 0)

        self._nodes: dict[str, Node] = {}
        for n in sorted(hierarchy, key=lambda n: node_order(n.id)):
            self._nodes[n.id] = Node(
                id=n.id,
                parent=n.parent,
                children=tuple(sorted(kids.get(n.id, []), key=node_order)),
                members=readonly(np.asarray(n.members, dtype=np.int64)),
                created_round=int(n.created_round),
                split_round=int(n.split_round),
                depth=depth(n.id),
                datasets=MappingProxyType({k: readonly(v) for k, v in n.datasets.items()}),
            )

    def __getitem__(self, cid: str) -> Node:
        return self._nodes[cid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def roots(self) -> list[Node]:
        """The clusters of round 0: one root "0" for the splitting algorithms."""
        return [n for n in self._nodes.values() if not n.parent]

    @property
    def leaves(self) -> list[Node]:
        """The clusters that trained at the end, in tree order."""
        return [n for n in self._nodes.values() if n.is_leaf]

    @property
    def splits(self) -> list[Node]:
        """The clusters that split, in tree order."""
        return [n for n in self._nodes.values() if not n.is_leaf]

    def table(self):
        """One row per cluster (:func:`make_table`): id, parent, depth, size (members),
        children (how many), created_round, split_round (-1: a leaf)."""
        nodes = list(self._nodes.values())
        return make_table(
            {
                "id": np.array([n.id for n in nodes], dtype=object),
                "parent": np.array([n.parent for n in nodes], dtype=object),
                "depth": np.array([n.depth for n in nodes], dtype=np.int64),
                "size": np.array([n.size for n in nodes], dtype=np.int64),
                "children": np.array([len(n.children) for n in nodes], dtype=np.int64),
                "created_round": np.array([n.created_round for n in nodes], dtype=np.int64),
                "split_round": np.array([n.split_round for n in nodes], dtype=np.int64),
            }
        )

    def __str__(self) -> str:
        return "\n".join(tree_lines(self._hierarchy, self._accuracy))

    def __repr__(self) -> str:
        return (
            f"<distfl Tree: {len(self)} clusters, {len(self.leaves)} leaves, "
            f"{len(self.splits)} splits>"
        )


__all__ = ["Node", "Tree", "score_text", "tree_lines"]
