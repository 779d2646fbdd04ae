"""Clustering algorithms, by ``algorithm.name``."""

from __future__ import annotations

from distfl.algorithms.base import ClientReports, ClusteringAlgorithm, RoundPlan, Split
from distfl.algorithms.fedgwc import FedGWC
from distfl.algorithms.none import NoClustering
from distfl.config import Config

REGISTRY: dict[str, type[ClusteringAlgorithm]] = {
    NoClustering.name: NoClustering,
    FedGWC.name: FedGWC,
}


def build_algorithm(config: Config) -> ClusteringAlgorithm:
    a = config.algorithm
    common = dict(
        num_clients=config.data.num_clients,
        clients_per_round=config.server.clients_per_round,
        seed=config.run.seed,
    )
    if a.name == "fedgwc":
        return FedGWC(
            **common,
            beta=a.beta,
            epsilon=a.epsilon,
            n_max=a.n_max,
            alpha=a.alpha,
            patience=a.patience,
            min_clients=a.min_clients,
            sampling=a.sampling,
            db_threshold=a.db_threshold,
        )
    return REGISTRY[a.name](**common)


__all__ = [
    "ClientReports",
    "ClusteringAlgorithm",
    "REGISTRY",
    "RoundPlan",
    "Split",
    "build_algorithm",
]
