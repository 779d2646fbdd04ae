"""FeSEM: federated stochastic expectation maximisation (Long, Xie, Shen, Zhou, Wang, Jiang,
"Multi-center federated learning: clients clustering for better personalization", World
Wide Web 2023).

A fixed number M of centres (cluster models "0".."M-1"). Clients start assigned uniformly at
random (a random permutation dealt round-robin, so every centre has members when K ≥ M).
How the centres start is ``init``:

- ``"random"`` (the paper's): each centre from its own random model. Models from distinct
  random initialisations lie far apart in parameter space (about 11.4 for the digits MLP)
  while a round of local training moves a client by less than 1, so the E-step keeps
  every client at its random centre: the clustering is the random start's.
- ``"kmeans++"`` (the default): every centre starts from the run's one initial model, and
  round 1 is a seeding round in which every client (up to 2,048 and 1 GiB of float32
  models, :func:`~distfl.algorithms.common.seeded.seeding_size`; a uniform sample of that many
  above, the others keeping their random start) trains from it once and sends its
  model (K models reach the server once, as IFCA's round 1 probes every client); the
  server runs k-means on them, seeded k-means++ style (:mod:`distfl.algorithms.common.kmeans`),
  puts each client in its k-means cluster and sets the centres to the clusters' weighted
  means. Seeding from one round's sample instead left the clients outside it at their
  random start, and the E-step rarely moves a client away from the centre it trained
  from: on the 0°/180° digits federation (12 clients, 6 per round, 15 rounds) that ended
  at ARI 0.03, 0.67 and 0.39 for seeds 0-2, against 1.0 for all three with every client
  in the seeding round. ``fedavg_rounds`` = W > 0 puts W rounds of FedAvg before the seeding
  round (every centre the sample-weighted mean of the round's models), so that the
  seeding round's models are trained from a warmed-up model: near a common model the
  clients' updates point towards their own group's optimum, which k-means can see, where
  8 steps from the random start mostly do not (rotated mnist5k, docs/fidelity.md).

Each round ``clients_per_round``
clients are drawn uniformly without replacement; each trains from its centre's model and
sends its trained model to the server. Every ``reassign_every`` rounds the server then

- E-step: re-assigns each of those clients to the nearest centre (L2 distance between its
  flattened trained model and the centres after the round's aggregation; ties to the
  lowest index), and
- M-step: sets each centre that has returned clients assigned to it to the
  sample-weighted mean of their models; a centre without one keeps its model.

In the other rounds the centres are the aggregator's per-cluster average of their
participants, as for any algorithm. The paper's M-step averages all of a centre's
members; here it averages the members that trained this round (partial participation),
the stochastic form of the same step. A centre may lose all its clients; it then keeps
its model and may win clients back later.

The pure math is in module-level functions; :class:`FeSEM` holds the assignment.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.common import seeded
from distfl.algorithms.common.kmeans import kmeans

# -- pure functions --------------------------------------------------------------------


def l2_distances(models: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """D[i, m] = ||models[i] - centres[m]||_2, [n, M], float64 (computed from the
    differences, not from the expansion of the square, so no cancellation)."""
    X = np.asarray(models, dtype=np.float64)
    C = np.asarray(centres, dtype=np.float64)
    if X.ndim != 2 or C.ndim != 2 or X.shape[1] != C.shape[1]:
        raise ValueError(f"models [n, P] and centres [M, P] needed, not {X.shape}, {C.shape}")
    out = np.empty((X.shape[0], C.shape[0]))
    for m in range(C.shape[0]):
        out[:, m] = np.linalg.norm(X - C[m], axis=1)
    return out


def assign_nearest(distances: np.ndarray) -> np.ndarray:
    """Each row's nearest centre, [n] int64; ties go to the lowest index."""
    D = np.asarray(distances, dtype=np.float64)
    if D.ndim != 2 or D.shape[1] == 0:
        raise ValueError(f"distances must be [n, M] with M ≥ 1, not {D.shape}")
    return np.argmin(D, axis=1).astype(np.int64)  # argmin returns the first minimum


def weighted_centres(
    models: np.ndarray, weights: np.ndarray, labels: np.ndarray, old_centres: np.ndarray
) -> np.ndarray:
    """[M, P] float64: centre m is Σ_{i: labels_i = m} w_i models_i / Σ w_i over the same i,
    or ``old_centres[m]`` where no model (or only zero weight) is assigned to m."""
    X = np.asarray(models, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    lab = np.asarray(labels, dtype=np.int64)
    out = np.array(old_centres, dtype=np.float64, copy=True)
    if X.ndim != 2 or w.shape != (X.shape[0],) or lab.shape != (X.shape[0],):
        raise ValueError(f"models [n, P], weights [n], labels [n]: {X.shape}, {w.shape}")
    for m in range(out.shape[0]):
        mask = lab == m
        total = w[mask].sum()
        if mask.any() and total > 0:
            out[m] = (w[mask] / total) @ X[mask]
    return out


def initial_assignment(num_clients: int, num_clusters: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random assignment in which the centres' sizes differ by at most one
    (a random permutation dealt round-robin): every centre is non-empty when K ≥ M."""
    return rng.permutation(np.arange(num_clients, dtype=np.int64) % num_clusters)


# -- the algorithm -----------------------------------------------------------------


@dataclass(frozen=True)
class FeSEMParams(seeded.CentresParams):
    num_clusters: int = seeded.fixed_models_setting()
    reassign_every: int = api.setting(1, "int ≥ 1", "rounds between re-assignments")
    init: str = seeded.init_setting()
    fedavg_rounds: int = seeded.fedavg_rounds_setting(
        "every centre the round's sample-weighted mean model; [Fidelity on "
        "mnist5k](fidelity.md#fidelity-on-mnist5k)"
    )

    def check(self, config) -> None:
        super().check(config)
        api.require(self.reassign_every >= 1, "reassign_every", self.reassign_every, "at least 1")


@api.register
class FeSEM(seeded.Centres):
    name = "fesem"
    Params = FeSEMParams
    models_from_clients = "its centres are weighted means of the clients' individual models"

    def __init__(
        self, *, num_clients: int, clients_per_round: int, seed: int,
        params: FeSEMParams | None = None, **settings,
    ):  # fmt: skip
        params = FeSEMParams.made(params, settings)
        num_clusters, reassign_every = params.num_clusters, params.reassign_every
        init, fedavg_rounds = params.init, params.fedavg_rounds
        if num_clusters < 1 or reassign_every < 1 or fedavg_rounds < 0:
            raise ValueError(
                "num_clusters and reassign_every must be at least 1, fedavg_rounds 0 or more"
            )
        seeded.check_init(init)
        rng = np.random.default_rng([seed, 0xFE5E])
        labels = initial_assignment(num_clients, int(num_clusters), rng)
        ids = [str(m) for m in range(int(num_clusters))]
        super().__init__(
            num_clients=num_clients,
            clients_per_round=clients_per_round,
            seed=seed,
            roots={cid: np.flatnonzero(labels == m) for m, cid in enumerate(ids)},
            params=params,
        )
        self.num_clusters = int(num_clusters)
        self.reassign_every = int(reassign_every)
        self.ids = ids
        self.rng = rng
        self.reassignments = 0  # clients that changed centre, summed over the run
        #: whether the centres are still to be seeded from client models (kmeans++)
        self.unseeded = init == "kmeans++"
        #: FedAvg rounds before the seeding round (kmeans++ only)
        self.fedavg_rounds = int(fedavg_rounds) if init == "kmeans++" else 0

    @property
    def labels(self) -> np.ndarray:
        """Each client's centre index (read from the tree)."""
        return self.tree.index_in(self.ids)

    def plan(self, round_index: int) -> api.RoundPlan:
        if self.unseeded and round_index > self.fedavg_rounds:  # seeding: every client
            chosen = self.seeding_sample()
        else:
            n = min(self.clients_per_round, self.num_clients)
            chosen = np.sort(self.sample_clients(self.num_clients, n))
        leaves, assign = self.tree.assignment()
        train = {int(k): leaves[int(assign[k])] for k in chosen}
        return api.RoundPlan(round=round_index, train=train, return_models=frozenset(train))

    def update(
        self, round_index: int, plan: api.RoundPlan, reports: api.ClientReports
    ) -> api.RoundUpdate:
        """The E-step and M-step on this round's returned models, every ``reassign_every``
        rounds; ``models``: the centres it moved."""
        if reports.models is None or len(reports.models) == 0:
            return api.RoundUpdate()
        clients = np.asarray(reports.clients, dtype=np.int64)
        if len(reports.models) != len(clients):
            raise ValueError(
                f"FeSEM needs every trained model: {len(reports.models)} for {len(clients)}"
            )
        if self.unseeded and round_index <= self.fedavg_rounds:  # FedAvg: all centres one mean
            mean = np.average(
                np.asarray(reports.models, dtype=np.float64),
                axis=0,
                weights=np.asarray(reports.num_samples, dtype=np.float64),
            ).astype(np.float32)
            return api.RoundUpdate(models={cid: mean.copy() for cid in self.ids})
        if self.unseeded:  # fewer models than clusters (lost to participation): seed later
            if len(clients) < self.num_clusters:
                return api.RoundUpdate()
            return self._seed(clients, reports)
        if round_index % self.reassign_every != 0:
            return api.RoundUpdate()
        X = np.asarray(reports.models, dtype=np.float64)
        models = reports.cluster_models
        centres = np.stack([np.asarray(models[cid], dtype=np.float64) for cid in self.ids])
        labels = assign_nearest(l2_distances(X, centres))
        self.reassignments += self.tree.reassign(clients, [self.ids[m] for m in labels])
        new = weighted_centres(X, reports.num_samples, labels, centres)
        return api.RoundUpdate(
            models={
                cid: new[m].astype(np.float32)
                for m, cid in enumerate(self.ids)
                if (labels == m).any()
            }
        )

    def _seed(self, clients: np.ndarray, reports: api.ClientReports) -> api.RoundUpdate:
        """k-means (k-means++ seeds) on the round's models: its clients join their k-means
        cluster, each centre becomes its cluster's weighted mean."""
        X = np.asarray(reports.models, dtype=np.float64)
        labels, centres = kmeans(X, reports.num_samples, self.num_clusters, self.rng)
        self.reassignments += self.tree.reassign(clients, [self.ids[m] for m in labels])
        self.unseeded = False
        return api.RoundUpdate(
            models={cid: centres[m].astype(np.float32) for m, cid in enumerate(self.ids)}
        )

    def state_dict(self) -> dict:
        return {
            "rng": self.rng.bit_generator.state,
            "reassignments": self.reassignments,
            "unseeded": self.unseeded,
        }

    def load_state_dict(self, state: dict) -> None:
        """(Files written before the tree held the assignment also stored it here; files
        written before ``init`` existed have no ``unseeded``: their centres started at
        random.)"""
        self.rng.bit_generator.state = state["rng"]
        self.reassignments = int(state["reassignments"])
        self.unseeded = bool(state.get("unseeded", False))


__all__ = [
    "FeSEM",
    "FeSEMParams",
    "assign_nearest",
    "initial_assignment",
    "l2_distances",
    "weighted_centres",
]
