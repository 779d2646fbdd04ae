"""FlexCFL (Duan, Liu, Ji, Wu, Liang, Chen, Tan, "Flexible Clustered Federated Learning for
Client-Level Data Distribution Shift", IEEE TPDS 2021, arXiv 2108.09749; public code
github.com/morningD/FlexCFL).

``num_clusters`` = m groups (cluster ids ``"0"`` .. ``"m-1"``) and one more leaf, ``"m"``,
that holds the clients not yet in a group and whose model stays the run's initial model.

- **Pre-training (round 1).** n = min(K, ``pretrain_scale`` · m) clients drawn uniformly
  (α = 20, the reference code's default) train from the initial model and send their
  models; their updates Δw_i = w_i − w_0 form the n × P matrix ΔW.
- **Grouping by EDC.** The m leading right singular vectors v_1..v_m of ΔW (exact thin
  SVD) give each client the row (cos(Δw_i, v_1), .., cos(Δw_i, v_m)) — the decomposed
  cosine similarity — and k-means on these rows (Euclidean: EDC) forms the m groups. A
  group's model is the plain mean of its members' pre-trained models and its latest update
  the plain mean of their updates (the reference code's equal weights).
- **Cold start.** From round 2 on, ``clients_per_round`` clients are drawn uniformly from
  the population each round. A drawn client not yet in a group trains from the initial
  model (its cold-start pre-training) and joins the group whose latest update its own
  update is most cosine-similar to (ties: the lowest group).
- **Inter-group aggregation.** After each round's intra-group aggregation (the runtime's
  aggregator), a group that trained moves by η = ``eta`` times the sum of the other
  trained groups' normalised updates: w_g ← w_g + η Σ_{h≠g} Δw_h / ‖Δw_h‖, where Δw_h is
  group h's change this round; η = 0 (the default) turns it off. A group's latest update
  is its change this round, this step included.
- **Client migration** (``migrate = true``): a drawn client already in a group sends its
  model; its update (model − its group's model before the round) is compared with every
  group's latest update, and it moves to the most cosine-similar group when that is not
  its own.

Deviations, all stated in docs/algorithms.md:

- The paper migrates a client when the Wasserstein distance between its label
  distributions before and after a shift exceeds a threshold; distfl's clients keep their
  data for the whole run, so that trigger would never fire. ``migrate`` is distfl's
  update-direction rule instead, off by default (then no client ever migrates, as in the
  paper on data without shift).
- A newcomer's cold-start round is its pre-training only: it trains in its group from its
  next draw on (the paper's newcomer also trains in its group in the same round).
- Pre-training takes the run's ``train.local_steps`` (the paper's own pre-training epochs).
- The SVD is exact (numpy), not sklearn's randomised ``TruncatedSVD``; k-means is distfl's
  (:mod:`distfl.algorithms.common.kmeans`: one k-means++ start, Lloyd's iterations to a fixed
  point) on the EDC rows, not sklearn's ``KMeans`` (10 starts, 20 iterations).
- The inter-group form is the paper's update form; the reference code instead averages
  the group models with weights η/‖w_h‖ (1 for the group itself).

Degenerate input — a pre-training update matrix with a NaN or infinity, or all zero — is
no result: the statistic ``edc_rank`` is NaN (0 for all zero), every pre-training client
joins group ``"0"``, and the run goes on as FedAvg in that group with cold starts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.common.kmeans import (
    check_cluster_count,
    cluster_count_setting,
    kmeans,
    with_group_count,
)

# -- pure functions --------------------------------------------------------------------


def cosine_rows(X: np.ndarray, D: np.ndarray) -> np.ndarray:
    """C[i, j] = cos(X_i, D_j), [n, m] float64; 0 where either vector is zero."""
    X = np.asarray(X, dtype=np.float64)
    D = np.asarray(D, dtype=np.float64)
    nx = np.linalg.norm(X, axis=1)
    nd = np.linalg.norm(D, axis=1)
    dots = X @ D.T
    denom = np.outer(nx, nd)
    out = np.zeros_like(dots)
    np.divide(dots, denom, out=out, where=denom > 0)
    return out


def decomposed_cosine(updates: np.ndarray, num_components: int) -> tuple[np.ndarray, int]:
    """(E [n, m], rank): E[i, k] = cos(Δw_i, v_k) for the m leading right singular vectors
    v_k of ``updates`` [n, P] (float64, exact thin SVD; components beyond min(n, P) are 0),
    and the numerical rank of ``updates``. Raises ValueError on a non-finite matrix."""
    X = np.asarray(updates, dtype=np.float64)
    if X.ndim != 2 or not np.isfinite(X).all():
        raise ValueError("the update matrix must be a finite [n, P] array")
    _, s, vt = np.linalg.svd(X, full_matrices=False)
    tol = s.max(initial=0.0) * max(X.shape) * np.finfo(np.float64).eps
    rank = int((s > tol).sum())
    m = int(num_components)
    E = np.zeros((X.shape[0], m))
    k = min(m, vt.shape[0])
    E[:, :k] = cosine_rows(X, vt[:k])
    return E, rank


def edc_groups(
    updates: np.ndarray, num_groups: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, int]:
    """(labels [n], E [n, m], rank): k-means into ``num_groups`` groups (distfl's k-means,
    equal weights) of the decomposed cosine rows E of ``updates``."""
    E, rank = decomposed_cosine(updates, num_groups)
    labels, _ = kmeans(E, np.ones(len(E)), int(num_groups), rng)
    return labels, E, rank


def most_similar_group(updates: np.ndarray, group_updates: np.ndarray) -> np.ndarray:
    """[n] index of the group update each row of ``updates`` is most cosine-similar to
    (ties: the lowest index; a zero vector has cosine 0 with everything)."""
    return np.argmax(cosine_rows(updates, group_updates), axis=1).astype(np.int64)


def inter_group(models: np.ndarray, deltas: np.ndarray, trained: np.ndarray,
                eta: float) -> np.ndarray:  # fmt: skip
    """[m, P] float64: each trained group g's model plus η Σ_{h≠g} Δ_h/‖Δ_h‖ over the other
    trained groups h with ‖Δ_h‖ > 0; the other groups' models unchanged."""
    W = np.array(models, dtype=np.float64, copy=True)
    D = np.asarray(deltas, dtype=np.float64)
    trained = np.asarray(trained, dtype=bool)
    norms = np.linalg.norm(D, axis=1)
    use = trained & (norms > 0)
    unit = np.zeros_like(D)
    unit[use] = D[use] / norms[use, None]
    total = unit.sum(axis=0)
    for g in np.flatnonzero(trained):
        W[g] += eta * (total - unit[g])
    return W


# -- the algorithm -----------------------------------------------------------------


@dataclass(frozen=True)
class FlexCFLParams(api.Params):
    num_clusters: int = cluster_count_setting(2, "the number of groups m")
    pretrain_scale: int = api.setting(
        20,
        "int ≥ 1",
        "pre-training clients per group (the paper's α): round 1 pre-trains "
        "min(K, pretrain_scale · m) clients",
    )
    eta: float = api.setting(
        0.0,
        "0 ≤ η ≤ 1",
        "inter-group learning rate: each trained group moves by η times the sum of the other "
        "trained groups' normalised updates; 0: off",
    )
    migrate: bool = api.setting(
        False,
        "`true`, `false`",
        "a drawn client moves to the group whose latest update its own is most similar to "
        "(distfl's rule; the paper's is triggered by a label-distribution shift, see Algorithms)",
    )

    def pretrain_clients(self, num_clients: int) -> int:
        return min(int(num_clients), self.pretrain_scale * max(self.num_clusters, 1))

    def check(self, config) -> None:
        check_cluster_count(self, config)
        api.require(self.pretrain_scale >= 1, "pretrain_scale", self.pretrain_scale, "at least 1")
        api.require(0.0 <= self.eta <= 1.0, "eta", self.eta, "between 0 and 1")


@api.register
class FlexCFL(api.ClusteringAlgorithm):
    name = "flexcfl"
    models_from_clients = "its group models are made from the clients' individual models"
    clusters_key = "num_clusters"
    Params = FlexCFLParams
    statistics = (
        api.Statistic("edc_rank", "rank of the pre-training update matrix (NaN: no result)"),
        api.Statistic("cold_started", "newcomers that joined the group this round"),
        api.Statistic("migrated", "clients that migrated into the group this round"),
    )

    def __init__(
        self, *, num_clients: int, clients_per_round: int, seed: int,
        params: FlexCFLParams | None = None, **settings,
    ):  # fmt: skip
        params = FlexCFLParams.made(params, settings)
        m = params.num_clusters
        if m < 1:
            raise ValueError(f"num_clusters must be at least 1, got {m}")
        if params.pretrain_clients(num_clients) < m:
            raise ValueError("fewer pre-training clients than groups")
        self.ids = [str(g) for g in range(m)]
        self.wait = str(m)
        roots = {cid: () for cid in self.ids}
        roots[self.wait] = np.arange(num_clients, dtype=np.int64)
        super().__init__(num_clients=num_clients, clients_per_round=clients_per_round,
                         seed=seed, roots=roots, params=params)  # fmt: skip
        self.rng = np.random.default_rng([seed, 0xF1E7])
        self.init_model: np.ndarray | None = None  # float32 [P], read in round 1
        self.group_models: np.ndarray | None = None  # float32 [m, P], after the last round
        self.latest: np.ndarray | None = None  # float64 [m, P], each group's latest update

    @classmethod
    def from_config(cls, federation, params):
        return super().from_config(federation, with_group_count(params, federation))

    @classmethod
    def round_models(cls, params, *, num_clients: int, clients_per_round: int,
                     num_params: int) -> int:  # fmt: skip
        return max(clients_per_round, params.pretrain_clients(num_clients))

    def plan(self, round_index: int) -> api.RoundPlan:
        if self.init_model is None:  # pre-training: from the initial model
            n = self.params.pretrain_clients(self.num_clients)
            chosen = np.sort(self.sample_clients(self.num_clients, n))
            train = dict.fromkeys(chosen.tolist(), self.wait)
            return api.RoundPlan(round=round_index, train=train, return_models=frozenset(train))
        n = min(self.clients_per_round, self.num_clients)
        chosen = np.sort(self.sample_clients(self.num_clients, n))
        leaves, assign = self.tree.assignment()
        train = {int(k): leaves[int(assign[k])] for k in chosen}
        back = [k for k, c in train.items() if c == self.wait or self.migrate]
        return api.RoundPlan(round=round_index, train=train, return_models=frozenset(back))

    def update(
        self, round_index: int, plan: api.RoundPlan, reports: api.ClientReports
    ) -> api.RoundUpdate:
        if self.init_model is None:
            return self._pretrain(reports)
        clients = np.asarray(reports.clients, dtype=np.int64)
        returned = sorted(plan.return_models)
        X = None
        if returned:
            X = np.asarray(reports.models, dtype=np.float64)
        row = {k: i for i, k in enumerate(returned)}
        stats: dict[str, dict[str, float]] = {}
        # the groups' change this round, then inter-group aggregation
        before = self.group_models.astype(np.float64)
        after = np.stack([np.asarray(reports.cluster_models[c], np.float64) for c in self.ids])
        trained = np.array([c in set(plan.train.values()) for c in self.ids])
        if self.eta > 0 and trained.sum() > 1:
            after = inter_group(after, after - before, trained, self.eta)
        self.latest[trained] = (after - before)[trained]
        models = {c: after[g].astype(np.float32) for g, c in enumerate(self.ids) if trained[g]}
        # cold start of the newcomers
        new = [k for k in clients if plan.train[int(k)] == self.wait]
        if new:
            U = X[[row[int(k)] for k in new]] - self.init_model.astype(np.float64)
            ok = np.isfinite(U).all(axis=1)
            join = most_similar_group(np.where(ok[:, None], U, 0.0), self.latest)
            placed = np.asarray(new, dtype=np.int64)[ok]
            self.tree.reassign(placed, [self.ids[j] for j in join[ok]])
            for j in join[ok]:
                s = stats.setdefault(self.ids[j], {})
                s["cold_started"] = s.get("cold_started", 0.0) + 1
            models[self.wait] = self.init_model.copy()
        if self.migrate:
            old = [k for k in clients if plan.train[int(k)] != self.wait]
            if old:
                gidx = np.array([self.ids.index(plan.train[int(k)]) for k in old])
                U = X[[row[int(k)] for k in old]] - before[gidx]
                ok = np.isfinite(U).all(axis=1)
                to = most_similar_group(np.where(ok[:, None], U, 0.0), self.latest)
                moved = ok & (to != gidx)
                if moved.any():
                    self.tree.reassign(np.asarray(old, dtype=np.int64)[moved],
                                       [self.ids[j] for j in to[moved]])  # fmt: skip
                    for j in to[moved]:
                        s = stats.setdefault(self.ids[j], {})
                        s["migrated"] = s.get("migrated", 0.0) + 1
        self.group_models = after.astype(np.float32)
        for g, c in enumerate(self.ids):
            if not trained[g]:
                self.group_models[g] = np.asarray(reports.cluster_models[c], np.float32)
        return api.RoundUpdate(models=models, stats=stats)

    def _pretrain(self, reports: api.ClientReports) -> api.RoundUpdate:
        """Round 1: EDC grouping of the pre-training clients' updates."""
        init = np.asarray(reports.cluster_models[self.ids[0]], dtype=np.float32).copy()
        clients = np.asarray(reports.clients, dtype=np.int64)
        W = np.asarray(reports.models, dtype=np.float64)
        U = W - init.astype(np.float64)
        m = self.num_clusters
        try:
            labels, _, rank = edc_groups(U, m, self.rng)
            if rank == 0:
                raise ValueError("every update is zero")
        except (ValueError, np.linalg.LinAlgError):
            labels = np.zeros(len(clients), dtype=np.int64)
            rank = 0 if np.isfinite(U).all() else float("nan")
        self.tree.reassign(clients, [self.ids[g] for g in labels])
        self.init_model = init
        self.group_models = np.repeat(init[None], m, axis=0)
        self.latest = np.zeros((m, len(init)))
        for g in range(m):
            mask = labels == g
            if mask.any() and np.isfinite(W[mask]).all():
                self.group_models[g] = W[mask].mean(axis=0).astype(np.float32)
                self.latest[g] = U[mask].mean(axis=0)
        models = {c: self.group_models[g].copy() for g, c in enumerate(self.ids)}
        models[self.wait] = init.copy()
        return api.RoundUpdate(models=models, stats={self.wait: {"edc_rank": float(rank)}})

    def state_dict(self) -> dict:
        empty = np.zeros((0, 0))
        return {
            "rng": self.rng.bit_generator.state,
            "init_model": self.init_model if self.init_model is not None else np.zeros(0),
            "group_models": self.group_models if self.group_models is not None else empty,
            "latest": self.latest if self.latest is not None else empty,
        }

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        init = np.asarray(state["init_model"], dtype=np.float32).reshape(-1)
        if init.size == 0:
            self.init_model = self.group_models = self.latest = None
            return
        self.init_model = init.copy()
        self.group_models = np.asarray(state["group_models"], dtype=np.float32).copy()
        self.latest = np.asarray(state["latest"], dtype=np.float64).copy()


__all__ = [
    "FlexCFL",
    "FlexCFLParams",
    "cosine_rows",
    "decomposed_cosine",
    "edc_groups",
    "inter_group",
    "most_similar_group",
]
