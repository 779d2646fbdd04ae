"""Clustering algorithms, by ``algorithm.name``."""

from __future__ import annotations

from distfl.algorithms.base import ClientReports, ClusteringAlgorithm, RoundPlan, Split
from distfl.algorithms.none import NoClustering
from distfl.config import Config

REGISTRY: dict[str, type[ClusteringAlgorithm]] = {
    NoClustering.name: NoClustering,
}


def build_algorithm(config: Config) -> ClusteringAlgorithm:
    cls = REGISTRY[config.algorithm.name]
    return cls(
        num_clients=config.data.num_clients,
        clients_per_round=config.server.clients_per_round,
        seed=config.run.seed,
    )


__all__ = [
    "ClientReports",
    "ClusteringAlgorithm",
    "REGISTRY",
    "RoundPlan",
    "Split",
    "build_algorithm",
]
