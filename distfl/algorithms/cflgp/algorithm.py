"""CFL-GP, clustered federated learning via gradient-based partitioning (Kim, Kim, de Veciana,
"Clustered Federated Learning via Gradient-based Partitioning", ICML 2024, PMLR 235:
24137-24193; reference code github.com/Heasung-Kim/clustered-federated-learning-via-
gradient-based-partitioning).

The server keeps ``num_clusters`` models and each client's *gradient profile*: one block of
``d`` numbers per cluster model, the cumulative average of the gradients the client computed
for that model. Every ``period`` rounds, up to round ``stop_round`` (a *clustering round*),
the round's sampled clients compute the gradient of the *criterion model* m (the models in
turn: m = c mod M in the c-th clustering round, counted from 0) on a batch of their own
training data (the probe ``"gradient"``, :mod:`distfl.algorithms.cflgp.client`), and the
server adds it to block m of their profiles: the block's cumulative average over the
gradients it received (:func:`accumulate`). The server then clusters the clients that have
a profile spectrally: the top-M singular directions of the profile matrix (clients × M·d),
k-means (the best of ``restarts`` runs from k-means++ seeds, :mod:`distfl.algorithms.common.kmeans`)
on the clients' coordinates along them (:func:`spectral_coordinates`), and the labels matched
to the previous clustering's clusters by the most clients kept (:func:`match_labels`). Each
cluster model is then trained by FedAvg of its members (the runtime's aggregator).

Defaults and deviations (docs/algorithms.md says the same):

- ``num_clusters`` is given (CFL-GP takes the number of models, 4 in the reference code's
  defaults; 0: one per ground-truth group, as IFCA's key); the reference code's estimate of
  the number from singular-value gaps and silhouette scores (its ``unknown_k`` option) is not
  implemented.
- The criterion model cycles over the M models, one per clustering round, as the paper's
  abstract ("the gradients that clients compute for various models") and the reference
  code's README ("for a set of models") describe it; the reference code itself keeps the
  criterion index at 0 and takes each client's gradient at its own cluster's model, and
  weighs a block's update by β = 1/(⌊(t + 1)/(M·period)⌋ + 1) for 0-based round t, where
  distfl's cumulative average weighs a client's n-th gradient of a block by 1/n.
- ``period`` 2 and ``stop_round`` 10 are the reference code's defaults (its clustering
  period and its clustering termination threshold); clustering rounds are 1, 1 + period, ...
  up to ``stop_round``.
- A gradient is one local SGD step from the criterion model on one batch of ``batch``
  samples (the reference code's gradient of one batch of 100; 0: ``train.batch_size``),
  taken as (start − after) / ``train.lr``: with ``train.weight_decay`` w it is the gradient plus
  w times the criterion model, the same for every client.
- The cumulative average counts each client's own updates of a block (1/n for its n-th):
  with partial participation a client's block averages the gradients it sent.
- ``restarts`` 10 k-means runs per clustering, the least within-cluster sum of squares
  kept: scikit-learn's ``KMeans`` default before version 1.4, which the reference code calls
  (with one run, seed 2 of the rotated digits lost the rotations it had found in round 1).
- ``profile_dim`` 0 keeps the whole gradient (the paper's profile, M·P numbers a client, P the
  model's parameters); n > 0 keeps n coordinates of it drawn once from the algorithm's seed
  (the reference code's reduced profile, a random subset of the coordinates), M·n a client.
- Every cluster model starts from its own initialisation (cluster j from initialisation j:
  cluster "0" from the run's model), as the reference code's independently built models.
- Partial participation (the reference code queries every client every round): a client
  never sampled in a clustering round has no profile and stays where it is, in cluster "0"
  until it first is; a clustering round clusters every client that has a profile. Clients
  profiled in different rounds hold different blocks: a block a client has no gradient for
  is taken as the mean of that block over the clients that have it
  (:func:`imputed_profiles`), so that which blocks a client holds adds no distance (with
  zeros there, rotated digits at 20 of 40 clients a round reached ARI 0.60 after 10 rounds;
  with the means 1.0). With every client in every clustering round nothing is imputed.
- Degenerate profiles (fewer profiled clients or distinct coordinates than clusters, a
  non-finite number) leave the clusters as they were; the round records ``clustered`` 0 (no
  result). A gradient row that is not finite is not accumulated (``skipped`` counts them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.common.kmeans import (
    check_cluster_count,
    cluster_count_setting,
    kmeans,
    sq_distances,
    with_group_count,
)

#: the most rounds between two clusterings
MAX_PERIOD = 1_000_000
#: the most k-means runs per clustering
MAX_RESTARTS = 1000

# -- pure math -------------------------------------------------------------------------


def accumulate(profile: np.ndarray, counts: np.ndarray, rows: np.ndarray) -> None:
    """Add ``rows`` [n, d] to the cumulative averages ``profile`` [n, d] (in place), each row
    the ``counts`` [n]-th + 1 value it averages: p ← p + (g − p) / (c + 1), c ← c + 1."""
    counts += 1
    profile += (np.asarray(rows, dtype=np.float64) - profile) / counts[:, None]


def imputed_profiles(profile: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """[n, M·d] profile matrix of ``profile`` [n, M, d], where a block a client has no
    gradient for (``counts`` [n, M] 0) is the mean of that block over the clients that have
    it (zeros when none has): under partial participation clients profiled in different
    rounds hold different blocks, and a missing block then adds no distance of its own."""
    X = np.array(profile, dtype=np.float64)
    seen = np.asarray(counts) > 0
    for m in range(X.shape[1]):
        have = seen[:, m]
        if have.any() and not have.all():
            X[~have, m] = X[have, m].mean(axis=0)
    return X.reshape(X.shape[0], X.shape[1] * X.shape[2])


def spectral_coordinates(X: np.ndarray, k: int) -> np.ndarray:
    """[n, k] coordinates of the rows of ``X`` [n, D] along its top-k right singular vectors
    (U_k Σ_k of X = U Σ Vᵀ: the paper's Pᵀ_k G with G = Xᵀ), from the eigenvectors of the
    smaller Gram matrix (X Xᵀ when n ≤ D, else Xᵀ X). A direction's sign is arbitrary
    (k-means does not depend on it); fewer than k nonzero singular values give zero columns."""
    X = np.asarray(X, dtype=np.float64)
    n, D = X.shape
    k = min(k, n, D)
    if n <= D:
        vals, vecs = np.linalg.eigh(X @ X.T)
        top = np.argsort(vals)[::-1][:k]
        return vecs[:, top] * np.sqrt(np.clip(vals[top], 0.0, None))
    vals, vecs = np.linalg.eigh(X.T @ X)
    top = np.argsort(vals)[::-1][:k]
    return X @ vecs[:, top]


def match_labels(labels: np.ndarray, previous: np.ndarray, k: int) -> np.ndarray:
    """``labels`` [n] in 0..k-1 renamed by the permutation of 0..k-1 that keeps the most
    clients in their ``previous`` [n] cluster (-1: none; the reference code's index matching,
    by an assignment instead of trying every permutation); ties keep the lowest labels."""
    labels = np.asarray(labels, dtype=np.int64)
    previous = np.asarray(previous, dtype=np.int64)
    overlap = np.zeros((k, k), dtype=np.int64)
    kept = previous >= 0
    np.add.at(overlap, (labels[kept], previous[kept]), 1)
    from scipy.optimize import linear_sum_assignment  # only where CFL-GP clusters

    rows, cols = linear_sum_assignment(overlap, maximize=True)
    rename = np.empty(k, dtype=np.int64)
    rename[rows] = cols
    return rename[labels]


def cluster_profiles(
    X: np.ndarray, k: int, rng: np.random.Generator, restarts: int = 1
) -> np.ndarray | None:
    """k-means labels [n] of the spectral coordinates of the profiles ``X`` [n, D] (the best of
    ``restarts`` runs from k-means++ seeds, by their within-cluster sum of squares), or None
    (no result) when they cannot give k clusters: fewer than k rows, a non-finite number,
    fewer than k distinct coordinate rows (zero or identical profiles)."""
    X = np.asarray(X, dtype=np.float64)
    if X.shape[0] < k or not np.isfinite(X).all():
        return None
    coords = spectral_coordinates(X, k)
    if not np.isfinite(coords).all() or len(np.unique(coords, axis=0)) < k:
        return None
    best, least = None, np.inf
    for _ in range(restarts):  # the least within-cluster sum of squares wins (first on ties)
        labels, centres = kmeans(coords, np.ones(len(coords)), k, rng)
        inertia = float(sq_distances(coords, centres)[np.arange(len(coords)), labels].sum())
        if inertia < least:
            best, least = labels, inertia
    return best


def clustering_rounds(period: int, stop_round: int, rounds: int) -> int:
    """How many of rounds 1..``rounds`` are clustering rounds (1, 1 + period, ... ≤ stop)."""
    last = min(stop_round, rounds)
    return 0 if last < 1 else (last - 1) // period + 1


# -- the algorithm ----------------------------------------------------------------------


@dataclass(frozen=True)
class CFLGPParams(api.Params):
    num_clusters: int = cluster_count_setting(
        4, "M, the number of cluster models (the reference code's 4)"
    )
    period: int = api.setting(
        2, "int ≥ 1", "rounds between two clustering rounds (the reference code's 2)"
    )
    stop_round: int = api.setting(
        10,
        "int ≥ 1",
        "the last round that may cluster (the reference code's termination threshold 10); the "
        "clusters stay as they are after it",
    )
    batch: int = api.setting(
        100,
        "int ≥ 0",
        "samples of the batch each gradient is computed on (the reference code's batch of 100; "
        "at most the client's train samples); 0: `train.batch_size`",
    )
    restarts: int = api.setting(
        10,
        "int ≥ 1",
        "k-means runs from k-means++ seeds per clustering, the one of least within-cluster sum "
        "of squares kept (scikit-learn's `KMeans` default before 1.4, which the reference code "
        "calls)",
    )
    profile_dim: int = api.setting(
        0,
        "int ≥ 0",
        "coordinates of each gradient a profile keeps: 0 the whole gradient (the paper's, M·P "
        "float64 a client for a model of P parameters); n a random n of them, drawn once from "
        "the algorithm's seed, `run.sampling_seed` (the reference code's reduced profile)",
    )

    def check(self, config) -> None:
        check_cluster_count(self, config)
        api.require(1 <= self.period <= MAX_PERIOD, "period", self.period,
                f"1 to {MAX_PERIOD:,} rounds")  # fmt: skip
        api.require(self.stop_round >= 1, "stop_round", self.stop_round, "round 1 or later")
        api.require(
            self.batch >= 0, "batch", self.batch, "0 (train.batch_size) or a number of samples"
        )
        api.require(1 <= self.restarts <= MAX_RESTARTS, "restarts", self.restarts,
                f"1 to {MAX_RESTARTS} k-means runs")  # fmt: skip
        api.require(self.profile_dim >= 0, "profile_dim", self.profile_dim,
                "0 (the whole gradient) or a number of coordinates")  # fmt: skip


@api.register
class CFLGP(api.ClusteringAlgorithm):
    name = "cflgp"
    clusters_key = "num_clusters"
    Params = CFLGPParams
    client_ops = ("gradient",)
    client = "distfl.algorithms.cflgp.client:CFLGPClient"
    #: the Gram matrix of the profiled clients and its eigenvectors (float64), per pair of
    #: profiled clients (:meth:`pair_memory` counts the clients that can have a profile)
    pair_bytes = 16
    statistics = (
        api.Statistic(
            "clustered",
            "clustering rounds: 1 when the profiles were clustered, 0 when "
            "they gave no result (too few, identical or not finite)",
        ),
        api.Statistic(
            "profiled", "clustering rounds: the cluster's members with a gradient profile"
        ),
        api.Statistic("skipped", "clustering rounds: gradients not accumulated (not finite)"),
    )

    def __init__(self, **kwargs):
        params = CFLGPParams.made(kwargs.pop("params", None), {
            key: kwargs.pop(key) for key in list(kwargs) if key in CFLGPParams.keys()
        })  # fmt: skip
        if params.num_clusters < 1:
            raise ValueError(f"num_clusters must be at least 1, got {params.num_clusters}")
        self.ids = [str(j) for j in range(params.num_clusters)]
        K = kwargs["num_clients"]
        roots = {cid: () for cid in self.ids}
        roots["0"] = np.arange(K, dtype=np.int64)  # everyone starts in cluster "0"
        super().__init__(roots=roots, params=params, **kwargs)
        self.rng = np.random.default_rng([self.seed, 0xCF1])
        self._sampled = np.zeros(0, dtype=np.int64)
        self._sampled_round = 0
        #: clients with a profile (ascending), their profiles [n, M, d] and counts [n, M]
        self.profiled = np.zeros(0, dtype=np.int64)
        self.profile = np.zeros((0, self.num_clusters, 0))
        self.counts = np.zeros((0, self.num_clusters), dtype=np.int64)
        self._coords: np.ndarray | None = None
        #: what this round's clustering gave, for its statistics
        self._clustered = False
        self._skipped = 0

    @classmethod
    def from_config(cls, federation, params):
        return super().from_config(federation, with_group_count(params, federation))

    # -- sizes -----------------------------------------------------------------------

    @classmethod
    def _observed(cls, params, num_clients, clients_per_round, rounds) -> int:
        """Clients that can have a profile by the end of ``rounds`` rounds."""
        c = clustering_rounds(params.period, params.stop_round, rounds)
        return min(num_clients, c * clients_per_round)

    @classmethod
    def pair_memory(cls, params, *, num_clients, clients_per_round, rounds) -> int:
        """The Gram matrix of the profiled clients and its eigenvectors (at most n² each, n
        the clients that can have a profile), and with ``profile_dim`` n > 0 the profiles
        themselves (M·n float64 a client) and their copy; the whole-gradient profile counts
        in :meth:`round_models`, which knows the model's size."""
        n = cls._observed(params, num_clients, clients_per_round, rounds)
        M = max(params.num_clusters, 1)
        profiles = 2 * n * M * params.profile_dim * 8
        return 2 * n * n * 8 + profiles

    @classmethod
    def state_bytes(cls, params, *, num_clients, clients_per_round, rounds, num_params,
                    **_sizes) -> int:  # fmt: skip
        """The profiles the state keeps: M blocks of ``profile_dim`` coordinates (the whole
        gradient, ``num_params``, with 0) in float64 for every client that can have one."""
        n = cls._observed(params, num_clients, clients_per_round, rounds)
        width = params.profile_dim if params.profile_dim else num_params
        return n * max(params.num_clusters, 1) * min(width, num_params) * 8

    @classmethod
    def round_models(cls, params, *, num_clients, clients_per_round, num_params) -> int:
        """The cohort's models and gradient rows (float64: two models' bytes each) and, with
        the whole gradient as profile, every profiled client's M blocks twice over (the
        profiles and the matrix clustered), for a run of ``stop_round`` rounds."""
        cohort = 3 * clients_per_round
        if params.profile_dim:
            return cohort
        n = cls._observed(params, num_clients, clients_per_round, params.stop_round)
        return cohort + 4 * n * max(params.num_clusters, 1)

    def initial_models(self) -> dict[str, int]:
        return {cid: j for j, cid in enumerate(self.ids)}

    # -- a round ---------------------------------------------------------------------

    def clustering(self, round_index: int) -> bool:
        return round_index <= self.stop_round and (round_index - 1) % self.period == 0

    def criterion(self, round_index: int) -> int:
        """The cluster model whose gradients clustering round ``round_index`` asks for."""
        return ((round_index - 1) // self.period) % self.num_clusters

    def plan_probe(self, round_index: int) -> api.ProbeRequest | None:
        chosen = self.sample_clients(self.num_clients, self.clients_per_round)
        self._sampled = np.sort(chosen).astype(np.int64)
        self._sampled_round = round_index
        if not self.clustering(round_index):
            return None
        P = int(self.federation.num_params)
        if P <= 0:
            raise RuntimeError("CFL-GP needs the model's number of parameters")
        m = self.ids[self.criterion(round_index)]
        return api.ProbeRequest(clients=self._sampled.copy(), clusters=[m], op="gradient",
                            width=P, args=(int(round_index), int(self.batch)))  # fmt: skip

    def coordinates(self) -> np.ndarray | None:
        """The gradient coordinates a profile keeps (None: all), drawn once from the seed."""
        P = int(self.federation.num_params)
        if not self.profile_dim or self.profile_dim >= P:
            return None
        if self._coords is None:
            g = np.random.default_rng([self.seed, 0xCF1, 1])
            self._coords = np.sort(g.choice(P, size=self.profile_dim, replace=False))
        return self._coords

    def update_probe(self, round_index: int, request: api.ProbeRequest, rows: np.ndarray) -> None:
        """Add each probed client's gradient to block m of its profile, then cluster."""
        clients = np.asarray(request.clients, dtype=np.int64)
        rows = np.asarray(rows, dtype=np.float64)
        coords = self.coordinates()
        if coords is not None:
            rows = rows[:, coords]
        finite = np.isfinite(rows).all(axis=1)
        self._skipped = int((~finite).sum())
        clients, rows = clients[finite], rows[finite]
        self._add_clients(clients, rows.shape[1])
        at = np.searchsorted(self.profiled, clients)
        m = self.criterion(round_index)
        block, counts = self.profile[at, m], self.counts[at, m]
        accumulate(block, counts, rows)
        self.profile[at, m], self.counts[at, m] = block, counts
        X = imputed_profiles(self.profile, self.counts)
        labels = cluster_profiles(X, self.num_clusters, self.rng, self.restarts)
        self._clustered = labels is not None
        if labels is None:
            return
        index = self.tree.index_in(self.ids)[self.profiled]
        labels = match_labels(labels, index, self.num_clusters)
        self.tree.reassign(self.profiled, [self.ids[j] for j in labels])

    def _add_clients(self, clients: np.ndarray, d: int) -> None:
        if self.profile.shape[2] != d:
            if len(self.profiled):
                raise RuntimeError(f"CFL-GP: gradient rows of {d} values, profiles of "
                                   f"{self.profile.shape[2]}")  # fmt: skip
            self.profile = np.zeros((0, self.num_clusters, d))
        new = np.setdiff1d(clients, self.profiled)
        if not len(new):
            return
        M = self.num_clusters
        ids = np.concatenate([self.profiled, new])
        order = np.argsort(ids, kind="stable")
        self.profiled = ids[order]
        self.profile = np.concatenate([self.profile, np.zeros((len(new), M, d))])[order]
        self.counts = np.concatenate([self.counts, np.zeros((len(new), M), np.int64)])[order]

    def plan(self, round_index: int) -> api.RoundPlan:
        if self._sampled_round != round_index:
            raise RuntimeError(f"CFL-GP: round {round_index} planned without its sample")
        leaves, assign = self.tree.assignment()
        return api.RoundPlan(round_index, {int(k): leaves[int(assign[k])] for k in self._sampled})

    def update(
        self, round_index: int, plan: api.RoundPlan, reports: api.ClientReports
    ) -> api.RoundUpdate:
        """No split and no model replaced; in clustering rounds the statistics."""
        out = api.RoundUpdate()
        if not self.clustering(round_index):
            return out
        index = self.tree.index_in(self.ids)[self.profiled]
        for j, cid in enumerate(self.ids):
            out.stats[cid] = {
                "clustered": float(self._clustered),
                "profiled": float((index == j).sum()),
                "skipped": float(self._skipped),
            }
        return out

    # -- checkpoints -----------------------------------------------------------------

    def state_dict(self) -> dict:
        return {
            "rng": self.rng.bit_generator.state,
            "sampled": self._sampled.copy(),
            "sampled_round": self._sampled_round,
            "profiled": self.profiled.copy(),
            "profile": self.profile.copy(),
            "counts": self.counts.copy(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self._sampled = np.asarray(state["sampled"], dtype=np.int64).reshape(-1).copy()
        self._sampled_round = int(state["sampled_round"])
        self.profiled = np.asarray(state["profiled"], dtype=np.int64).reshape(-1).copy()
        M = self.num_clusters
        profile = np.asarray(state["profile"], dtype=np.float64)
        if profile.ndim != 3:
            profile = profile.reshape(len(self.profiled), M, -1 if len(self.profiled) else 0)
        self.profile = profile.copy()
        self.counts = np.asarray(state["counts"], dtype=np.int64).reshape(-1, M).copy()


__all__ = [
    "CFLGP",
    "CFLGPParams",
    "accumulate",
    "cluster_profiles",
    "clustering_rounds",
    "imputed_profiles",
    "match_labels",
    "spectral_coordinates",
]
