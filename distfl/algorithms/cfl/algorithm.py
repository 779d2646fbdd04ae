"""CFL: Clustered Federated Learning (Sattler, Müller, Samek, IEEE TNNLS 2020).

Every cluster runs FedAvg until its federated optimisation has (nearly) reached a
stationary point of the members' joint objective while some members are still far from
their own: then the norm of the mean update is small and the largest client update is
large. A cluster splits when

    ||Σ_k w_k ΔW_k / Σ_k w_k|| < ε1   and   max_k ||ΔW_k|| > ε2

(after a warm-up of ``warmup`` rounds and only if it has more than 2 members; paper
ε1 = 0.4, ε2 = 1.6, warm-up 20), into the two groups that complete-linkage agglomerative
clustering finds on the cosine similarities of the members' flattened updates (distance
−similarity, as the reference code does with scikit-learn). Each child starts from the
parent's model and splits again on its own.

Where this differs from the reference code:

- **Full participation.** Every member of every cluster trains in every round, as in the
  paper's experiments and the reference code (``server.clients_per_round`` is not used);
  every trained model travels to the server, which computes the updates ΔW_k = θ_k − θ_c
  against the model θ_c the cluster started the round from.
- **Weights.** The mean update is weighted by the clients' sample counts, like FedAvg's
  aggregation (the reference code takes the plain mean).
- **Global client ids.** A split's children hold global client ids at every level (the
  reference code indexes a second-level split by positions within the cluster).
- **Round 1 is never tested.** The runtime hands the algorithm the aggregated models after
  each round (``ClientReports.cluster_models``); those are the models the clusters start
  the next round from, and CFL keeps them. The model of round 1's start (the run's initial
  model) is not given to the algorithm, so the first round has no updates to test; with
  the warm-up of 20 rounds this never matters.
- **Children's first model.** The runtime gives the children of a split the parent's
  aggregated model; the reference code aggregates each child's members' updates in the
  round of the split.

The pure math is in module-level functions; :class:`CFL` holds the cluster state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distfl.algorithms import api

ROOT = "0"

# -- pure functions --------------------------------------------------------------------


def split_criterion(
    updates: np.ndarray, weights: np.ndarray, eps1: float, eps2: float
) -> tuple[float, float, bool]:
    """CFL's split test on one cluster's updates ΔW_k (rows of ``updates``, [n, P]).

    Returns ``(mean_norm, max_norm, split)`` with mean_norm = ||Σ w_k ΔW_k / Σ w_k||,
    max_norm = max_k ||ΔW_k|| and split = mean_norm < eps1 and max_norm > eps2. With no
    update (n = 0) both norms are 0 and there is no split."""
    U = np.asarray(updates, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if U.ndim != 2 or w.shape != (U.shape[0],):
        raise ValueError(f"updates must be [n, P] and weights [n], not {U.shape} and {w.shape}")
    if U.shape[0] == 0:
        return 0.0, 0.0, False
    if w.sum() <= 0:
        raise ValueError("the weights must have a positive sum")
    mean = (w / w.sum()) @ U
    mean_norm = float(np.linalg.norm(mean))
    max_norm = float(np.linalg.norm(U, axis=1).max())
    return mean_norm, max_norm, bool(mean_norm < eps1 and max_norm > eps2)


def cosine_similarity(updates: np.ndarray) -> np.ndarray:
    """S[i, j] = <ΔW_i, ΔW_j> / (||ΔW_i|| ||ΔW_j||), [n, n], float64, exactly symmetric;
    0 in the rows and columns of zero updates (as scikit-learn's ``cosine_similarity``)."""
    U = np.asarray(updates, dtype=np.float64)
    if U.ndim != 2:
        raise ValueError(f"updates must be [n, P], not shape {U.shape}")
    norms = np.linalg.norm(U, axis=1)
    safe = np.where(norms > 0, norms, 1.0)
    V = U / safe[:, None]
    S = V @ V.T
    S = 0.5 * (S + S.T)
    np.clip(S, -1.0, 1.0, out=S)
    return S


def bipartition(similarity: np.ndarray) -> np.ndarray:
    """Two groups by complete-linkage agglomerative clustering of the distance −S.

    Labels [n] in {0, 1}, 0 for the group of the first item. The distance is taken as
    1 − S (complete linkage compares maxima only, so adding a constant to −S changes
    nothing), the tree is cut at its last merge (what scikit-learn's
    ``AgglomerativeClustering(n_clusters=2, metric="precomputed", linkage="complete")``
    does). Needs n ≥ 2."""
    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import squareform

    S = np.asarray(similarity, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise ValueError(f"similarity must be square, not {S.shape}")
    n = S.shape[0]
    if n < 2:
        raise ValueError("a bipartition needs at least 2 items")
    D = 1.0 - 0.5 * (S + S.T)
    np.fill_diagonal(D, 0.0)
    np.maximum(D, 0.0, out=D)
    Z = linkage(squareform(D, checks=False), method="complete")
    # node ids: 0..n-1 the items, n + i the merge of row i of Z; the last row joins the two
    members: dict[int, list[int]] = {i: [i] for i in range(n)}
    for i, (a, b) in enumerate(Z[:-1, :2].astype(np.int64)):
        members[n + i] = members.pop(int(a)) + members.pop(int(b))
    a, b = (int(x) for x in Z[-1, :2])
    labels = np.zeros(n, dtype=np.int64)
    labels[members[b]] = 1
    if labels[0] == 1:
        labels = 1 - labels
    return labels


# -- the algorithm -----------------------------------------------------------------


@dataclass(frozen=True)
class CFLParams(api.Params):
    """CFL's keys; the defaults follow the paper."""

    eps1: float = api.setting(
        0.4,
        "≥ 0",
        "ε1: a cluster splits when its mean update's norm is below ε1 (and the "
        "largest client update's norm above ε2)",
    )
    eps2: float = api.setting(
        1.6,
        "≥ 0",
        "ε2: a cluster splits when its largest client update's norm is above ε2 "
        "(and the mean update's norm below ε1)",
    )
    warmup: int = api.setting(20, "int ≥ 0", "rounds before a cluster is first tested")

    def check(self, config) -> None:
        api.require(self.eps1 >= 0, "eps1", self.eps1, "non-negative")
        api.require(self.eps2 >= 0, "eps2", self.eps2, "non-negative")
        api.require(self.warmup >= 0, "warmup", self.warmup, "0 or more rounds")


@api.register
class CFL(api.ClusteringAlgorithm):
    name = "cfl"
    Params = CFLParams
    #: a split keeps the cosine similarities of its parent's members (float64) in the
    #: hierarchy: K² entries at the root's split
    pair_bytes = 8
    #: at a split: the similarities and their symmetrised copies, the linkage's distances
    #: (square and condensed) and its work arrays (about 44 bytes per pair measured at
    #: n = 1,000), besides the similarities earlier splits keep
    working_bytes = 48
    #: every member trains and returns its model every round: all K at the root
    every_member_trains = True
    #: with every member planned, nothing is drawn from the algorithm's seed
    ignored_keys = {"run.sampling_seed": "it draws nothing: every member of a cluster "
                    "trains every round"}  # fmt: skip

    #: each cluster's update norms against ε₁ and ε₂
    figures = (
        api.ReportFigure(
            api.ReportFigure.TRAINING,
            "norms.png",
            "distfl.algorithms.cfl.figures:norms",
            stats=("mean_norm", "max_norm"),
        ),
    )
    split_matrices = (("similarity", "cosine similarity of updates"),)
    split_datasets = (
        ("similarity", "[n, n]", "cosine similarity of the members' updates"),
        ("labels", "[n]", "the child of each member"),
        ("mean_norm", "[]", "norm of the mean update"),
        ("max_norm", "[]", "largest update norm"),
    )
    statistics = (
        api.Statistic("mean_norm", "norm of the cluster's mean update", True),
        api.Statistic("max_norm", "largest update norm in the cluster", True),
    )

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.eps1 = float(self.eps1)
        self.eps2 = float(self.eps2)
        self.warmup = int(self.warmup)
        #: the model each cluster starts its next round from (float32, flat)
        self.start: dict[str, np.ndarray] = {}
        #: per cluster: mean_norm and max_norm of the last round it was tested on
        self.stats: dict[str, dict[str, float]] = {}
        self.rounds_seen = 0

    def plan(self, round_index: int) -> api.RoundPlan:
        return self.every_member_plan(round_index)

    def update(
        self, round_index: int, plan: api.RoundPlan, reports: api.ClientReports
    ) -> api.RoundUpdate:
        """Each cluster's updates against the model it started the round from; the split
        test; the aggregated models kept as the start of the next round. Replaces no model;
        ``stats``: each tested cluster's mean_norm and max_norm."""
        pending = self._updates(round_index, reports)
        self.start = {
            cid: np.array(reports.cluster_models[cid], dtype=np.float32, copy=True)
            for cid in self.tree.leaf_ids()
            if cid in reports.cluster_models
        }
        self.rounds_seen += 1
        self.stats = {}
        out = api.RoundUpdate(stats=self.stats)
        for cid in self.tree.leaf_ids():
            if cid not in pending:
                continue
            mean_norm, max_norm, split, S = pending[cid]
            self.stats[cid] = {"mean_norm": mean_norm, "max_norm": max_norm}
            members = self.tree.members(cid)
            if not split or round_index <= self.warmup or len(members) <= 2:
                continue
            if len(S) != len(members):  # a member did not report: never split on part
                continue
            labels = bipartition(S)
            children = {f"{cid}.{c}": members[labels == c] for c in (0, 1)}
            info = {
                "similarity": S,
                "labels": labels,
                "mean_norm": np.array([mean_norm]),
                "max_norm": np.array([max_norm]),
            }
            out.splits.append(self.tree.split(cid, children, round_index, info))
        for split in out.splits:
            start = self.start.pop(split.parent, None)
            if start is not None:
                for child in split.children:
                    self.start[child] = start.copy()
        return out

    def _updates(
        self, round_index: int, reports: api.ClientReports
    ) -> dict[str, tuple[float, float, bool, np.ndarray]]:
        """Per cluster with a start model and reports: (mean_norm, max_norm, split, S), S the
        cosine similarities when the cluster may split, else empty."""
        out: dict[str, tuple[float, float, bool, np.ndarray]] = {}
        if reports.models is None:
            return out
        clients = np.asarray(reports.clients, dtype=np.int64)
        if len(reports.models) != len(clients):
            raise ValueError(
                f"CFL needs every trained model: {len(reports.models)} for {len(clients)} clients"
            )
        row_of = {int(k): i for i, k in enumerate(clients)}
        for cid, members in self.tree.leaves().items():
            start = self.start.get(cid)
            rows = [row_of[int(k)] for k in members if int(k) in row_of]
            if start is None or not rows:
                continue
            U = reports.models[rows].astype(np.float64) - start.astype(np.float64)
            w = np.asarray(reports.num_samples, dtype=np.float64)[rows]
            mean_norm, max_norm, split = split_criterion(U, w, self.eps1, self.eps2)
            testable = round_index > self.warmup and len(rows) == len(members) > 2
            S = cosine_similarity(U) if split and testable else np.zeros((0, 0))
            out[cid] = (mean_norm, max_norm, split, S)
        return out

    def state_dict(self) -> dict:
        return {
            "rounds_seen": self.rounds_seen,
            "start": {cid: m.copy() for cid, m in self.start.items()},
            "stats": {cid: dict(s) for cid, s in self.stats.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        """(Files written before the tree held the members also stored them here.)"""
        self.rounds_seen = int(state["rounds_seen"])
        self.start = {
            str(cid): np.asarray(m, dtype=np.float32).copy()
            for cid, m in state.get("start", {}).items()
        }
        self.stats = {
            str(cid): {k: float(v) for k, v in s.items()}
            for cid, s in state.get("stats", {}).items()
        }


__all__ = ["CFL", "CFLParams", "bipartition", "cosine_similarity", "split_criterion"]
