"""FedSaC's server half (Yan et al., ICML 2024; its public code yankd22/FedSaC,
``FedSaC.py`` and ``utils.py``, and EMD-CFL's port of it, ``fit_fedsac``).

pFedGraph's loop (:mod:`distfl.algorithms.pfedgraph`: a model per client, the round's
clients train from their personalised models with the local cosine term, each client's
model becomes its row of the graph applied to the round's trained models), with FedSaC's
graph: each trained client also sends the top ``components`` (3) principal axes of its
trained model's penultimate features on its train split (:func:`principal_basis`), and row
i of the graph minimises

    ‖a − p‖² + λ1 Σ_j a_j c_ij + λ2 Σ_j a_j s_ij

over the simplex on the round's clients: p their shares of the samples, s_ij = −cos(θ_i −
θ⁰, θ_j − θ⁰) (pFedGraph's, a cosine above 0.9 counted as 1) and c_ij the overlap of the
two feature subspaces (:func:`subspace_overlap`; penalised, so a client's weight goes to
clients whose features complement its own). ``lambda1`` = 0.9 and ``lambda2`` = 1.4 (the
code's README command; its ``config.py`` has 1.2 and 1.2).

The subspaces' angles are the code's greedy matching of signed cosines between axes
(``angles = "code"``) or the principal angles (``"svd"``, what the paper's text describes).

Deviations (docs/algorithms.md): as pFedGraph's (the local term's target and sign, the run's
``train`` settings); the features are taken in evaluation mode on the unaugmented train
split (the code's loader augments); the code samples 10 clients a round whatever the
population (``clients_per_round`` here).
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
from distfl.algorithms.fedsac.graph import ANGLES, sac_piece
from distfl.algorithms.local import client_id
from distfl.algorithms.pfedgraph.algorithm import SIGNS, PFedGraph
from distfl.algorithms.pfedgraph.graph import aggregate_piece, update_directions
from distfl.algorithms.registry import register
from distfl.runfile.layout import Column

#: the client half's op: the trained model's feature basis, after its training
BASIS = "basis"


@dataclass(frozen=True)
class FedSaCParams(Params):
    lambda1: float = setting(0.9, ">= 0", "λ1, the weight of complementarity (the code's README)")
    lambda2: float = setting(1.4, ">= 0", "λ2, the weight of similarity (the code's README)")
    components: int = setting(
        3, ">= 1", "the principal axes of each client's features (the code's k_principal)"
    )
    angles: str = setting(
        "code", "code or svd", "the subspaces' angles: the code's greedy matching of signed "
        "axis cosines, or the principal angles (SVD)",
    )  # fmt: skip
    lam: float = setting(0.01, ">= 0", "λ of the local cosine term (pFedGraph's, the code's)")
    sign: str = setting("paper", "paper or code", "the local term's sign (pFedGraph's ``sign``)")

    choices = {"angles": ANGLES, "sign": SIGNS}

    def check(self, config) -> None:
        require(self.lambda1 >= 0, "lambda1", self.lambda1, "0 or more")
        require(self.lambda2 >= 0, "lambda2", self.lambda2, "0 or more")
        require(self.components >= 1, "components", self.components, "1 or more")
        require(self.lam >= 0, "lam", self.lam, "0 or more")


@register
class FedSaC(PFedGraph):
    name = "fedsac"
    Params = FedSaCParams
    client_ops = (BASIS,)
    client = "distfl.algorithms.fedsac.client:FedSaCClient"
    tables = (
        RecordTable("graph", "pair", (
            Column("weight", "float", "a_ij, the weight of the other's model in the client's "
                   "aggregate"),
            Column("complementarity", "float", "c_ij, the overlap of the two clients' "
                   "feature subspaces (1: one subspace)"),
        ), "each pair of the round's clients (the client's own weight too)"),
    )  # fmt: skip

    def plan(self, round_index: int) -> RoundPlan:
        plan = super().plan(round_index)
        width = int(self.params.components) * int(self.federation.embed_dim)
        return RoundPlan(round=round_index, train=plan.train, return_models=plan.return_models,
                         after=BASIS, after_width=width)  # fmt: skip

    def update(self, round_index: int, plan: RoundPlan, reports: ClientReports) -> RoundUpdate:
        clients = np.asarray(reports.clients, dtype=np.int64)
        if self.initial is None:  # every model starts as θ⁰: any of round 1's starts
            first = reports.start_models[client_id(clients[0])]
            self.initial = np.asarray(first, dtype=np.float64).copy()
        n = len(clients)
        k = int(self.params.components)
        bases = np.asarray(reports.rows, dtype=np.float64).reshape(n, k, -1)
        settings = np.array([self.params.lambda1, self.params.lambda2,
                             ANGLES.index(self.params.angles)], dtype=np.float64)  # fmt: skip
        rows = self.pool.map(sac_piece, {
            "updates": update_directions(reports.models, self.initial), "bases": bases,
            "sizes": np.asarray(reports.num_samples, dtype=np.float64), "settings": settings,
        }, n, 2 * n)  # fmt: skip
        A, overlap = np.ascontiguousarray(rows[:, :n]), np.ascontiguousarray(rows[:, n:])
        models = np.asarray(reports.models, dtype=np.float64)
        mixed = self.pool.map(aggregate_piece, {"graph": A, "models": models}, n, models.shape[1])
        table = {"client": np.repeat(clients, n), "other": np.tile(clients, n),
                 "weight": A.reshape(-1), "complementarity": overlap.reshape(-1)}  # fmt: skip
        models = {client_id(c): mixed[i].astype(np.float32) for i, c in enumerate(clients)}
        return RoundUpdate(models=models, rows={"graph": table})


__all__ = ["FedSaC", "FedSaCParams"]
