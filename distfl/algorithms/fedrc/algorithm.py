"""FedRC's server half (Guo, Tang, Lin, ICML 2024, and its public code, LINs-lab/FedRC).

FedEM's round (:mod:`distfl.algorithms.fedem`: M models, each client's weights π_k, every
component trained with a weight per sample, aggregated with weight n_k, evaluated on the
mixture Σ_m π_km softmax(h_m(x))) with the robust clustering's E-step: a sample's
responsibility divides out its cluster's label distribution P_m(y),

    q_im ∝ π_km · exp(−ℓ(h_m(x_i), y_i)) / P_m(y_i),

so that a cluster is drawn to clients whose features it explains, not to those that share
its label mix (the paper's I(x, y; θ) = P(y | x; θ) / P(y; θ)). P_m is the server's: each
client's E-step sends back, besides its π_k, its q-weighted label counts c_km(y) = Σ_i q_im
[y_i = y]; the server keeps every client's last counts and sets P_m(y) ∝ max(Σ_k c_km(y),
1e-8) over all clients that trained so far (the code's sum over every client, whose
unsampled ones hold their last counts), sent to the next round's clients. Before any client
trained P is uniform, so the first E-steps are FedEM's.

Deviations (docs/algorithms.md): as FedEM's, the aggregate of a component is the FedAvg mean
over the sampled clients (the code's, too); each client's optimiser starts fresh every round
(the code keeps each client's SGD momentum between its rounds); local work is the run's
``train`` settings; the default is the code's 3 components.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.common.kmeans import EMDCFL_GIVES, cluster_count_setting
from distfl.algorithms.common.mixture import (
    ESTEP,
    FedEMParams,
    Mixture,
    mixture_weights,
    responsibilities,
    weight_rows,
)

#: the floor of a label's share before P_m is normalised (the code's 1e-8)
LABEL_FLOOR = 1e-8


def robust_responsibilities(
    weights: np.ndarray, losses: np.ndarray, label_share: np.ndarray, y: np.ndarray
) -> np.ndarray:
    """FedRC's E-step: q [M, n] with q_im ∝ π_m e^(−ℓ_mi) / P_m(y_i), from π [M], the losses
    ℓ [M, n], the clusters' label distributions P [M, C] and the labels y [n] (the code's
    ``softmax(log π − ℓ − log P(y))``); as FedEM's :func:`responsibilities` for NaN losses
    and samples no cluster explains."""
    share = np.asarray(label_share, dtype=np.float64)
    adjusted = np.asarray(losses, dtype=np.float64) + np.log(share[:, np.asarray(y)])
    return responsibilities(weights, adjusted)


def label_counts(q: np.ndarray, y: np.ndarray, num_classes: int) -> np.ndarray:
    """[M, C] each cluster's q-weighted count of each label: Σ_i q_im [y_i = c]."""
    q = np.asarray(q, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    return np.stack([np.bincount(y, weights=q[m], minlength=num_classes) for m in range(len(q))])


def label_shares(counts: np.ndarray) -> np.ndarray:
    """P [M, C]: each row of the summed counts floored at 1e-8 and normalised (the code's)."""
    floored = np.maximum(np.asarray(counts, dtype=np.float64), LABEL_FLOOR)
    return floored / floored.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class FedRCParams(FedEMParams):
    num_clusters: int = cluster_count_setting(
        3, "the clusters (the code's n_learners, 3 by default)", EMDCFL_GIVES
    )


@api.register
class FedRC(Mixture):
    name = "fedrc"
    Params = FedRCParams
    client = "distfl.algorithms.fedrc.client:FedRCClient"
    #: not built: its E-step reads the server's label distributions, which a probe does
    #: not carry (FedEM's rule would leave them out)
    newcomers = ""

    salt = 0xFED4C

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        #: [K, M, C] each client's last label counts (zero until it trains); sized on the
        #: first plan, when the federation's classes are known
        self.counts: np.ndarray | None = None

    @classmethod
    def state_bytes(cls, params, *, num_clients: int, num_classes: int = 0, **sizes) -> int:
        """π and each client's label counts: M (1 + C) float64 values a client."""
        M = max(int(params.num_clusters), 1)
        return 8 * num_clients * M * (1 + max(int(num_classes), 1))

    def _classes(self) -> int:
        C = int(self.federation.num_classes)
        if C < 1:
            raise RuntimeError("FedRC needs the model's number of classes (Federation.num_classes)")
        return C

    def _counts(self) -> np.ndarray:
        if self.counts is None:
            self.counts = np.zeros((self.num_clients, len(self.ids), self._classes()))
        return self.counts

    def label_share(self) -> np.ndarray:
        """P [M, C], from every client's last counts (uniform before any client trained)."""
        counts = self._counts()
        if not counts.any():
            return np.full(counts.shape[1:], 1.0 / counts.shape[2])
        return label_shares(counts.sum(axis=0))

    def plan(self, round_index: int) -> api.RoundPlan:
        plan = super().plan(round_index)
        M, C = len(self.ids), self._classes()
        share = self.label_share().reshape(-1)
        plan.client_state = {
            k: np.concatenate([row, share]) for k, row in plan.client_state.items()
        }
        plan.prepare_width = M + M * C
        return plan

    def update(self, round_index: int, plan: api.RoundPlan, reports) -> api.RoundUpdate:
        clients = np.array(sorted(plan.train), dtype=np.int64)
        M, C = len(self.ids), self._classes()
        rows = np.asarray(reports.rows, dtype=np.float64)
        if rows.shape != (len(clients), M + M * C):
            raise ValueError(
                f"round {round_index}: E-step rows of shape {rows.shape}, expected "
                f"{(len(clients), M + M * C)}"
            )
        pi = rows[:, :M]
        self.pi[clients] = pi
        self._counts()[clients] = rows[:, M:].reshape(len(clients), M, C)
        self.tree.reassign(clients, [self.ids[j] for j in np.argmax(pi, axis=1)])
        return api.RoundUpdate(rows={"weights": weight_rows(clients, self.ids, pi)})

    def state_dict(self) -> dict:
        state = super().state_dict()
        state["counts"] = self._counts().copy()
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        counts = np.asarray(state["counts"], dtype=np.float64)
        if counts.ndim != 3 or counts.shape[:2] != (self.num_clients, len(self.ids)):
            raise ValueError(f"FedRC's stored label counts have shape {counts.shape}")
        self.counts = counts.copy()


__all__ = [
    "ESTEP",
    "FedRC",
    "FedRCParams",
    "label_counts",
    "label_shares",
    "mixture_weights",
    "robust_responsibilities",
]
