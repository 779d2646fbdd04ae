"""The oracle: the scenario's ground-truth groups as clusters, from round 0.

It is the upper reference for clustering quality: its clusters are the true groups by
construction (adjusted Rand index 1.0 against ``/clients/group``), so the accuracy it
reaches is what per-group federated averaging gives once the clustering is perfect, and
what a clustering algorithm can at best approach. Cluster ``"g"`` holds the clients of
group ``g``; every cluster starts from the run's initial model (offset 0) and never splits.

Each round each cluster C draws ``min(|C|, max(1, round(ρ·|C|)))`` of its members uniformly
without replacement, ρ = ``clients_per_round / num_clients`` (halves round up), from the
run's seed, so that every group trains every round at the federation's participation rate.
"""

from __future__ import annotations

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.common.sampling import sample_sizes


@api.register
class Oracle(api.ClusteringAlgorithm):
    name = "oracle"

    def __init__(
        self, *, num_clients: int, clients_per_round: int, seed: int, groups: np.ndarray,
        **settings,
    ):  # fmt: skip
        groups = np.asarray(groups, dtype=np.int64)
        if groups.shape != (num_clients,):
            raise ValueError(f"groups must have shape ({num_clients},), got {groups.shape}")
        if (groups < 0).any():
            raise ValueError("groups must be non-negative group indices")
        roots = {str(g): np.flatnonzero(groups == g) for g in np.unique(groups)}
        super().__init__(
            num_clients=num_clients, clients_per_round=clients_per_round, seed=seed, roots=roots,
            **settings,
        )  # fmt: skip
        self.groups = groups.copy()
        self.rng = np.random.default_rng([seed, 0x0AC1E])
        self._ids = sorted(roots, key=int)
        self._sizes = sample_sizes(
            np.array([len(roots[c]) for c in self._ids]), clients_per_round, num_clients
        )

    newcomers = "the cluster of its ground-truth group"

    def place_newcomers(self, clients, groups, rows) -> api.NewcomerModels:
        return api.NewcomerModels([str(int(g)) for g in groups])

    @classmethod
    def from_config(cls, federation: api.Federation, params: api.Params) -> Oracle:
        if federation.groups is None:
            raise ValueError("the oracle needs the clients' ground-truth groups")
        oracle = cls(
            num_clients=federation.num_clients,
            clients_per_round=federation.clients_per_round,
            seed=federation.seed,
            groups=federation.groups,
            params=params,
        )
        oracle.federation = federation
        return oracle

    def plan(self, round_index: int) -> api.RoundPlan:
        train: dict[int, str] = {}
        for cid, n in zip(self._ids, self._sizes, strict=True):
            chosen = self.sample_clients(self.tree.members(cid), int(n))
            train.update({int(k): cid for k in chosen})
        return api.RoundPlan(round=round_index, train=dict(sorted(train.items())))

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]


__all__ = ["Oracle"]
