"""The cluster tree: the one record of which client belongs to which cluster.

The algorithm owns a :class:`ClusterTree` and updates it (splits; for IFCA and FeSEM, moves
of clients between leaves); the server reads it to plan evaluations and to save
``/hierarchy`` and ``/final``; nobody keeps a copy. A node is a cluster: its id ("0" is the
root, "0.1" the second child of the root), its parent, the round it was created in, the
round it split in (-1 while it is a leaf), its members (global client ids, ascending; a
split node keeps the members it had when it split) and, at a split, what the algorithm
recorded about it (``datasets``: FedGWC's P and W, CFL's similarities, ...).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np


def node_order(node_id: str) -> tuple[int, ...]:
    """Sort key of a cluster id: "0" < "0.0" < "0.1" < "0.2" < "0.10" (numeric, per level)."""
    return tuple(int(p) for p in node_id.split("."))


def clusters_found(assignment: np.ndarray) -> int:
    """The clusters a run found: the leaves that hold at least one client (``assignment``:
    each client's leaf index, -1 for a client in none). A leaf left empty (an IFCA or FeSEM
    cluster that lost every client) is a leaf, not a cluster found."""
    a = np.asarray(assignment, dtype=np.int64)
    return int(len(np.unique(a[a >= 0])))


def empty_leaves_note(clusters: int, leaves: int) -> str:
    """`` (N leaves, M of them empty)`` after a count of :func:`clusters_found` where some
    of the ``leaves`` hold no client, else ""."""
    return f" ({leaves} leaves, {leaves - clusters} of them empty)" if leaves > clusters else ""


def first_split(hierarchy: Iterable[HierarchyNode]) -> int | None:
    """The round of the hierarchy's first split; None when no cluster split."""
    return min((int(n.split_round) for n in hierarchy if n.split_round >= 0), default=None)


@dataclass
class HierarchyNode:
    id: str
    parent: str
    created_round: int
    members: np.ndarray
    split_round: int = -1
    datasets: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def is_leaf(self) -> bool:
        return self.split_round < 0


@dataclass
class Split:
    """A cluster that became several: the children ids and their members."""

    parent: str
    children: dict[str, np.ndarray]
    info: dict[str, np.ndarray] = field(default_factory=dict)


def _ids(values: Iterable[int]) -> np.ndarray:
    """Client ids as an ascending int64 array."""
    if not isinstance(values, np.ndarray):
        values = list(values)
    return np.sort(np.asarray(values, dtype=np.int64).reshape(-1))


class ClusterTree:
    """Nodes by id; the leaves are the clusters that train.

    ``roots`` are the clusters of round 0 (one root "0" for the splitting algorithms, one
    per cluster model for IFCA and FeSEM, one per ground-truth group for the oracle). A
    leaf may be empty (an IFCA model no client has chosen yet)."""

    def __init__(self, roots: dict[str, Iterable[int]], *, num_clients: int):
        self.num_clients = int(num_clients)
        self.nodes: dict[str, HierarchyNode] = {
            cid: HierarchyNode(id=cid, parent="", created_round=0, members=_ids(members))
            for cid, members in roots.items()
        }

    # -- reading -------------------------------------------------------------------------

    def leaf_ids(self) -> list[str]:
        """The leaves' ids, sorted as strings (the order every algorithm iterates in)."""
        return sorted(cid for cid, node in self.nodes.items() if node.is_leaf)

    def leaves(self) -> dict[str, np.ndarray]:
        """Leaf id -> members, in :meth:`leaf_ids` order."""
        return {cid: self.nodes[cid].members for cid in self.leaf_ids()}

    def members(self, cid: str) -> np.ndarray:
        return self.nodes[cid].members

    def __contains__(self, cid: str) -> bool:
        return cid in self.nodes

    def __getitem__(self, cid: str) -> HierarchyNode:
        return self.nodes[cid]

    def to_nodes(self) -> list[HierarchyNode]:
        """Every node, parents before children (:func:`node_order`)."""
        return [self.nodes[cid] for cid in sorted(self.nodes, key=node_order)]

    def assignment(self) -> tuple[list[str], np.ndarray]:
        """(leaf ids, index of each client's leaf in them; -1 for a client in no leaf)."""
        leaves = self.leaf_ids()
        return leaves, self.index_in(leaves)

    def index_in(self, ids: Sequence[str]) -> np.ndarray:
        """[K] each client's leaf as a position in ``ids`` (-1 for a client in no leaf, or in
        a leaf not listed): IFCA's and FeSEM's cluster indices."""
        out = np.full(self.num_clients, -1, dtype=np.int64)
        for i, cid in enumerate(ids):
            node = self.nodes.get(cid)
            if node is not None and node.is_leaf:
                out[node.members] = i
        return out

    # -- changing ------------------------------------------------------------------------

    def split(
        self,
        parent: str,
        children: dict[str, Iterable[int]],
        round_index: int,
        info: dict[str, np.ndarray] | None = None,
    ) -> Split:
        """Split the leaf ``parent`` into ``children`` (new leaves created in
        ``round_index``); ``info`` is stored with the parent. Returns the :class:`Split`."""
        node = self.nodes.get(parent)
        if node is None or not node.is_leaf:
            raise ValueError(f"cluster {parent!r} is not a leaf of the tree")
        kids = {cid: _ids(m) for cid, m in children.items()}
        for cid in kids:
            if cid in self.nodes:
                raise ValueError(f"cluster {cid!r} exists already")
        node.split_round = round_index
        node.datasets.update(info or {})
        for cid, members in kids.items():
            self.nodes[cid] = HierarchyNode(
                id=cid, parent=parent, created_round=round_index, members=members
            )
        return Split(parent=parent, children=kids, info=dict(info or {}))

    def reassign(self, clients: Sequence[int] | np.ndarray, leaves: Sequence[str]) -> int:
        """Move each of ``clients`` to the leaf of the same position in ``leaves`` (a client
        in no leaf yet joins one). Returns how many clients changed leaf."""
        clients = np.asarray(clients, dtype=np.int64).reshape(-1)
        if len(leaves) != len(clients):
            raise ValueError(f"{len(clients)} clients but {len(leaves)} leaves")
        ids = self.leaf_ids()
        index = {cid: i for i, cid in enumerate(ids)}
        unknown = sorted(set(leaves) - set(index))
        if unknown:
            raise ValueError(f"not leaves of the tree: {unknown}")
        _, current = self.assignment()
        target = np.array([index[c] for c in leaves], dtype=np.int64)
        moved = int(np.count_nonzero(current[clients] != target))
        if moved:
            current[clients] = target
            for i, cid in enumerate(ids):
                self.nodes[cid].members = np.flatnonzero(current == i).astype(np.int64)
        return moved

    def restore(self, nodes: Iterable[HierarchyNode]) -> None:
        """Replace every node by ``nodes`` (as read back from a run file)."""
        self.nodes = {}
        for node in sorted(nodes, key=lambda n: node_order(n.id)):
            self.nodes[node.id] = HierarchyNode(
                id=node.id,
                parent=node.parent,
                created_round=int(node.created_round),
                members=np.asarray(node.members, dtype=np.int64),
                split_round=int(node.split_round),
                datasets=dict(node.datasets),
            )


__all__ = ["ClusterTree", "HierarchyNode", "Split", "node_order"]
