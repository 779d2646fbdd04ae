"""FedCE's server half. No public code of the paper was found; this follows the FedCE of
EMD-CFL's public code (``src/trainer.py``, ``fit_fedce``), the implementation behind the
EMD-CFL table's FedCE row, with the paper's equations as its comments quote them.

The server keeps M cluster models ("0".."M-1", each from its own initialisation) and a
history h [K, M] of each client's association with each cluster, 0 at the start and never
reset. A round:

1. ``clients_per_round`` clients are drawn uniformly without replacement (EMD-CFL trains
   every client every round: ``server.clients_per_round`` = the population);
2. each evaluates every cluster model on its train split in consecutive batches of
   ``train.batch_size`` (no shuffle): ℓ_j, the vector of its batch means under cluster j,
   and L_j, their mean. Its cluster is b = argmin_j L_j (ties: the first), and its history
   grows by 1 at b and by exp(−δ ‖ℓ_b − ℓ_j‖₂) at every other j (the code's eq. 3 and 5);
3. it trains cluster b's model and sends its model w_k;
4. every cluster model becomes θ_i = Σ_k α_ki w_k over the round's clients, α_·i the softmax
   over those clients of their histories h_·i (max-subtracted: the code's float32 softmax
   overflows after about 89 rounds).

A client is evaluated on its cluster's model (the code's ``memberships.csv``); the tree holds
it in its last cluster b. ``prefix_counts = true`` adds the +1 as the code does (inside its
loop over the clusters: +1 at the argmin of L_0..L_j after each j, so cluster 0 gains at
least 1 a round; the code's comment says "update hist assoc for best cluster only").

Deviations (docs/algorithms.md): EMD-CFL associates on a validation split (10 % of a
client's data, not trained on); distfl's clients have a train and a test split, and the
association reads the train split, as FedEM's E-step does. Local work is the run's
``train`` settings. The partial-participation rules (histories of the drawn clients only,
the softmax over them) are distfl's: the code trains every client.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.common.kmeans import check_cluster_count
from distfl.algorithms.common.models_of_own import ModelsOfOwn

#: the client half's op: each cluster's mean loss and the client's association increments
ASSOCIATE = "associate"


def batch_means(losses: np.ndarray, batch_size: int) -> np.ndarray:
    """[M, B] the mean of each consecutive batch of ``batch_size`` samples (the last one
    shorter) of the per-sample losses [M, n]."""
    ell = np.asarray(losses, dtype=np.float64)
    n = ell.shape[1]
    starts = np.arange(0, n, max(int(batch_size), 1))
    if n == 0:
        return np.zeros((ell.shape[0], 0))
    sums = np.add.reduceat(ell, starts, axis=1)
    return sums / np.diff(np.r_[starts, n])


def association(vectors: np.ndarray, delta: float, prefix_counts: bool = False):
    """(L [M], increments [M]) from each cluster's batch-loss vector [M, B]: L_j the mean of
    ℓ_j, b = argmin L (a NaN loss never wins; ties: the first), the increment 1 at b and
    exp(−δ ‖ℓ_b − ℓ_j‖₂) elsewhere. ``prefix_counts``: the EMD-CFL code's +1 at the argmin of
    L_0..L_j for every j instead of the one +1 at b."""
    ell = np.asarray(vectors, dtype=np.float64)
    M = ell.shape[0]
    L = ell.mean(axis=1) if ell.shape[1] else np.zeros(M)
    clean = np.where(np.isnan(L), np.inf, L)
    b = int(np.argmin(clean))
    with np.errstate(invalid="ignore"):
        gap = np.sqrt(((ell - ell[b]) ** 2).sum(axis=1))
    inc = np.exp(-float(delta) * gap)
    inc = np.where(np.isnan(inc), 0.0, inc)
    inc[b] = 0.0 if prefix_counts else 1.0
    if prefix_counts:
        for j in range(M):
            inc[int(np.argmin(clean[: j + 1]))] += 1.0
    return L, inc


def soft_aggregate(histories: np.ndarray, models: np.ndarray) -> np.ndarray:
    """[M, P] float64: θ_i = Σ_k α_ki w_k, α_·i = softmax over the clients (rows) of
    ``histories`` [n, M]; the clients' models ``models`` [n, P] summed in their order."""
    h = np.asarray(histories, dtype=np.float64)
    e = np.exp(h - h.max(axis=0, keepdims=True))
    alpha = e / e.sum(axis=0, keepdims=True)
    W = np.asarray(models, dtype=np.float64)
    out = np.zeros((h.shape[1], W.shape[1]))
    for k in range(len(W)):  # a fixed order: the same bits at any world size
        out += alpha[k][:, None] * W[k][None, :]
    return out


@dataclass(frozen=True)
class FedCEParams(api.Params):
    num_clusters: int = api.setting(
        0, "0..K", "the clusters; 0 (the default): one per ground-truth data group, what "
        "EMD-CFL gives it (no default of the paper is known)",
    )  # fmt: skip
    delta: float = api.setting(0.5, "> 0", "δ of the association exp(−δ ‖ℓ_b − ℓ_j‖₂) (EMD-CFL's)")
    prefix_counts: bool = api.setting(
        False, "true or false", "count the +1 as EMD-CFL's code does (at every prefix's "
        "argmin) rather than once at the client's cluster",
    )  # fmt: skip

    def check(self, config) -> None:
        check_cluster_count(self, config)
        api.require(self.delta > 0, "delta", self.delta, "a positive number")


@api.register
class FedCE(ModelsOfOwn):
    name = "fedce"
    models_from_clients = "each cluster model is a softmax mix of the clients' individual models"
    salt = 0xFEDCE
    Params = FedCEParams
    client_ops = (ASSOCIATE,)
    client = "distfl.algorithms.fedce.client:FedCEClient"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        #: [K, M] each client's accumulated association with each cluster
        self.history = np.zeros((self.num_clients, len(self.ids)))
        self._sampled = np.zeros(0, dtype=np.int64)
        self._sampled_round = 0

    @classmethod
    def state_bytes(cls, params, *, num_clients: int, **sizes) -> int:
        """h: M float64 values a client (M ≤ the ground-truth groups where 0)."""
        return 8 * num_clients * max(int(params.num_clusters), 1)

    def plan_probe(self, round_index: int) -> api.ProbeRequest:
        self._sampled = self.draw()
        self._sampled_round = round_index
        return api.ProbeRequest(self._sampled.copy(), list(self.ids), op=ASSOCIATE,
                            width=2 * len(self.ids))  # fmt: skip

    def update_probe(self, round_index: int, request: api.ProbeRequest, rows: np.ndarray) -> None:
        """Each drawn client joins its cluster of least loss; its history grows."""
        M = len(self.ids)
        rows = np.asarray(rows, dtype=np.float64)
        if rows.shape != (len(request.clients), 2 * M):
            raise ValueError(f"round {round_index}: association rows of shape {rows.shape}")
        clients = np.asarray(request.clients, dtype=np.int64)
        L = np.where(np.isnan(rows[:, :M]), np.inf, rows[:, :M])
        best = np.argmin(L, axis=1)
        self.history[clients] += rows[:, M:]
        self.tree.reassign(clients, [self.ids[j] for j in best])

    def plan(self, round_index: int) -> api.RoundPlan:
        if self._sampled_round != round_index:
            raise RuntimeError(f"FedCE: round {round_index} planned without its association")
        leaves, assign = self.tree.assignment()
        train = {int(k): leaves[int(assign[k])] for k in self._sampled}
        return api.RoundPlan(round=round_index, train=train, return_models=frozenset(train))

    def update(
        self, round_index: int, plan: api.RoundPlan, reports: api.ClientReports
    ) -> api.RoundUpdate:
        """Every cluster model: the clients' models mixed by the softmax of their histories."""
        clients = np.asarray(reports.clients, dtype=np.int64)
        mixed = soft_aggregate(self.history[clients], reports.models)
        return api.RoundUpdate(models={cid: mixed[j].astype(np.float32)
                                   for j, cid in enumerate(self.ids)})  # fmt: skip

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "history": self.history.copy(),
                "sampled": self._sampled.copy(), "sampled_round": self._sampled_round}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        history = np.asarray(state["history"], dtype=np.float64)
        if history.shape != self.history.shape:
            raise ValueError(f"FedCE's stored history has shape {history.shape}")
        self.history = history.copy()
        self._sampled = np.asarray(state["sampled"], dtype=np.int64).reshape(-1).copy()
        self._sampled_round = int(state["sampled_round"])


__all__ = ["FedCE", "FedCEParams", "association", "batch_means", "soft_aggregate"]
