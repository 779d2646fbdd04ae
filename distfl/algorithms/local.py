"""Local training: each client trains alone, its own model, never aggregated (PFLlib's
``Local``, the lower reference every personalised method is compared with).

Every client is a cluster of its own, a root of the tree with the client's id as its id
("0", "1", ..., K - 1); every cluster's model starts as the run's one initial model (offset
0), as PFLlib's clients start from copies of one model. Each round ``clients_per_round``
clients are drawn uniformly without replacement, with the same generator (seed and stream)
as ``none`` (FedAvg), so that a Local run and a FedAvg run of one seed train the same
clients in every round; each trains ``train.local_steps`` steps from its own model, and the
aggregator makes that cluster's new model from its one member's update (with FedAvg the
client's model itself). A client that is never drawn keeps the initial model, and is
evaluated with it.

Where this differs from PFLlib's ``Local``: PFLlib counts local work in epochs
(``local_epochs``), here in steps (``train.local_steps``), as every algorithm of the run
does. The clustering metrics of K singleton clusters are what they are: the adjusted Rand
index against the true groups is 0 (no pair of clients is grouped), the Wasserstein
scores are undefined and recorded as missing.

The server holds K models (``held_models``): the runtime's memory check counts them and
refuses, before any work, a population whose models do not fit. ``/metrics/clusters`` has a
row per client trained in a round (``record_idle_clusters = False``), not one per client of
the run.
"""

from __future__ import annotations

import numpy as np

from distfl.algorithms.base import Params, RoundPlan
from distfl.algorithms.none import NoClustering
from distfl.algorithms.registry import register


def client_id(k: int) -> str:
    """The id of client ``k``'s own cluster."""
    return str(int(k))


@register
class Local(NoClustering):
    name = "local"
    record_idle_clusters = False
    #: a cluster per client: never two reports of a cluster for FedPNS to compare
    refused_selections = {
        "fedpns": "every client is its own cluster, and FedPNS's optimal aggregation compares "
        "the reports of a cluster (it would never lower a probability)"
    }

    def __init__(self, **kwargs):
        K = int(kwargs["num_clients"])
        kwargs.setdefault("roots", {client_id(k): [k] for k in range(K)})
        super().__init__(**kwargs)

    @classmethod
    def held_models(cls, params: Params, *, num_clients: int) -> int:
        return num_clients

    def plan(self, round_index: int) -> RoundPlan:
        chosen = self.sample_clients(self.num_clients, self.clients_per_round)
        return RoundPlan(round=round_index, train={int(k): client_id(k) for k in np.sort(chosen)})


__all__ = ["Local", "client_id"]
