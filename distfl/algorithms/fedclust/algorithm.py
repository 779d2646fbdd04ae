"""FedClust (Islam, Javaherian, Xu, Yuan, Chen, Tzeng, "FedClust: Optimizing Federated
Learning on Non-IID Data through Weight-Driven Client Clustering", arXiv:2403.04144, 2024):
one-shot clustering by the distances between the clients' final-layer weights after local
training from a common initialisation.

Each client of the one-shot round trains the run's initial model for ``steps`` local steps
and sends the weights of its final layer (the model's last linear layer: weight and bias),
as one row (the probe ``"weights"``, answered by :mod:`distfl.algorithms.fedclust.client`).
The server builds the proximity matrix of the Euclidean distances between these rows and
clusters it hierarchically (:mod:`distfl.algorithms.common.agglomerative`): merging while the
least cluster distance is at most ``threshold`` λ, or into ``num_clusters`` clusters, which
wins over λ (0: one per ground-truth group, as IFCA's key). Each cluster then trains by
FedAvg. A client first seen later trains the initial model alike and joins the cluster
nearest to its weights (:mod:`distfl.algorithms.common.oneshot`).

Defaults and deviations:

- The client half rebuilds the run's initial model on its worker (the same seed and
  architecture as the server's), so that a client first seen in a later round trains from
  the same start as the one-shot round's clients; only the final layer's weights travel.
- ``steps`` 0 trains the run's ``train.local_steps``, a round's local training.
- λ depends on the model and data; distfl's default 5.0 is EMD-CFL's setting for rotated
  MNIST (45 for rotated CIFAR-10, 8 PACS, 4 and 28 backdoor MNIST and CIFAR-10).
- The linkage is a key (default ``average``, UPGMA).
- The clusters start from the model the root reached in round 1 (the runtime gives a
  split's children their parent's model), not from the initial model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.common.agglomerative import LINKAGES
from distfl.algorithms.common.oneshot import (
    OneShotClustering,
    OneShotParams,
    block_rows,
    cluster_cut_setting,
    one_shot_datasets,
    probe_clients_setting,
)

#: the most local steps a client trains before sending its weights
MAX_STEPS = 1_000_000

# -- pure math -------------------------------------------------------------------------


def euclidean(a_rows: np.ndarray, b_rows: np.ndarray) -> np.ndarray:
    """[m, n] Euclidean distances between rows, from their differences (no Gram-matrix
    cancellation); NaN where a row is not finite."""
    A = np.asarray(a_rows, dtype=np.float64)
    B = np.asarray(b_rows, dtype=np.float64)
    out = np.empty((len(A), len(B)))
    for i in range(len(A)):
        diff = B - A[i]
        out[i] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    return out


@api.pooled
def distance_block(payload: dict[str, np.ndarray], task: int) -> np.ndarray:
    """Rows [BLOCK · task, BLOCK · (task + 1)) of the distance matrix, flattened."""
    return block_rows(lambda a, b, _: euclidean(a, b), payload["rows"], task, {})


# -- the algorithm ----------------------------------------------------------------------


@dataclass(frozen=True)
class FedClustParams(OneShotParams):
    threshold: float = api.setting(
        5.0,
        "float ≥ 0",
        "λ: clusters merge while their distance is at most λ (Euclidean, between final-layer "
        "weights; EMD-CFL used 5 on rotated digits); `num_clusters` ≥ 0 wins over it",
    )
    num_clusters: int = cluster_cut_setting()
    steps: int = api.setting(
        0,
        "int ≥ 0",
        "local SGD steps each client trains the initial model for before sending its final "
        "layer; 0: `train.local_steps`",
    )
    linkage: str = api.setting(
        "average", "`average`, `weighted`, `complete`, `single`",
        "the hierarchical clustering's linkage",
    )  # fmt: skip
    probe_clients: int = probe_clients_setting()

    choices = {"linkage": LINKAGES}

    def check(self, config) -> None:
        api.require(0 <= self.steps <= MAX_STEPS, "steps", self.steps,
                f"0 (train.local_steps) or up to {MAX_STEPS:,} local steps")  # fmt: skip
        self.check_cut(config)
        api.require(np.isfinite(self.threshold) and self.threshold >= 0, "threshold",
                self.threshold, "a distance of 0 or more")  # fmt: skip


@api.register
class FedClust(OneShotClustering):
    name = "fedclust"
    Params = FedClustParams
    client_ops = ("weights",)
    client = "distfl.algorithms.fedclust.client:FedClustClient"
    tag = 0xFC1
    split_datasets = one_shot_datasets("Euclidean distances of final-layer weights (up to 4,096)")

    def _span(self) -> tuple[int, int]:
        start, stop = self.federation.last_layer
        if stop <= start:
            raise RuntimeError("FedClust needs the model's last linear layer in the flat model")
        return int(start), int(stop)

    def row_width(self) -> int:
        start, stop = self._span()
        return stop - start

    def probe_args(self) -> tuple[int, ...]:
        steps = self.steps or self.federation.local_steps
        return (int(steps), *self._span())

    def pairwise(self, rows: np.ndarray) -> np.ndarray:
        return self.pooled_pairwise(distance_block, {"rows": rows})

    def cross(self, rows: np.ndarray, clustered: np.ndarray) -> np.ndarray:
        return euclidean(rows, clustered)


__all__ = ["FedClust", "FedClustParams", "distance_block", "euclidean"]
