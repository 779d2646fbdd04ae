"""The base of the algorithms that keep M cluster models, each from its own initialisation,
and draw each round's clients uniformly: FedEM, FedRC, FedSoft and FedCE."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from distfl.algorithms import api
from distfl.algorithms.common.kmeans import with_group_count


class ModelsOfOwn(api.ClusteringAlgorithm):
    """M = ``num_clusters`` (its :attr:`Params`' key; 0 in a config: one per ground-truth
    data group, :meth:`from_config`) cluster models ``"0"`` … ``"M-1"`` (:attr:`ids`,
    ascending as strings: the order of the broadcast models and of every per-client row),
    each from its own initialisation; every client starts under the first. Each round's
    clients are drawn uniformly without replacement (:meth:`draw`), from a generator of
    (seed, :attr:`salt`)."""

    clusters_key = "num_clusters"
    #: its generator's second entropy word (an algorithm's own: its draws are its own)
    salt: ClassVar[int] = 0

    def __init__(
        self, *, num_clients: int, clients_per_round: int, seed: int,
        params: api.Params | None = None, **settings,
    ):  # fmt: skip
        params = self.Params.made(params, settings)
        M = int(params.num_clusters)
        if M < 1:
            raise ValueError(f"num_clusters must be at least 1, got {M}")
        if not 1 <= clients_per_round <= num_clients:
            raise ValueError(
                f"clients_per_round must be in 1..{num_clients}, got {clients_per_round}"
            )
        #: the clusters' ids in ascending (string) order
        self.ids = sorted(str(j) for j in range(M))
        roots = {cid: () for cid in self.ids}
        roots[self.ids[0]] = np.arange(num_clients, dtype=np.int64)
        super().__init__(
            num_clients=num_clients, clients_per_round=clients_per_round, seed=seed,
            roots=roots, params=params,
        )  # fmt: skip
        self.rng = np.random.default_rng([seed, self.salt])

    @classmethod
    def from_config(cls, federation, params):
        return super().from_config(federation, with_group_count(params, federation))

    def initial_models(self) -> dict[str, int]:
        """Each cluster model from its own initialisation."""
        return {cid: j + 1 for j, cid in enumerate(self.ids)}

    def draw(self, trainings: int = 1) -> np.ndarray:
        """The round's clients: ``clients_per_round`` drawn uniformly without replacement,
        ascending (int64); each trains ``trainings`` models (for FedCS's schedule)."""
        chosen = self.sample_clients(self.num_clients, self.clients_per_round,
                                     trainings=trainings)  # fmt: skip
        return np.sort(chosen).astype(np.int64)


__all__ = ["ModelsOfOwn"]
