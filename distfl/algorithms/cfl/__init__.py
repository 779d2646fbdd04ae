"""CFL: Clustered Federated Learning (Sattler, Müller, Samek, IEEE TNNLS 2020).

The modules: :mod:`~.algorithm` (the server half) and :mod:`~.figures` (its
figures in ``distfl report``).
"""

from __future__ import annotations

from distfl.algorithms.cfl.algorithm import (
    CFL,
    ROOT,
    CFLParams,
    bipartition,
    cosine_similarity,
    split_criterion,
)

__all__ = [
    "CFL",
    "CFLParams",
    "ROOT",
    "bipartition",
    "cosine_similarity",
    "split_criterion",
]
