"""What a report shows, read from a run file through :class:`~distfl.runfile.run.Run` and
arranged for plotting (no matplotlib here): the view the report and the algorithms'
figures draw from.

Everything is computed from the run file alone: what an algorithm stored at a split is
handed to its figures as it is, the class distribution of a final cluster comes from
``/clients/class_counts`` and ``/final/assignment``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from distfl.config import Config
from distfl.errors import CheckpointError
from distfl.hierarchy import HierarchyNode, node_order
from distfl.plugins import ALGORITHMS

if TYPE_CHECKING:
    from distfl.runfile.run import Run


def split_matrix_titles(first: str | None = None) -> dict[str, str]:
    """{dataset: title} of the square matrices the registered algorithms store at a split
    (:attr:`ClusteringAlgorithm.split_matrices`): ``first``'s first, then the others' by
    algorithm name; of two titles of one dataset the first is kept."""
    out: dict[str, str] = {}
    for name in ALGORITHMS.first_then_by_name(first):
        for dataset, title in ALGORITHMS.get(name).split_matrices:
            out.setdefault(dataset, title)
    return out


@dataclass
class SplitRecord:
    """One split of the hierarchy: the parent's members, the child each went to, and what
    the algorithm stored."""

    id: str
    round: int
    members: np.ndarray  # client ids of the parent
    labels: np.ndarray  # [n] the child index of each member
    groups: np.ndarray  # [n] the ground-truth group of each member
    #: every array the algorithm stored at the split, by name
    datasets: dict[str, np.ndarray] = field(default_factory=dict)
    #: the square per-member matrices among them, {name: title}: those the algorithms
    #: declare (:attr:`~distfl.algorithms.ClusteringAlgorithm.split_matrices`) in their
    #: order, then any other [n, n] array under its own name
    matrices: dict[str, str] = field(default_factory=dict)


@dataclass
class RunData:
    path: str
    config: Config
    created: str
    written: str
    version: str
    world_size: int
    rounds_done: int
    metrics: dict[str, np.ndarray]
    cluster_metrics: dict[str, np.ndarray]
    evaluation: dict[str, np.ndarray]
    hierarchy: list[HierarchyNode]
    groups: np.ndarray  # [K] ground-truth group per client
    class_counts: np.ndarray  # [K, C]
    client_accuracy: np.ndarray  # [K]
    leaves: list[str]
    assignment: np.ndarray  # [K] index into leaves
    membership: dict[str, np.ndarray] = field(default_factory=dict)
    #: the run as every reader sees it (its summary: :meth:`distfl.runfile.run.Run.summary`)
    run: Run | None = None

    @property
    def finished(self) -> bool:
        return self.rounds_done >= self.config.run.rounds

    def group_names(self) -> list[str]:
        return [g.name or f"group {i}" for i, g in enumerate(self.config.groups)]

    def splits(self) -> list[SplitRecord]:
        out = []
        declared = split_matrix_titles(self.config.algorithm.name)
        for node in sorted(self.hierarchy, key=lambda n: node_order(n.id)):
            if node.split_round < 0:
                continue
            members = np.asarray(node.members, dtype=np.int64)
            labels = node.datasets.get("labels")
            if labels is None or len(labels) != len(members):
                labels = self.child_labels(node)
            square = {
                name: values
                for name, values in node.datasets.items()
                if np.ndim(values) == 2
                and np.shape(values) == (len(members), len(members))
                and np.asarray(values).dtype.kind in "biuf"
            }
            titles = {n: t for n, t in declared.items() if n in square}
            titles.update({n: n for n in sorted(square) if n not in titles})
            out.append(
                SplitRecord(
                    id=node.id,
                    round=node.split_round,
                    members=members,
                    labels=np.asarray(labels, dtype=np.int64),
                    groups=self.groups[members],
                    datasets={k: np.asarray(v) for k, v in node.datasets.items()},
                    matrices=titles,
                )
            )
        return out

    def child_labels(self, node: HierarchyNode) -> np.ndarray:
        """The child of each member, from the children's members (-1: in none of them)."""
        kids = sorted(
            (n for n in self.hierarchy if n.parent == node.id), key=lambda n: node_order(n.id)
        )
        where = {int(k): i for i, kid in enumerate(kids) for k in kid.members}
        return np.array([where.get(int(k), -1) for k in node.members], dtype=np.int64)


def load_run(path: str | Path, *, plugins: bool = False) -> RunData:
    """Read a run file (finished, or the last checkpoint of a run in progress) through
    :func:`distfl.runfile.run.read`; ``plugins``: import its ``run.plugins`` (code the file names),
    not done by default."""
    from distfl.runfile.run import read

    run = read(path, plugins=plugins)  # the results only: not the models nor the Ps
    file = run.stored
    try:
        return RunData(
            path=str(path),
            config=run.config,
            created=run.created,
            written=run.written or run.created,
            version=run.version,
            world_size=run.world_size,
            rounds_done=run.round,
            metrics=file.metrics,
            cluster_metrics=file.cluster_metrics,
            evaluation=file.evaluation,
            membership=file.membership,
            hierarchy=file.hierarchy,
            groups=file.clients["group"],
            class_counts=file.clients["class_counts"],
            client_accuracy=file.clients["accuracy"],
            leaves=file.leaves,
            assignment=file.assignment,
            run=run,
        )
    except KeyError as exc:  # a file of another layout (the integrity record checked it)
        raise CheckpointError(f"run file {path} cannot be read: it has no {exc}") from None


# -- arranging -----------------------------------------------------------------------


def member_order(labels: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The order in which a split's members are drawn: by chosen label, then by
    ground-truth group, then by position (client id)."""
    labels = np.asarray(labels)
    return np.lexsort((np.arange(len(labels)), np.asarray(groups), labels))


def boundaries(sorted_labels: np.ndarray) -> np.ndarray:
    """Positions i where sorted_labels[i] != sorted_labels[i - 1]: the block edges."""
    sorted_labels = np.asarray(sorted_labels)
    return np.flatnonzero(sorted_labels[1:] != sorted_labels[:-1]) + 1


def class_fractions(
    class_counts: np.ndarray, assignment: np.ndarray, num_leaves: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per final cluster: the fraction of its samples in each class [L, C] and its number of
    samples [L] (an empty cluster's row is all zeros)."""
    counts = np.zeros((num_leaves, class_counts.shape[1]))
    np.add.at(counts, np.asarray(assignment, dtype=np.int64), class_counts)
    totals = counts.sum(axis=1)
    fractions = np.divide(
        counts, totals[:, None], out=np.zeros_like(counts), where=totals[:, None] > 0
    )
    return fractions, totals


def group_mix(groups: np.ndarray, assignment: np.ndarray, num_leaves: int, num_groups: int):
    """[L, G] how many clients of each ground-truth group each final cluster holds."""
    mix = np.zeros((num_leaves, num_groups), dtype=np.int64)
    np.add.at(mix, (np.asarray(assignment, dtype=np.int64), np.asarray(groups, dtype=np.int64)), 1)
    return mix


def series(table: dict[str, np.ndarray], column: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(rounds, values) of ``column`` per cluster from a per-(round, cluster) table, in
    cluster order, keeping only finite values."""
    if not table or column not in table or "cluster" not in table:
        return {}
    rounds = np.asarray(table["round"])
    values = np.asarray(table[column], dtype=np.float64)
    clusters = np.asarray(table["cluster"], dtype=object)
    out = {}
    for cid in sorted(set(clusters.tolist()), key=node_order):
        keep = (clusters == cid) & np.isfinite(values)
        if keep.any():
            out[cid] = (rounds[keep], values[keep])
    return out


@dataclass
class TreeNode:
    id: str
    size: int
    created: int
    split: int  # -1: a leaf
    x: float
    children: list[str]


def tree_layout(hierarchy: list[HierarchyNode]) -> dict[str, TreeNode]:
    """Positions of a dendrogram: leaves at x = 0, 1, 2, ... in depth-first order of
    their ids, each parent centred over its children."""
    nodes = {n.id: n for n in hierarchy}
    kids: dict[str, list[str]] = {i: [] for i in nodes}
    for n in hierarchy:
        if n.parent in nodes:
            kids[n.parent].append(n.id)
    out: dict[str, TreeNode] = {}
    next_x = 0
    roots = sorted((i for i, n in nodes.items() if n.parent not in nodes), key=node_order)
    # depth first without recursion (a tree of any depth): a node is placed once its
    # children are; (id, whether its children are placed)
    todo = [(root, False) for root in reversed(roots)]
    while todo:
        i, ready = todo.pop()
        children = sorted(kids[i], key=node_order)
        if not ready and children:
            todo.append((i, True))
            todo.extend((c, False) for c in reversed(children))
            continue
        if children:
            x = float(np.mean([out[c].x for c in children]))
        else:
            x = float(next_x)
            next_x += 1
        n = nodes[i]
        out[i] = TreeNode(
            id=i,
            size=len(n.members),
            created=n.created_round,
            split=n.split_round,
            x=x,
            children=children,
        )
    return out
