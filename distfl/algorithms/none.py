"""No clustering: one global model trained by FedAvg (McMahan et al., AISTATS 2017).

Each round ``server.clients_per_round`` clients are drawn uniformly without replacement.
"""

from __future__ import annotations

import numpy as np

from distfl.algorithms.base import ClusteringAlgorithm, RoundPlan
from distfl.algorithms.registry import register

ROOT = "0"


@register
class NoClustering(ClusteringAlgorithm):
    name = "none"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rng = np.random.default_rng([self.seed, 0x5E4FE4])

    def plan(self, round_index: int) -> RoundPlan:
        chosen = self.sample_clients(self.num_clients, self.clients_per_round)
        return RoundPlan(round=round_index, train={int(k): ROOT for k in np.sort(chosen)})

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
