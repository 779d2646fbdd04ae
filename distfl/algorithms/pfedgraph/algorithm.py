"""pFedGraph's server half (Ye et al., ICML 2023; its public code MediaBrain-SJTU/pFedGraph,
``pytorch/pfedgraph_cosine.py`` and ``utils.py``, and EMD-CFL's port of it, ``fit_pfedgraph``).

Every client is a cluster of its own (a leaf "k", as ``local``'s): its model is its
personalised aggregate θ̄_k, the run's initial model θ⁰ until it first trains. A round:

1. ``clients_per_round`` clients S are drawn uniformly without replacement (the code trains
   every client by default);
2. each trains from its θ̄_k with the local loss ℓ − λ·cos(θ, θ̄_k) (``lam`` = 0.01; the
   paper's sign, a pull toward its aggregate; ``sign = "code"`` adds the term, as the
   public code does, pushing away) and sends its model θ_k;
3. the server computes d_ij = −cos(θ_i − θ⁰, θ_j − θ⁰) over S (the change of each model
   since the initial model; a cosine above 0.9 counts as 1) and, for each i, the weights
   a_i minimising α‖a − p‖² + Σ_j a_j d_ij over the simplex on S (p the clients' shares of
   S's samples; ``alpha`` = 0.8): the projection of p − d_i / (2α) onto the simplex, what
   the code's cvxpy problem solves;
4. each client's model becomes θ̄_i = Σ_j a_ij θ_j, where its next training starts and with
   which it is evaluated.

Each client's row of the graph and its aggregate are independent pieces, spread over the
ranks in a run of several (:meth:`ServerPool.map`), with the bits one process computes.

The round's graph is recorded in the table ``graph`` (a row per pair of S, the weight a_ij).
There are no clusters to score: ``membership = "none"`` (the table's "–").

Deviations (docs/algorithms.md): the local term is the cosine to the start of the training,
θ̄_k, as EMD-CFL's port and the code's ``pfedgraph_approx`` have it; the code's default
variant uses Σ_j a_ij cos(θ, θ_j) with the last round's trained models, which would keep P
more values for every client. The term applies from the first round (the code's from the
second, where θ̄ is θ⁰ in the first). Local work is the run's ``train`` settings (the
code: 200–400 steps of SGD, lr 0.01, momentum 0.9).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distfl.algorithms.base import (
    ClientReports,
    Params,
    RecordTable,
    RoundPlan,
    RoundUpdate,
    require,
    setting,
)
from distfl.algorithms.local import Local, client_id
from distfl.algorithms.pfedgraph.graph import aggregate_piece, graph_piece, update_directions
from distfl.algorithms.registry import register
from distfl.runfile.layout import Column
from distfl.settings import Condition

SIGNS = ("paper", "code")


#: the largest λ of a local term: it scales a float32 loss (the largest float32)
MAX_LAM = float(np.finfo(np.float32).max)
#: the smallest α of the graph step: the projection of p − d/(2α) onto the simplex keeps
#: float64's precision while 1/(2α) stays far below 1e16
MIN_ALPHA = 1e-12


def lam_setting():
    """The key ``lam``: λ of the local cosine term (pFedGraph's and FedSaC's)."""
    return setting(0.01, "0 to 3.4e38", "λ of the local cosine term (the code's)")


def check_lam(lam: float) -> None:
    """Refuse a ``lam`` below 0 or beyond :data:`MAX_LAM` (it scales a float32 loss)."""
    require(0 <= lam <= MAX_LAM, "lam", lam,
            f"from 0 to {MAX_LAM:.4g} (it scales a float32 loss)")  # fmt: skip


#: the local term's sign takes effect only with a term: ``lam`` > 0 (pFedGraph's and FedSaC's)
SIGN_CONDITIONS = {
    "sign": Condition(("algorithm.lam",), "algorithm.lam > 0 (a local cosine term)",
                      lambda c: c.algorithm.lam > 0)
}  # fmt: skip


def sign_setting():
    """The key ``sign``: the local cosine term's sign (pFedGraph's and FedSaC's)."""
    return setting(
        "paper", "paper or code", "the local term's sign: the paper's −λ·cos (a pull toward the "
        "client's aggregate) or the public code's +λ·cos",
    )  # fmt: skip


@dataclass(frozen=True)
class PFedGraphParams(Params):
    alpha: float = setting(
        0.8, "≥ 1e-12", "α of the graph step (the code's, against concentration)"
    )
    lam: float = lam_setting()
    sign: str = sign_setting()

    choices = {"sign": SIGNS}
    conditions = SIGN_CONDITIONS

    def check(self, config) -> None:
        require(self.alpha >= MIN_ALPHA, "alpha", self.alpha,
                f"at least {MIN_ALPHA:g} (the graph step divides by 2α)")  # fmt: skip
        check_lam(self.lam)


@register
class PFedGraph(Local):
    name = "pfedgraph"
    Params = PFedGraphParams
    membership = "none"
    tables = (
        RecordTable("graph", "pair", (
            Column("weight", "float", "a_ij, the weight of the other's model in the client's "
                   "aggregate"),
        ), "each pair of the round's clients (the client's own weight too)"),
    )  # fmt: skip

    @classmethod
    def start_cosine(cls, params) -> float:
        return float(params.lam) * (1.0 if params.sign == "paper" else -1.0)

    def plan(self, round_index: int) -> RoundPlan:
        plan = super().plan(round_index)
        return RoundPlan(round=round_index, train=plan.train,
                         return_models=frozenset(plan.train))  # fmt: skip

    def update(self, round_index: int, plan: RoundPlan, reports: ClientReports) -> RoundUpdate:
        clients = np.asarray(reports.clients, dtype=np.int64)
        n = len(clients)
        # each client's row of the graph, then its aggregate: independent pieces, spread
        # over the ranks (the same bits wherever each is computed)
        initial = np.asarray(self.federation.initial_model, dtype=np.float64)  # θ⁰
        A, columns = self.graph(reports, update_directions(reports.models, initial))
        models = np.asarray(reports.models, dtype=np.float64)
        P = models.shape[1]
        mixed = self.pool.map(aggregate_piece, {"graph": A, "models": models}, n, P)
        table = {"client": np.repeat(clients, n), "other": np.tile(clients, n),
                 "weight": A.reshape(-1), **columns}  # fmt: skip
        models = {client_id(k): mixed[i].astype(np.float32) for i, k in enumerate(clients)}
        return RoundUpdate(models=models, rows={"graph": table})

    def graph(
        self, reports: ClientReports, updates: np.ndarray
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The round's graph A [n, n] from the clients' changes since θ⁰ ([n, P]), and the
        table ``graph``'s other columns (a value per pair, row-major)."""
        n = len(updates)
        A = self.pool.map(graph_piece, {
            "updates": updates, "sizes": np.asarray(reports.num_samples, dtype=np.float64),
            "alpha": np.array([self.params.alpha]),
        }, n, n)  # fmt: skip
        return A, {}


__all__ = [
    "SIGN_CONDITIONS",
    "PFedGraph",
    "PFedGraphParams",
    "check_lam",
    "lam_setting",
    "sign_setting",
]
