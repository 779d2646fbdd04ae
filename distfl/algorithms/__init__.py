"""Clustering algorithms, by ``algorithm.name``."""

from __future__ import annotations

import numpy as np

from distfl.algorithms.base import (
    ClientReports,
    ClusteringAlgorithm,
    ProbeRequest,
    RoundPlan,
    Split,
)
from distfl.algorithms.fedgwc import FedGWC
from distfl.algorithms.none import NoClustering
from distfl.config import Config

REGISTRY: dict[str, type[ClusteringAlgorithm]] = {
    NoClustering.name: NoClustering,
    FedGWC.name: FedGWC,
}


def build_algorithm(config: Config, groups: np.ndarray | None = None) -> ClusteringAlgorithm:
    """The algorithm of ``algorithm.name``; ``groups`` (each client's ground-truth group)
    is what the oracle clusters by."""
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
    if a.name == "emdcfl":
        from distfl.algorithms.emdcfl import EMDCFL

        return EMDCFL(**common, epsilon=a.emd_epsilon, steps=a.emd_steps)
    if a.name == "cfl":
        from distfl.algorithms.cfl import CFL

        return CFL(**common, eps1=a.eps1, eps2=a.eps2, warmup=a.warmup)
    if a.name == "ifca":
        from distfl.algorithms.ifca import IFCA

        return IFCA(**common, num_clusters=a.num_clusters)
    if a.name == "fesem":
        from distfl.algorithms.fesem import FeSEM

        return FeSEM(**common, num_clusters=a.num_clusters, reassign_every=a.reassign_every)
    if a.name == "flcl":
        from distfl.algorithms.flcl import FLCL

        return FLCL(
            **common,
            eta=a.flcl_eta,
            delta=a.flcl_delta,
            period=a.flcl_period,
            expel=a.flcl_expel,
        )
    if a.name == "oracle":
        from distfl.algorithms.oracle import Oracle

        if groups is None:
            raise ValueError("the oracle needs the clients' ground-truth groups")
        return Oracle(**common, groups=np.asarray(groups, dtype=np.int64))
    return REGISTRY[a.name](**common)


__all__ = [
    "ClientReports",
    "ClusteringAlgorithm",
    "ProbeRequest",
    "REGISTRY",
    "RoundPlan",
    "Split",
    "build_algorithm",
]
