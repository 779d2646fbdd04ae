"""CFL-GP, clustered federated learning via gradient-based partitioning (Kim, Kim, de Veciana,
"Clustered Federated Learning via Gradient-based Partitioning", ICML 2024, PMLR 235:
24137-24193; reference code github.com/Heasung-Kim/clustered-federated-learning-via-
gradient-based-partitioning).

The modules: :mod:`~.algorithm` (the server half) and :mod:`~.client` (what the workers
compute for its probe).
"""

from __future__ import annotations

from distfl.algorithms.cflgp.algorithm import (
    CFLGP,
    MAX_PERIOD,
    MAX_RESTARTS,
    CFLGPParams,
    accumulate,
    cluster_profiles,
    clustering_rounds,
    imputed_profiles,
    match_labels,
    spectral_coordinates,
)

__all__ = [
    "CFLGP",
    "CFLGPParams",
    "MAX_PERIOD",
    "MAX_RESTARTS",
    "accumulate",
    "cluster_profiles",
    "clustering_rounds",
    "imputed_profiles",
    "match_labels",
    "spectral_coordinates",
]
