"""One global model (FedAvg's round: :mod:`distfl.algorithms.none`) and a model per client
(:mod:`distfl.algorithms.local`), the rounds that FedAvg + fine-tuning, Local, pFedGraph and
FedSaC keep. Neither registers: an algorithm subclasses one and names itself.

Both draw each round's ``clients_per_round`` clients uniformly without replacement with
one generator (seed and stream), so that runs of one seed train the same clients in every
round."""

from __future__ import annotations

import numpy as np

from distfl.algorithms import api

#: the global model's cluster
ROOT = "0"


class GlobalModel(api.ClusteringAlgorithm):
    """One model, the root's, trained by the round's clients; a newcomer is evaluated on
    it too."""

    newcomers = "the one global model, as every client"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rng = np.random.default_rng([self.seed, 0x5E4FE4])

    def place_newcomers(self, clients, groups, rows) -> api.NewcomerModels:
        return api.NewcomerModels([ROOT] * len(clients))

    def plan(self, round_index: int) -> api.RoundPlan:
        chosen = self.sample_clients(self.num_clients, self.clients_per_round)
        return api.RoundPlan(round=round_index, train={int(k): ROOT for k in np.sort(chosen)})

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]


def client_id(k: int) -> str:
    """The id of client ``k``'s own cluster."""
    return str(int(k))


class PerClientModels(GlobalModel):
    """A model per client: every client is a root of the tree of its own (id
    :func:`client_id`), and each round's clients train their own models."""

    record_idle_clusters = False
    #: a newcomer has no model of its own, and none of the others is its
    newcomers = ""
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
    def held_models(cls, params: api.Params, *, num_clients: int) -> int:
        return num_clients

    def plan(self, round_index: int) -> api.RoundPlan:
        chosen = self.sample_clients(self.num_clients, self.clients_per_round)
        return api.RoundPlan(
            round=round_index, train={int(k): client_id(k) for k in np.sort(chosen)}
        )


__all__ = ["GlobalModel", "PerClientModels", "ROOT", "client_id"]
