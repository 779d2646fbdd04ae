"""The personalised round of pFedGraph (:mod:`distfl.algorithms.pfedgraph` says what it
does) that FedSaC keeps with a graph of its own (:mod:`distfl.algorithms.fedsac`): a model
per client, each round's clients aggregated through the round's collaboration graph; and
the settings of the local cosine term both share (FedSoft's ``lam`` too).
:class:`GraphModels` registers under no name: an algorithm subclasses it and names itself."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.common.graph import aggregate_piece, graph_piece, update_directions
from distfl.algorithms.common.plain import PerClientModels, client_id
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
    return api.setting(0.01, "0 to 3.4e38", "λ of the local cosine term (the code's)")


def check_lam(lam: float) -> None:
    """Refuse a ``lam`` below 0 or beyond :data:`MAX_LAM` (it scales a float32 loss)."""
    api.require(0 <= lam <= MAX_LAM, "lam", lam,
            f"from 0 to {MAX_LAM:.4g} (it scales a float32 loss)")  # fmt: skip


#: the local term's sign takes effect only with a term: ``lam`` > 0 (pFedGraph's and FedSaC's)
SIGN_CONDITIONS = {
    "sign": Condition(("algorithm.lam",), "algorithm.lam > 0 (a local cosine term)",
                      lambda c: c.algorithm.lam > 0)
}  # fmt: skip


def sign_setting():
    """The key ``sign``: the local cosine term's sign (pFedGraph's and FedSaC's)."""
    return api.setting(
        "paper", "paper or code", "the local term's sign: the paper's −λ·cos (a pull toward the "
        "client's aggregate) or the public code's +λ·cos",
    )  # fmt: skip


@dataclass(frozen=True)
class PFedGraphParams(api.Params):
    alpha: float = api.setting(
        0.8, "≥ 1e-12", "α of the graph step (the code's, against concentration)"
    )
    lam: float = lam_setting()
    sign: str = sign_setting()

    choices = {"sign": SIGNS}
    conditions = SIGN_CONDITIONS

    def check(self, config) -> None:
        api.require(self.alpha >= MIN_ALPHA, "alpha", self.alpha,
                f"at least {MIN_ALPHA:g} (the graph step divides by 2α)")  # fmt: skip
        check_lam(self.lam)


class GraphModels(PerClientModels):
    """pFedGraph's round: the graph of the clients' changes since θ⁰ (:meth:`graph`),
    each client's model its row of it applied to the round's models."""

    Params = PFedGraphParams
    membership = "none"
    models_from_clients = "each client's model is its graph row's mix of the clients' models"
    tables = (
        api.RecordTable("graph", "pair", (
            Column("weight", "float", "a_ij, the weight of the other's model in the client's "
                   "aggregate"),
        ), "each pair of the round's clients (the client's own weight too)"),
    )  # fmt: skip

    @classmethod
    def start_cosine(cls, params) -> float:
        return float(params.lam) * (1.0 if params.sign == "paper" else -1.0)

    def plan(self, round_index: int) -> api.RoundPlan:
        plan = super().plan(round_index)
        return api.RoundPlan(round=round_index, train=plan.train,
                         return_models=frozenset(plan.train))  # fmt: skip

    def update(
        self, round_index: int, plan: api.RoundPlan, reports: api.ClientReports
    ) -> api.RoundUpdate:
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
        return api.RoundUpdate(models=models, rows={"graph": table})

    def graph(
        self, reports: api.ClientReports, updates: np.ndarray
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
    "SIGNS",
    "GraphModels",
    "PFedGraphParams",
    "check_lam",
    "lam_setting",
    "sign_setting",
]
