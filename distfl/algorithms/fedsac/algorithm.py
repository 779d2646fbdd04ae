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

from dataclasses import dataclass, replace

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.common.graph_model import (
    SIGN_CONDITIONS,
    SIGNS,
    GraphModels,
    check_lam,
    lam_setting,
    sign_setting,
)
from distfl.algorithms.fedsac.graph import ANGLES, sac_piece
from distfl.runfile.layout import Column

#: the client half's op: the trained model's feature basis, after its training
BASIS = "basis"


#: the largest λ1 and λ2: a graph row is the projection of p − (λ1 c + λ2 s)/2 onto the
#: simplex (c, s and p in [-1, 1]), which keeps float64's precision far below 1e16
MAX_WEIGHT = 1e12
#: the most principal axes a client sends: the axes beyond its samples or its model's
#: feature width are zero rows, and each is a row of the report of every trained client
MAX_COMPONENTS = 1024


@dataclass(frozen=True)
class FedSaCParams(api.Params):
    lambda1: float = api.setting(
        0.9, "0 to 1e12", "λ1, the weight of complementarity (the code's README)"
    )
    lambda2: float = api.setting(
        1.4, "0 to 1e12", "λ2, the weight of similarity (the code's README)"
    )
    components: int = api.setting(
        3, f"1..{MAX_COMPONENTS:,}",
        "the principal axes of each client's features (the code's k_principal)",
    )  # fmt: skip
    angles: str = api.setting(
        "code", "code or svd", "the subspaces' angles: the code's greedy matching of signed "
        "axis cosines, or the principal angles (SVD)",
    )  # fmt: skip
    lam: float = lam_setting()
    sign: str = sign_setting()

    choices = {"angles": ANGLES, "sign": SIGNS}
    conditions = SIGN_CONDITIONS

    def check(self, config) -> None:
        for key in ("lambda1", "lambda2"):
            value = getattr(self, key)
            api.require(0 <= value <= MAX_WEIGHT, key, value, f"from 0 to {MAX_WEIGHT:g}")
        api.require(1 <= self.components <= MAX_COMPONENTS, "components", self.components,
                f"from 1 to {MAX_COMPONENTS:,} (axes beyond a client's samples or its "
                "model's feature width are zero)")  # fmt: skip
        check_lam(self.lam)


@api.register
class FedSaC(GraphModels):
    name = "fedsac"
    Params = FedSaCParams
    client_ops = (BASIS,)
    client = "distfl.algorithms.fedsac.client:FedSaCClient"
    tables = (
        api.RecordTable("graph", "pair", (
            Column("weight", "float", "a_ij, the weight of the other's model in the client's "
                   "aggregate"),
            Column("complementarity", "float", "c_ij, the overlap of the two clients' "
                   "feature subspaces (1: one subspace)"),
        ), "each pair of the round's clients (the client's own weight too)"),
    )  # fmt: skip

    def plan(self, round_index: int) -> api.RoundPlan:
        width = int(self.params.components) * int(self.federation.embed_dim)
        return replace(super().plan(round_index), after=BASIS, after_width=width)

    def graph(
        self, reports: api.ClientReports, updates: np.ndarray
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """FedSaC's graph from the changes and the feature bases the clients sent after
        training, and its complementarity c, a column of the table."""
        n = len(updates)
        bases = np.asarray(reports.rows, dtype=np.float64).reshape(
            n, int(self.params.components), -1
        )
        settings = np.array([self.params.lambda1, self.params.lambda2,
                             ANGLES.index(self.params.angles)], dtype=np.float64)  # fmt: skip
        rows = self.pool.map(sac_piece, {
            "updates": updates, "bases": bases,
            "sizes": np.asarray(reports.num_samples, dtype=np.float64), "settings": settings,
        }, n, 2 * n)  # fmt: skip
        A, overlap = np.ascontiguousarray(rows[:, :n]), np.ascontiguousarray(rows[:, n:])
        return A, {"complementarity": overlap.reshape(-1)}


__all__ = ["FedSaC", "FedSaCParams"]
