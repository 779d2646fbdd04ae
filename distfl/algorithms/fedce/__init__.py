"""FedCE (Cai, Chen, Cao, He, Li, "FedCE: Personalized Federated Learning Method based on
Clustering Ensembles", ACM MM 2023), as EMD-CFL's authors ran it: each client trains its
cluster of least loss, and every cluster model is a soft mix of all trained clients,
weighted by the clients' accumulated association with it.

The modules: :mod:`~.algorithm` (the server half) and :mod:`~.client` (the association, on
the workers).
"""

from __future__ import annotations

from distfl.algorithms.fedce.algorithm import *  # noqa: F403 (the names of its __all__)
from distfl.algorithms.fedce.algorithm import __all__ as __all__
