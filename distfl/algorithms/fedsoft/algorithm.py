"""FedSoft's server half (Ruan and Joe-Wong, AAAI 2022, Algorithm 1; its public code
ycruan/FedSoft, ``servers.py``, ``clients.py`` and ``solvers.py``).

The server keeps S cluster models c_s ("0".."S-1", each from its own initialisation, as the
code's ``model_fn()`` calls) and, for every client that has trained, its importance weights
u_k (S values) and its personal model w_k. A round:

1. ``clients_per_round`` clients are drawn uniformly without replacement;
2. each estimates its importance weights on its train split (a probe,
   :func:`importance_weights`): n_ks counts its samples whose loss is least under c_s (ties:
   the first cluster), u_ks = n_ks / n_k, and a cluster no sample picks gets σ (the code's
   ``count_smoother``, ``sigma`` = 1e-4);
3. each trains its personal model w_k (before its first training: the run's initial model,
   the code's one initialisation shared by the clients) once, with the proximal term
   (λ/2) Σ_s u_ks ‖w − c_s‖² (``lam`` = 0.1, the code's MNIST setting), i.e. a pull of
   strength λ Σ_s u_ks toward its mix Σ_s u_ks c_s / Σ_s u_ks (``start = "mix"``: every
   training starts from the mix, as EMD-CFL's port does);
4. each cluster model becomes Σ_k v_sk w_k with v_sk = u_ks n_k / Σ_k' u_k's n_k' over the
   round's clients (the code's aggregation without selection): the runtime's exact weighted
   sums, each client's one model entering every cluster's sum with weight u_ks·n_k.

A client is evaluated on its personal model (the code's validator; a client that never
trained: on its mix, with u uniform before it first estimates). Its cluster, for the tree,
the ARI and the per-cluster tables, is its largest weight (ties: the first cluster); before
its first estimate, the first. The table ``weights`` holds each round's clients' u_k.

Deviations (docs/algorithms.md): the code estimates every client's weights every τ rounds
and selects, for each cluster, K clients with probabilities v_sk, each cluster averaging its
selection; that needs every client's weights each τ rounds (a probe of the whole
population), so distfl estimates the round's clients only, every round, and aggregates with
the weights v_sk over them (the code's ``do_selection = False`` rule). A client that never
trained is evaluated on its mix of the cluster models (the code evaluates its shared initial
model, which every client has trained by then in its full participation). The
optimiser is the run's ``train`` settings, fresh each round (the code keeps each client's
Adam, lr 1e-4, across rounds); the code trains 10 epochs of batches of 10 a round.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.common.graph import aggregate_rows
from distfl.algorithms.common.graph_model import check_lam
from distfl.algorithms.common.kmeans import EMDCFL_GIVES, check_cluster_count, cluster_count_setting
from distfl.algorithms.common.mixture import weight_rows
from distfl.algorithms.common.models_of_own import ModelsOfOwn

#: the client half's ops: the importance estimate (a probe), the start of a client's
#: training (its preparation) and its evaluation on its personal model
ESTIMATE, START, PERSONAL = "importance", "start", "personal"


def importance_weights(losses: np.ndarray, sigma: float) -> np.ndarray:
    """FedSoft's importance weights u [S] of one client from the loss ℓ [S, n] of each of
    its samples under each cluster model: u_s = n_s / n with n_s the samples whose least
    loss is under model s (ties: the first; a NaN loss counts as +∞), and σ for a model no
    sample picks (the code's ``count_smoother``: a zero count becomes σ·n). No samples:
    1/S each."""
    ell = np.asarray(losses, dtype=np.float64)
    S, n = ell.shape
    if n == 0:
        return np.full(S, 1.0 / S)
    best = np.argmin(np.where(np.isnan(ell), np.inf, ell), axis=0)
    counts = np.bincount(best, minlength=S).astype(np.float64)
    counts[counts == 0] = sigma * n
    return counts / n


def mix_of(models: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """[P] float64: Σ_s u_s c_s / Σ_s u_s, the models [S, P] summed in their order."""
    u = np.asarray(weights, dtype=np.float64)
    return aggregate_rows(u[None, :], models)[0] / u.sum()


def state_row(weights: np.ndarray, personal: np.ndarray | None, num_params: int) -> np.ndarray:
    """A client's row for its client half: [has a personal model (1 or 0), u_1..u_S, w_1..w_P]
    (zeros for w without one)."""
    w = np.zeros(num_params) if personal is None else np.asarray(personal, dtype=np.float64)
    return np.concatenate([[0.0 if personal is None else 1.0], weights, w])


def split_row(row: np.ndarray, num_clusters: int) -> tuple[bool, np.ndarray, np.ndarray]:
    """(has a personal model, u [S], w [P]) of :func:`state_row`'s row."""
    row = np.asarray(row, dtype=np.float64)
    return bool(row[0] > 0), row[1 : 1 + num_clusters], row[1 + num_clusters :]


@dataclass(frozen=True)
class FedSoftParams(api.Params):
    num_clusters: int = cluster_count_setting(
        2, "S, the cluster models (the code's shipped experiment: 2)", EMDCFL_GIVES
    )
    lam: float = api.setting(
        0.1, "0 to 3.4e38", "λ of the proximal term (the code's MNIST setting)"
    )
    sigma: float = api.setting(
        1e-4, "in (0, 1]", "σ, the weight of a cluster no sample picks (the code's count smoother)"
    )
    start: str = api.setting(
        "personal", "personal or mix", "where a client's training starts: its personal model "
        "(the code's), or each round its mix of the cluster models (EMD-CFL's port)",
    )  # fmt: skip

    choices = {"start": ("personal", "mix")}
    #: a file written before ``start`` existed trained from the personal models
    stored_defaults = {"start": "personal"}

    def check(self, config) -> None:
        check_cluster_count(self, config)
        check_lam(self.lam)
        api.require(0 < self.sigma <= 1, "sigma", self.sigma, "a number in (0, 1]")


@api.register
class FedSoft(ModelsOfOwn):
    name = "fedsoft"
    salt = 0xF505
    Params = FedSoftParams
    client_ops = (ESTIMATE, START, PERSONAL)
    newcomers = (
        "its importance weights estimated on its train split as a drawn client's "
        "(the share of its samples each cluster model fits best), then its mix "
        "Σ u_s c_s / Σ u_s of the cluster models, as a client that never trained"
    )
    client = "distfl.algorithms.fedsoft.client:FedSoftClient"
    evaluation = PERSONAL
    membership = "largest weight"
    tables = (
        api.soft_weights_table(
            "u_ks, the client's importance weight of the cluster (its share of samples best "
            "explained by the cluster's model)",
            "each round's clients' importance weights, a row per cluster, every round",
        ),
    )
    figures = (api.SOFT_WEIGHTS_FIGURE,)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        #: the importance weights u_k of each client that has estimated them (float64 [S])
        self.weights: dict[int, np.ndarray] = {}
        #: the personal model w_k of each client that has trained (float32 [P])
        self.personal: dict[int, np.ndarray] = {}
        #: the round's clients, drawn by plan_probe (for the round's plan; a round's state
        #: needs none of it)
        self.cohort = np.zeros(0, dtype=np.int64)

    @classmethod
    def round_models(cls, params, *, num_clients, clients_per_round, num_params) -> int:
        """Each client's personal model, returned once per cluster it enters."""
        return clients_per_round * max(int(params.num_clusters), 1)

    @classmethod
    def state_bytes(cls, params, *, num_clients: int, num_params: int, **sizes) -> int:
        """A personal model (float32) and S weights (float64) per client that trains: at
        most every client."""
        return num_clients * (4 * num_params + 8 * max(int(params.num_clusters), 1) + 8)

    def plan_probe(self, round_index: int) -> api.ProbeRequest:
        self.cohort = self.draw()
        return api.ProbeRequest(clients=self.cohort, clusters=list(self.ids), op=ESTIMATE)

    def update_probe(self, round_index: int, request: api.ProbeRequest, rows: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.float64)
        for i, k in enumerate(request.clients.tolist()):
            self.weights[int(k)] = rows[i].copy()
        self.tree.reassign(request.clients, [self.ids[j] for j in np.argmax(rows, axis=1)])

    def plan(self, round_index: int) -> api.RoundPlan:
        P = int(self.federation.num_params)
        train, state = {}, {}
        first = self.federation.initial_model  # the clients' shared start (the code's)
        for k in self.cohort.tolist():
            u = self.weights[k]
            train[k] = {cid: float(u[j]) for j, cid in enumerate(self.ids)}
            state[k] = state_row(u, self.personal.get(k, first), P)
        return api.RoundPlan(
            round=round_index, train=train, return_models=frozenset(train), prepare=START,
            prepare_width=0, client_state=state, one_training=True,
        )  # fmt: skip

    def update(
        self, round_index: int, plan: api.RoundPlan, reports: api.ClientReports
    ) -> api.RoundUpdate:
        """Keep each trained client's personal model (its one training, returned once per
        cluster) and record its weights."""
        clients = np.asarray(reports.clients, dtype=np.int64)
        first = np.r_[True, clients[1:] != clients[:-1]]
        for i in np.flatnonzero(first):
            self.personal[int(clients[i])] = np.array(reports.models[i], dtype=np.float32)
        trained = clients[first]
        u = np.stack([self.weights[int(k)] for k in trained])
        return api.RoundUpdate(rows={"weights": weight_rows(trained, self.ids, u)})

    def newcomer_probe(self, clients: np.ndarray) -> api.ProbeRequest:
        """Each newcomer's importance weights, estimated as a drawn client's."""
        return api.ProbeRequest(clients=np.asarray(clients, dtype=np.int64),
                                clusters=list(self.ids), op=ESTIMATE)  # fmt: skip

    def place_newcomers(self, clients, groups, rows) -> api.NewcomerModels:
        """Each newcomer under its largest weight (ties: the first cluster), evaluated on its
        mix of the cluster models: a state row without a personal model."""
        P = int(self.federation.num_params)
        u = np.asarray(rows, dtype=np.float64).reshape(len(clients), len(self.ids))
        state = np.stack([state_row(w, None, P) for w in u])
        return api.NewcomerModels([self.ids[j] for j in np.argmax(u, axis=1)], rows=state)

    def client_rows(self, clients: np.ndarray) -> np.ndarray:
        """Each client's state row: its weights (1/S before its first estimate) and its
        personal model (none before it trains)."""
        S, P = len(self.ids), int(self.federation.num_params)
        uniform = np.full(S, 1.0 / S)
        return np.stack([
            state_row(self.weights.get(int(k), uniform), self.personal.get(int(k)), P)
            for k in np.asarray(clients, dtype=np.int64).tolist()
        ])  # fmt: skip

    def state_dict(self) -> dict:
        S, P = len(self.ids), int(self.federation.num_params)
        weighted = np.array(sorted(self.weights), dtype=np.int64)
        trained = np.array(sorted(self.personal), dtype=np.int64)
        return {
            "rng": self.rng.bit_generator.state,
            "weighted": weighted,
            "weights": np.stack([self.weights[k] for k in weighted.tolist()])
            if len(weighted) else np.zeros((0, S)),
            "trained": trained,
            "personal": np.stack([self.personal[k] for k in trained.tolist()])
            if len(trained) else np.zeros((0, P), dtype=np.float32),
        }  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        weights = np.asarray(state["weights"], dtype=np.float64)
        if weights.ndim != 2 or weights.shape[1] != len(self.ids):
            raise ValueError(
                f"FedSoft's stored weights have shape {weights.shape}, not (n, {len(self.ids)})"
            )
        self.weights = {
            int(k): weights[i].copy() for i, k in enumerate(np.asarray(state["weighted"]).tolist())
        }
        personal = np.asarray(state["personal"], dtype=np.float32)
        self.personal = {
            int(k): personal[i].copy() for i, k in enumerate(np.asarray(state["trained"]).tolist())
        }


__all__ = [
    "FedSoft",
    "FedSoftParams",
    "importance_weights",
    "mix_of",
    "split_row",
    "state_row",
]
